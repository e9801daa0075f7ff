"""Quitting on a signal: SIGTERM (`kill PID`), SIGHUP (the tmux pane or SSH connection closed)
and SIGQUIT do what `q` does, Ctrl+C quits, and none of them leaves the terminal broken or a
probe child behind.

The terminal tests run `python -m gpumon --demo` on the slave side of a real pseudo-terminal
(the dashboard needs a tty on stdin and stderr) and read what it writes on the master side.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import selectors
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator

import psutil
import pytest
from textual.command import CommandPalette
from textual.selection import Selection

from gpumon.probe.runner import run_probe
from gpumon.ui.signals import QUIT_SIGNALS, QuitOnSignals, detach_hung_up_terminal, hung_up
from gpumon.ui.widgets.help import HelpScreen
from tests.probe.test_probe_runner import REQUEST, Recorder
from tests.support.fake_children import gone, script
from tests.ui.dashboard.test_app_probe import probe_app, start_probe, until

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="signals and ptys as on Linux"
)

COLUMNS, ROWS = 100, 30
FIRST_FRAME_TIMEOUT_S = 60.0  # a loaded 2-core CI machine starts Textual slowly
EXIT_TIMEOUT_S = 30.0

# What Textual writes when it leaves application mode (LinuxDriver.stop_application_mode and
# _disable_mouse_support): alternate screen off, cursor shown, every mouse mode off.
RESTORE_SEQUENCES = {
    "alternate screen off": b"\x1b[?1049l",
    "cursor shown": b"\x1b[?25h",
    "mouse tracking off": b"\x1b[?1000l",
    "any-motion mouse off": b"\x1b[?1003l",
    "urxvt mouse off": b"\x1b[?1015l",
    "SGR mouse off": b"\x1b[?1006l",
}
ANSI_RE = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]")


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


class PtyDashboard:
    """gpumon on a pty's slave side; a thread drains the master side into ``output``.

    The test keeps its own slave descriptor open, so the terminal's settings can be read
    after gpumon exits (and the master never sees EIO while this object lives).
    """

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self.termios_before = termios.tcgetattr(self.slave)
        self._output = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._master_open = True
        env = dict(os.environ)
        for name in ("COLORTERM", "NO_COLOR", "FORCE_COLOR", "TEXTUAL", "TERM_PROGRAM"):
            env.pop(name, None)
        for name in ("COLUMNS", "LINES", "LC_ALL", "LC_CTYPE"):
            env.pop(name, None)
        env.update(TERM="xterm-256color", LANG="C.UTF-8")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpumon", "--demo", "--demo-gpus", "2"],
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            env=env,
            close_fds=True,
            start_new_session=True,  # its own session, with this pty as controlling terminal
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        self._reader = threading.Thread(target=self._drain, name="pty-drain", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.master, selectors.EVENT_READ)
            while not self._stop.is_set():
                if not selector.select(0.05):
                    continue
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                if not data:
                    return
                with self._lock:
                    self._output += data

    def output(self, start: int = 0) -> bytes:
        with self._lock:
            return bytes(self._output[start:])

    def text(self) -> str:
        return ANSI_RE.sub(b"", self.output()).decode("utf-8", "replace")

    def wait_for_first_frame(self) -> None:
        """The process table's header and a demo process's command line are on the screen."""

        def drawn() -> bool:
            assert self.process.poll() is None, (
                f"gpumon exited with status {self.process.returncode}: {self.text()[-2000:]!r}"
            )
            text = self.text()
            return "COMMAND" in text and "python" in text

        wait_until(drawn, FIRST_FRAME_TIMEOUT_S, "the first full frame")

    def signal(self, signum: int) -> int:
        """Send ``signum`` to gpumon; returns how much output came before it."""
        mark = len(self.output())
        self.process.send_signal(signum)
        return mark

    def wait_exit(self) -> int:
        try:
            return self.process.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"gpumon did not exit within {EXIT_TIMEOUT_S:g} s; it wrote: "
                f"{self.output()[-600:]!r}"
            ) from None

    def wait_for_output(self, start: int, needles: list[bytes], timeout_s: float = 10) -> None:
        """Until every needle arrived after ``start`` (the pty delivers a little late)."""
        with contextlib.suppress(AssertionError):
            wait_until(
                lambda: all(needle in self.output(start) for needle in needles),
                timeout_s,
                "the terminal's restore sequences",
            )

    def hang_up(self) -> None:
        """Close the master side: the terminal is gone (tmux closed the pane)."""
        self._stop.set()
        self._reader.join(5)
        os.close(self.master)
        self._master_open = False

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self._stop.set()
        self._reader.join(5)
        if self._master_open:
            os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def dashboard() -> Iterator[PtyDashboard]:
    terminal = PtyDashboard()
    try:
        yield terminal
    finally:
        terminal.close()


def session_members(sid: int) -> list[int]:
    members = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if pid != sid and os.getsid(pid) == sid:
                members.append(pid)
    return members


def assert_terminal_restored(terminal: PtyDashboard, after: int) -> None:
    terminal.wait_for_output(after, list(RESTORE_SEQUENCES.values()))
    written = terminal.output(after)
    missing = [name for name, sequence in RESTORE_SEQUENCES.items() if sequence not in written]
    assert not missing, f"not restored: {missing}; written after the signal: {written[-400:]!r}"
    now = termios.tcgetattr(terminal.slave)
    lflag = now[3]
    for flag in ("ICANON", "ECHO", "ISIG"):
        assert lflag & getattr(termios, flag), f"{flag} is still off (stty -{flag.lower()})"
    assert now == terminal.termios_before, "the terminal's settings differ from before"


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT], ids=lambda s: s.name
)
def test_a_quit_signal_restores_the_terminal_and_exits_0(
    dashboard: PtyDashboard, signum: signal.Signals
) -> None:
    dashboard.wait_for_first_frame()
    after = dashboard.signal(signum)
    status = dashboard.wait_exit()
    assert status == 0, f"exit status {status} after {signum.name}"
    assert_terminal_restored(dashboard, after)
    assert not session_members(dashboard.process.pid), "something of gpumon's still runs"


def test_a_second_signal_while_quitting_changes_nothing(dashboard: PtyDashboard) -> None:
    dashboard.wait_for_first_frame()
    after = dashboard.signal(signal.SIGTERM)
    dashboard.signal(signal.SIGHUP)
    dashboard.signal(signal.SIGTERM)
    status = dashboard.wait_exit()
    assert status == 0, f"exit status {status}"
    assert_terminal_restored(dashboard, after)


def test_closing_the_terminal_quits_without_hanging(dashboard: PtyDashboard) -> None:
    """tmux closing the pane, or a dropped SSH connection: the kernel hangs the terminal up
    and sends SIGHUP. Every write to it now fails (EIO); gpumon must still quit, at once and
    with status 0 (a traceback or a panic would make it 1)."""
    dashboard.wait_for_first_frame()
    dashboard.hang_up()
    status = dashboard.wait_exit()
    assert status == 0, f"exit status {status} after the terminal hung up"


def test_suspend_and_resume_still_work(dashboard: PtyDashboard) -> None:
    """Textual's own SIGTSTP/SIGCONT handling (suspend, then redraw) is left alone."""
    dashboard.wait_for_first_frame()
    process = psutil.Process(dashboard.process.pid)
    suspended_at = dashboard.signal(signal.SIGTSTP)
    wait_until(lambda: process.status() == psutil.STATUS_STOPPED, 30, "gpumon to stop")
    dashboard.wait_for_output(suspended_at, [b"\x1b[?1049l"])
    assert b"\x1b[?1049l" in dashboard.output(suspended_at)  # left the alternate screen
    resumed_at = dashboard.signal(signal.SIGCONT)
    dashboard.wait_for_output(resumed_at, [b"\x1b[?1049h"])
    assert b"\x1b[?1049h" in dashboard.output(resumed_at)  # and is back in it
    assert process.status() != psutil.STATUS_STOPPED
    after = dashboard.signal(signal.SIGTERM)
    assert dashboard.wait_exit() == 0
    assert_terminal_restored(dashboard, after)


