"""Regenerate the SVG screenshots in this folder: `python screenshots/generate.py`.

Deterministic: a seeded demo server, a fixed clock and UTC, so a re-run only changes the
files when the screen really changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
from textual.pilot import Pilot

from gpumon.data.model import (
    GpuProcess,
    GpuUnavailable,
    HostStats,
    MigInstance,
    ProcessKind,
    Sample,
    UnavailableReason,
)
from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the tests' stand-in torch, for the probe shot
FIXED_TIME = 1_700_000_000.0
GIB = 1024**3
MIB = 1024**2


def demo_app(gpus: int, processes: int, history: int = 0) -> GpumonApp:
    """A seeded demo server; with ``history``, the samples before the shot are one second
    apart and the last is at FIXED_TIME (graphs and sparklines need a past)."""
    ticks = iter(range(history, -1, -1))
    source = DemoSource(
        gpus,
        seed=7,
        process_count=processes,
        current_user="alice",
        clock=lambda: FIXED_TIME - next(ticks, 0),
    )
    return create_app(source, autostart=False, ascii_only=False)


class _NoDriver:
    """What a server shows after an unattended driver upgrade, before the reboot."""

    simulated = False

    def sample(self) -> Sample:
        return Sample(
            timestamp_s=FIXED_TIME,
            host=HostStats("gpu-box", 3.0, (0.4, 0.3, 0.2), 9 * GIB, 256 * GIB, 0, 8 * GIB, 32),
            driver=None,
            gpus=(),
            unavailable=GpuUnavailable(
                UnavailableReason.VERSION_MISMATCH,
                "Driver/library version mismatch: the driver was updated but the old kernel "
                "module is still loaded.",
                "NVML: Driver/library version mismatch",
                "Reboot (or reload the nvidia kernel modules) to finish the driver update.",
            ),
        )

    def close(self) -> None:
        pass


async def shoot(
    name: str,
    app: GpumonApp,
    size: tuple[int, int],
    action: Callable[[Pilot[int]], Awaitable[None]] | None = None,
    history: int = 0,
) -> None:
    async with app.run_test(size=size) as pilot:
        for _ in range(history + 1):
            app.receive_sample(app.source.sample())
        await pilot.pause()
        if action is not None:
            await action(pilot)
            await pilot.pause()
        app.save_screenshot(filename=f"{name}.svg", path=str(HERE))
    print(f"screenshots/{name}.svg")


class _DemoSeenByNvml(DemoSource):
    """The demo server, plus this script's child processes (the probe) on GPU 0."""

    def sample(self) -> Sample:
        demo = super().sample()
        gpu = demo.gpus[0]
        probes = tuple(
            GpuProcess(
                gpu.index,
                gpu.uuid,
                child.pid,
                ProcessKind.COMPUTE,
                768 * MIB,
                user="alice",
                command="python -m gpumon.probe.child",
                visible=True,
                is_current_user=True,
            )
            for child in psutil.Process().children(recursive=True)
        )
        return dataclasses.replace(demo, processes=demo.processes + probes)


class _MigDemo(DemoSource):
    """The demo server with GPU 0 in MIG mode (three instances, their processes placed in
    them) and GPU 1 in MIG mode as a non-root user sees it (instances and processes unknown)."""

    def sample(self) -> Sample:
        demo = super().sample()
        gpu0, gpu1 = demo.gpus[0], demo.gpus[1]
        profiles = (("3g.24gb", 1, 24), ("2g.12gb", 5, 12), ("1g.6gb", 13, 6))
        instances = tuple(
            MigInstance(
                gpu_index=0,
                index=number,
                gpu_instance_id=gi,
                compute_instance_id=0,
                profile=profile,
                uuid=f"MIG-{number + 1:x}c0ffee0-1234-5678-9abc-def0123456{number:02x}",
                memory_used_bytes=[14, 3, 0][number] * GIB,
                memory_total_bytes=size * GIB - 256 * MIB,
            )
            for number, (profile, gi, size) in enumerate(profiles)
        )
        gpus = list(demo.gpus)
        gpus[0] = dataclasses.replace(
            gpu0,
            mig_mode=True,
            mig_instances=instances,
            utilization_gpu_pct=None,
            utilization_memory_pct=None,
            memory_used_bytes=17 * GIB,
        )
        gpus[1] = dataclasses.replace(
            gpu1, mig_mode=True, mig_instances=None, utilization_gpu_pct=None,
            processes_error="NVML: Insufficient Permissions",
        )  # fmt: skip
        on_gpu0 = [p for p in demo.processes if p.gpu_index == 0]
        placed = [
            dataclasses.replace(p, gpu_instance_id=[1, 5][n % 2], compute_instance_id=0,
                                sm_utilization_pct=None)
            for n, p in enumerate(on_gpu0)
        ]  # fmt: skip
        others = [p for p in demo.processes if p.gpu_index not in (0, 1)]
        return dataclasses.replace(demo, gpus=tuple(gpus), processes=tuple(placed + others))


