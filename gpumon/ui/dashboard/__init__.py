"""The one-machine dashboard (``gpumon``): its app, the main screen and its keys, the GPU and
process details, help, the signal dialog, the per-user summary, the probe panel, ``w``, and
the history database's part: idle since as recorded, ``U``'s usage screen and the GPU
detail's longer spans (``history``, ``usage_screen``, ``gpu_history``). The sample
pipeline they draw from is headless: :mod:`gpumon.sampling.pipeline`.

May import: :mod:`gpumon.ui.widgets`, :mod:`gpumon.ui` (the shared app base),
:mod:`gpumon.probe`, :mod:`gpumon.sampling`, :mod:`gpumon.sources`, :mod:`gpumon.data`;
never the cluster dashboard (``ui.cluster``).
"""
