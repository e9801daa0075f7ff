"""Textual's terminal driver with an input thread that sleeps while no key comes.

Textual's input thread wakes ten times a second to time out a half-read escape sequence.
:class:`QuietLinuxDriver` ticks only for :data:`TICKING_S` after the last input, otherwise
waits with no timeout; a pipe wakes it when its exit event is set. Used only where
:func:`follows_textual`; docs/textual-replacements.md says why and how.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import time
from codecs import getincrementaldecoder
from threading import Event
from typing import Any

from textual import constants
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

from gpumon.ui.textual_source import QUIET_INPUT, is_on

#: Textual's tick while a key may be half read (its own input thread's select timeout).
TICK_S = 0.1
#: How long after the last input the thread keeps ticking: well past Textual's escape
#: delay, so a lone Esc is delivered as promptly as Textual delivers it.
TICKING_S = max(1.0, 4 * constants.ESCAPE_DELAY)


def follows_textual() -> bool:
    """Whether the installed Textual's driver and key parser are ones :class:`QuietLinuxDriver`
    was tested with (:data:`gpumon.ui.textual_source.QUIET_INPUT`)."""
    return is_on(QUIET_INPUT)


class WakingEvent(Event):
    """An :class:`~threading.Event` that, when set, also writes a byte to ``wake_fd`` (the
    input thread's selector watches the pipe's other end)."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self.wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # a full pipe is awake already; a closed one ended
            os.write(self.wake_fd, b"\0")


class QuietLinuxDriver(LinuxDriver):
    """:class:`LinuxDriver` whose input thread sleeps until input, or its exit."""

    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(app, **options)
        self._wake_read = self._wake_write = -1
        self.exit_event: WakingEvent = WakingEvent(-1)
        self._open_wake_pipe()

    def _open_wake_pipe(self) -> None:
        """The pipe that wakes the input thread, (re)opened: :meth:`close` closes it, and
        Textual closes a driver it suspends (``Ctrl+Z``) and starts the same one again."""
        if self._wake_read >= 0:
            return
        self._wake_read, self._wake_write = os.pipe()  # not inherited by children
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        self.exit_event.wake_fd = self._wake_write

    def start_application_mode(self) -> None:
        self._open_wake_pipe()  # before Textual starts the input thread
        super().start_application_mode()

    def close(self) -> None:
        super().close()
        self.exit_event.wake_fd = -1  # its number may be another file's once closed
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_read = self._wake_write = -1

    def run_input_thread(self) -> None:
        """Wait for input and dispatch events (Textual's loop, with :data:`TICK_S` ticks only
        within :data:`TICKING_S` of the last input)."""
        selector = selectors.SelectSelector()
        fileno, wake = self.fileno, self._wake_read
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        last_input = time.monotonic()

        def dispatch(ready: list[tuple[selectors.SelectorKey, int]]) -> bool:
            """Feed what can be read to the parser; whether there was input."""
            got = False
            for key, mask in ready:
                if key.fd == wake:
                    with contextlib.suppress(OSError):
                        os.read(wake, 4096)
                    continue
                if not mask & selectors.EVENT_READ:
                    continue
                text = decode(os.read(fileno, 1024 * 4))
                if not text:  # stdin piped and at its end
                    break
                got = True
                for event in parser.feed(text):
                    self.process_message(event)
            for event in parser.tick():
                self.process_message(event)
            return got

        try:
            while not self.exit_event.is_set():
                ticking = time.monotonic() - last_input < TICKING_S
                if dispatch(selector.select(TICK_S if ticking else None)):
                    last_input = time.monotonic()
            # As Textual does: a last tick a moment later delivers a key half read.
            selector.unregister(fileno)
            selector.unregister(wake)
            dispatch(selector.select(TICK_S))
        finally:
            selector.close()
            with contextlib.suppress(EOFError, ParseError):
                for _event in parser.feed(""):
                    pass
