"""The one-machine dashboard (``gpumon``): its app, the main screen, the GPU and process
details, help, the signal dialog, the per-user summary, the probe panel, ``w``'s watches,
the start-up GPU filter, the held-idle tracker and notes, and the history database's
part: idle since as recorded, ``U``'s usage screen and the GPU detail's longer spans
(``history``, ``history_keys``, ``usage_screen``, ``gpu_history``).

May import: :mod:`gpumon.ui.widgets`, :mod:`gpumon.ui` (the shared app base),
:mod:`gpumon.probe`, :mod:`gpumon.sampling`, :mod:`gpumon.sources`, :mod:`gpumon.data`;
never the cluster dashboard (``ui.cluster``).
"""
