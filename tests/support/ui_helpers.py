"""Helpers for Pilot tests: known samples and the screen as plain text."""

from __future__ import annotations

import itertools
from typing import Any

from textual.app import App
from textual.pilot import Pilot

from gpumon.data.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    HostStats,
    ProcessKind,
    Sample,
)
from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app

GIB = 1024**3
MIB = 1024**2
FIXED_TIME = 1_700_000_000.0  # 22:13:20 UTC


def screen_text(app: App[object]) -> str:
    """What a user sees, without colours: one string, lines joined by newlines."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


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


class StaticSource:
    """A source that returns the samples it is given, the last one forever."""

    simulated = False

    def __init__(self, *samples: Sample) -> None:
        self.samples = list(samples)
        self.calls = 0

    def sample(self) -> Sample:
        self.calls += 1
        if len(self.samples) > 1:
            return self.samples.pop(0)
        return self.samples[0]

    def close(self) -> None:
        pass


def app_for(*samples: Sample, **options: object) -> GpumonApp:
    """An app over ``samples`` that does not poll by itself: tests hand samples in."""
    options.setdefault("autostart", False)
    options.setdefault("ascii_only", False)
    return create_app(StaticSource(*samples), **options)  # type: ignore[arg-type]


def record_terminal_writes(app: GpumonApp) -> list[str]:
    """From now on, append every partial screen update the app sends to the terminal (the
    bytes a user's terminal receives, as text) to the returned list."""
    from textual._compositor import CompositorUpdate

    written: list[str] = []
    original = app._display

    def capture(screen, renderable):  # type: ignore[no-untyped-def]
        if isinstance(renderable, CompositorUpdate):
            written.append(renderable.render_segments(app.console))
        original(screen, renderable)

    app._display = capture  # type: ignore[method-assign]
    return written


async def screen_after(sample: Sample, size: tuple[int, int] = (120, 40)) -> str:
    """The screen (see :func:`screen_text`) of an app that was handed ``sample``."""
    app = app_for(sample)
    async with app.run_test(size=size) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        return screen_text(app)


def demo_app(gpus: int = 4, ascii_only: bool = False) -> tuple[GpumonApp, DemoSource]:
    """A seeded demo server (seed 0) whose samples are one second apart, and an app for it
    that does not poll: tests hand it samples with :func:`push`."""
    ticks = itertools.count()
    source = DemoSource(gpus, seed=0, current_user="alice", clock=lambda: FIXED_TIME + next(ticks))
    return create_app(source=source, autostart=False, ascii_only=ascii_only), source


async def push(pilot: Pilot[Any], source: DemoSource, count: int) -> Sample:
    """Hand ``count`` new samples to the app, then let it draw; returns the last."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    sample = source.sample()
    app.receive_sample(sample)
    for _ in range(count - 1):
        sample = source.sample()
        app.receive_sample(sample)
    await pilot.pause()
    return sample