@pytest.mark.slow
def test_keys_still_arrive_after_suspend_and_resume(dashboard: PtyDashboard) -> None:
    """Textual closes a driver it suspends and starts the same one again: gpumon's key
    thread (gpumon.ui.input_driver) opens its wake-up pipe again and reads keys, and q quits."""
    dashboard.wait_for_first_frame()
    process = psutil.Process(dashboard.process.pid)
    for _ in range(2):
        suspended_at = dashboard.signal(signal.SIGTSTP)
        wait_until(lambda: process.status() == psutil.STATUS_STOPPED, 30, "gpumon to stop")
        dashboard.wait_for_output(suspended_at, [b"\x1b[?1049l"])
        resumed_at = dashboard.signal(signal.SIGCONT)
        dashboard.wait_for_output(resumed_at, [b"\x1b[?1049h"])
    time.sleep(1.5)  # past the thread's ticking: asleep until a key comes
    before = len(dashboard.output())
    os.write(dashboard.master, b"q")
    assert dashboard.wait_exit() == 0
    assert b"Traceback" not in dashboard.output() and b"Error" not in dashboard.output(before)
    assert_terminal_restored(dashboard, before)


def test_a_sigcont_without_a_suspend_does_not_restart_application_mode(
    dashboard: PtyDashboard,
) -> None:
    """The kernel sends SIGHUP and SIGCONT to a session leader whose terminal hangs up (and
    `kill -CONT` sends one any time). Textual's own handler would start application mode a
    second time (a second output thread, which a dead terminal kills, hanging the quit)."""
    dashboard.wait_for_first_frame()
    dashboard.signal(signal.SIGCONT)
    dashboard.signal(signal.SIGTERM)
    assert dashboard.wait_exit() == 0
    entered = dashboard.output().count(b"\x1b[?1049h")
    assert entered == 1, f"entered the alternate screen {entered} times"


