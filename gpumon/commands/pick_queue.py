"""``gpumon pick``'s fair queue: ``--wait`` enters it, every pick leaves older waiters their GPUs.

A waiting pick writes a waiter file beside the claims and removes it when it ends. At each
look a pick (waiting or not) skips the GPUs kept for older live waiters
(:func:`gpumon.data.queue.kept_for`: first come, first served, with backfill). A waiter that
keeps a GPU and does not take it within :func:`hold_s` is passed over, so no live process
can stall the queue. ``pick --queue`` prints the queue. The rules: docs/claims.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from gpumon.data import claims as claim_rules
from gpumon.data import queue as rules
from gpumon.data.model import Sample
from gpumon.data.ranking import Candidate
from gpumon.sources.host.claims import ClaimsDir, ClaimsOff
from gpumon.sources.host.queue import WaiterScan, scan_waiters, write_waiter

if TYPE_CHECKING:
    from gpumon.commands.pick import Look
    from gpumon.commands.pick_claims import PickClaims

#: A waiter a GPU is kept for has this long, at least, to take it (it looks every interval).
MIN_HOLD_S = 30.0


def hold_s(request: rules.Request) -> float:
    """How long a GPU stays kept for a waiter that does not take it: three of its looks, at
    least :data:`MIN_HOLD_S`."""
    return max(MIN_HOLD_S, 3 * request.interval_s)


def _clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(seconds))


@dataclass
class PickQueue:
    """One pick's part in the queue: its own entry (when it waits), what it saw kept."""

    #: The request to enter in the queue (a waiting pick that claims), or None.
    request: rules.Request | None = None
    since_s: float = field(default_factory=time.time)
    entry: str | None = field(default=None, init=False)
    #: Waiter file -> since when (this pick's clock) it has kept a GPU, look after look.
    _first_kept: dict[str, float] = field(default_factory=dict, init=False)
    _passed_over: set[str] = field(default_factory=set, init=False)

    def look(
        self, claims: PickClaims, qualifying: Sequence[Candidate], sample: Sample
    ) -> tuple[tuple[Candidate, ...], list[str], dict[int, str]]:
        """``qualifying`` less what is kept for older waiters; why each was left; and NVML index
        -> who it is kept for. Where the directory cannot be used, as claims that cannot be
        made: raises :class:`CannotClaim` (``--no-claim``: says so, keeps ``qualifying``)."""
        try:
            held = claims.held(sample)
            directory = claims.opened()
            if self.request is not None and self.entry is None:
                self.entry = write_waiter(directory, self.request, self.since_s)
            return self._filter(directory, claims, qualifying, sample, held)
        except (ClaimsOff, OSError) as error:
            if isinstance(error, OSError):
                error = ClaimsOff(f"cannot write in {claims.path}: {error.strerror or error}")
            claims.cannot(str(error))
            return tuple(qualifying), [], {}

    def _filter(
        self,
        directory: ClaimsDir,
        claims: PickClaims,
        qualifying: Sequence[Candidate],
        sample: Sample,
        held: frozenset[str],
    ) -> tuple[tuple[Candidate, ...], list[str], dict[int, str]]:
        now_s = time.time()
        found = scan_waiters(directory, now_s)
        claims.report(found.ignored, "waiter")
        if claims.claim:  # --no-claim changes nothing in the directory
            self._tidy(directory, found)
        mine = next((w for w in found.waiters if w.file_name == self.entry), None)
        older = [
            waiter
            for waiter in found.waiters
            if waiter.file_name != self.entry
            and waiter.file_name not in self._passed_over
            and (mine is None or waiter.order() < mine.order())
        ]
        kept = rules.kept_for(sample, older, held)
        if self._pass_over(kept, now_s, claims.say):
            older = [w for w in older if w.file_name not in self._passed_over]
            kept = rules.kept_for(sample, older, held)
        left: list[Candidate] = []
        reasons: list[str] = []
        holders: dict[int, str] = {}
        for candidate in qualifying:
            waiter = kept.get(claim_rules.claim_key(candidate.uuid) or "")
            if waiter is None:
                left.append(candidate)
                continue
            since = _clock(waiter.since_s)
            reasons.append(f"{candidate.label}: kept for {waiter.owner} (waiting since {since})")
            holders[candidate.gpu_index] = waiter.owner
        return tuple(left), reasons, holders

    def _pass_over(
        self, kept: dict[str, rules.Waiter], now_s: float, say: Callable[[str], None]
    ) -> bool:
        """Pass over the waiters that have kept GPUs longer than they would take to take them;
        True when one was."""
        keeping = {waiter.file_name: waiter for waiter in kept.values()}
        for name in list(self._first_kept):
            if name not in keeping:
                del self._first_kept[name]
        passed = False
        for name, waiter in keeping.items():
            first = self._first_kept.setdefault(name, now_s)
            if now_s - first > hold_s(waiter.request):
                self._passed_over.add(waiter.file_name)
                say(
                    f"{waiter.owner}'s pick waiting since {_clock(waiter.since_s)} (PID "
                    f"{waiter.pid}) has not taken the GPU kept for it: passed over"
                )
                passed = True
        return passed

    def _tidy(self, directory: ClaimsDir, found: WaiterScan) -> None:
        """Remove this user's files of waiters whose process ended."""
        for name, uid in found.dead:
            if uid == directory.uid:
                directory.remove(name)

    def leave(self, claims: PickClaims) -> None:
        """Leave the queue (the pick got its GPUs, gave up or was interrupted)."""
        if self.entry is not None:
            with contextlib.suppress(ClaimsOff):
                claims.opened().remove(self.entry)
        self.entry = None


