"""GPU data sources. Each returns immutable :class:`gpumon.model.Sample` objects."""

from gpumon.sources.base import GpuSource, open_source, source_for

__all__ = ["GpuSource", "open_source", "source_for"]
