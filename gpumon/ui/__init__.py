"""The Textual dashboards. Imported only by the dashboard path of the CLI.

What lives here: :mod:`~gpumon.ui.app` (``MonitorApp``, the base both apps share: the ASCII
look, the chosen theme, quitting on signals, closing the poller, alerts),
:mod:`~gpumon.ui.alerts` (the bell and desktop notifications), :mod:`~gpumon.ui.signals`,
:mod:`~gpumon.ui.exact_updates` (only changed cells reach the terminal), ``app.tcss`` (sizes
and theme colours), and three packages: ``widgets`` (what both apps draw with),
``dashboard`` (the one-machine app and its screens) and ``cluster`` (the cluster app and its
screens).

May import: every layer below (:mod:`gpumon.probe`, :mod:`gpumon.sampling`,
:mod:`gpumon.sources`, :mod:`gpumon.data`), textual and rich; never :mod:`gpumon.commands`.
``dashboard`` and ``cluster`` never import each other; ``widgets`` and the base import
neither.
"""
