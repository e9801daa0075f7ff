"""Keys as a laggy SSH link delivers them (several in one read) and resizes, at random, in
both dashboards: nothing ends the app, and it answers afterwards."""

from __future__ import annotations

import random

import pytest
from textual import events
from textual.app import App
from textual.command import CommandPalette

from gpumon.config import Settings
from gpumon.ui.dashboard.app import create_app
from tests.ui.cluster.test_cluster_ui import cluster_app, make_cluster

# Every key either app binds, and the ones a palette, a dialog or a screen reads. Never "y"
# (the signal dialog's yes), and the dashboard runs read-only besides.
KEYS = (
    "up", "down", "left", "right", "pageup", "pagedown", "home", "end", "tab", "shift+tab",
    "enter", "escape", "ctrl+p", "question_mark", "slash", "a", "f", "m", "u", "z", "s", "r",
    "p", "w", "plus", "minus", "P", "T", "K", "I", "n", "backspace", "space", "x",
)  # fmt: skip
SIZES = ((120, 40), (80, 24), (200, 50), (60, 15), (30, 10), (160, 45))


def burst(app: App[int], keys: tuple[str, ...]) -> None:
    """Keys in one read: queued before the app handles the first. Never Enter into the
    command palette: its first command may be Quit, a way out the user chose."""
    palette = isinstance(app.screen, CommandPalette)
    for key in keys:
        palette = palette or key == "ctrl+p"
        if not (palette and key == "enter"):
            app.post_message(events.Key(key, None))


async def storm(app: App[int], pilot, seed: int, rounds: int) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    for _ in range(rounds):
        roll = rng.random()
        if roll < 0.1:
            await pilot.resize_terminal(*rng.choice(SIZES))
        elif roll < 0.3:
            burst(app, ("ctrl+p", rng.choice(("pagedown", "pageup", "end", "down"))))
        else:
            burst(app, tuple(rng.choice(KEYS) for _ in range(rng.randint(1, 4))))
        await pilot.pause(rng.choice((0, 0, 0.01, 0.05)))
        assert app.is_running, f"the app ended (seed {seed})"


async def close_everything(pilot) -> None:  # type: ignore[no-untyped-def]
    """Escape out of whatever the storm left open: palettes, dialogs, detail screens."""
    for _ in range(6):
        await pilot.press("escape")
        await pilot.pause(0.02)


@pytest.mark.parametrize("keys", [("ctrl+p", "pagedown"), ("ctrl+p", "pageup")])
async def test_ctrl_p_and_a_page_key_in_one_read_leave_the_dashboard_running(
    keys: tuple[str, str],
) -> None:
    """Textual's option list raised KeyError for a page key before its first layout."""
    app = create_app(demo=True, demo_gpus=2, interval_s=0.25, ascii_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        burst(app, keys)
        await pilot.pause(0.5)
        assert app.is_running
        assert app.screen.id == "--command-palette"


@pytest.mark.parametrize("keys", [("ctrl+p", "pagedown"), ("ctrl+p", "pageup")])
async def test_ctrl_p_and_a_page_key_in_one_read_leave_the_cluster_view_running(
    keys: tuple[str, str],
) -> None:
    app = cluster_app(make_cluster(12))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        burst(app, keys)
        await pilot.pause(0.5)
        assert app.is_running


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.slow
async def test_a_storm_of_keys_and_resizes_leaves_the_dashboard_answering(seed: int) -> None:
    settings = Settings(demo=True, demo_gpus=4, interval_s=0.25, readonly=True)
    app = create_app(settings=settings, ascii_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        await storm(app, pilot, seed, rounds=100)
        await close_everything(pilot)
        await pilot.resize_terminal(120, 40)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert type(app.screen).__name__ == "DashboardHelpScreen", "keys are not answered"
        await pilot.press("escape")
        app.poller.paused, app.poller.interval_s = False, 0.25  # the storm may have paused
        before = app.samples_received
        await pilot.pause(1.5)
        assert app.samples_received > before, "the dashboard stopped taking samples"
        await pilot.press("q")
    assert app.return_code == 0


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.slow
async def test_a_storm_of_keys_and_resizes_leaves_the_cluster_view_answering(seed: int) -> None:
    app = cluster_app(make_cluster(30))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        await storm(app, pilot, seed, rounds=100)
        await close_everything(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert type(app.screen).__name__ == "ClusterHelpScreen", "keys are not answered"
        await pilot.press("escape", "q")
    assert app.return_code == 0
