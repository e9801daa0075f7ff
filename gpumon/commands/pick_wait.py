"""``gpumon pick --wait``: look again every interval until enough GPUs qualify.

:func:`attempts` runs one look (an :class:`Attempt`) until one succeeds, the limit passes
(exit 1) or Ctrl+C (exit 130). On a terminal one stderr line is rewritten in place while it
waits; elsewhere one final line. Without ``--wait`` the same code looks once.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from gpumon.data import format as fmt
from gpumon.data.free import processes_known
from gpumon.data.model import Sample
from gpumon.data.ranking import Candidate, users_text

PREFIX = "gpumon pick: "
#: A look at the wait's end still gives the driver this long to answer (a healthy read takes
#: milliseconds): it ends as a wait that ran out, not as a driver that did not answer.
LAST_READ_S = 1.0
#: Erase the line the cursor is on and go to its start.
CLEAR_LINE = "\r\x1b[2K"
DEMO_LABEL = "simulated GPUs (--demo)"
#: A failure line names at most this many reasons, then says how many more there are.
MAX_REASONS = 12


@dataclass(frozen=True, slots=True)
class Attempt:
    """One look at the GPUs: ``output`` (stdout) and ``notes`` when enough qualify; else
    ``failure`` (the line for giving up now), ``hints`` (the lines after it: what would help)
    and ``status`` (the waiting line). ``fatal``: lines to say before exiting ``fatal_status``
    at once (no driver; 2 for a usage error).
    """

    output: str | None = None
    notes: tuple[str, ...] = ()
    failure: str = ""
    hints: tuple[str, ...] = ()
    status: str = ""
    fatal: tuple[str, ...] = ()
    fatal_status: int = 1
    #: Too few could ever qualify (too few GPUs, MIG, too little memory on any board):
    #: waiting would not help, so ``--wait`` does not.
    hopeless: bool = False


class StatusLine:
    """The one waiting line on a terminal's stderr, rewritten in place; silent elsewhere."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        try:
            self.terminal = stream.isatty()
        except (AttributeError, ValueError):
            self.terminal = False
        self.shown = False

    def show(self, text: str) -> None:
        if not self.terminal:
            return
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            width = 80
        # One cell short of the edge: a line that fills it wraps on some terminals, and a
        # wrapped line is no longer erased by the next carriage return.
        self.stream.write(CLEAR_LINE + fmt.truncate(text, max(1, width - 1)))
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(CLEAR_LINE)
            self.stream.flush()
            self.shown = False


def with_reasons(head: str, reasons: Sequence[str]) -> str:
    """``head: why, why, ..., 3 more``: a failure line naming at most :data:`MAX_REASONS`."""
    if not reasons:
        return head
    shown = list(reasons[:MAX_REASONS])
    if len(reasons) > MAX_REASONS:
        shown.append(f"{len(reasons) - MAX_REASONS} more")
    return f"{head}: {', '.join(shown)}"


def failure_line(
    picked: Sequence[Candidate],
    reasons: Sequence[str],
    n: int,
    *,
    gpu_count: int,
    simulated: bool = False,
) -> str:
    """The one stderr line for "fewer than ``n`` qualify", naming why the others do not
    (``gpu_count``: the sample's GPUs; with MIG candidates they are "devices").
    """
    total = len(picked) + len(reasons)
    prefix = f"gpumon pick: {DEMO_LABEL}: " if simulated else "gpumon pick: "
    if total == 0:
        return f"{prefix}no GPU found (need {n})"
    kind = "GPU" if total == gpu_count else "device"
    noun = kind if total == 1 else f"{kind}s"
    if not reasons:
        return f"{prefix}only {total} {noun} here (need {n})"
    if picked:
        verb = "qualifies" if len(picked) == 1 else "qualify"
        head = f"only {len(picked)} of {total} {noun} {verb}"
    elif total == 1:
        head = f"the only {kind} does not qualify"
    else:
        head = f"none of {total} {noun} qualifies"
    return with_reasons(f"{prefix}{head} (need {n})", reasons)


def processes_text(count: int) -> str:
    """``1 process``, ``3 processes``."""
    return f"{count} process" + ("" if count == 1 else "es")


def hand_over(result: Attempt, release: Callable[[], None] | None = None) -> int:
    """Print a successful attempt (exit 0); when the GPUs cannot reach the user, ``release``
    takes their claims back."""
    try:
        print(result.output)
        sys.stdout.flush()
    except BaseException:
        if release is not None:
            release()
        raise
    for line in result.notes:
        print(line, file=sys.stderr)
    return 0


