"""The headless modes: ``once``, ``status``, ``pick`` (with ``cluster_output`` and
``cluster_pick`` for ``--prometheus``), ``report`` (with ``report_output``: its text, CSV and
JSON), ``record`` (the history's recorder) and ``export/``.

May import: :mod:`gpumon.sampling`, :mod:`gpumon.sources`, :mod:`gpumon.data`,
:mod:`gpumon.config`; never :mod:`gpumon.ui`, and never textual or
rich: ``gpumon status`` runs every few seconds in a status bar and must start light.
"""
