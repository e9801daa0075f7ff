"""The probe in the real dashboard: `P` on a selected GPU, streamed steps, the highlighted row,
and no child left behind when gpumon quits mid-probe."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Footer

from gpumon.data.model import Sample
from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app
from gpumon.ui.dashboard.probe_panel import ProbePanel
from gpumon.ui.widgets.bars import HostStrip
from gpumon.ui.widgets.process_table import ProcessTable
from gpumon.ui.widgets.search_box import SearchBox
from tests.support.fake_children import FAKE_TORCH_UUIDS, children_sample, gone, real_child, script
from tests.support.ui_helpers import screen_text


class FakeServer:
    """A two-GPU server whose NVML sees every child process of this test (so the probe)."""

    simulated = False

    def sample(self) -> Sample:
        return children_sample(memory=2048 * 2**20)

    def close(self) -> None:
        pass


async def until(pilot: Pilot[int], condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await pilot.pause(0.05)


async def start_probe(pilot: Pilot[int], app: GpumonApp) -> int:
    """Wait for the first sample, press P, and return the probe child's PID once it runs."""
    await until(pilot, lambda: app.sample is not None)
    await pilot.press("P")
    panel = app.query_one(ProbePanel)
    await until(pilot, lambda: panel.child_pid is not None)
    assert panel.child_pid is not None
    return panel.child_pid


def probe_app(child: list[str]) -> GpumonApp:
    return create_app(FakeServer(), interval_s=0.25, ascii_only=False, probe_child_command=child)


async def test_pressing_P_runs_the_probe_and_highlights_its_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stand-in torch sees two GPUs, in an order that differs from NVML's.
    monkeypatch.setenv("FAKE_TORCH_GPUS", json.dumps(FAKE_TORCH_UUIDS))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    app = probe_app(real_child("fake"))
    highlighted: list[frozenset[int]] = []
    record = ProcessTable.highlight

    def recording(table: ProcessTable, pids: frozenset[int]) -> None:
        highlighted.append(pids)
        record(table, pids)

    monkeypatch.setattr(ProcessTable, "highlight", recording)
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.sample is not None)
        await pilot.press("P")
        panel = app.query_one(ProbePanel)
        await until(pilot, lambda: panel.child_pid is not None)
        pid = panel.child_pid
        await until(
            pilot,
            lambda: (
                not panel.query_one("#probe-verdict").has_class("-running")
                and ("PASS" in screen_text(app) or "FAIL:" in screen_text(app))
            ),
        )
        text = screen_text(app)
        assert "FAIL" not in text, text
        assert "GPU 0 is cuda:1" in text  # NVML's GPU 0 is cuda:1 for the stand-in torch
        assert f"NVML lists PID {pid} on GPU 0" in text, text
        # While the child held its tensors its row was highlighted; cleared when it finished.
        assert highlighted[0] == frozenset({pid})
        table = app.query_one(ProcessTable)
        await until(pilot, lambda: table.highlighted_pids == frozenset(), timeout_s=5)
        assert pid is not None and gone(pid)
        await pilot.press("escape")
        await pilot.pause()
        assert not app.query(ProbePanel)


async def test_quitting_mid_probe_leaves_no_child() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(200, 50)) as pilot:
        pid = await start_probe(pilot, app)
        await pilot.press("q")
    assert gone(pid), f"probe child {pid} outlived gpumon"


