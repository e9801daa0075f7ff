"""Advisory claims on GPUs, as pure data: file names, the file's text, expiry, the notes.

A claim file is ``<key>.<uid>.<token>``; its owner is the file's ``st_uid`` and its time the
one its text states, never the mtime; a user's newest claim on a GPU counts; of two claims the
one claimed first comes first (:func:`precedes`). No I/O (:mod:`gpumon.sources.host.claims`
does it). The rules in full: docs/pick.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpumon.data.model import GpuProcess, Sample
from gpumon.data.ranking import mig_on
from gpumon.data.views import instance_processes

#: No claim outlives the time its text states by more than this, whatever else it says.
MAX_CLAIM_S = 600.0
#: A claim dated this far ahead of our clock is not one anybody made.
CLOCK_SLACK_S = 5.0
#: A claim file gpumon writes is about 150 bytes; a larger one is not one of ours.
MAX_CLAIM_FILE_BYTES = 512

_HEADER = "gpumon-claim 1"
_KEY = re.compile(r"[A-Za-z0-9_-]{1,96}", re.ASCII)
_UID = re.compile(r"[0-9]{1,10}", re.ASCII)
_TOKEN = re.compile(r"[0-9a-f]{8,32}", re.ASCII)
_SECONDS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,17})?", re.ASCII)


def claim_key(uuid: str | None) -> str | None:
    """The part of a claim file's name that names the GPU: its UUID (an old-style MIG UUID's
    slashes as ``_``); None for a UUID that cannot name a file (then it is never claimed)."""
    if uuid is None:
        return None
    key = uuid.replace("/", "_")
    return key if _KEY.fullmatch(key) else None


def file_name(key: str, uid: int, token: str) -> str:
    """``GPU-1a2b....0.9f3c2d1e``: the claim of ``uid`` on the GPU ``key``."""
    return f"{key}.{uid}.{token}"


def parse_file_name(name: str) -> tuple[str, int, str] | None:
    """``(key, uid, token)`` of a claim file's name; None for any other name."""
    parts = name.rsplit(".", 2)
    if len(parts) != 3:
        return None
    key, uid, token = parts
    if not (_KEY.fullmatch(key) and _UID.fullmatch(uid) and _TOKEN.fullmatch(token)):
        return None
    return key, int(uid), token


def claim_text(key: str, claimed_s: float, expires_s: float, pid: int) -> bytes:
    """What a claim file holds. Times as ``repr`` writes them: read back, they are exactly
    the times written (a pick compares its own claims' times with when it began)."""
    return (
        f"{_HEADER}\nuuid {key}\nclaimed {claimed_s!r}\nexpires {expires_s!r}\npid {pid}\n"
    ).encode("ascii")