def mig_app() -> GpumonApp:
    source = _MigDemo(4, seed=7, process_count=12, current_user="alice", clock=lambda: FIXED_TIME)
    return create_app(source, autostart=False, ascii_only=False)


async def shoot_signal_dialog() -> None:
    """The confirmation T opens on one of the user's own processes (the shot never sends)."""
    import signal

    from gpumon.ui.dashboard.signal_dialog import SignalDialog

    app = demo_app(8, 24)
    async with app.run_test(size=(100, 30)) as pilot:
        app.receive_sample(app.source.sample())
        await pilot.pause()
        sample = app.sample
        assert sample is not None
        mine = next(p for p in sample.processes if p.is_current_user)
        app.push_screen(SignalDialog(mine, signal.SIGTERM))
        await pilot.pause()
        app.save_screenshot(filename="signal-dialog.svg", path=str(HERE))
    print("screenshots/signal-dialog.svg")


async def shoot_probe() -> None:
    """The probe panel, run against the stand-in torch of the tests (there is no GPU where
    screenshots are made). The GPUs are the demo's and the header says DEMO."""
    from tests.support.fake_children import real_child

    source = _DemoSeenByNvml(
        4, seed=7, process_count=6, current_user="alice", clock=lambda: FIXED_TIME
    )
    uuids = [gpu.uuid.removeprefix("GPU-") for gpu in source.sample().gpus[:2]]
    os.environ["FAKE_TORCH_GPUS"] = json.dumps(uuids[::-1])  # CUDA order differs from NVML's
    app = create_app(
        source, interval_s=0.25, ascii_only=False, probe_child_command=real_child("fake")
    )
    async with app.run_test(size=(200, 50)) as pilot:
        while app.sample is None:
            await pilot.pause(0.05)
        await app.dashboard.open_probe(app.sample.gpus[0], app.sample)
        for _ in range(200):
            await pilot.pause(0.05)
            if str(app.query_one("#probe-verdict").render()).startswith(("PASS", "FAIL")):
                break
        await pilot.pause(0.3)
        app.save_screenshot(filename="probe-panel.svg", path=str(HERE))
    print("screenshots/probe-panel.svg")


async def main() -> None:
    os.environ["TZ"] = "UTC"
    time.tzset()

    async def open_help(pilot: Pilot[int]) -> None:
        await pilot.press("question_mark")

    async def open_gpu_detail(pilot: Pilot[int]) -> None:
        await pilot.press("right", "enter")

    async def open_process_detail(pilot: Pilot[int]) -> None:
        await pilot.press("tab", "down", "enter")

    async def filter_processes(pilot: Pilot[int]) -> None:
        await pilot.press("right", "f", "slash", *"python", "enter")

    async def open_users(pilot: Pilot[int]) -> None:
        await pilot.press("u")

    await shoot("dashboard-8gpu-200x50", demo_app(8, 64, 300), (200, 50), history=300)
    await shoot("dashboard-8gpu-120x40", demo_app(8, 24), (120, 40))
    await shoot("dashboard-8gpu-80x24", demo_app(8, 24), (80, 24))
    await shoot("tmux-pane-60x15", demo_app(8, 24), (60, 15))
    await shoot("no-driver", create_app(_NoDriver(), autostart=False, ascii_only=False), (100, 24))
    await shoot("help", demo_app(4, 6), (120, 44), open_help)
    await shoot("gpu-detail", demo_app(4, 12, 600), (120, 50), open_gpu_detail, history=600)
    await shoot("process-detail", demo_app(4, 12, 300), (100, 30), open_process_detail, 300)
    await shoot("processes-filtered-120x40", demo_app(8, 64), (120, 40), filter_processes)
    await shoot("user-summary", demo_app(8, 64), (100, 24), open_users)
    await shoot("mig", mig_app(), (120, 36))
    await shoot_signal_dialog()
    await shoot_probe()


if __name__ == "__main__":
    asyncio.run(main())
