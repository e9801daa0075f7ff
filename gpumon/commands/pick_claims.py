"""``gpumon pick``'s claims: skip the GPUs another pick holds, claim the ones it prints.

Which claim blocks a pick (:func:`blocking_claim`): a live claim of another user; or one of
this user's made while this pick was running, by another pick of theirs beside it (two jobs
started at once must not share a GPU either). A claim this user made before this pick began
does not block: the claimer's own later picks may take that GPU again (and claim it anew),
but only after every GPU nobody claimed, so that a script's second pick gets another GPU
while there is one. A claim whose GPU now runs its owner's process has ended: its job
started.

A pick claims all its GPUs or none, inside the directory's lock
(:mod:`gpumon.sources.host.claims` says why that makes exactly one of two racing picks win),
and removes its claims again when it cannot hand the GPUs over (stdout gone, interrupted).
``--no-claim`` still skips what others hold, and leaves no claim. Claims that cannot be used
(the directory cannot be made, is a symlink, the lock is held for ever) turn claims off for
this pick, with one line on stderr; the pick goes on without them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import TextIO

from gpumon.data import claims as rules
from gpumon.data.model import GpuProcess, Sample
from gpumon.data.ranking import Candidate
from gpumon.sources.host.claims import ClaimsDir, ClaimsLocked, ClaimsOff


def blocking_claim(
    claims: Sequence[rules.Claim],
    processes: Sequence[GpuProcess],
    *,
    uid: int,
    started_s: float,
    now_s: float,
) -> rules.Claim | None:
    """The claim that keeps this pick (of ``uid``, begun at ``started_s``) off one GPU, or
    None. ``claims`` are that GPU's, ``processes`` what runs on it."""
    holders = [
        claim
        for claim in claims
        if claim.live(now_s)
        and not rules.ended_by(claim, processes, now_s)
        and (claim.uid != uid or claim.claimed_s >= started_s)
    ]
    return max(holders, key=lambda claim: claim.claimed_s) if holders else None


def claimed_reason(candidate: Candidate, claim: rules.Claim, uid: int, now_s: float) -> str:
    """``GPU 3: claimed by alice 40 s ago``."""
    mine = " (by another pick of yours)" if claim.uid == uid else ""
    return f"{candidate.label}: claimed by {claim.owner} {claim.ago(now_s)}{mine}"


