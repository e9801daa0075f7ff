"""The dashboard's note on a GPU another pick claimed: ``claimed by alice 40 s ago``.

:class:`ClaimNotes` is one of the app's note sources. It reads the claims directory
(:mod:`gpumon.sources.host.claims`; only if it passes the checks ``gpumon pick`` makes,
never creating it) on the event loop's executor thread at most once every
:data:`REFRESH_S`, so a slow or hung file system never holds up the event loop, and answers
every redraw from the last read: the note shows from the redraw after the read. Simulated
GPUs have no claims. (A Textual thread worker each second cost more than the read: its
state messages went through the app's message queue, ~4 % of the dashboard's CPU.)
"""

from __future__ import annotations

import asyncio
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


class ClaimNotes:
    """A note source: NVML index -> ``claimed by ...`` notes (style ``note-warn``)."""

    def __init__(
        self,
        app: App[Any],
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.path = path
        self.clock = clock
        self.monotonic = monotonic
        #: The claims of the last read (replaced whole by the worker, never changed).
        self.claims: tuple[rules.Claim, ...] = ()
        self._read_at: float | None = None
        self._reading = False
        #: The read in flight or last started (tests wait for it).
        self.pending: asyncio.Future[None] | None = None

    def __call__(self, sample: Sample | None) -> dict[int, list[GpuNote]]:
        if sample is None or sample.simulated:
            return {}
        self._refresh_soon()
        said = rules.notes(sample, self.claims, self.clock())
        return {
            index: [GpuNote(text, "note-warn") for text in texts] for index, texts in said.items()
        }

    def _refresh_soon(self) -> None:
        """Start a read off the loop unless one runs or the last began under
        :data:`REFRESH_S` ago."""
        now = self.monotonic()
        if self._reading or (self._read_at is not None and now - self._read_at < REFRESH_S):
            return
        if not self.app.is_running:
            return
        self._reading, self._read_at = True, now
        self.pending = asyncio.get_running_loop().run_in_executor(None, self._read)

    def _read(self) -> None:
        """Off the loop: touches no widget, only replaces :attr:`claims`."""
        try:
            with ClaimsDir.open(self.path, create=False) as directory:
                self.claims = directory.scan().claims
        except ClaimsOff:  # no directory, or one pick would not use: no claims to show
            self.claims = ()
        except Exception:  # as the thread worker did (exit_on_error=False): the last claims
            pass  # stand, and no "exception was never retrieved" is printed over the screen
        finally:
            self._reading = False