# --- in process: the same handler, with a probe running ---------------------------------------


async def test_sigterm_mid_probe_quits_and_kills_the_probe_child() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(200, 50)) as pilot:
        pid = await start_probe(pilot, app)
        # Without gpumon's handler the signal would end the test run itself.
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None), (
            "gpumon installed no SIGTERM handler"
        )
        os.kill(os.getpid(), signal.SIGTERM)
        await until(pilot, lambda: not app.is_running or app._exit, timeout_s=30)
    assert app.return_code == 0
    assert gone(pid), f"probe child {pid} outlived gpumon"


async def test_the_handlers_are_removed_when_the_app_ends_without_a_signal() -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    app = probe_app(script("hanging"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("q")
    assert {signum: signal.getsignal(signum) for signum in before} == before


# --- Ctrl+C ------------------------------------------------------------------------------------


async def test_ctrl_c_quits() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app._exit, timeout_s=10)
    assert app.return_code == 0


async def test_ctrl_c_quits_from_the_help_screen() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout_s=10)
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app._exit, timeout_s=10)
    assert app.return_code == 0


async def test_ctrl_c_quits_from_the_command_palette() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), timeout_s=10)
        await pilot.press("t", "h")
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app._exit, timeout_s=10)
    assert app.return_code == 0


async def test_ctrl_c_copies_text_selected_with_the_mouse_instead_of_quitting() -> None:
    app = probe_app(script("hanging"))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.sample is not None)
        header = app.query_one("#header")
        app.screen.selections = {header: Selection(None, None)}  # as a mouse drag leaves it
        selected = app.screen.get_selected_text()
        assert selected
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not app._exit
        assert app.clipboard == selected
        app.screen.clear_selection()
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app._exit, timeout_s=10)
    assert app.return_code == 0


# --- the handler on its own --------------------------------------------------------------------


class StuckApp:
    """An app whose quitting never finishes (exit does nothing)."""

    def __init__(self) -> None:
        self.exits: list[int] = []

    def exit(self, return_code: int = 0) -> None:
        self.exits.append(return_code)


async def test_a_second_signal_is_ignored_and_the_watchdog_ends_a_hung_quit() -> None:
    app = StuckApp()
    statuses: list[int] = []
    quit_signals = QuitOnSignals(app, grace_s=0.2, force_exit=statuses.append)  # type: ignore[arg-type]
    recorder = Recorder()
    probe = asyncio.ensure_future(run_probe(REQUEST, command=script("hanging"), on_event=recorder))
    try:
        await asyncio.wait_for(recorder.hello.wait(), 30)
        quit_signals.handle(signal.SIGTERM)
        quit_signals.handle(signal.SIGHUP)
        assert app.exits == [0]
        assert quit_signals.received == signal.SIGTERM
        deadline = time.monotonic() + 10
        while not statuses and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert statuses == [128 + signal.SIGTERM]
        assert gone(recorder.pid), "the watchdog left the probe child running"
    finally:
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probe


async def test_the_watchdog_is_stopped_when_the_app_finished_in_time() -> None:
    app = StuckApp()
    statuses: list[int] = []
    quit_signals = QuitOnSignals(app, grace_s=0.2, force_exit=statuses.append)  # type: ignore[arg-type]
    previous = {signum: signal.getsignal(signum) for signum in QUIT_SIGNALS}
    quit_signals.handle(signal.SIGTERM)
    try:
        quit_signals.finished()
        for signum in QUIT_SIGNALS:  # quitting already: a repeat must not kill the process
            assert signal.getsignal(signum) == signal.SIG_IGN
        await asyncio.sleep(0.5)  # the watchdog's grace and more
        assert statuses == []
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_hung_up_tells_a_dead_terminal_from_a_live_one_and_from_a_file() -> None:
    master, slave = os.openpty()
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        assert not hung_up(slave)
        assert not hung_up(devnull)
        os.close(master)
        assert hung_up(slave)
        assert detach_hung_up_terminal((slave, devnull)) == [slave]
        assert not hung_up(slave)  # now /dev/null: writes go nowhere, without EIO
        assert os.write(slave, b"x") == 1
    finally:
        os.close(slave)
        os.close(devnull)