class PickClaims:
    """One pick's claims: the directory opened once, each complaint said once."""

    def __init__(
        self,
        path: str,
        *,
        claim_seconds: int,
        started_s: float,
        stderr: TextIO,
        claim: bool = True,
    ) -> None:
        #: False for --no-claim: what others hold is skipped, nothing is written.
        self.claim = claim
        self.claim_seconds = claim_seconds
        self.started_s = started_s
        self.stderr = stderr
        self.written: list[str] = []
        self._said: set[str] = set()
        self.path = path
        self.dir: ClaimsDir | None = None
        self.uid = os.geteuid()
        self._opened = False

    def _say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            print(f"gpumon pick: {line}", file=self.stderr)

    def _off(self, line: str) -> None:
        self._say(line)
        self.close()

    def take(
        self, qualifying: Sequence[Candidate], n: int, sample: Sample
    ) -> tuple[list[Candidate], list[str], dict[int, str]]:
        """The first ``n`` of ``qualifying`` (freest first) that no other pick holds, claimed;
        why each skipped one was skipped (``GPU 3: claimed by alice 40 s ago``); and NVML
        index -> who holds each skipped one. Fewer than ``n``: nothing is claimed."""
        if not self._opened:  # at the first look with GPUs: no driver, no directory made
            self._opened = True
            try:
                self.dir = ClaimsDir.open(self.path, create=True, uid=self.uid)
            except ClaimsOff as off:
                self._say(str(off))
        if self.dir is None:
            return list(qualifying[:n]), [], {}
        running = {key: target.processes for key, target in rules.targets(sample).items()}
        try:
            with self.dir.locked():
                now_s = time.time()
                claims = self._read(running, now_s)
                picked, skipped = self._choose(qualifying, n, running, claims, now_s)
                if len(picked) == n and self.claim:
                    self._claim(picked, claims, now_s)
        except ClaimsLocked as locked:
            # Anyone may hold the lock: what other picks hold is still read and skipped,
            # only this look claims nothing (the next look tries the lock again).
            self._say(f"{locked}: other picks' claims are kept to, none written")
            now_s = time.time()
            try:
                claims = self._read(running, now_s, tidy=False)
            except (ClaimsOff, OSError) as error:
                self._off(f"claims are off: cannot read {self.dir.path}: {error}")
                return list(qualifying[:n]), [], {}
            picked, skipped = self._choose(qualifying, n, running, claims, now_s)
        except ClaimsOff as off:
            self._off(str(off))
            return list(qualifying[:n]), [], {}
        except OSError as error:
            path = self.dir.path if self.dir is not None else ""
            self.release()
            self._off(f"claims are off: cannot write in {path}: {error.strerror or error}")
            return list(qualifying[:n]), [], {}
        reasons = [claimed_reason(c, claim, self.uid, now_s) for c, claim in skipped]
        holders = {candidate.gpu_index: claim.owner for candidate, claim in skipped}
        return picked, reasons, holders

    def _read(
        self, running: Mapping[str, Sequence[GpuProcess]], now_s: float, *, tidy: bool = True
    ) -> dict[str, list[rules.Claim]]:
        """Every GPU's claims; this user's own that are over are removed on the way (with
        ``tidy``: only under the lock)."""
        assert self.dir is not None
        scan = self.dir.scan(keys=running.keys(), now_s=now_s)
        for name, why in scan.ignored:
            self._say(f"ignored claim file {name} in {self.dir.path}: {why}")
        by_key: dict[str, list[rules.Claim]] = {}
        for claim in scan.claims:
            over = not claim.live(now_s) or rules.ended_by(claim, running.get(claim.key, ()), now_s)
            if claim.uid == self.dir.uid and over:
                if self.claim and tidy:  # tidy this user's files; --no-claim changes nothing
                    self.dir.remove(claim.file_name)
                continue
            by_key.setdefault(claim.key, []).append(claim)
        return by_key

    def _choose(
        self,
        qualifying: Sequence[Candidate],
        n: int,
        running: Mapping[str, Sequence[GpuProcess]],
        claims: Mapping[str, Sequence[rules.Claim]],
        now_s: float,
    ) -> tuple[list[Candidate], list[tuple[Candidate, rules.Claim]]]:
        assert self.dir is not None
        unclaimed: list[Candidate] = []
        mine: list[Candidate] = []  # claimed by this user before this pick began
        skipped: list[tuple[Candidate, rules.Claim]] = []
        for candidate in qualifying:
            key = rules.claim_key(candidate.uuid)
            found = claims.get(key, ()) if key is not None else ()
            processes = running.get(key, ()) if key is not None else ()
            holder = blocking_claim(
                found, processes, uid=self.dir.uid, started_s=self.started_s, now_s=now_s
            )
            if holder is not None:
                skipped.append((candidate, holder))
            elif any(c.live(now_s) and not rules.ended_by(c, processes, now_s) for c in found):
                mine.append(candidate)
            else:
                unclaimed.append(candidate)
        picked = (unclaimed + mine)[:n]
        if len(picked) == n:  # a second job of this user about to share a GPU: say so
            for candidate in picked:
                if candidate in mine:
                    self._say(
                        f"{candidate.label}: your own earlier pick claimed it and no job of "
                        "yours has started there since (two jobs may share it)"
                    )
        return picked, skipped

    def _claim(
        self,
        picked: Sequence[Candidate],
        claims: Mapping[str, Sequence[rules.Claim]],
        now_s: float,
    ) -> None:
        """Claim every picked GPU, replacing this user's earlier claims on them."""
        assert self.dir is not None
        for candidate in picked:
            key = rules.claim_key(candidate.uuid)
            if key is None:
                continue  # no UUID to name it by: it goes unclaimed
            self.written.append(self.dir.write(key, now_s, now_s + self.claim_seconds))
            for earlier in claims.get(key, ()):
                if earlier.uid == self.dir.uid:
                    self.dir.remove(earlier.file_name)

    def release(self) -> None:
        """Remove the claims this pick wrote: the GPUs never reached the user."""
        if self.dir is not None:
            for name in self.written:
                self.dir.remove(name)
        self.written.clear()

    def close(self) -> None:
        if self.dir is not None:
            self.dir.close()
            self.dir = None
