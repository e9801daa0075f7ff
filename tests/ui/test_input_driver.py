"""The dashboard's key-reading thread sleeps while no key comes (Textual's woke ten times a
second for nothing: ~0.18 % of a core in a dashboard left open for days), yet every key, a
lone Esc included, arrives as before, and quitting ends the thread at once."""

from __future__ import annotations

import os
import selectors
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from textual import events
from textual.message import Message

from gpumon.ui import input_driver
from gpumon.ui.input_driver import QuietLinuxDriver

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Textual's POSIX driver")


class StubApp:
    """What the driver touches of an app while it reads keys."""


class Recording(QuietLinuxDriver):
    """The driver, with what it would post to the app kept in a list (made on a running
    event loop, as Textual makes its driver)."""

    def __init__(self, fileno: int) -> None:
        handlers = signal.getsignal(signal.SIGTSTP), signal.getsignal(signal.SIGCONT)
        super().__init__(StubApp())
        signal.signal(signal.SIGTSTP, handlers[0])  # the driver installs its own
        signal.signal(signal.SIGCONT, handlers[1])
        self.fileno = fileno
        self.got: list[Message] = []

    def process_message(self, message: Message) -> None:
        self.got.append(message)

    def keys(self) -> list[str]:
        return [m.key for m in list(self.got) if isinstance(m, events.Key)]


@pytest.fixture
def selects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float | None]]:
    """Every select the input thread makes: (when, its timeout)."""
    made: list[tuple[float, float | None]] = []
    real = selectors.SelectSelector.select

    def select(self: selectors.SelectSelector, timeout: float | None = None) -> Any:
        made.append((time.monotonic(), timeout))
        return real(self, timeout)

    monkeypatch.setattr(selectors.SelectSelector, "select", select)
    return made


@pytest.fixture
async def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Recording, int]]:
    """A driver reading keys from a pipe on its thread, and the pipe's write end (the tests
    wait with time.sleep: the thread never needs the event loop)."""
    monkeypatch.setattr(input_driver, "TICKING_S", 0.3)
    read, write = os.pipe()
    recording = Recording(read)
    thread = threading.Thread(target=recording.run_input_thread, daemon=True)
    thread.start()
    yield recording, write
    recording.exit_event.set()
    thread.join(timeout=2)
    recording.close()
    os.close(read)
    os.close(write)


def wait_for(condition: Any, timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


async def test_keys_arrive_and_a_lone_escape_is_a_key(driver: tuple[Recording, int]) -> None:
    recording, write = driver
    os.write(write, b"q")
    assert wait_for(lambda: recording.keys() == ["q"])
    time.sleep(0.5)  # asleep by now: the next key still wakes it
    os.write(write, "é".encode())
    assert wait_for(lambda: recording.keys() == ["q", "é"])
    os.write(write, b"\x1b")  # no more of a sequence follows: a lone Esc, after the delay
    assert wait_for(lambda: recording.keys() == ["q", "é", "escape"])
    os.write(write, b"\x1b[B")  # a whole sequence: Down
    assert wait_for(lambda: recording.keys()[-1:] == ["down"])


async def test_with_no_input_the_thread_sleeps(
    driver: tuple[Recording, int], selects: list[tuple[float, float | None]]
) -> None:
    """Textual's thread: a select every 0.1 s for ever. This one: ticks only within
    TICKING_S (0.3 s here) of the last input, then one select with no timeout."""
    recording, write = driver
    os.write(write, b"a")
    assert wait_for(lambda: recording.keys() == ["a"])
    time.sleep(1.2)
    quiet = [made for made in selects if made[0] > time.monotonic() - 0.7]
    assert quiet == [] or all(timeout is None for _, timeout in quiet), selects
    assert selects and selects[-1][1] is None


async def test_setting_the_exit_event_ends_a_sleeping_thread_at_once() -> None:
    read, write = os.pipe()
    recording = Recording(read)
    thread = threading.Thread(target=recording.run_input_thread, daemon=True)
    thread.start()
    time.sleep(input_driver.TICKING_S + 0.3)  # past ticking: waiting with no timeout
    began = time.monotonic()
    recording.exit_event.set()
    thread.join(timeout=3)
    assert not thread.is_alive()
    assert time.monotonic() - began < 0.5  # the pipe woke it (and one last 0.1 s tick)
    # Textual clears the event after the join (suspend, then resume): a new thread reads on.
    recording.exit_event.clear()
    again = threading.Thread(target=recording.run_input_thread, daemon=True)
    again.start()
    os.write(write, b"x")
    assert wait_for(lambda: recording.keys() == ["x"])
    recording.exit_event.set()
    again.join(timeout=3)
    assert not again.is_alive()
    recording.close()
    os.close(read)
    os.close(write)


def test_the_dashboard_uses_it_unless_textual_driver_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from textual import constants

    from gpumon.ui.dashboard.app import GpumonApp

    app = GpumonApp.__new__(GpumonApp)
    assert app.get_driver_class() is QuietLinuxDriver
    monkeypatch.setattr(constants, "DRIVER", "textual.drivers.headless_driver:HeadlessDriver")
    assert app.get_driver_class().__name__ == "HeadlessDriver"


def test_textuals_input_loop_is_the_one_this_driver_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """QuietLinuxDriver.run_input_thread is Textual 8.2's loop with other waits: when
    Textual changes the modules it relies on, look at the change and carry it over, then
    update FOLLOWED. Until then (a user's other Textual 8), Textual's driver is used."""
    from textual.drivers.linux_driver import LinuxDriver

    from gpumon.ui.dashboard.app import GpumonApp
    from gpumon.ui.textual_source import QUIET_INPUT, changed

    assert not changed(QUIET_INPUT), "carry Textual's change over to gpumon/ui/input_driver.py"
    assert input_driver.follows_textual()
    monkeypatch.setitem(QUIET_INPUT.follows, "textual._parser:Parser.tick", frozenset({"other"}))
    app = GpumonApp.__new__(GpumonApp)
    assert app.get_driver_class() is LinuxDriver


async def test_a_closed_driver_never_writes_to_a_reused_descriptor() -> None:
    read, write = os.pipe()
    recording = Recording(read)
    wake = recording._wake_write
    recording.close()
    assert recording.exit_event.wake_fd == -1
    reused_read, reused_write = os.pipe()  # may take the closed numbers
    try:
        recording.exit_event.set()  # after close (a second stop): writes nowhere
        os.set_blocking(reused_read, False)
        with pytest.raises(BlockingIOError):
            os.read(reused_read, 1)
        assert wake >= 0
    finally:
        for fd in (read, write, reused_read, reused_write):
            os.close(fd)