def request_for(look: Look, sample: Sample, output_format: str) -> rules.Request:
    """What ``look``'s pick asks for, to enter in the queue (``--only``: the GPUs it names)."""
    only = None
    if look.selection is not None and look.selection.active:
        only = tuple(sorted(claim_rules.targets(sample)))
    return rules.Request(
        count=look.n,
        min_free_bytes=look.min_free_bytes,
        max_utilization_pct=look.max_utilization_pct,
        free_below_bytes=look.free_below_bytes,
        output_format=output_format,
        only=only,
        interval_s=look.interval_s,
    )


def queue_lines(found: WaiterScan, now_s: float) -> list[str]:
    """``pick --queue``'s table, oldest first; one line when no one waits."""
    if not found.waiters:
        return ["no one waits"]
    rows = [("#", "USER", "WAITED", "SINCE", "PID", "WANTS")]
    for position, waiter in enumerate(found.waiters, 1):
        waited = _waited(now_s - waiter.since_s)
        rows.append(
            (
                str(position),
                waiter.owner,
                waited,
                _clock(waiter.since_s),
                str(waiter.pid),
                waiter.request.wants(),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(5)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[5]])
        for row in rows
    ]


def _waited(seconds: float) -> str:
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    return f"{total // 3600}h{total % 3600 // 60:02d}m"


def queue_json(found: WaiterScan, now_s: float) -> str:
    """``pick --queue --json``: the waiters, oldest first, and the entries ignored."""
    waiting = [
        {
            "position": position,
            "user": waiter.owner,
            "uid": waiter.uid,
            "pid": waiter.pid,
            "since_s": round(waiter.since_s, 3),
            "waited_s": round(max(0.0, now_s - waiter.since_s), 1),
            "count": waiter.request.count,
            "free_only": waiter.request.free_below_bytes is not None,
            "min_free_bytes": waiter.request.min_free_bytes,
            "max_utilization_pct": waiter.request.max_utilization_pct,
            "gpus": None if waiter.request.only is None else list(waiter.request.only),
            "wants": waiter.request.wants(),
        }
        for position, waiter in enumerate(found.waiters, 1)
    ]
    ignored = [{"name": entry.name, "why": entry.why, "uid": entry.uid} for entry in found.ignored]
    return json.dumps({"waiting": waiting, "ignored": ignored}, indent=2)


def show_queue(path: str, *, as_json: bool, stdout: TextIO, stderr: TextIO) -> int:
    """``gpumon pick --queue``: who waits for what, and since when (exit 0); 1 when the
    directory cannot be read."""
    now_s = time.time()
    if not os.path.lexists(path):
        found = WaiterScan((), (), ())
    else:
        try:
            with ClaimsDir.open(path, create=False) as directory:
                found = scan_waiters(directory, now_s)
        except ClaimsOff as off:
            print(f"gpumon pick: {off}", file=stderr)
            return 1
    from gpumon.commands.pick_claims import PickClaims

    # Named as pick names them: a user with many, one line that counts them.
    PickClaims(path, 0, now_s, stderr, claim=False).report(found.ignored, "waiter")
    text = queue_json(found, now_s) if as_json else "\n".join(queue_lines(found, now_s))
    print(text, file=stdout)
    return 0
