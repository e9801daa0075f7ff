"""The one-machine dashboard (``gpumon``): its app, screens, keys and panels. What it draws
comes from the headless :mod:`gpumon.sampling.pipeline`.

May import :mod:`gpumon.ui.widgets`, the shared app base and every headless layer; never the
cluster dashboard (``ui.cluster``).
"""
