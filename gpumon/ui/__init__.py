"""The Textual dashboards, imported only by the dashboard path of the CLI: the base both apps
share (:mod:`~gpumon.ui.app`), ``app.tcss``, and the packages ``widgets`` (what both draw
with), ``dashboard`` (one machine) and ``cluster`` (Prometheus).

May import every layer below, textual and rich; never :mod:`gpumon.commands`. ``dashboard``
and ``cluster`` never import each other; ``widgets`` and the base import neither.
"""