async def test_probe_is_refused_on_simulated_gpus() -> None:
    app = create_app(DemoSource(2, seed=0, current_user="alice"), autostart=False, ascii_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(app.source.sample())
        await pilot.press("P")
        await pilot.pause()
        assert not app.query(ProbePanel)
        assert "simulated" in screen_text(app)


@pytest.mark.parametrize(("size", "side"), [((200, 50), "right"), ((100, 40), "bottom")])
async def test_probe_panel_fits_beside_or_below_the_dashboard(
    size: tuple[int, int], side: str
) -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.sample is not None)
        await pilot.press("P")
        await pilot.pause()
        probe = app.query_one(ProbePanel).region
        gpus = app.query_one("#gpus").region
        table = app.query_one(ProcessTable).region
        # Nothing overlaps, everything keeps some room, and every GPU is still drawn.
        assert not probe.overlaps(gpus) and not probe.overlaps(table)
        assert gpus.height >= 2 and table.height >= 2 and probe.height >= 8
        if side == "right":
            assert probe.x >= gpus.right and probe.height > size[1] // 2
        else:
            assert probe.y >= table.bottom and probe.width == size[0]
        text = screen_text(app)
        assert "GPU 0" in text or "\n 0 " in text
        assert "GPU 1" in text or "\n 1 " in text
        await pilot.press("escape")
        await pilot.pause()
        assert app.query_one(ProcessTable).region.area > table.area  # the room is given back


async def test_pressing_P_again_replaces_the_running_probe() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(200, 50)) as pilot:
        first_pid = await start_probe(pilot, app)
        await pilot.press("P")
        await pilot.pause()
        assert len(app.query(ProbePanel)) == 1
        assert gone(first_pid), "the replaced probe's child is still running"


async def test_the_probe_confirms_with_nvml_even_while_the_dashboard_is_paused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_TORCH_GPUS", json.dumps(FAKE_TORCH_UUIDS))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    app = create_app(
        FakeServer(), interval_s=60, ascii_only=False, probe_child_command=real_child("fake")
    )
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.sample is not None)
        await pilot.press("space")  # paused, and the interval is 60 s anyway
        assert app.poller.paused
        await pilot.press("P")
        panel = app.query_one(ProbePanel)
        await until(
            pilot,
            lambda: str(panel.query_one("#probe-verdict").render()).startswith(("PASS", "FAIL")),
        )
        text = screen_text(app)
        assert "NVML lists PID" in text, text
        assert "FAIL" not in text, text


@pytest.mark.slow
async def test_escape_then_P_typed_ahead_keeps_the_new_probe_laid_out() -> None:
    """Both keys in one read: the old panel's Closed arrives after the new panel mounted."""
    from textual import events

    app = probe_app(script("hanging"))
    async with app.run_test(size=(100, 40)) as pilot:
        first = await start_probe(pilot, app)
        app.post_message(events.Key("escape", None))
        app.post_message(events.Key("P", "P"))

        def laid_out() -> bool:
            placed = app.dashboard.has_class("-probing")
            return len(app.query(ProbePanel)) == 1 and app.dashboard.probing and placed

        # The new panel mounts, then is laid out; under load that takes a while. Once it is,
        # the old panel's late Closed message must not undo it.
        await until(pilot, laid_out)
        await until(pilot, lambda: gone(first))
        await pilot.pause(0.3)
        assert laid_out()


async def test_a_too_small_terminal_during_a_probe_still_says_so() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(200, 50)) as pilot:
        await start_probe(pilot, app)
        await pilot.resize_terminal(38, 12)
        await pilot.pause()
        await pilot.pause()
        assert "Terminal too small (38x12)" in screen_text(app)


@pytest.mark.parametrize("size", [(80, 24), (59, 15)])
@pytest.mark.slow
async def test_the_verdict_shows_on_a_short_terminal(size: tuple[int, int]) -> None:
    """Nine steps do not fit in 13 lines: the panel follows the probe to its verdict, the
    verdict is also on its border, and the keyboard scrolls it."""
    app = probe_app([*script("slow"), "--delay", "0"])
    async with app.run_test(size=size) as pilot:
        await start_probe(pilot, app)
        panel = app.query_one(ProbePanel)
        await until(pilot, lambda: panel.outcome is not None)
        await until(pilot, lambda: "PASS:" in screen_text(app), timeout_s=10)
        assert panel.border_subtitle == "PASS"
        await pilot.press("home")
        await pilot.pause()
        assert panel.scroll_y == 0
        assert "1. " in screen_text(app)
        await pilot.press("end")
        await pilot.pause()
        assert panel.scroll_y == panel.max_scroll_y > 0


