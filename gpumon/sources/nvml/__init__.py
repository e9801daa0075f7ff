"""The NVML source: the only package in gpumon that imports ``pynvml`` (and only its
:mod:`~gpumon.sources.nvml.source` module does, lazily).

What lives here: :mod:`~gpumon.sources.nvml.source` (``NvmlSource``),
:mod:`~gpumon.sources.nvml.device` (one GPU behind one choke point),
:mod:`~gpumon.sources.nvml.mig` (MIG instances), :mod:`~gpumon.sources.nvml.processes`
(NVML's process lists), :mod:`~gpumon.sources.nvml.health` (memory temperature, PCIe
replays, remapped rows, and Xid errors from NVML's events) and
:mod:`~gpumon.sources.nvml.errors` (NVML's return codes, ``GpuLost`` and the low-level
helpers the others share). Imports run one way: source -> device -> health, mig -> errors
(mig and health name ``Device`` only for type checking).

May import: :mod:`gpumon.data`, :mod:`gpumon.sources.host`.
"""
