"""Widgets both dashboards use: bars, graphs, line widgets, the GPU panel (its cards and
rows), a GPU's readings as its screens show them, the process table (on the scrolled table the
cluster's node list shares) and its columns, how a screen shares its room, the help
screen's frame, and what ``w`` watches (notes on a GPU, watches).

May import: :mod:`gpumon.data`, :mod:`gpumon.sampling`, textual and rich; never
either dashboard (``ui.dashboard``, ``ui.cluster``).
"""
