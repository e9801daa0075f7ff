"""T / K / I on a process: the confirmation dialog and what reaches the user (Pilot tests).

A minimal app of its own binds T, K and I as the dashboard does, to a REAL child process of
the test: a signal that is sent ends it, one that is not leaves it running.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.widgets import Static

from gpumon.data.model import GpuProcess
from gpumon.ui.dashboard.signal_dialog import SignalDialog, request_signal
from tests.sources.host.test_process_signals import Children, assert_alive, ended_by, process_of
from tests.support.ui_helpers import screen_text


class SignalApp(App[None]):
    """The dashboard's T, K and I over one "selected" process, recording notifications."""

    BINDINGS = [
        Binding("T", "signal('SIGTERM')"),
        Binding("K", "signal('SIGKILL')"),
        Binding("I", "signal('SIGINT')"),
    ]

    def __init__(
        self,
        process: GpuProcess | None,
        *,
        readonly: bool = False,
        current_uid: int | None = None,
    ) -> None:
        super().__init__()
        self.process = process
        self.readonly = readonly
        self.current_uid = current_uid
        self.notes: list[tuple[str, SeverityLevel]] = []

    def compose(self) -> ComposeResult:
        yield Static("process table")

    def action_signal(self, name: str) -> None:
        request_signal(
            self,
            self.process,
            signal.Signals[name],
            readonly=self.readonly,
            current_uid=self.current_uid,
        )

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        self.notes.append((message, severity))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)


@pytest.fixture
def children() -> Iterator[Children]:
    started = Children()
    yield started
    started.close()


def dialog_of(app: App[Any]) -> SignalDialog:
    assert isinstance(app.screen, SignalDialog), app.screen
    return app.screen


async def test_the_dialog_names_the_process(children: Children) -> None:
    child = children.own()
    app = SignalApp(process_of(child, user="alice", command="python train.py --lr 3e-4"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        text = screen_text(app)
        assert f"Send SIGTERM to PID {child.pid}?" in text
        assert f"PID         {child.pid}" in text
        assert "User        alice" in text
        assert "Command     python train.py --lr 3e-4" in text
        assert "GPU memory  2.0G" in text
        assert "GPU         0" in text
        assert "Cancel" in text and "Send SIGTERM" in text
    assert_alive(child)


@pytest.mark.parametrize("key, name", [("T", "SIGTERM"), ("K", "SIGKILL"), ("I", "SIGINT")])
async def test_cancel_is_focused_and_enter_sends_nothing(
    children: Children, key: str, name: str
) -> None:
    child = children.own()
    app = SignalApp(process_of(child))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press(key)
        dialog = dialog_of(app)
        assert dialog.sig.name == name
        assert app.focused is not None and app.focused.id == "signal-cancel"
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        assert app.notes == []
    assert_alive(child)


@pytest.mark.parametrize("key", ["escape", "n"])
async def test_escape_and_n_cancel(children: Children, key: str) -> None:
    child = children.own()
    app = SignalApp(process_of(child))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("K")
        dialog_of(app)
        await pilot.press(key)
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        assert app.notes == []
    assert_alive(child)


@pytest.mark.parametrize(
    "key, keys, sig",
    [
        ("T", ["y"], signal.SIGTERM),
        ("K", ["tab", "enter"], signal.SIGKILL),
        ("I", ["right", "enter"], signal.SIGINT),
    ],
)
async def test_confirming_sends_and_says_so(
    children: Children, key: str, keys: list[str], sig: signal.Signals
) -> None:
    child = children.own()
    app = SignalApp(process_of(child))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press(key)
        dialog_of(app)
        await pilot.press(*keys)
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        assert app.notes == [(f"{sig.name} sent to PID {child.pid}", "information")]
    assert ended_by(child) == sig


async def test_clicking_send_sends(children: Children) -> None:
    child = children.own()
    app = SignalApp(process_of(child))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        await pilot.click("#signal-send")
        await pilot.pause()
        assert app.notes == [(f"SIGTERM sent to PID {child.pid}", "information")]
    assert ended_by(child) == signal.SIGTERM


async def test_a_process_gone_while_asking_is_reported(children: Children) -> None:
    """The process ends while the dialog is open: "gone", as a warning, nothing else."""
    child = children.own()
    app = SignalApp(process_of(child))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        child.kill()
        child.wait(timeout=10)
        await pilot.press("y")
        await pilot.pause()
        assert app.notes == [(f"PID {child.pid} has already exited: SIGTERM not sent", "warning")]


async def test_a_hostile_command_shows_literally(children: Children) -> None:
    """Markup in a command is text, and an escape sequence never reaches the terminal."""
    child = children.own()
    command = "python [red]x[/] [bold]y \x1b[2J\x1b]0;owned\x07 z"
    app = SignalApp(process_of(child, command=command, user="[b]eve[/b]"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        text = screen_text(app)
        assert "python [red]x[/] [bold]y" in text
        assert "User        [b]eve[/b]" in text
        assert "\x1b" not in text and "\x07" not in text
        await pilot.press("escape")
    assert_alive(child)


async def test_another_users_process_is_refused_without_a_dialog(children: Children) -> None:
    """The live owner is not the user signals are sent for: a warning names the owner,
    no dialog opens, nothing is sent."""
    child = children.own()
    someone_else = os.getuid() + 1
    app = SignalApp(process_of(child, is_current_user=True), current_uid=someone_else)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("K")
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        [(message, severity)] = app.notes
        assert severity == "warning"
        assert message.startswith(f"PID {child.pid} belongs to ")
        assert message.endswith(", not to you: nothing sent")
    assert_alive(child)


async def test_readonly_refuses_without_a_dialog(children: Children) -> None:
    child = children.own()
    app = SignalApp(process_of(child), readonly=True)
    async with app.run_test(size=(100, 30)) as pilot:
        for key in ("T", "K", "I"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, SignalDialog)
        assert app.notes == [("Read-only mode (--readonly): nothing sent", "warning")] * 3
    assert_alive(child)


async def test_no_process_selected() -> None:
    app = SignalApp(None)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        assert app.notes == [("No process selected", "warning")]


async def test_the_buttons_stay_on_a_small_terminal(children: Children) -> None:
    """A long command in a 60x15 tmux pane: the process details scroll, the buttons stay."""
    child = children.own()
    app = SignalApp(process_of(child, command="python " + "--flag " * 200))
    async with app.run_test(size=(60, 15)) as pilot:
        await pilot.press("T")
        text = screen_text(app)
        assert "Cancel" in text and "Send SIGTERM" in text
        await pilot.press("escape")
    assert_alive(child)


async def test_ascii_terminal_gets_no_box_drawing(children: Children) -> None:
    """The dashboard marks a terminal that is not UTF-8 with the -ascii class."""
    child = children.own()
    app = SignalApp(process_of(child, command="python " + "x" * 300))
    async with app.run_test(size=(100, 30)) as pilot:
        app.add_class("-ascii")
        await pilot.press("T")
        text = screen_text(app)
        assert "Send SIGTERM" in text
        assert text.isascii(), [line for line in text.splitlines() if not line.isascii()]
        await pilot.press("escape")
    assert_alive(child)
