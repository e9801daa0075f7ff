"""Widgets both dashboards use: bars, graphs, line widgets, the GPU panel and its rows, the
process table and its columns, and the help screen's frame.

May import: :mod:`gpumon.data`, :mod:`gpumon.sampling`, textual and rich; never
:mod:`gpumon.ui.dashboard` or :mod:`gpumon.ui.cluster`.
"""
