"""The probe panel in a minimal app: live steps, messages, keys, and no child left behind.

Snapshots: regenerate with ``pytest tests/ui/dashboard/test_probe_panel.py --snapshot-update``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
from textual.app import App, ComposeResult
from textual.message import Message
from textual.pilot import Pilot
from textual.widgets import Input, Static

from gpumon.data.model import Sample
from gpumon.probe import steps as S
from gpumon.ui.dashboard.probe_panel import ProbePanel, StepRow
from tests.support.fake_children import MIB, gone, sample, script

UUID = "GPU-00000000-0000-0000-0000-000000000000"  # the GPU the fake children "hold"


class PanelApp(App[None]):
    """Mounts one ProbePanel and records the messages it posts; removes it on Closed."""

    def __init__(self, panel: ProbePanel) -> None:
        super().__init__()
        self.panel = panel
        self.received: list[Message] = []

    def compose(self) -> ComposeResult:
        yield self.panel

    def on_probe_panel_probe_holding(self, message: ProbePanel.ProbeHolding) -> None:
        self.received.append(message)

    def on_probe_panel_finished(self, message: ProbePanel.Finished) -> None:
        self.received.append(message)

    async def on_probe_panel_closed(self, message: ProbePanel.Closed) -> None:
        self.received.append(message)
        await message.panel.remove()


def make_panel(child: Sequence[str], **options: object) -> ProbePanel:
    return ProbePanel(
        0,
        UUID,
        "NVIDIA H100 80GB HBM3",
        gpus=[(0, UUID)],
        python="/opt/envs/train/bin/python",
        child_command=child,
        **options,  # type: ignore[arg-type]
    )


async def until(pilot: Pilot[None], condition: Callable[[], bool], timeout_s: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out waiting"
        await pilot.pause(0.05)


def row_status(panel: ProbePanel, step: int) -> str:
    row = panel.query_one(f"#probe-step-{step}", StepRow)
    return next(c[1:] for c in row.classes if c.startswith("-"))


def statuses(panel: ProbePanel) -> list[str]:
    return [row_status(panel, step) for step in S.STEP_IDS]


def verdict(panel: ProbePanel) -> str:
    return str(panel.query_one("#probe-verdict", Static).render())


async def test_steps_stream_in_live_and_the_verdict_follows() -> None:
    panel = make_panel([*script("slow"), "--delay", "0.2"])
    app = PanelApp(panel)
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: row_status(panel, 2) == S.PASS)
        # Mid-run: early steps done, later ones still pending, the verdict says what runs.
        assert row_status(panel, 1) == S.PASS
        assert row_status(panel, 9) == "pending"
        assert verdict(panel).startswith("Running step")
        await until(pilot, lambda: panel.outcome is not None)
        await pilot.pause()
        assert statuses(panel) == [S.PASS] * 5 + [S.SKIP] + [S.PASS] * 3
        assert verdict(panel) == "PASS: every step passed on cuda:0 (1 skipped)"
        value = panel.query_one("#probe-step-4 .probe-value", Static).render()
        assert "GPU 0 is cuda:0 in this environment" in str(value)
        holding = [m for m in app.received if isinstance(m, ProbePanel.ProbeHolding)]
        assert [(m.pid, m.gpu_uuid, m.allocated_bytes) for m in holding] == [
            (panel.child_pid, UUID, 256 * MIB)
        ]
        finished = [m for m in app.received if isinstance(m, ProbePanel.Finished)]
        assert len(finished) == 1 and finished[0].ok


async def test_step_6_uses_the_dashboards_next_sample() -> None:
    async def next_sample() -> Sample:
        # Like NVML: the child is listed while it runs, and not once it has exited.
        pid = panel.child_pid
        assert pid is not None
        running = not gone(pid, within_s=0)
        return sample(gpus=((0, UUID),), processes=[(pid, 0, 900 * MIB)] if running else [])

    panel = make_panel([*script("slow"), "--delay", "0"], next_sample=next_sample)
    async with PanelApp(panel).run_test() as pilot:
        await until(pilot, lambda: panel.outcome is not None)
        assert panel.outcome is not None and panel.outcome.ok
        assert row_status(panel, 6) == S.PASS
        text = str(panel.query_one("#probe-step-6 .probe-value", Static).render())
        assert f"NVML lists PID {panel.child_pid} on GPU 0 using 900 MiB" in text
        text = str(panel.query_one("#probe-step-9 .probe-value", Static).render())
        assert f"NVML: PID {panel.child_pid} gone from GPU 0" in text


async def test_a_crash_shows_as_a_failed_step_and_a_fail_verdict() -> None:
    panel = make_panel(script("crashing"))
    async with PanelApp(panel).run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: panel.outcome is not None)
        await pilot.pause()
        assert statuses(panel) == [S.PASS, S.PASS, S.FAIL] + [S.SKIP] * 6
        assert verdict(panel).startswith("FAIL: step 3")
        detail = str(panel.query_one("#probe-step-3 .probe-value", Static).render())
        assert "killed by SIGSEGV" in detail
        assert "simulated driver crash" in detail  # the stderr tail is shown


async def test_quitting_the_app_mid_probe_leaves_no_child_behind() -> None:
    panel = make_panel(script("hanging"))
    app = PanelApp(panel)
    async with app.run_test() as pilot:
        await until(pilot, lambda: row_status(panel, 1) == S.RUNNING)
        pid = panel.child_pid
        value = str(panel.query_one("#probe-step-1 .probe-value", Static).render())
        grandchild = int(value.split()[1])
        assert pid is not None and not gone(pid, within_s=0)
    # The app has exited: the worker was cancelled and the runner killed the child's group.
    assert gone(pid, within_s=5)
    assert gone(grandchild, within_s=5)


async def test_escape_closes_the_panel_and_kills_the_child() -> None:
    panel = make_panel(script("hanging"))
    app = PanelApp(panel)
    async with app.run_test() as pilot:
        await until(pilot, lambda: panel.child_pid is not None)
        pid = panel.child_pid
        assert pid is not None
        await pilot.press("escape")
        await until(pilot, lambda: any(isinstance(m, ProbePanel.Closed) for m in app.received))
        await pilot.pause()
        assert not app.query(ProbePanel)
        assert gone(pid, within_s=5)


async def test_r_reruns_and_kills_the_previous_child() -> None:
    panel = make_panel(script("hanging"))
    async with PanelApp(panel).run_test() as pilot:
        await until(pilot, lambda: panel.child_pid is not None)
        first = panel.child_pid
        assert first is not None
        await pilot.press("r")
        await until(pilot, lambda: panel.child_pid not in (None, first))
        assert gone(first, within_s=5)
        assert row_status(panel, 1) == S.RUNNING


@pytest.mark.slow
async def test_the_interpreter_can_be_changed_in_the_panel() -> None:
    panel = make_panel(script("hanging"))
    async with PanelApp(panel).run_test() as pilot:
        await until(pilot, lambda: panel.child_pid is not None)
        first = panel.child_pid
        await pilot.press("i")
        field = panel.query_one("#probe-python", Input)
        assert field.has_focus
        field.value = ""
        await pilot.press(*"/usr/bin/python3", "enter")
        await until(pilot, lambda: panel.child_pid not in (None, first))
        assert panel.python == "/usr/bin/python3"
        assert panel.has_focus  # back on the panel: r and Escape work again
        # Escape inside the field only leaves the field.
        await pilot.press("i", "escape")
        assert panel.has_focus and panel.is_mounted


async def test_a_missing_interpreter_is_a_failed_step_not_a_crash() -> None:
    panel = ProbePanel(0, UUID, "GPU", python="/nonexistent/python")
    async with PanelApp(panel).run_test() as pilot:
        await until(pilot, lambda: panel.outcome is not None)
        await pilot.pause()
        assert row_status(panel, 1) == S.FAIL
        assert verdict(panel).startswith("FAIL: step 1")


# --- snapshots ---------------------------------------------------------------------------------


def _snapshot_app(*extra: str) -> PanelApp:
    child = [*script("slow"), "--delay", "0.01", "--fixed-pid", "4242", *extra]
    return PanelApp(make_panel(child))


def test_snapshot_mid_run(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The panel mid-run: steps 1-4 passed, step 5 running, the rest pending."""

    async def wait(pilot: Pilot[None]) -> None:
        panel = pilot.app.query_one(ProbePanel)
        await until(pilot, lambda: row_status(panel, 5) == S.RUNNING)
        await pilot.pause()

    assert snap_compare(
        _snapshot_app("--stop-after", "4"), terminal_size=(110, 24), run_before=wait
    )


def test_snapshot_finished(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The panel after a passing probe: every step passed but step 6 (no NVML here)."""

    async def wait(pilot: Pilot[None]) -> None:
        panel = pilot.app.query_one(ProbePanel)
        await until(pilot, lambda: panel.outcome is not None)
        await pilot.pause()

    assert snap_compare(_snapshot_app(), terminal_size=(110, 24), run_before=wait)


async def test_c_copies_every_step_whole_for_pasting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A narrow panel folds a long path or URL: `c` puts the steps on the clipboard as
    text, each path, command and URL on one line."""
    copied: list[str] = []
    panel = make_panel([*script("slow"), "--delay", "0"])
    app = PanelApp(panel)
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=(100, 40)) as pilot:
        await until(pilot, lambda: panel.outcome is not None)
        panel.focus()
        await pilot.press("c")
        await pilot.pause()
    assert copied, "nothing copied"
    lines = copied[0].splitlines()
    assert lines[0].startswith("Torch probe - GPU 0")
    assert lines[1].startswith("[PASS] 1. ")
    assert any(line.startswith("[PASS] 4. ") and "is cuda:0" in line for line in lines)