def span(seconds: float) -> str:
    """``2.5s``, ``42s``, ``3m12s``, ``2h13m``: how long a pick waited."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    return f"{total // 3600}h{total % 3600 // 60:02d}m"


def attempts(
    attempt: Callable[[], Attempt],
    *,
    wait_s: float | None,
    interval_s: float,
    stderr: TextIO,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Attempt | int:
    """Look until an attempt succeeds (returned) or not: an exit status (1: too few, the wait ran
    out, or fatal; 2: a usage error; 130: Ctrl+C). ``wait_s``: None looks once; ``math.inf``
    waits without limit.
    """
    status = StatusLine(stderr)
    started = clock()
    tries = 0
    try:
        while True:
            tries += 1
            began = clock()
            result = attempt()
            if result.fatal:
                status.clear()
                for line in result.fatal:
                    print(line, file=stderr)
                return result.fatal_status
            waited = clock() - started
            if result.output is not None:
                status.clear()
                if tries > 1:
                    print(f"{PREFIX}waited {span(waited)}", file=stderr)
                return result
            if wait_s is None:
                for line in (result.failure, *result.hints):
                    print(line, file=stderr)
                return 1
            if result.hopeless:
                status.clear()
                print(f"{result.failure}; waiting would not change that", file=stderr)
                for line in result.hints:
                    print(line, file=stderr)
                return 1
            if waited >= wait_s:
                status.clear()
                reason = result.failure.removeprefix(PREFIX)
                print(f"{PREFIX}gave up after waiting {span(waited)}: {reason}", file=stderr)
                for line in result.hints:
                    print(line, file=stderr)
                return 1
            status.show(result.status)
            pause = interval_s - (clock() - began)
            if not math.isinf(wait_s):
                pause = min(pause, wait_s - waited)
            if pause > 0:
                sleep(pause)
    except KeyboardInterrupt:
        status.clear()
        return 130


def read_timeout(wait_s: float | None, waited_s: float) -> float | None:
    """How long one look may wait for the driver: what is left of ``--wait`` (at least
    :data:`LAST_READ_S`, in tenths of a second), so that a stuck driver cannot hold a pick
    past its wait; None (the usual limit) without a limited wait."""
    if wait_s is None or math.isinf(wait_s):
        return None
    from gpumon.sampling.snapshot import SAMPLE_TIMEOUT_S

    left = math.ceil((wait_s - waited_s) * 10) / 10
    return min(SAMPLE_TIMEOUT_S, max(LAST_READ_S, left))


def waiting_text(
    sample: Sample,
    available: Sequence[Candidate],
    n: int,
    claimed: Mapping[int, str],
    *,
    word: str = "free",
    kept: Mapping[int, str] | None = None,
) -> str:
    """``waiting: 1 of 2 free; GPU 0 alice 2h13m, GPU 3 bob 5m``: how many qualify, and who holds
    each other GPU (``claimed``: NVML index -> the claim's owner; ``kept``: -> the older
    waiter it is kept for) or why else it does not.
    """
    kept = kept or {}
    taken = {candidate.gpu_index for candidate in available}
    holders = []
    for gpu in sample.gpus:
        if gpu.index in taken:
            continue
        label = f"GPU {gpu.index}"
        processes = sample.processes_on(gpu.index)
        if gpu.lost:
            holders.append(f"{label} LOST")
        elif not processes_known(gpu, sample):
            holders.append(f"{label} unknown")
        elif gpu.index in claimed:
            holders.append(f"{label} claimed by {claimed[gpu.index]}")
        elif gpu.index in kept:
            holders.append(f"{label} kept for {kept[gpu.index]} (queue)")
        elif processes:
            ages = [p.elapsed_s for p in processes if p.elapsed_s is not None]
            since = f" {fmt.duration(max(ages))}" if ages else ""
            holders.append(f"{label} {users_text(processes, '+')}{since}")
        elif gpu.memory_used_bytes is not None:
            holders.append(f"{label} {fmt.bytes_short(gpu.memory_used_bytes)} in use")
        else:
            holders.append(f"{label} busy")
    head = f"waiting: {min(len(available), n)} of {n} {word}"
    return f"{head}; {', '.join(holders)}" if holders else head


def exit_on_signals() -> Callable[[], None]:
    """Until the returned function is called, SIGTERM and SIGHUP (a closed SSH session) end the
    pick as Ctrl+C does: its ``finally`` leaves the queue and releases its claims at once,
    rather than leaving a dead waiter's file for its owner's next pick to remove."""

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may set handlers (an embedding caller)
    previous = {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
