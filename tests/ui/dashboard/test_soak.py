"""Soak: the dashboard polls a simulated server with heavy process churn 20,000 times and
neither memory nor threads nor file descriptors grow.

gpumon is left open in tmux panes for days, so a few bytes kept per sample or per process
that ended would add up. The real app (``create_app``) runs its real poller loop against a
:class:`DemoSource` whose processes end and start all the time (thousands of distinct PIDs
pass through the process table), accelerated: the poller's clock jumps past every wait, so
polls run back to back and no test time is spent sleeping. Textual composes frames along
the way (its own screen refresh, up to 60 per second, while the polls run); at every
checkpoint the poller stops at an exact poll count, the screen must show the newest process,
and RSS (after ``gc.collect()``), threads and open file descriptors are read.

Deterministic: the simulation is seeded and the checkpoints are exact poll counts, never
wall-clock windows; load only makes the test slower. ``tests/benchmarks/bench_soak.py`` runs
the same soak for 100,000 polls (and the real dashboard in a pty for minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import psutil
import pytest

import gpumon.ui.dashboard.app as app_module
from gpumon.data.model import MAX_INTERVAL_S, Sample
from gpumon.sampling.poller import Poller
from gpumon.sources.base import GpuSource
from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app
from gpumon.ui.widgets.process_table import ProcessTable
from tests.support.ui_helpers import FIXED_TIME, screen_text

MIB = 1024**2

POLLS = 20_000
# Rich and Textual keep bounded caches of the text they measure and cut (the largest, rich's
# Segment._split_cells, holds 16,384 entries: about 10 MiB when full). Processes that keep
# changing feed them new text, so RSS rises until they are full, about 3,000 polls here;
# growth is measured from the end of the warm-up.
WARM_UP_POLLS = 5_000
CHECK_EVERY_POLLS = 2_500
RSS_GROWTH_LIMIT_BYTES = 5 * MIB
# Stop with a clear message, instead of hanging, if the poller makes no progress this long.
STALL_S = 60.0


@dataclass(frozen=True)
class SoakConfig:
    """What the soak runs: the simulated server, the terminal and the refresh interval."""

    gpus: int = 8
    processes: int = 64
    # Processes replaced per tick: one a tick, so a process lives about 64 ticks.
    churn: float = 1.0
    # The tmux pane of the README (one line per GPU, a short process table). A poll costs
    # 1.5 to 2.5 ms of CPU there on a 2-core machine, against about 7 ms at 200x50, where
    # 8 GPU cards and 45 table rows are redrawn: 20,000 polls would take 2.5 minutes.
    # tests/benchmarks/bench_soak.py soaks 200x50.
    size: tuple[int, int] = (60, 15)
    interval_s: float = 0.25
    seed: int = 1


class InstantClock:
    """A monotonic clock that jumps past the longest interval on every reading: each wait
    of the poller is already over when it computes it, so polls run back to back."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += MAX_INTERVAL_S
        return self.now


class SoakPoller(Poller):
    """The real poller on an :class:`InstantClock`, which starts paused and pauses itself
    after exactly the number of polls the soak asks for (:meth:`run_to`).

    It also counts the PIDs it delivers for the first time: demo PIDs only grow, so a PID
    above every earlier one is a new process.
    """

    def __init__(
        self,
        source: GpuSource,
        interval_s: float,
        on_sample: Callable[[Sample], None],
        **options: Any,
    ) -> None:
        options["clock"] = InstantClock()
        super().__init__(source, interval_s, self._deliver, **options)
        self._app_on_sample = on_sample
        self.paused = True
        self.pause_at = 0
        self.reached = asyncio.Event()
        self.newest_pid = 0
        self.new_pids = 0

    def _deliver(self, sample: Sample) -> None:
        self._app_on_sample(sample)
        fresh = [p.pid for p in sample.processes if p.pid > self.newest_pid]
        if fresh:
            self.new_pids += len(fresh)
            self.newest_pid = max(fresh)
        if self.polls_finished >= self.pause_at:
            self.paused = True
            self.reached.set()

    async def run_to(self, polls: int) -> None:
        """Poll until ``polls`` polls have finished in all, then stay paused."""
        self.pause_at = polls
        self.reached.clear()
        self.paused = False
        progress = (self.polls_finished, time.monotonic())
        while not self.reached.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.reached.wait(), 1.0)
            if self.polls_finished != progress[0]:
                progress = (self.polls_finished, time.monotonic())
            elif time.monotonic() - progress[1] > STALL_S:
                raise AssertionError(
                    f"no poll finished for {STALL_S:.0f} s at {self.polls_finished} polls"
                )


