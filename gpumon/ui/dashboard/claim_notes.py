"""The dashboard's note on a GPU another pick claimed: ``claimed by alice 40 s ago``.

:class:`ClaimNotes` is one of the app's note sources. It reads the claims directory
(:mod:`gpumon.sources.host.claims`; only if it passes the checks ``gpumon pick`` makes,
never creating it) on the event loop's executor thread at most once every
:data:`REFRESH_S`, so a slow or hung file system never holds up the event loop, and answers
every redraw from the last read: the note shows from the redraw after the read. Simulated
GPUs have no claims. (A Textual thread worker each second cost more than the read: its
state messages went through the app's message queue, ~4 % of the dashboard's CPU.)

The directory is shared with every local user, who may fill it with thousands of files
(only claim-named ones are read, but each is checked): reading them all cost ~0.18 s of
CPU, every second, in every user's dashboard. So a read first looks at the directory: one
unchanged since the last full read (same inode and modification time, not changed within
:data:`RECENT_CHANGE_S`, whose edits a coarse time stamp could hide) is not read again
until :data:`FULL_READ_S` has passed (a claim file rewritten in place changes no directory;
``gpumon pick`` renames its files into place, which does). And reads take at most
:data:`MAX_READ_SHARE` of a core: after a read that took ``t`` seconds of CPU the next one
waits ``t / MAX_READ_SHARE`` (at least :data:`REFRESH_S`, at most :data:`FULL_READ_S`), so a
directory changed all the time costs a bounded share of a core, not a core.
Reads also take at most :data:`MAX_WALL_SHARE` of the time: a directory on a slow network
file system, whose reads wait rather than compute, is not asked back to back either.
A directory that could not be listed (an I/O error) is treated as one read: listed again
when it changes, or after FULL_READ_S. Its claims are unknown then, not none: the dashboard
says so once, in a notice (as ``pick`` says it).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpumon.data import claims as rules
from gpumon.data.model import Sample
from gpumon.sources.host.claims import ClaimsDir, ClaimsOff
from gpumon.ui.widgets.gpu_notes import GpuNote

if TYPE_CHECKING:
    from textual.app import App

#: The claims directory is read at most this often.
REFRESH_S = 1.0
#: An unchanged directory's files are read again this often all the same.
FULL_READ_S = 30.0
#: A directory whose modification time is newer than this is read whole each time: a second
#: change within its time stamp's granularity would leave the time stamp as it was.
RECENT_CHANGE_S = 2.0
#: The most of a core that reading the directory may take.
MAX_READ_SHARE = 0.02
#: The most of the time that reading it may take (a read waiting on a slow file system costs
#: no CPU; one slowed by a busy machine rarely takes a tenth of a second).
MAX_WALL_SHARE = 0.1


class ClaimNotes:
    """A note source: NVML index -> ``claimed by ...`` notes (style ``note-warn``)."""

    def __init__(
        self,
        app: App[Any],
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        thread_time: Callable[[], float] = time.thread_time,
    ) -> None:
        self.app = app
        self.path = path
        self.clock = clock
        self.monotonic = monotonic
        self.thread_time = thread_time
        #: The claims of the last read (replaced whole by the worker, never changed).
        self.claims: tuple[rules.Claim, ...] = ()
        #: When the next read may start (monotonic), None: at once.
        self._next_read_at: float | None = None
        #: The directory as it was at the last full read: (device, inode, mtime ns), and
        #: when (monotonic) that read began.
        self._read_stamp: tuple[int, int, int] | None = None
        self._full_read_at = 0.0
        #: Whether the directory's time stamp was already RECENT_CHANGE_S old at that read:
        #: a change after it would have moved the stamp (else one within the stamp's tick,
        #: after the read, would leave it as it was, hidden until the next full read).
        self._read_settled = False
        #: Why the claims cannot be read now (``cannot list ...``), None when they can; and
        #: what the notice last said.
        self.off: str | None = None
        self._said_off: str | None = None
        #: How many times the files were read (tests count them).
        self.full_reads = 0
        self._reading = False
        #: The read in flight or last started (tests wait for it).
        self.pending: asyncio.Future[None] | None = None

    def __call__(self, sample: Sample | None) -> dict[int, list[GpuNote]]:
        if sample is None or sample.simulated:
            return {}
        self._refresh_soon()
        self._say_off()
        said = rules.notes(sample, self.claims, self.clock())
        return {
            index: [GpuNote(text, "note-warn") for text in texts] for index, texts in said.items()
        }

    def _say_off(self) -> None:
        """On the loop: a directory whose claims cannot be read is said once per reason, so
        that no claim notes do not read as no claims."""
        off = self.off
        if off is None or off == self._said_off or not self.app.is_running:
            return
        self._said_off = off
        self.app.notify(
            f"Claims cannot be read: {off}. GPUs claimed with gpumon pick are not marked.",
            severity="warning",
            timeout=10,
            markup=False,  # a path may hold brackets
        )

    def _refresh_soon(self) -> None:
        """Start a read off the loop unless one runs or it is not yet time for the next."""
        if self._reading or (
            self._next_read_at is not None and self.monotonic() < self._next_read_at
        ):
            return
        if not self.app.is_running:
            return
        self._reading = True
        self.pending = asyncio.get_running_loop().run_in_executor(None, self.read)

    def read(self) -> None:
        """Off the loop: touches no widget, only replaces :attr:`claims`."""
        began, cpu_began = self.monotonic(), self.thread_time()
        try:
            with ClaimsDir.open(self.path, create=False) as directory:
                info = os.fstat(directory.fd)
                stamp = (info.st_dev, info.st_ino, info.st_mtime_ns)
                if self._unchanged(stamp, began):
                    return
                self._read_stamp, self._full_read_at = stamp, began
                self._read_settled = self.clock() - info.st_mtime >= RECENT_CHANGE_S
                self.full_reads += 1
                try:
                    self.claims, self.off = directory.scan().claims, None
                except ClaimsOff as off:  # the listing failed: as read
                    self.claims, self.off = (), str(off)
        except ClaimsOff:  # no directory, or one pick would not use: no claims to show
            self.claims, self._read_stamp, self.off = (), None, None
        except Exception:  # as the thread worker did (exit_on_error=False): the last claims
            self._read_stamp = None  # stand, and no "exception was never retrieved" is
            # printed over the screen
        finally:
            # The CPU this read took as a share of the wait, and (more loosely: a busy
            # machine is no reason to read less often) its wall time, for a slow file
            # system; the wait is at most FULL_READ_S.
            took = max(0.0, self.thread_time() - cpu_began)
            waited = max(0.0, self.monotonic() - began)
            shares = (took / MAX_READ_SHARE, waited / MAX_WALL_SHARE)
            wait = min(FULL_READ_S, max(REFRESH_S, *shares))
            self._next_read_at = began + wait
            self._reading = False

    def _unchanged(self, stamp: tuple[int, int, int], now: float) -> bool:
        """Whether the last full read still stands for a directory that looks like ``stamp``:
        the same stamp, which was already settled when that read was made (a clock stepped
        back reads as not settled: read again)."""
        return (
            stamp == self._read_stamp
            and self._read_settled
            and now - self._full_read_at < FULL_READ_S
        )
