"""SVG snapshots of the main views (pytest-textual-snapshot).

Regenerate after an intended change with:
pytest tests/ui/dashboard/test_snapshots.py --snapshot-update
Each docstring below appears in the snapshot report next to the diff.
"""

from __future__ import annotations

from textual.pilot import Pilot

from gpumon.data.model import GpuUnavailable, UnavailableReason
from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app
from tests.support.ui_helpers import FIXED_TIME, StaticSource, make_sample


def demo_app(gpus: int, processes: int | None = None) -> GpumonApp:
    source = DemoSource(
        gpus, seed=7, process_count=processes, current_user="alice", clock=lambda: FIXED_TIME
    )
    return create_app(source, autostart=False, ascii_only=False)


async def show_one_sample(pilot: Pilot[object]) -> None:
    app = pilot.app
    assert isinstance(app, GpumonApp)
    app.receive_sample(app.source.sample())
    await pilot.pause()


def test_one_gpu(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """One GPU at 120x40: a single card with every field, and its processes."""
    assert snap_compare(demo_app(1, 3), terminal_size=(120, 40), run_before=show_one_sample)


def test_eight_gpus_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Eight GPUs at 120x40: cards two abreast, process table below."""
    assert snap_compare(demo_app(8, 24), terminal_size=(120, 40), run_before=show_one_sample)


def test_eight_gpus_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Eight GPUs at 80x24: two lines per GPU, all eight visible, processes below."""
    assert snap_compare(demo_app(8, 24), terminal_size=(80, 24), run_before=show_one_sample)


def test_tmux_pane_60x15(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """A 60x15 tmux pane: one line per GPU, a few process rows."""
    assert snap_compare(demo_app(8, 24), terminal_size=(60, 15), run_before=show_one_sample)


def test_no_driver(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """No NVIDIA driver: the reason in words, NVML's own text, a hint, and the host strip."""
    unavailable = GpuUnavailable(
        UnavailableReason.LIBRARY_NOT_FOUND,
        "No NVIDIA driver: libnvidia-ml.so could not be loaded.",
        "NVML: NVML Shared Library Not Found",
        "Install the NVIDIA driver, or try `gpumon --demo` for a simulated server.",
    )
    sample = make_sample((), driver=None, unavailable=unavailable)
    app = create_app(StaticSource(sample), autostart=False, ascii_only=False)
    assert snap_compare(app, terminal_size=(100, 30), run_before=show_one_sample)
