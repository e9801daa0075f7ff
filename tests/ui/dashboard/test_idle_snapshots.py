"""SVG snapshots of a server with one GPU held idle (pytest-textual-snapshot).

Deterministic: the hand-built four-GPU server of tests/ui/dashboard/test_idle_dashboard.py, its
samples handed in on a fake clock (alice's notebook on GPU 1 quiet for 2h13m, dana's job beside
chen's on GPU 2 for 1h13m). Regenerate after an intended change with:
pytest tests/ui/dashboard/test_idle_snapshots.py --snapshot-update
Each docstring below appears in the snapshot report next to the diff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot

from tests.support.ui_helpers import app_for
from tests.ui.dashboard.test_idle_dashboard import TIMELINE, replay, server


def after(*keys: str, quiet_since_start: bool = False) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Replay the timeline (or, ``quiet_since_start``, a server already quiet when gpumon
    started, 20 minutes on), then press ``keys``."""

    async def run_before(pilot: Pilot[Any]) -> None:
        if quiet_since_start:
            await replay(pilot, ((0.0, server(0, 0)), (20 * 60.0, server(0, 0))))
        else:
            await replay(pilot, TIMELINE)
        if keys:
            await pilot.press(*keys)
            await pilot.pause()

    return run_before


def test_gpu_held_idle_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """GPU 1's card reads "held idle by alice 2h13m" in its bottom border; in the process
    table alice's notebook reads "idle 2h13m" and dana's job "idle 1h13m" in a widened SM%
    column, the others their SM utilisation (the display server N/A). GPU 2 is not held
    idle: chen computes on it."""
    assert snap_compare(app_for(server(40, 30)), terminal_size=(120, 40), run_before=after())


def test_gpu_held_idle_since_start_ascii_100x30(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """ASCII, already quiet when gpumon started: "held idle by alice >=20m" and "idle >=20m":
    gpumon knows the quiet only since it started."""
    app = app_for(server(0, 0), ascii_only=True)
    run_before = after(quiet_since_start=True)
    assert snap_compare(app, terminal_size=(100, 30), run_before=run_before)


def test_user_summary_with_idle_memory_100x30(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """``u``: IDLE-MEM is 20.0G for alice and 6.0G for dana, "-" for the others, with the rule
    below the table."""
    assert snap_compare(app_for(server(40, 30)), terminal_size=(100, 30), run_before=after("u"))
