"""Known samples for tests, with no Textual: a GPU, a process and a sample of fixed readings."""

from __future__ import annotations

from gpumon.data.model import DriverInfo, GpuProcess, GpuStats, HostStats, ProcessKind, Sample

GIB = 1024**3
MIB = 1024**2
FIXED_TIME = 1_700_000_000.0  # 22:13:20 UTC


def make_gpu(index: int, **fields: object) -> GpuStats:
    values: dict[str, object] = dict(
        index=index,
        uuid=f"GPU-{index:08x}-aaaa-bbbb-cccc-dddddddddddd",
        name="NVIDIA Test Board",
        pci_bus_id=f"00000000:{0x10 + index:02X}:00.0",
        persistence_mode=True,
        performance_state=2,
        fan_pct=41,
        temperature_c=57,
        temperature_slowdown_c=90,
        power_draw_w=123.0,
        power_limit_w=250.0,
        memory_used_bytes=12 * GIB,
        memory_total_bytes=24 * GIB,
        memory_reserved_bytes=300 * MIB,
        utilization_gpu_pct=73,
        utilization_memory_pct=31,
        clock_sm_mhz=1410,
        clock_memory_mhz=1215,
        compute_mode="Default",
        ecc_errors_uncorrected_volatile=0,
        mig_mode=False,
    )
    values.update(fields)
    return GpuStats(**values)  # type: ignore[arg-type]


def make_process(gpu: GpuStats, pid: int, **fields: object) -> GpuProcess:
    values: dict[str, object] = dict(
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        pid=pid,
        kind=ProcessKind.COMPUTE,
        gpu_memory_bytes=2 * GIB,
        user="bob",
        command=f"python job_{pid}.py",
        cpu_pct=99.0,
        rss_bytes=3 * GIB,
        elapsed_s=3723.0,
    )
    values.update(fields)
    return GpuProcess(**values)  # type: ignore[arg-type]


def make_sample(
    gpus: tuple[GpuStats, ...], processes: tuple[GpuProcess, ...] = (), **fields: object
) -> Sample:
    values: dict[str, object] = dict(
        timestamp_s=FIXED_TIME,
        host=HostStats("testhost", 12.0, (1.0, 0.5, 0.25), 8 * GIB, 64 * GIB, 0, 4 * GIB, 16),
        driver=DriverInfo("550.54.15", "12.4", "12.550.54.15"),
        gpus=gpus,
        processes=processes,
    )
    values.update(fields)
    return Sample(**values)  # type: ignore[arg-type]
