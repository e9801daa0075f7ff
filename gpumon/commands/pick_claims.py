"""``gpumon pick``'s claims: skip the GPUs another pick holds, claim the ones it prints.

A pick writes its claims, then lists the directory again: of racing picks exactly one keeps
a GPU, with no lock anybody could hold (:meth:`PickClaims._settle`). A pick claims all its
GPUs or none; claims fail closed (:class:`CannotClaim`). Which claim blocks and why the race
settles: docs/pick.md.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from gpumon.data import claims as rules
from gpumon.data.model import GpuProcess, Sample
from gpumon.data.ranking import Candidate
from gpumon.sources.host.claims import ClaimsDir, ClaimsOff, Ignored, user_name

#: How long a pick waits for a racing pick's later claim to be withdrawn (that pick lists the
#: directory right after writing it); a claim still there after this is kept to.
SETTLE_S = 1.0
#: How often it lists the directory meanwhile.
SETTLE_POLL_S = 0.02
#: A user's entries that are not claims are named one by one up to this many, then counted.
MAX_NAMED = 3


class CannotClaim(Exception):
    """This pick cannot claim GPUs, so it prints none; the text says why in one line."""


@dataclass
class PickClaims:
    """One pick's claims: the directory opened once, each complaint said once."""

    path: str
    claim_seconds: int
    started_s: float
    stderr: TextIO
    #: False for --no-claim: what others hold is skipped, nothing is written.
    claim: bool = True
    waiting: bool = False
    written: list[str] = field(default_factory=list, init=False)
    dir: ClaimsDir | None = field(default=None, init=False)
    uid: int = field(default_factory=lambda: os.geteuid(), init=False)
    _said: set[str] = field(default_factory=set, init=False)
    _counted: set[int] = field(default_factory=set, init=False)

    def say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            print(f"gpumon pick: {line}", file=self.stderr)

    def cannot(self, why: str) -> None:
        """Claims cannot be used: raise CannotClaim, or (--no-claim) say so once."""
        self.close()
        if not self.claim:
            self.say(f"other picks' claims cannot be read: {why}")
            return
        if self.waiting:
            self.say(f"cannot claim: {why}; waiting until it can (--no-claim: pick unclaimed)")
        raise CannotClaim(f"cannot claim: {why}")

    def take(
        self, qualifying: Sequence[Candidate], n: int, sample: Sample
    ) -> tuple[list[Candidate], list[str], dict[int, str]]:
        """The first ``n`` of ``qualifying`` that no other pick holds, claimed; why each other was
        skipped; and NVML index -> who holds it. Fewer than ``n``: nothing is claimed. Raises
        :class:`CannotClaim` when the directory cannot be used (not with ``--no-claim``).
        """
        if self.dir is None:  # opened at the first look with GPUs (no driver: none made)
            try:
                self.opened()
            except ClaimsOff as off:
                self.cannot(str(off))
                return list(qualifying[:n]), [], {}
        running = {key: target.processes for key, target in rules.targets(sample).items()}
        lost: tuple[Candidate, rules.Claim] | None = None
        try:
            for _ in range(len(qualifying) + 1):  # each lost race leaves a GPU claimed
                now_s = time.time()
                claims = self._read(running, now_s)
                picked, skipped = self._choose(qualifying, n, running, claims, now_s)
                if len(picked) < n or not self.claim:
                    break
                lost = self._claim(picked, running, claims)
                if lost is None:
                    break
            else:
                # Every round lost a race: name the claim that won the last one, even if it
                # is gone now (a claim that blocks and vanishes must not block unnamed).
                picked = []
                if lost is not None:
                    skipped.append(lost)
        except (ClaimsOff, OSError) as error:
            self.release()
            if isinstance(error, OSError):
                error = ClaimsOff(f"cannot write in {self.path}: {error.strerror or error}")
            self.cannot(str(error))
            return list(qualifying[:n]), [], {}
        reasons = [
            f"{c.label}: claimed by {claim.owner} {claim.ago(now_s)}"
            + (" (by another pick of yours)" if claim.uid == self.uid else "")
            for c, claim in skipped
        ]
        holders = {candidate.gpu_index: claim.owner for candidate, claim in skipped}
        return picked, reasons, holders

    def opened(self) -> ClaimsDir:
        """The claims directory, opened (made when missing) at the first call; raises
        :class:`ClaimsOff` when it cannot be used."""
        if self.dir is None:
            self.dir = ClaimsDir.open(self.path, create=True, uid=self.uid)
        return self.dir

    def held(self, sample: Sample) -> frozenset[str]:
        """The claim keys that a live claim of anybody holds (as a waiting pick sees them).
        Raises :class:`ClaimsOff` or :class:`OSError` when the directory cannot be read."""
        self.opened()
        running = {key: target.processes for key, target in rules.targets(sample).items()}
        now_s = time.time()
        claims = self._read(running, now_s, tidy=False)
        return frozenset(
            key
            for key, found in claims.items()
            if any(
                claim.live(now_s) and not rules.ended_by(claim, running.get(key, ()), now_s)
                for claim in found
            )
        )

    def _read(
        self, running: Mapping[str, Sequence[GpuProcess]], now_s: float, *, tidy: bool = True
    ) -> dict[str, list[rules.Claim]]:
        """Every GPU's claims; this user's own that are over are removed on the way (with
        ``tidy``)."""
        assert self.dir is not None
        scan = self.dir.scan(keys=running.keys(), now_s=now_s)
        self.report(scan.ignored)
        by_key: dict[str, list[rules.Claim]] = {}
        for claim in scan.claims:
            over = not claim.live(now_s) or rules.ended_by(claim, running.get(claim.key, ()), now_s)
            if claim.uid == self.uid and over:
                if self.claim and tidy:  # tidy this user's files; --no-claim changes nothing
                    self.dir.remove(claim.file_name)
                continue
            by_key.setdefault(claim.key, []).append(claim)
        return by_key

    def report(self, ignored: Sequence[Ignored], kind: str = "claim") -> None:
        """Name each ignored entry (a ``kind`` file) once; a user with many is one count line,
        said once."""
        by_uid: dict[int, list[Ignored]] = {}
        for entry in ignored:
            by_uid.setdefault(entry.uid, []).append(entry)
        for uid, entries in by_uid.items():
            if len(entries) <= MAX_NAMED:
                for entry in entries:
                    self.say(f"ignored {kind} file {entry.name} in {self.path}: {entry.why}")
            elif uid not in self._counted:
                self._counted.add(uid)
                self.say(
                    f"ignored {len(entries)} entries of {user_name(uid)} (uid {uid}) in "
                    f"{self.path} that are not {kind}s"
                )

    def _blocking(
        self, claims: Sequence[rules.Claim], processes: Sequence[GpuProcess], now_s: float
    ) -> rules.Claim | None:
        """The claim that keeps this pick off one GPU, or None: ``claims`` are that GPU's,
        ``processes`` what runs on it; this user's own block only under ``--wait`` or when
        made after this pick began."""
        holders = [
            claim
            for claim in claims
            if claim.live(now_s)
            and not rules.ended_by(claim, processes, now_s)
            and (claim.uid != self.uid or self.waiting or claim.claimed_s >= self.started_s)
        ]
        return max(holders, key=lambda claim: claim.claimed_s, default=None)

    def _choose(
        self,
        qualifying: Sequence[Candidate],
        n: int,
        running: Mapping[str, Sequence[GpuProcess]],
        claims: Mapping[str, Sequence[rules.Claim]],
        now_s: float,
    ) -> tuple[list[Candidate], list[tuple[Candidate, rules.Claim]]]:
        unclaimed: list[Candidate] = []
        mine: list[Candidate] = []  # claimed by this user before this pick began
        skipped: list[tuple[Candidate, rules.Claim]] = []
        for candidate in qualifying:
            key = rules.claim_key(candidate.uuid)
            found = claims.get(key, ()) if key is not None else ()
            processes = running.get(key, ()) if key is not None else ()
            holder = self._blocking(found, processes, now_s)
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
                    self.say(
                        f"{candidate.label}: your own earlier pick claimed it and no job of "
                        "yours has started there since (two jobs may share it; --wait waits "
                        "instead)"
                    )
        return picked, skipped

    def _claim(
        self,
        picked: Sequence[Candidate],
        running: Mapping[str, Sequence[GpuProcess]],
        claims: Mapping[str, Sequence[rules.Claim]],
    ) -> tuple[Candidate, rules.Claim] | None:
        """Claim every picked GPU, then settle any race: None when this pick keeps its claims (its
        user's earlier ones there removed), else the GPU and the rival claim it lost to.

        A random token per file, so nobody can take the names of the pick's other claims first; a
        prefix shared by its tokens orders exact ties alike on all its GPUs.
        """
        assert self.dir is not None
        claimed_s = time.time()
        prefix = secrets.token_hex(4)
        mine: dict[str, rules.Claim] = {}
        by_key: dict[str, Candidate] = {}
        for candidate in picked:
            key = rules.claim_key(candidate.uuid)
            if key is None:
                continue  # no UUID to name it by: it goes unclaimed
            expires_s = claimed_s + self.claim_seconds
            token = prefix + secrets.token_hex(8)
            name = self.dir.write(key, claimed_s, expires_s, token)
            self.written.append(name)
            owner = user_name(self.uid)
            mine[key] = rules.Claim(key, self.uid, owner, name, claimed_s, expires_s)
            by_key[key] = candidate
        rival = self._settle(mine, running)
        if rival is not None:
            self.release()
            return by_key[rival.key], rival
        for key in mine:
            for earlier in claims.get(key, ()):
                if earlier.uid == self.uid:
                    self.dir.remove(earlier.file_name)
        return None

    def _settle(
        self, mine: Mapping[str, rules.Claim], running: Mapping[str, Sequence[GpuProcess]]
    ) -> rules.Claim | None:
        """List the directory again until no other blocking claim is on this pick's GPUs
        (None: keep them); the rival to withdraw for: one that came before this pick's own,
        or a later one that stayed SETTLE_S."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            now_s = time.time()
            claims = self._read(running, now_s, tidy=False)
            later: rules.Claim | None = None
            for key, own in mine.items():
                for rival in claims.get(key, ()):
                    if rival.file_name == own.file_name:
                        continue
                    if self._blocking((rival,), running.get(key, ()), now_s) is None:
                        continue
                    if rules.precedes(rival, own):
                        return rival
                    later = rival
            if later is None:
                return None
            if time.monotonic() >= deadline:
                return later
            time.sleep(SETTLE_POLL_S)

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
