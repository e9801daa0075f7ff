"""GPU data sources. Each returns immutable :class:`gpumon.data.model.Sample` objects.

``base`` (:class:`GpuSource`, ``open_source``), ``demo`` (always labelled DEMO), ``nvml``
(the only pynvml importer), ``host`` (psutil, cgroups, signals; other users' text made safe
where it is read), ``prometheus`` and ``cluster_base``. May import :mod:`gpumon.data`,
:mod:`gpumon.config`; never sampling, commands or UI.
"""
