#!/usr/bin/env python3
"""Soak benchmark: does the dashboard's memory, thread or fd count grow over a long run?

A script, not a pytest test (the name does not start with ``test_``). Two modes:

* accelerated (the default): the soak of ``tests/ui/dashboard/test_soak.py`` (the real app and
  poller over a simulated server with heavy process churn, the poller's clock jumping past every
  wait) for ``--polls`` polls, by default 100,000 on 8 GPUs and 64 processes at 200x50, one
  process replaced per poll. Prints RSS (after ``gc.collect()``), threads and open fds
  before the first poll, after the warm-up and every ``--every`` polls.
* real interval (``--seconds``): ``python -m gpumon --demo --demo-gpus 8 --demo-processes 64
  --interval 0.25`` in a 200x50 pseudo-terminal, as a user runs it, sampled from outside
  (RSS, threads, fds) every ``--every-seconds`` for ``--seconds`` seconds. Needs Linux.
  The dashboard's memory has its plateau once its ten minutes of history are full (2,400
  samples at 0.25 s), so by default the first ``--prefill`` polls (that many samples) run
  back to back, through ``soak_prefill.py`` (the same ``python -m gpumon``, its first polls
  not waiting), and the clock of the run starts once they are done: every reading is of the
  plateau, each after a ``gc.collect()`` in the dashboard. ``--prefill 0`` runs plain
  ``python -m gpumon`` from an empty history (whose first ten minutes grow, by design).

Usage, from the repository root::

    python tests/benchmarks/bench_soak.py                        # 100,000 polls, ~12 min
    python tests/benchmarks/bench_soak.py --polls 20000 --size 60x15
    python tests/benchmarks/bench_soak.py --interval 0.25 --seconds 240   # at the plateau

Exit status: 0 when RSS grew less than 5 MiB from the end of the warm-up to the end and the
thread and fd counts did not change, 1 when something grew, 2 on error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pty_terminal import spawn_in_pty  # noqa: E402  (this script's own directory)

from gpumon.sampling.store import history_points  # noqa: E402
from tests.ui.dashboard.test_soak import (  # noqa: E402
    RSS_GROWTH_LIMIT_BYTES,
    WARM_UP_POLLS,
    Reading,
    SoakConfig,
    checkpoints,
    leaks,
    run_soak,
)

MIB = 1024**2
PREFILL_TIMEOUT_S = 600.0
PREFILL_SCRIPT = str(Path(__file__).with_name("soak_prefill.py"))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_size(text: str) -> tuple[int, int]:
    columns, _, rows = text.lower().partition("x")
    try:
        return int(columns), int(rows)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected COLUMNSxROWS, got {text!r}") from None


def machine() -> str:
    import textual

    return (
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, textual "
        f"{textual.__version__}, {platform.platform()}"
    )


# --- accelerated ---------------------------------------------------------------------------


def accelerated(args: argparse.Namespace) -> int:
    config = SoakConfig(
        gpus=args.gpus,
        processes=args.processes,
        churn=1.0 if args.churn is None else args.churn,
        size=args.size,
        interval_s=args.interval,
    )
    print(
        f"Accelerated soak: {args.polls} polls, {config.gpus} GPUs, {config.processes} "
        f"processes, churn {config.churn:g} per poll, {config.size[0]}x{config.size[1]}; "
        f"warm-up {args.warmup} polls\n{machine()}\n"
    )
    header = (
        f"{'polls':>7} {'seconds':>8} {'ms/poll':>7} {'RSS MiB':>8} {'vs warm':>8} "
        f"{'threads':>7} {'tasks':>5} {'fds':>4} {'new PIDs':>8} {'frames':>7} {'newest PID':>10}  "
        "rich caches"
    )
    print(header, flush=True)
    readings: list[Reading] = []

    def show(reading: Reading) -> None:
        warm = next((r for r in readings if r.polls == args.warmup), None)
        previous = readings[-1] if readings else None
        readings.append(reading)
        per_poll = (
            (reading.seconds - previous.seconds) / (reading.polls - previous.polls) * 1000
            if previous and reading.polls > previous.polls
            else 0.0
        )
        versus = f"{(reading.rss_bytes - warm.rss_bytes) / MIB:+8.2f}" if warm else f"{'':>8}"
        shown = "" if reading.newest_pid_on_screen or not reading.polls else " NOT SHOWN"
        print(
            f"{reading.polls:>7} {reading.seconds:>8.1f} {per_poll:>7.2f} "
            f"{reading.rss_mib:>8.2f} {versus} {len(reading.threads):>7} {reading.tasks:>5} "
            f"{len(reading.fds):>4} {reading.new_pids:>8} {reading.frames:>7} "
            f"{reading.newest_pid:>10}{shown}  "
            f"{reading.caches}",
            flush=True,
        )

    points = checkpoints(args.polls, args.warmup, args.every)
    result = asyncio.run(run_soak(config, points, show))
    warm = next(r for r in result.readings if r.polls == args.warmup)
    end = result.readings[-1]
    problems = leaks(warm, end)
    if len(end.threads) != len(warm.threads) or len(end.fds) != len(warm.fds):
        problems.append(
            f"threads {len(warm.threads)} -> {len(end.threads)}, fds {len(warm.fds)} -> "
            f"{len(end.fds)}"
        )
    if not all(r.newest_pid_on_screen for r in result.readings if r.polls):
        problems.append("a checkpoint's screen did not show the newest process")
    if end.samples_received != end.polls:
        problems.append(f"{end.polls - end.samples_received} polls failed")
    return verdict(warm.rss_bytes, end.rss_bytes, problems)


def verdict(warm_rss: int, end_rss: int, problems: Sequence[str]) -> int:
    print(
        f"\nRSS growth after warm-up: {(end_rss - warm_rss) / MIB:+.2f} MiB "
        f"(limit < {RSS_GROWTH_LIMIT_BYTES / MIB:.0f} MiB)"
    )
    for problem in problems:
        print(f"GREW: {problem}")
    print("PASS" if not problems else "FAIL")
    return 1 if problems else 0


# --- real interval, in a pty ---------------------------------------------------------------


@dataclass
class ChildReading:
    seconds: float
    rss_bytes: int
    threads: int
    fds: int


LAUNCHER = (
    "from gpumon.sources.demo import DemoSource; from gpumon.ui.dashboard.app import create_app; "
    "raise SystemExit(create_app(DemoSource({gpus}, process_count={processes}, "
    "churn={churn!r}), interval_s={interval!r}).run() or 0)"
)


def child_command(args: argparse.Namespace, done_file: str) -> list[str]:
    if args.churn is None:
        # Exactly what a user runs (the demo's own churn: about one process a minute).
        gpumon_args = [
            *("--demo", "--demo-gpus", str(args.gpus)),
            *("--demo-processes", str(args.processes), "--interval", str(args.interval)),
        ]
        if args.prefill:
            prefill = ("--polls", str(args.prefill), "--done", done_file)
            return [sys.executable, PREFILL_SCRIPT, *prefill, "--", *gpumon_args]
        return [sys.executable, "-m", "gpumon", *gpumon_args]
    launcher = LAUNCHER.format(
        gpus=args.gpus, processes=args.processes, churn=args.churn, interval=args.interval
    )
    return [sys.executable, "-c", launcher]


def drain(fd: int, stop: threading.Event, counter: list[int]) -> None:
    """Read the terminal's side of the pty, as a terminal would, and throw it away."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not stop.is_set():
            if not selector.select(0.1):
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed its side
                return
            if not data:
                return
            counter[0] += len(data)