def text_fields(data: bytes, max_bytes: int, header: str, what: str) -> dict[str, str]:
    """The ``name value`` lines after ``header`` of a file gpumon wrote in the claims directory;
    :class:`ValueError` when it is not one (the message never quotes another user's text)."""
    if len(data) > max_bytes:
        raise ValueError("too large")
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise ValueError("not text") from None
    if not lines or lines[0] != header:
        raise ValueError(f"not a gpumon {what}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(" ")
        if name in fields:
            raise ValueError("a field is given twice")  # its name: another user's text
        fields[name] = value
    return fields


def parse_claim_text(data: bytes, key: str) -> tuple[float, float]:
    """``(claimed_s, expires_s)`` from a claim file's bytes; :class:`ValueError` when it is not a
    claim gpumon wrote for ``key``.
    """
    fields = text_fields(data, MAX_CLAIM_FILE_BYTES, _HEADER, "claim")
    if fields.get("uuid") != key:
        raise ValueError("its text names another GPU")
    numbers = []
    for name in ("claimed", "expires"):
        value = fields.get(name, "")
        if not _SECONDS.fullmatch(value):
            raise ValueError(f"no valid {name} time")
        numbers.append(float(value))
    return numbers[0], numbers[1]


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim file that passed every check: ``uid`` its owner (``st_uid``), ``claimed_s`` what
    its text says, ``expires_s`` what :func:`expiry` allows.
    """

    key: str
    uid: int
    owner: str
    file_name: str
    claimed_s: float
    expires_s: float

    def live(self, now_s: float) -> bool:
        return now_s < self.expires_s

    def ago(self, now_s: float) -> str:
        """``40 s ago``, ``3 min ago``."""
        age = max(0, int(now_s - self.claimed_s))
        return f"{age} s ago" if age < 60 else f"{age // 60} min ago"


def expiry(stated_s: float, claimed_s: float) -> float:
    """When a claim ends: what its text states, but never after ``claimed + MAX_CLAIM_S``."""
    return min(stated_s, claimed_s + MAX_CLAIM_S)


def from_the_future(claimed_s: float, now_s: float) -> bool:
    """True for a claim dated later than any clock drift explains (a forged time)."""
    return claimed_s > now_s + CLOCK_SLACK_S


def precedes(first: Claim, second: Claim) -> bool:
    """True when ``first`` came before ``second`` (one GPU's): claimed earlier, or at the same
    moment with the smaller file name (its ``uid.token``): an order every pick agrees on."""
    return (first.claimed_s, first.file_name) < (second.claimed_s, second.file_name)


def current(claims: Iterable[Claim]) -> list[Claim]:
    """Each user's newest claim on each GPU: a user holds one claim on a GPU, however many
    files they leave."""
    newest: dict[tuple[str, int], Claim] = {}
    for claim in claims:
        held = newest.get((claim.key, claim.uid))
        if held is None or precedes(held, claim):
            newest[(claim.key, claim.uid)] = claim
    return list(newest.values())


def ended_by(claim: Claim, processes: Iterable[GpuProcess], now_s: float) -> bool:
    """True once the claimed GPU (or MIG instance: pass its processes) runs a process of the
    claim's owner that started after the claim was made: the job the claim was for has
    started, and the claim is over. A process the owner already ran there (a notebook)
    does not end it, nor one whose start is not known: the claim then runs to its expiry."""
    after = claim.claimed_s - CLOCK_SLACK_S
    for process in processes:
        if process.user != claim.owner:
            continue
        started = process.create_time_s
        if started is None and process.elapsed_s is not None:
            started = now_s - process.elapsed_s
        if started is not None and started >= after:
            return True
    return False


def newest_live(claims: Iterable[Claim], now_s: float) -> Claim | None:
    """The newest live claim among ``claims`` (one GPU's), or None."""
    live = [claim for claim in claims if claim.live(now_s)]
    return max(live, key=lambda claim: claim.claimed_s) if live else None


def note_text(claim: Claim, now_s: float) -> str:
    """The dashboard's note: ``claimed by alice 40 s ago``."""
    return f"claimed by {claim.owner} {claim.ago(now_s)}"


@dataclass(frozen=True, slots=True)
class Target:
    """What a claim key names in a sample: a GPU, or one of its MIG instances, and what runs
    there."""

    gpu_index: int
    mig_index: int | None
    processes: tuple[GpuProcess, ...]


def targets(sample: Sample) -> dict[str, Target]:
    """Claim key -> the GPU (or MIG instance) of ``sample`` it names."""
    found: dict[str, Target] = {}
    for gpu in sample.gpus:
        processes = sample.processes_on(gpu.index)
        key = claim_key(gpu.uuid)
        if key is not None:
            found[key] = Target(gpu.index, None, processes)
        if mig_on(gpu):
            for instance in gpu.mig_instances or ():
                instance_key = claim_key(instance.uuid)
                if instance_key is not None:
                    inside = instance_processes(instance, processes)
                    found[instance_key] = Target(gpu.index, instance.index, inside)
    return found


def notes(sample: Sample, claims: Iterable[Claim], now_s: float) -> dict[int, list[str]]:
    """NVML index -> what the dashboard says of each claimed GPU (``claimed by alice 40 s
    ago``, ``MIG 1 claimed by bob 3 min ago``): the newest live claim on it, or on each of
    its MIG instances, that has not ended."""
    where = targets(sample)
    by_key: dict[str, list[Claim]] = {}
    for claim in current(claims):
        if claim.key in where:
            by_key.setdefault(claim.key, []).append(claim)
    said: dict[int, list[str]] = {}
    for key, found in by_key.items():
        target = where[key]
        shown = newest_live((c for c in found if not ended_by(c, target.processes, now_s)), now_s)
        if shown is not None:
            mig = "" if target.mig_index is None else f"MIG {target.mig_index} "
            said.setdefault(target.gpu_index, []).append(mig + note_text(shown, now_s))
    return said
