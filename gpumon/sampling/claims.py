"""The claims of ``gpumon pick`` for the dashboard's notes: ``claimed by alice 40 s ago``;
and the header's ``2 waiting``, the live picks in the queue.

:class:`ClaimsReader` is a pipeline step: a sample starts a read of the claims directory
(:mod:`gpumon.sources.host.claims`; only one that passes pick's checks, never created) on its
own daemon thread, at most once every :data:`REFRESH_S`, so a slow or hung file system never
holds up the event loop; what it says comes from the last read. A directory unchanged since the
last full read is not read again until :data:`FULL_READ_S`, and reads take at most
:data:`MAX_READ_SHARE` of a core and :data:`MAX_WALL_SHARE` of the time (docs/claims.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future

from gpumon.data import claims as rules
from gpumon.data.model import Sample
from gpumon.data.notes import GpuNote
from gpumon.sampling.poller import DaemonThread
from gpumon.sources.host.claims import ClaimsDir, ClaimsOff
from gpumon.sources.host.queue import scan_waiters

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


class ClaimsReader:
    """The step that reads the claims, and the note source of what it read."""

    def __init__(
        self,
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        thread_time: Callable[[], float] = time.thread_time,
    ) -> None:
        self.path = path
        self.clock = clock
        self.monotonic = monotonic
        self.thread_time = thread_time
        #: The claims of the last read (replaced whole by the worker, never changed).
        self.claims: tuple[rules.Claim, ...] = ()
        #: How many live picks waited in the queue at the last read.
        self.waiting = 0
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
        self.pending: Future[None] | None = None
        self._thread: DaemonThread | None = None

    def __call__(self, sample: Sample) -> None:
        """Start a read off the loop unless one runs or it is not yet time for the next."""
        if sample.simulated or self._reading:
            return
        if self._next_read_at is not None and self.monotonic() < self._next_read_at:
            return
        self._reading = True
        if self._thread is None:
            self._thread = DaemonThread("gpumon-claims")
        self.pending = self._thread.submit(self.read)

    def notes(self, sample: Sample | None) -> dict[int, list[GpuNote]]:
        """A note source: NVML index -> ``claimed by ...`` notes (style ``note-warn``)."""
        if sample is None or sample.simulated:
            return {}
        said = rules.notes(sample, self.claims, self.clock())
        return {
            index: [GpuNote(text, "note-warn") for text in texts] for index, texts in said.items()
        }

    def with_waiting(self, free_text: tuple[str, ...]) -> tuple[str, ...]:
        """The header's free count, and how many picks wait in the queue (``FREE 3, 2
        waiting``), each form; as it is when none wait."""
        if not self.waiting:
            return free_text
        waiting = f"{self.waiting} waiting"
        return tuple(f"{text}, {waiting}" for text in free_text) or (waiting,)

    def notice(self) -> str | None:
        """Why the claims cannot be read, once per reason (no claim notes must not read as
        no claims); else ``None``."""
        off = self.off
        if off is None or off == self._said_off:
            return None
        self._said_off = off
        return f"Claims cannot be read: {off}. GPUs claimed with gpumon pick are not marked."

    def read(self) -> None:
        """On the reader's thread: only replaces :attr:`claims` and :attr:`off`."""
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
                    self.waiting = len(scan_waiters(directory, self.clock()).waiters)
                except ClaimsOff as off:  # the listing failed: as read
                    self.claims, self.off, self.waiting = (), str(off), 0
        except ClaimsOff:  # no directory, or one pick would not use: no claims to show
            self.claims, self._read_stamp, self.off, self.waiting = (), None, None, 0
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