def read_child(process: psutil.Process, started: float, collect: bool) -> ChildReading:
    if collect:  # soak_prefill.py runs gc.collect() on SIGUSR1
        process.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
    with process.oneshot():
        return ChildReading(
            seconds=time.monotonic() - started,
            rss_bytes=process.memory_info().rss,
            threads=process.num_threads(),
            fds=process.num_fds(),
        )


def vm_hwm_bytes(pid: int) -> int | None:
    """The peak RSS of a live process, from /proc."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def real_interval(args: argparse.Namespace) -> int:
    done_file = Path(tempfile.mkdtemp(prefix="gpumon-soak-")) / "prefilled"
    command = child_command(args, str(done_file))
    columns, rows = args.size
    prefilled = (
        f"after {args.prefill} samples polled back to back (the history full), "
        if args.prefill
        else "from an empty history, "
    )
    print(
        f"Real dashboard in a {columns}x{rows} pty {prefilled}for {args.seconds:g} s "
        f"(warm-up {args.warmup_seconds:g} s), RSS/threads/fds every {args.every_seconds:g} s\n"
        f"Command: {' '.join(command)}\n{machine()}\n"
    )
    env = dict(os.environ, TERM="xterm-256color", LANG="C.UTF-8")
    for name in ("COLUMNS", "LINES", "LC_ALL", "LC_CTYPE", "NO_COLOR", "TMUX"):
        env.pop(name, None)
    child, master = spawn_in_pty(command, columns=columns, rows=rows, env=env, cwd=str(ROOT))
    stop = threading.Event()
    written = [0]
    reader = threading.Thread(target=drain, args=(master, stop, written), daemon=True)
    reader.start()
    started = time.monotonic()
    # Read at the first frame, at the end of the warm-up, then every --every-seconds.
    schedule = [0.0, args.warmup_seconds]
    while schedule[-1] + args.every_seconds < args.seconds:
        schedule.append(schedule[-1] + args.every_seconds)
    schedule.append(args.seconds)
    readings: list[ChildReading] = []
    warm: ChildReading | None = None
    try:
        process = psutil.Process(child.pid)
        # The first frame: the terminal has received a screenful.
        while written[0] < columns * rows and time.monotonic() - started < 30:
            time.sleep(0.05)
        first_frame = read_child(process, started, collect=False)
        if args.prefill:
            while not done_file.exists():
                if child.poll() is not None:
                    raise RuntimeError(f"gpumon exited early with status {child.returncode}")
                if time.monotonic() - started > PREFILL_TIMEOUT_S:
                    raise RuntimeError(f"{args.prefill} polls took over {PREFILL_TIMEOUT_S} s")
                time.sleep(0.2)
            print(
                f"History filled: {args.prefill} samples in {time.monotonic() - started:.1f} s",
                flush=True,
            )
        started = time.monotonic()
        print(
            f"{'seconds':>8} {'RSS MiB':>8} {'vs warm':>8} {'threads':>7} {'fds':>4} "
            f"{'bytes out':>10}"
        )
        for at in schedule:
            while (left := started + at - time.monotonic()) > 0:
                if child.poll() is not None:
                    raise RuntimeError(f"gpumon exited early with status {child.returncode}")
                time.sleep(min(left, 0.5))
            reading = read_child(process, started, collect=bool(args.prefill))
            readings.append(reading)
            if at == args.warmup_seconds:
                warm = reading
            versus = f"{(reading.rss_bytes - warm.rss_bytes) / MIB:+8.2f}" if warm else " " * 8
            print(
                f"{reading.seconds:>8.1f} {reading.rss_bytes / MIB:>8.2f} {versus} "
                f"{reading.threads:>7} {reading.fds:>4} {written[0]:>10}",
                flush=True,
            )
    except (RuntimeError, psutil.Error) as error:
        log(f"error: {error}")
        return 2
    finally:
        peak = vm_hwm_bytes(child.pid)
        with contextlib.suppress(OSError):
            os.write(master, b"q")
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        stop.set()
        reader.join(1)
        os.close(master)
        done_file.unlink(missing_ok=True)
        done_file.parent.rmdir()
    if warm is None:
        log("error: the run ended before the warm-up did; use a longer --seconds")
        return 2
    end = readings[-1]
    problems = []
    if end.threads != warm.threads:
        problems.append(f"threads {warm.threads} -> {end.threads}")
    if end.fds != warm.fds:
        problems.append(f"fds {warm.fds} -> {end.fds}")
    if end.rss_bytes - warm.rss_bytes >= RSS_GROWTH_LIMIT_BYTES:
        problems.append(f"RSS grew {(end.rss_bytes - warm.rss_bytes) / MIB:.2f} MiB")
    print(f"\nRSS at the first frame: {first_frame.rss_bytes / MIB:.2f} MiB")
    if args.prefill:
        plateau = sorted(r.rss_bytes for r in readings if r.seconds >= args.warmup_seconds)
        print(
            f"RSS at the plateau (history full, after gc): median "
            f"{plateau[len(plateau) // 2] / MIB:.2f} MiB, max {plateau[-1] / MIB:.2f} MiB"
        )
    if peak is not None:
        print(f"Peak RSS (VmHWM): {peak / MIB:.2f} MiB")
    return verdict(warm.rss_bytes, end.rss_bytes, problems)


# --- main ----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=100_000, help="accelerated: polls in all")
    parser.add_argument(
        "--warmup",
        type=int,
        default=WARM_UP_POLLS,
        help=f"accelerated: polls before the baseline ({WARM_UP_POLLS})",
    )
    parser.add_argument(
        "--every", type=int, default=10_000, help="accelerated: polls between readings"
    )
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    parser.add_argument("--processes", type=int, default=64, help="simulated processes (64)")
    parser.add_argument(
        "--churn",
        type=float,
        default=None,
        help="processes replaced per poll (accelerated default 1; real interval default: "
        "the demo's own, about 0.01)",
    )
    parser.add_argument(
        "--size", type=parse_size, default=(200, 50), help="terminal COLUMNSxROWS (200x50)"
    )
    parser.add_argument(
        "--interval", type=float, default=0.25, help="refresh interval in seconds (0.25)"
    )
    parser.add_argument(
        "--seconds", type=float, help="run the real dashboard in a pty this long instead"
    )
    parser.add_argument(
        "--prefill",
        type=int,
        help="real interval: samples polled back to back before the run (default: a full "
        "history, 2400 at 0.25 s); 0: start from an empty history",
    )
    parser.add_argument(
        "--warmup-seconds", type=float, default=60.0, help="real interval: warm-up (60)"
    )
    parser.add_argument(
        "--every-seconds", type=float, default=30.0, help="real interval: between readings (30)"
    )
    args = parser.parse_args(argv)
    if args.prefill is None:
        args.prefill = history_points(args.interval)
    if args.prefill and args.churn is not None:
        parser.error("--churn runs the demo from a launcher that cannot prefill: add --prefill 0")
    if args.seconds is None and not 0 < args.warmup < args.polls:
        parser.error("--warmup must be between 0 and --polls")
    if args.every < 1 or args.every_seconds <= 0:
        parser.error("--every and --every-seconds must be positive")
    if args.seconds is not None and args.seconds <= args.warmup_seconds:
        parser.error("--seconds must be longer than --warmup-seconds")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seconds is not None:
        return real_interval(args)
    return accelerated(args)


if __name__ == "__main__":
    raise SystemExit(main())