@dataclass(frozen=True)
class Reading:
    """The process, read at a checkpoint (the poller paused, the last frame composed)."""

    polls: int
    seconds: float  # since the first poll
    rss_bytes: int
    threads: frozenset[tuple[int, str]]  # (ident, name) of every Python thread
    tasks: int  # OS threads (/proc/self/task): Python's and any others
    fds: frozenset[tuple[int, str]]  # (fd, what it points to)
    new_pids: int  # distinct PIDs delivered so far
    newest_pid: int
    newest_pid_on_screen: bool
    samples_received: int
    frames: int  # screen updates Textual composed so far
    caches: str = ""  # how full the largest bounded caches of rich are (for the report)

    @property
    def rss_mib(self) -> float:
        return self.rss_bytes / MIB


def open_fds() -> frozenset[tuple[int, str]]:
    found = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory listing's own fd, closed by now
            found.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
    return frozenset(found)


def read_process(app: GpumonApp, poller: SoakPoller, started: float, frames: int) -> Reading:
    newest = max((p.pid for p in app.sample.processes), default=0) if app.sample else 0
    on_screen = newest > 0 and bool(re.search(rf"(?<!\d){newest}(?!\d)", screen_text(app)))
    gc.collect()
    return Reading(
        polls=poller.polls_finished,
        seconds=time.perf_counter() - started,
        rss_bytes=psutil.Process().memory_info().rss,
        threads=frozenset((t.ident or 0, t.name) for t in threading.enumerate()),
        tasks=len(os.listdir("/proc/self/task")),
        fds=open_fds(),
        new_pids=poller.new_pids,
        newest_pid=newest,
        newest_pid_on_screen=on_screen,
        samples_received=app.samples_received,
        frames=frames,
        caches=bounded_caches(),
    )


def bounded_caches() -> str:
    """``used/size`` of rich's two largest LRU caches, the ones a warm-up must fill."""
    import rich.cells
    import rich.segment

    shown = []
    for cached in (rich.segment.Segment._split_cells, rich.cells.cached_cell_len):
        with contextlib.suppress(AttributeError):  # another rich: nothing to show
            info = cached.cache_info()
            shown.append(f"{info.currsize}/{info.maxsize}")
    return " ".join(shown)


@contextlib.contextmanager
def count_frames(app: GpumonApp) -> Iterator[Callable[[], int]]:
    """Count the screen updates Textual composes (its compositor's render_update)."""
    compositor = app.screen._compositor
    render_update = compositor.render_update
    count = 0

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        return render_update(*args, **kwargs)

    compositor.render_update = counting  # type: ignore[method-assign]
    try:
        yield lambda: count
    finally:
        del compositor.render_update


@dataclass
class SoakResult:
    config: SoakConfig
    readings: list[Reading] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def run_soak(
    config: SoakConfig,
    checkpoints: Sequence[int],
    on_reading: Callable[[Reading], None] | None = None,
) -> SoakResult:
    """Run the app over a churning demo server, reading the process at each checkpoint (a
    total poll count; 0 reads it before the first poll)."""
    ticks = iter(range(10**9))
    source = DemoSource(
        config.gpus,
        seed=config.seed,
        process_count=config.processes,
        current_user="me",
        # The sample's clock advances one interval a tick, as it would on a real server.
        clock=lambda: FIXED_TIME + next(ticks) * config.interval_s,
        tick_s=config.interval_s,
        churn=config.churn,
    )
    result = SoakResult(config)
    with mock.patch.object(app_module, "Poller", SoakPoller):
        app = create_app(source, interval_s=config.interval_s, ascii_only=False)
    poller = app.poller
    assert isinstance(poller, SoakPoller)
    async with app.run_test(size=config.size) as pilot:
        # Newest PID first: the top row is the newest process, so a frame composed from a
        # late sample is easy to tell from a stale one.
        await pilot.press("s", "r")
        assert app.query_one(ProcessTable).sort_key == "pid"
        with count_frames(app) as frames:
            started = time.perf_counter()
            for polls in checkpoints:
                if polls:
                    await poller.run_to(polls)
                await pilot.pause()  # the frame for the last sample is composed
                reading = read_process(app, poller, started, frames())
                result.readings.append(reading)
                if on_reading is not None:
                    on_reading(reading)
    return result


