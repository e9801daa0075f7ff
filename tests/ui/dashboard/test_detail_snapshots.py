"""SVG snapshots of the detail screens and of cards with sparklines (pytest-textual-snapshot).

Deterministic: demo seed 0, a fixed number of samples, a clock that starts at FIXED_TIME and
moves one second a sample (the spans "last 59s", the header's time), no host reads.
Regenerate after an intended change with:
pytest tests/ui/dashboard/test_detail_snapshots.py --snapshot-update
Each docstring below appears in the snapshot report next to the diff.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot

from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app
from tests.support.ui_helpers import FIXED_TIME


def demo_app(gpus: int) -> GpumonApp:
    ticks = itertools.count()
    source = DemoSource(gpus, seed=0, current_user="alice", clock=lambda: FIXED_TIME + next(ticks))
    return create_app(source, autostart=False, ascii_only=False)


def after(samples: int, *keys: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Push ``samples`` demo samples, then press ``keys``."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, GpumonApp)
        for _ in range(samples):
            app.receive_sample(app.source.sample())
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
            await pilot.pause()

    return run_before


def test_gpu_detail_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Enter on GPU 0 after 60 samples: title with DEMO, graphs of utilisation, memory,
    power, temperature (dotted slowdown line), SM clock, PCIe rx/tx over the last 59 s."""
    assert snap_compare(demo_app(4), terminal_size=(120, 40), run_before=after(60, "enter"))


def test_gpu_detail_scrolled_to_the_end_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The same screen for GPU 1, scrolled to the end: every field of the field table with
    its value and help, and the GPU's processes (one not visible: in a container)."""
    run_before = after(60, "down", "enter", "end")
    assert snap_compare(demo_app(4), terminal_size=(120, 40), run_before=run_before)


def test_process_detail_simulated_100x30(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Tab, down, Enter after 60 samples: a simulated process (no host read, said so), its
    command and user, and its GPU memory, SM and host CPU over time."""
    run_before = after(60, "tab", "down", "enter")
    assert snap_compare(demo_app(4), terminal_size=(100, 30), run_before=run_before)


def test_cards_with_sparklines_200x50(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Eight GPUs at 200x50 after 120 samples: three cards abreast, an 11-cell sparkline of
    utilisation and of memory right of the GPU and MEM bars, growing from the left: 16
    samples a cell after 120 (1, 2, 4, 8, 16 as each fills the width; 27 from five minutes),
    so eight cells drawn and three still empty."""
    assert snap_compare(demo_app(8), terminal_size=(200, 50), run_before=after(120))
