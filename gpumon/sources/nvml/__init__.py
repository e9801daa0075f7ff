"""The NVML source: the only package in gpumon that imports ``pynvml`` (and only its
:mod:`~gpumon.sources.nvml.source` module does, lazily).

Imports run one way: ``source`` -> ``device`` -> ``health``, ``mig``, ``processes`` ->
``errors``. May import :mod:`gpumon.data`, :mod:`gpumon.sources.host`. Costs: docs/sources.md.
"""
