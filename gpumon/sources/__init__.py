"""GPU data sources. Each returns immutable :class:`gpumon.data.model.Sample` objects.

What lives here: :mod:`~gpumon.sources.base` (the :class:`GpuSource` protocol and
``open_source``, the one place that picks a source), :mod:`~gpumon.sources.demo` (the
simulated server, always labelled DEMO), :mod:`gpumon.sources.nvml` (the only pynvml
importer), :mod:`gpumon.sources.host` (psutil, cgroups, signals; other users' text made safe
once, where it is read), :mod:`gpumon.sources.prometheus` (a cluster from Prometheus) and
:mod:`~gpumon.sources.cluster_base` (the one place that opens a cluster source).

May import: :mod:`gpumon.data`, :mod:`gpumon.config`; never the
sampling layer, the commands or the UI, and never textual or rich.
"""
