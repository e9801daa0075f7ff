"""The protocol every GPU source implements, and the one place that picks a source."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpumon.data.model import Sample

if TYPE_CHECKING:
    from gpumon.config import Settings


@runtime_checkable
class GpuSource(Protocol):
    """Something that can be sampled. ``sample()`` may block (driver ioctls): run it off the
    event loop. It is never called concurrently with itself.
    """

    simulated: bool

    def sample(self) -> Sample:
        """Read everything once and return an immutable snapshot."""
        ...

    def close(self) -> None:
        """Release the library (NVML shutdown). Idempotent."""
        ...


def read_details(source: GpuSource, wanted: bool) -> bool:
    """Ask ``source`` to read :data:`~gpumon.data.model.ON_DEMAND_GPU_FIELDS` or to leave
    them unread (their ``None`` then named in :attr:`Sample.unread_gpu_fields
    <gpumon.data.model.Sample.unread_gpu_fields>`). ``False`` for a source that always reads
    them (the demo, where they cost nothing)."""
    if not hasattr(source, "read_details"):
        return False
    source.read_details = wanted
    return True


def open_source(
    *,
    demo: bool = False,
    demo_gpus: int = 4,
    demo_processes: int | None = None,
    seed: int = 0,
    processes: bool = True,
    pcie: bool = True,
    host_details: bool = True,
) -> GpuSource:
    """Return the demo source or the NVML source; never raises for a missing driver (samples
    then carry ``unavailable``).

    ``processes=False`` skips NVML's process lists and the host's per-process reads (modes that
    show no process and no FREE mark); ``pcie=False`` skips the slow PCIe call (readings N/A);
    ``host_details=False`` reads the process lists but nothing of the host (``status``, to tell
    FREE). The demo source ignores them.
    """
    if demo:
        from gpumon.sources.demo import DemoSource

        return DemoSource(gpu_count=demo_gpus, process_count=demo_processes, seed=seed)
    from gpumon.sources.nvml.source import NvmlSource

    return NvmlSource(read_processes=processes, read_pcie=pcie, read_host_details=host_details)


def source_for(
    settings: Settings, *, processes: bool = True, pcie: bool = True, host_details: bool = True
) -> GpuSource:
    """:func:`open_source` for what ``settings`` ask (``--demo`` and its sizes)."""
    return open_source(
        demo=settings.demo,
        demo_gpus=settings.demo_gpus,
        demo_processes=settings.demo_processes,
        processes=processes,
        pcie=pcie,
        host_details=host_details,
    )
