"""The NVML source: the only package in gpumon that imports ``pynvml`` (and only its
:mod:`~gpumon.sources.nvml.source` module does, lazily).

What lives here: :mod:`~gpumon.sources.nvml.source` (``NvmlSource``),
:mod:`~gpumon.sources.nvml.device` (one GPU behind one choke point),
:mod:`~gpumon.sources.nvml.mig` (MIG instances) and :mod:`~gpumon.sources.nvml.processes`
(NVML's process lists).

May import: :mod:`gpumon.data`, :mod:`gpumon.sources.host`.
"""