def describe(readings: Sequence[Reading]) -> str:
    """The readings as a table, for a failure message or a report."""
    lines = [
        f"{'polls':>7} {'seconds':>8} {'RSS MiB':>8} {'threads':>7} {'tasks':>5} {'fds':>4} "
        f"{'new PIDs':>8} {'frames':>7} {'newest PID':>10} {'shown':>5}  rich caches"
    ]
    for r in readings:
        lines.append(
            f"{r.polls:>7} {r.seconds:>8.1f} {r.rss_mib:>8.2f} {len(r.threads):>7} "
            f"{r.tasks:>5} {len(r.fds):>4} {r.new_pids:>8} {r.frames:>7} {r.newest_pid:>10} "
            f"{'yes' if r.newest_pid_on_screen else 'NO':>5}  {r.caches}"
        )
    return "\n".join(lines)


def leaks(warm: Reading, end: Reading) -> list[str]:
    """What grew from ``warm`` to ``end``: RSS by 5 MiB or more, any thread or file
    descriptor opened after ``warm`` and still open at ``end``."""
    found = []
    growth = end.rss_bytes - warm.rss_bytes
    if growth >= RSS_GROWTH_LIMIT_BYTES:
        found.append(
            f"RSS grew {growth / MIB:.2f} MiB from poll {warm.polls} to poll {end.polls} "
            f"(limit {RSS_GROWTH_LIMIT_BYTES / MIB:.0f} MiB)"
        )
    if new_threads := end.threads - warm.threads:
        found.append(f"threads started after warm-up still alive: {sorted(new_threads)}")
    if end.tasks > warm.tasks:
        found.append(f"OS threads: {warm.tasks} after warm-up, {end.tasks} at the end")
    if new_fds := end.fds - warm.fds:
        found.append(f"file descriptors opened after warm-up still open: {sorted(new_fds)}")
    return found


def checkpoints(polls: int, warm_up: int, every: int) -> list[int]:
    """0 (before the first poll), the end of the warm-up, every ``every`` polls, the end."""
    points = {0, warm_up, polls, *range(every, polls, every)}
    return sorted(point for point in points if 0 <= point <= polls)


@pytest.mark.slow
async def test_twenty_thousand_polls_with_process_churn_grow_nothing() -> None:
    config = SoakConfig()
    result = await run_soak(config, checkpoints(POLLS, WARM_UP_POLLS, CHECK_EVERY_POLLS))
    table = describe(result.readings)
    warm = next(r for r in result.readings if r.polls == WARM_UP_POLLS)
    end = result.readings[-1]

    assert end.polls == POLLS, table
    # Every poll delivered a sample: none failed.
    assert end.samples_received == POLLS, table
    # Thousands of distinct PIDs went through the table.
    assert end.new_pids >= POLLS * config.churn / 2, table
    # Frames were composed along the way (hundreds), not only at the checkpoints.
    assert end.frames > 20 * len(result.readings), table
    # Every checkpoint's frame shows the newest process of the latest sample, one that did
    # not exist at the checkpoint before.
    assert all(r.newest_pid_on_screen for r in result.readings if r.polls), table
    newest = [r.newest_pid for r in result.readings]
    assert newest == sorted(set(newest)), table
    assert leaks(warm, end) == [], table
    # And the counts did not grow (a thread or an fd left by an earlier test that ends
    # during the soak makes them smaller: that is not a leak of this one).
    assert len(end.threads) <= len(warm.threads), table
    assert len(end.fds) <= len(warm.fds), table


@pytest.mark.parametrize(
    ("polls", "every", "expected"),
    [
        (20_000, 2_500, [2_500 * n for n in range(9)]),
        (6_000, 4_000, [0, 4_000, 5_000, 6_000]),
    ],
)
def test_checkpoints_are_exact_poll_counts(polls: int, every: int, expected: list[int]) -> None:
    assert checkpoints(polls, 5_000, every) == expected


def test_leaks_reports_growth_and_new_threads_and_fds() -> None:
    base = Reading(
        polls=2_000,
        seconds=1.0,
        rss_bytes=40 * MIB,
        threads=frozenset({(1, "MainThread")}),
        tasks=1,
        fds=frozenset({(0, "/dev/null")}),
        new_pids=10,
        newest_pid=5,
        newest_pid_on_screen=True,
        samples_received=2_000,
        frames=10,
    )
    same = dataclasses.replace(base, polls=20_000, rss_bytes=45 * MIB - 1)
    grown = dataclasses.replace(
        base,
        polls=20_000,
        rss_bytes=45 * MIB,
        threads=base.threads | {(2, "worker")},
        tasks=2,
        fds=base.fds | {(3, "pipe:[1]")},
    )

    assert leaks(base, same) == []
    found = leaks(base, grown)
    assert len(found) == 4
    assert "RSS grew 5.00 MiB" in found[0]
    assert "worker" in found[1]
    assert "pipe:[1]" in found[3]
