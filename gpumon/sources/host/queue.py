"""The waiting picks in the claims directory: read, checked and written as claims are.

A waiter file is read only when it is a regular file of the uid its name says, no larger
than a waiter's (:class:`~gpumon.sources.host.claims.ClaimsDir.read_entry`); it counts only
while its process lives: the PID it names, started when it says, run by the file's owner.
An entry that fails a check is other users' input: ignored and named, never followed.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

import psutil

from gpumon.data import queue as rules
from gpumon.data.claims import CLOCK_SLACK_S
from gpumon.data.format import safe_text
from gpumon.sources.host.claims import ClaimsDir, ClaimsOff, Ignored, Unread, user_name

#: A process whose start time differs from the one its waiter file states by more than this
#: is another process that got the PID.
START_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class WaiterScan:
    """The live waiters, oldest first; the files of waiters whose process ended (``dead``:
    file name -> owner uid); and the entries ignored, with why."""

    waiters: tuple[rules.Waiter, ...]
    dead: tuple[tuple[str, int], ...]
    ignored: tuple[Ignored, ...]


def process_start_s(pid: int) -> float:
    """When process ``pid`` started (the clock ``time.time`` reads)."""
    return float(psutil.Process(pid).create_time())


def _process_problem(pid: int, started_s: float, uid: int) -> tuple[bool, str]:
    """``(alive, why not counted)``: a waiter's process is alive when ``pid`` runs, started at
    ``started_s``; it counts only when ``uid`` runs it (else the entry is forged)."""
    try:
        process = psutil.Process(pid)
        created = process.create_time()
        if process.status() == psutil.STATUS_ZOMBIE:
            return False, ""
        owner = process.uids().effective
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False, ""
    except (psutil.AccessDenied, OSError):
        return True, "its process cannot be seen"
    if abs(created - started_s) > START_SLACK_S:
        return False, ""  # the PID went to another process: this waiter ended
    if owner != uid:
        return True, f"its process {pid} is run by {user_name(owner)}, not by its owner"
    return True, ""


def scan_waiters(directory: ClaimsDir, now_s: float) -> WaiterScan:
    """Every waiter file of ``directory``, checked. Raises :class:`ClaimsOff` when the
    directory cannot be listed."""
    waiters: list[rules.Waiter] = []
    dead: list[tuple[str, int]] = []
    ignored: list[Ignored] = []
    files_of: dict[int, int] = {}
    try:
        with os.scandir(directory.fd) as entries:
            names = [entry.name for entry in entries if entry.name.startswith(rules.PREFIX)]
    except OSError as error:
        raise ClaimsOff(f"cannot list {directory.path}: {error.strerror or error}") from None
    for name in names:
        parsed = rules.parse_file_name(name)
        if parsed is None:
            continue
        waiter, why, uid = _check(directory, name, parsed[0], now_s, files_of)
        if waiter is not None:
            waiters.append(waiter)
        elif why is None:
            dead.append((name, uid))
        elif why:  # empty: removed since the listing
            ignored.append(Ignored(safe_text(name, 120), safe_text(why, 200), uid))
    # A pick writes one entry: more naming one process would put it in the queue many times.
    first: list[rules.Waiter] = []
    for waiter in rules.in_order(waiters):
        if any(waiter.pid == earlier.pid for earlier in first):
            why = f"a second entry of process {waiter.pid}"
            ignored.append(Ignored(safe_text(waiter.file_name, 120), why, waiter.uid))
        else:
            first.append(waiter)
    return WaiterScan(tuple(first), tuple(dead), tuple(ignored))


def _check(
    directory: ClaimsDir, name: str, uid: int, now_s: float, files_of: dict[int, int]
) -> tuple[rules.Waiter | None, str | None, int]:
    """The live waiter ``name`` describes; else why it is not one (None: its process ended);
    and whose the entry is."""
    read = directory.read_entry(name, uid, rules.MAX_WAITER_FILE_BYTES, files_of)
    if isinstance(read, Unread):
        return None, read.why, read.uid
    data, opened = read
    try:
        text = rules.parse_waiter_text(data)
    except ValueError as error:
        return None, str(error), uid
    # The file's change time is its place: no user can set it back, as the text's could be.
    since_s = opened.st_ctime
    if max(text.since_s, since_s) > now_s + CLOCK_SLACK_S or text.since_s > since_s + CLOCK_SLACK_S:
        return None, "dated in the future", uid
    alive, problem = _process_problem(text.pid, text.started_s, opened.st_uid)
    if problem:
        return None, problem, uid
    if not alive:
        return None, None, uid
    waiter = rules.Waiter(
        uid=opened.st_uid,
        owner=user_name(opened.st_uid),
        file_name=name,
        since_s=since_s,
        pid=text.pid,
        request=text.request,
    )
    return waiter, "", uid


def write_waiter(directory: ClaimsDir, request: rules.Request, since_s: float) -> str:
    """Enter this process in the queue; returns its file's name. Raises :class:`OSError`,
    leaving nothing behind."""
    pid = os.getpid()
    name = rules.file_name(directory.uid, secrets.token_hex(8))
    directory.write_file(name, rules.waiter_text(request, since_s, pid, process_start_s(pid)))
    return name
