"""``gpumon pick --wait``'s queue as pure data: a waiter's file and text, the order, who keeps what.

A waiter file ``@wait.<uid>.<token>`` sits beside the claims; its owner is the file's
``st_uid`` and its place in the queue the file's change time (which no user can move back),
never a time its text states. A free GPU is kept for the oldest waiter that could start with
it now; one that could not (it wants more GPUs than are free) keeps nothing, so younger,
smaller requests go ahead of it (backfill). No I/O (:mod:`gpumon.sources.host.queue`). The
rules in full: docs/claims.md.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from gpumon.data import format as fmt
from gpumon.data.claims import claim_key, text_fields
from gpumon.data.model import Sample
from gpumon.data.ranking import qualify

PREFIX = "@wait."
#: A waiter file gpumon writes is a few hundred bytes (more with ``--only`` on many GPUs).
MAX_WAITER_FILE_BYTES = 4096
_HEADER = "gpumon-wait 1"
_UID = re.compile(r"[0-9]{1,10}", re.ASCII)
_TOKEN = re.compile(r"[0-9a-f]{8,32}", re.ASCII)
_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,17})?", re.ASCII)
_KEYS = re.compile(r"[A-Za-z0-9_-]{1,96}(?:,[A-Za-z0-9_-]{1,96})*", re.ASCII)
_FORMATS = ("index", "uuid")


def file_name(uid: int, token: str) -> str:
    """``@wait.1000.9f3c2d1e...``: a waiting pick of ``uid`` (never a claim's name)."""
    return f"{PREFIX}{uid}.{token}"


def parse_file_name(name: str) -> tuple[int, str] | None:
    """``(uid, token)`` of a waiter file's name; None for any other name."""
    if not name.startswith(PREFIX):
        return None
    uid, _, token = name.removeprefix(PREFIX).partition(".")
    if not (_UID.fullmatch(uid) and _TOKEN.fullmatch(token)):
        return None
    return int(uid), token


@dataclass(frozen=True, slots=True)
class Request:
    """What a waiting pick asks for: ``count`` GPUs that pass its thresholds (``free_below_bytes``:
    only FREE ones), printed as ``output_format``, among ``only`` (claim keys; None: any)."""

    count: int
    min_free_bytes: int | None = None
    max_utilization_pct: float | None = None
    free_below_bytes: int | None = None
    output_format: str = "uuid"
    only: tuple[str, ...] | None = None
    interval_s: float = 1.0

    def wants(self) -> str:
        """``2 GPUs, FREE``, ``1 GPU, 20.0G free memory, of 2 named``: for ``pick --queue``."""
        parts = [f"{self.count} GPU" + ("" if self.count == 1 else "s")]
        if self.min_free_bytes is not None:
            parts.append(f"{fmt.bytes_short(self.min_free_bytes)} free memory")
        if self.max_utilization_pct is not None:
            parts.append(f"at most {self.max_utilization_pct:g}% busy")
        if self.free_below_bytes is not None:
            parts.append("FREE")
        elif len(parts) == 1:
            parts.append("busy ok")
        if self.only is not None:
            parts.append(f"of {len(self.only)} named")
        return ", ".join(parts)


def _optional(value: float | None) -> str:
    return "-" if value is None else repr(value)


def waiter_text(request: Request, since_s: float, pid: int, started_s: float) -> bytes:
    """What a waiter file holds: the request, since when, and the process (PID and its start
    time, so that a PID used again by another process is not this waiter)."""
    only = "-" if request.only is None else ",".join(request.only)
    return (
        f"{_HEADER}\nsince {since_s!r}\npid {pid}\nstarted {started_s!r}\n"
        f"count {request.count}\nmin-free {_optional(request.min_free_bytes)}\n"
        f"max-utilization {_optional(request.max_utilization_pct)}\n"
        f"free-below {_optional(request.free_below_bytes)}\nformat {request.output_format}\n"
        f"only {only}\ninterval {request.interval_s!r}\n"
    ).encode("ascii")


@dataclass(frozen=True, slots=True)
class WaiterText:
    """A waiter file's text, parsed: what it asks for, and what it says of its process."""

    request: Request
    since_s: float
    pid: int
    started_s: float


def parse_waiter_text(data: bytes) -> WaiterText:
    """The waiter a file's bytes describe; :class:`ValueError` when they are not one gpumon
    wrote (the message is safe to show: it never quotes the text)."""
    fields = text_fields(data, MAX_WAITER_FILE_BYTES, _HEADER, "waiter")

    def number(name: str, *, optional: bool = False) -> float | None:
        value = fields.get(name, "")
        if optional and value == "-":
            return None
        if not _NUMBER.fullmatch(value):
            raise ValueError(f"no valid {name}")
        return float(value)

    since_s, started_s = number("since"), number("started")
    pid, count, interval_s = number("pid"), number("count"), number("interval")
    assert since_s is not None and started_s is not None and interval_s is not None
    if pid is None or not pid.is_integer() or count is None or not 1 <= count <= 4096:
        raise ValueError("no valid pid or count")
    min_free, max_utilization = (
        number("min-free", optional=True),
        number("max-utilization", optional=True),
    )
    free_below = number("free-below", optional=True)
    output_format = fields.get("format", "")
    only_text = fields.get("only", "")
    if output_format not in _FORMATS or not (only_text == "-" or _KEYS.fullmatch(only_text)):
        raise ValueError("no valid format or GPUs")
    request = Request(
        count=int(count),
        min_free_bytes=None if min_free is None else int(min_free),
        max_utilization_pct=max_utilization,
        free_below_bytes=None if free_below is None else int(free_below),
        output_format=output_format,
        only=None if only_text == "-" else tuple(only_text.split(",")),
        interval_s=interval_s,
    )
    return WaiterText(request, since_s, int(pid), started_s)


@dataclass(frozen=True, slots=True)
class Waiter:
    """A live waiting pick that passed every check: ``uid`` its file's owner, ``since_s`` its
    file's change time (its place in the queue)."""

    uid: int
    owner: str
    file_name: str
    since_s: float
    pid: int
    request: Request

    def order(self) -> tuple[float, str]:
        """The queue's order: the earlier file first; ties by file name, alike for all."""
        return (self.since_s, self.file_name)


def in_order(waiters: Iterable[Waiter]) -> list[Waiter]:
    """The queue, oldest first."""
    return sorted(waiters, key=Waiter.order)


def kept_for(
    sample: Sample, older: Sequence[Waiter], unavailable: Collection[str]
) -> dict[str, Waiter]:
    """Claim key -> the waiter a GPU (or MIG instance) of ``sample`` is kept for: in queue order
    (``older``, oldest first), a waiter that could start now with what is neither kept nor
    ``unavailable`` (claimed) keeps the GPUs it would pick; one that could not keeps none."""
    kept: dict[str, Waiter] = {}
    for waiter in older:
        request = waiter.request
        qualifying, _ = qualify(
            sample,
            n=request.count,
            min_free_bytes=request.min_free_bytes,
            max_utilization_pct=request.max_utilization_pct,
            output_format=request.output_format,
            free_below_bytes=request.free_below_bytes,
        )
        usable = []
        for candidate in qualifying:
            key = claim_key(candidate.uuid)
            if key is None or key in kept or key in unavailable:
                continue
            if request.only is None or key in request.only:
                usable.append(key)
        if len(usable) >= request.count:
            kept.update((key, waiter) for key in usable[: request.count])
    return kept
