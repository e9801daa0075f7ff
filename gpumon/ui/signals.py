"""Quit the dashboard on SIGTERM, SIGHUP and SIGQUIT as on ``q``, leaving the terminal usable.

Python's default for these is to die at once, leaving the terminal in application mode.
:class:`QuitOnSignals` makes each exit the app as ``q`` does, from the event loop; a hung-up
terminal is first pointed at ``/dev/null``, SIGCONT reaches Textual only after its suspend,
and a watchdog ends a quit that hangs. docs/process-and-terminal.md says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from textual.app import App

QUIT_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name)
)
#: Longer than anything quitting waits for: Textual's CLOSE_TIMEOUT (5 s) and the probe
#: runner's reaping of a child stuck in the GPU driver (REAP_TIMEOUT_S, 5 s, plus its pipes).
GRACE_S = 20.0


def hung_up(fd: int) -> bool:
    """True when ``fd`` is a terminal that has hung up (its ioctls fail with EIO)."""
    try:
        import termios  # POSIX only: imported here so that this module imports anywhere
    except ImportError:
        return False
    try:
        termios.tcgetattr(fd)
    except termios.error as error:
        return bool(error.args) and error.args[0] == errno.EIO
    except (OSError, ValueError):
        return False
    return False


def detach_hung_up_terminal(fds: tuple[int, ...] = (0, 1, 2)) -> list[int]:
    """Point each of ``fds`` that is a hung-up terminal at /dev/null; returns those moved."""
    moved = [fd for fd in fds if hung_up(fd)]
    if moved:
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in moved:
                os.dup2(devnull, fd)
        finally:
            os.close(devnull)
    return moved


def ignore_quit_signals() -> None:
    """Ignore the quit signals from now on (the process is quitting already)."""
    for signum in QUIT_SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_IGN)


def _kill_probe_children() -> None:
    # Only if a probe ever ran: importing the module just for this would be work for nothing.
    children = sys.modules.get("gpumon.probe.child_process")
    if children is not None:
        children.kill_live_children()


class _ResumeOnlyAfterSuspend:
    """Wraps Textual's SIGTSTP and SIGCONT handlers: SIGCONT reaches Textual's only after its
    SIGTSTP, and not once the terminal has hung up."""

    def __init__(self) -> None:
        self.suspended = False
        self._originals: dict[int, Any] = {}

    def install(self) -> None:
        if not hasattr(signal, "SIGTSTP"):
            return
        on_tstp, on_cont = signal.getsignal(signal.SIGTSTP), signal.getsignal(signal.SIGCONT)
        if not (callable(on_tstp) and callable(on_cont)):
            return  # no Textual driver handles them (headless, tests)

        def suspend(signum: int, frame: FrameType | None) -> None:
            self.suspended = True
            on_tstp(signum, frame)

        def resume(signum: int, frame: FrameType | None) -> None:
            if self.suspended and not hung_up(0):
                self.suspended = False
                on_cont(signum, frame)

        try:
            signal.signal(signal.SIGTSTP, suspend)
            signal.signal(signal.SIGCONT, resume)
        except (OSError, ValueError):  # not the main thread
            with contextlib.suppress(OSError, ValueError):
                signal.signal(signal.SIGTSTP, on_tstp)
            return
        self._originals = {signal.SIGTSTP: on_tstp, signal.SIGCONT: on_cont}

    def uninstall(self) -> None:
        for signum, original in self._originals.items():
            with contextlib.suppress(OSError, ValueError):
                signal.signal(signum, original)
        self._originals.clear()


class QuitOnSignals:
    """Makes ``app`` exit as on ``q`` on SIGTERM, SIGHUP and SIGQUIT: :meth:`install` on
    mount, :meth:`uninstall` on unmount, :meth:`finished` once ``App.run`` returned.
    ``received`` is the first quit signal (None: none came).

    Args:
        app: The app to quit.
        grace_s: Arm a watchdog for this long on the first quit signal (None: none; only a
            process that ends with the app may arm one: the CLI).
        force_exit: What the watchdog calls with the exit status (tests replace it).
    """

    def __init__(
        self,
        app: App[Any],
        *,
        grace_s: float | None = None,
        force_exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.app = app
        self.grace_s = grace_s
        self.received: signal.Signals | None = None
        self._force_exit = force_exit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self._resume_guard = _ResumeOnlyAfterSuspend()
        self._watchdog: threading.Timer | None = None

    def install(self) -> None:
        """Install the handlers on the running loop; where asyncio cannot (outside the main
        thread, on Windows) the defaults stay."""
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            previous = signal.getsignal(signum)
            try:
                loop.add_signal_handler(signum, self.handle, signum)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            self._previous[signum] = previous
        self._loop = loop
        self._resume_guard.install()

    def uninstall(self) -> None:
        """Put the previous handlers back, unless a quit signal came (then a repeat must
        change nothing while Textual finishes)."""
        if self.received is not None or self._loop is None:
            return
        self._resume_guard.uninstall()
        for signum, previous in self._previous.items():
            with contextlib.suppress(RuntimeError, ValueError):
                self._loop.remove_signal_handler(signum)
            if previous is not None:
                with contextlib.suppress(OSError, ValueError, TypeError):
                    signal.signal(signum, previous)
        self._previous.clear()

    def finished(self) -> None:
        """Stop the watchdog; after a quit signal, ignore the quit signals from now on (a
        repeat during the interpreter's exit must not turn status 0 into death by it)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.received is not None:
            ignore_quit_signals()

    def handle(self, signum: int) -> None:
        """Quit as on ``q``; quit signals after the first change nothing."""
        if self.received is not None:
            return
        self.received = signal.Signals(signum)
        detach_hung_up_terminal()
        if self.grace_s is not None:
            self._watchdog = threading.Timer(self.grace_s, self._give_up)
            self._watchdog.daemon = True
            self._watchdog.start()
        self.app.exit(return_code=0)

    def _give_up(self) -> None:
        """Quitting hung: do without the event loop what must be done, and end."""
        with contextlib.suppress(Exception):
            _kill_probe_children()
        assert self.received is not None
        self._force_exit(128 + self.received)
