"""Wall time of the headless modes on a simulated 8-GPU server (a benchmark, not a test).

Each run is a fresh ``python -m gpumon ...`` process, as a user or a tmux status bar runs
it, so interpreter start-up and imports are counted. Not collected by pytest (the name does
not start with ``test_``). Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_once.py            # 15 runs each
    .venv/bin/python tests/benchmarks/bench_once.py --runs 30

Targets (issue 4): ``gpumon once --json`` at most 0.25 s, ``gpumon status`` at most 0.15 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COMMANDS: dict[str, tuple[list[str], float]] = {
    "once --json (8 GPUs, 64 processes)": (
        ["once", "--json", "--demo", "--demo-gpus", "8", "--demo-processes", "64"],
        0.25,
    ),
    "once table (8 GPUs, 64 processes)": (
        ["once", "--demo", "--demo-gpus", "8", "--demo-processes", "64"],
        0.25,
    ),
    "status (8 GPUs)": (["status", "--demo", "--demo-gpus", "8"], 0.15),
}


def time_command(argv: list[str], runs: int, python: str) -> list[float]:
    """Wall seconds of ``runs`` fresh processes (after one untimed warm-up run)."""
    command = [python, "-m", "gpumon", *argv]
    env = dict(os.environ)
    subprocess.run(command, check=True, capture_output=True, cwd=ROOT, env=env)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=ROOT, env=env)
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (15)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run gpumon")
    args = parser.parse_args()
    print(f"{'command':<40} {'min':>7} {'median':>7} {'max':>7}  target")
    over = False
    for label, (argv, target) in COMMANDS.items():
        times = time_command(argv, args.runs, args.python)
        median = statistics.median(times)
        over = over or median > target
        flag = "ok" if median <= target else "OVER"
        print(
            f"{label:<40} {min(times):7.3f} {median:7.3f} {max(times):7.3f}  "
            f"<= {target:.2f} s {flag}"
        )
    print(
        f"({args.runs} runs each, seconds, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs)"
    )
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
