"""Feeding the history from a sampler: ``gpumon record`` and ``gpumon export --record``.

:class:`Recorder` hands each sample to a :class:`HistoryWriter` and turns its errors into
one line each (repeated only when the problem changes); a problem that may pass retries with
the next batch, one that will not stops it (:attr:`Recorder.failed`). :class:`RecorderThread`
runs it on its own thread, dropping the oldest samples when it falls behind.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable

from gpumon.data.model import Sample
from gpumon.sampling.history.schema import HistoryError
from gpumon.sampling.history.writer import RESOLVED, HistoryWriter

#: Samples that may wait for the exporter's writer thread.
QUEUE_SAMPLES = 16


class Recorder:
    """Records samples through ``writer``; ``report`` takes one line (``"warning: ..."``,
    ``"error: ..."`` or that writing works again) to print after the command's name.
    """

    def __init__(self, writer: HistoryWriter, report: Callable[[str], None]) -> None:
        self.writer = writer
        self.report = report
        #: The problem that stopped the recording, if one did.
        self.failed: HistoryError | None = None
        self._problem = ""
        self._notices: set[str] = set()

    def open(self) -> bool:
        """Open the database now, to say at once what is wrong; False when the recording
        cannot go on (:attr:`failed`). A problem that may pass is reported, and retried."""
        return self._attempt(self.writer.open)

    def sampled(self, sample: Sample) -> None:
        """Record ``sample`` (a :meth:`Store.subscribe <gpumon.sampling.store.Store.
        subscribe>` callback); nothing once the recording has failed."""
        if self.failed is None:
            self._attempt(lambda: self.writer.record(sample))

    @property
    def recording(self) -> bool:
        """Samples reach the history now: nothing stopped the recording, and no problem
        keeps them waiting for a retry."""
        return self.failed is None and not self._problem

    def close(self) -> None:
        """Write what is pending (one try) and close the database."""
        self.writer.close()

    def _attempt(self, call: Callable[[], None]) -> bool:
        try:
            call()
        except HistoryError as error:
            if not error.retry:
                self.failed = error
                self.report(f"error: {error}")
                return False
            if str(error) != self._problem:
                self.report(f"warning: {error}")
            self._problem = str(error)
            return True
        if self._problem:
            self.report(f"recording to {self.writer.path} again")
            self._problem = ""
        self._say_notices()
        return True

    def _say_notices(self) -> None:
        """One line when a problem the writer notices begins (a clock ahead of the history,
        a write-ahead log that cannot be reset), one when it is over."""
        notices = self.writer.notices()
        for kind in notices.keys() - self._notices:
            self.report(f"warning: {notices[kind]}")
        for kind in self._notices - notices.keys():
            self.report(RESOLVED[kind])
        self._notices = set(notices)


class RecorderThread:
    """A :class:`Recorder` on a daemon thread: :meth:`submit` never blocks."""

    def __init__(self, recorder: Recorder, name: str = "gpumon-recorder") -> None:
        self.recorder = recorder
        self._samples: queue.Queue[Sample | None] = queue.Queue(QUEUE_SAMPLES)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Write what is pending and close, within ``timeout_s``; False when the writer is
        still busy (a database locked for long): it is left to the process's exit."""
        self.submit(None)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def submit(self, sample: Sample | None) -> None:
        """Queue ``sample`` for the writer (``None``: the end); the oldest waiting one goes when
        the queue is full."""
        while True:
            try:
                self._samples.put_nowait(sample)
                return
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._samples.get_nowait()

    def _run(self) -> None:
        while (sample := self._samples.get()) is not None:
            self.recorder.sampled(sample)
        self.recorder.close()