async def test_the_probe_panel_border_is_ascii_without_a_utf8_locale() -> None:
    app = create_app(
        FakeServer(), interval_s=0.25, ascii_only=True, probe_child_command=script("hanging")
    )
    async with app.run_test(size=(100, 40)) as pilot:
        await start_probe(pilot, app)
        panel = app.query_one(ProbePanel)
        assert panel.has_focus
        assert panel.styles.border_top[0] == "ascii"
        assert "╭" not in screen_text(app)


async def test_a_redraw_while_the_probe_panel_is_being_removed_never_crashes() -> None:
    """Escape's handler awaits the panel out of the DOM; a sample arriving meanwhile redraws
    the dashboard. That redraw crashed the app (NoMatches '#probe'), full-screen traceback."""
    app = probe_app(real_child("fake"))
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.sample is not None)
        await pilot.press("P")
        await until(pilot, lambda: bool(app.query(ProbePanel)))
        await app.query_one(ProbePanel).remove()
        app.dashboard.refresh_all()  # what the next sample does while Closed is handled
        await pilot.pause(0.3)
        assert app.is_running and not app.dashboard.probing
        assert not app.dashboard.has_class("-probing")


@pytest.mark.slow
async def test_probe_escape_and_the_command_palette_in_a_loop_leave_the_app_running() -> None:
    app = probe_app(real_child("fake"))
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.sample is not None)
        for _ in range(5):
            await pilot.press("P")
            await until(pilot, lambda: bool(app.query(ProbePanel)))
            await pilot.press("escape", "ctrl+p")
            await pilot.pause(0.25)
            await pilot.press("escape")
        await pilot.pause(0.3)
        assert app.is_running


def probe_layout(app: GpumonApp) -> tuple[Region, Region, list[str]]:
    """The probe panel's region, the footer's, and the screen's lines."""
    return (
        app.query_one(ProbePanel).region,
        app.dashboard.query_one(Footer).region,
        screen_text(app).splitlines(),
    )


@pytest.mark.parametrize("size", [(159, 50), (100, 30), (60, 15), (40, 15)])
async def test_the_probe_panel_under_the_dashboard_ends_above_the_footer(
    size: tuple[int, int],
) -> None:
    """Below 160 columns the panel is under the dashboard and above the footer: its bottom
    border shows (the footer covered it), the host strip is above it, and nothing scrolls,
    also with the search box open."""
    app = probe_app(script("hanging"))
    async with app.run_test(size=size) as pilot:
        await start_probe(pilot, app)
        for keys in ((), ("slash",)):
            await pilot.press(*keys)
            await pilot.pause()
            assert app.dashboard.query_one(SearchBox).open == bool(keys)
            probe, footer, lines = probe_layout(app)
            host = app.dashboard.query_one(HostStrip).region
            assert probe.bottom == footer.y and footer.bottom == size[1]
            assert lines[probe.bottom - 1].startswith("╰") and lines[probe.bottom - 1].endswith("╯")
            assert host.height == 1 and host.bottom == probe.y
            assert app.dashboard.max_scroll_y == 0
            assert app.query_one(ProcessTable).region.height >= 3


@pytest.mark.parametrize("size", [(40, 10), (40, 14), (80, 12)])
async def test_the_probe_panel_shows_alone_on_a_short_terminal(size: tuple[int, int]) -> None:
    """Too short for the dashboard and the panel (at 40x10 the panel covered the host strip
    and the screen scrolled): the panel alone, above the footer; Escape brings the
    dashboard back."""
    app = probe_app(script("hanging"))
    async with app.run_test(size=size) as pilot:
        await start_probe(pilot, app)
        await pilot.pause()
        probe, footer, lines = probe_layout(app)
        assert (probe.y, probe.bottom, probe.width) == (0, footer.y, size[0])
        assert lines[0].startswith("╭") and lines[probe.bottom - 1].startswith("╰")
        assert app.dashboard.max_scroll_y == 0
        await pilot.press("escape")
        await until(pilot, lambda: not app.dashboard.probing)
        await pilot.pause()
        assert app.query_one(ProcessTable).region.height >= 3
        assert app.dashboard.query_one(HostStrip).region.bottom == footer.y
