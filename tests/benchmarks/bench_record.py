#!/usr/bin/env python3
"""What the history costs: the recorder's CPU, a report's query time, the file's size (a
benchmark script, not collected by pytest).

``cpu`` (the first part of ``all``, the default)
    ``python -m gpumon record`` against ``python -m gpumon export`` (and ``export --record``)
    on the same server at the same ``--interval`` (default 1 s): the fake NVML library of
    ``../shared/fakenvml`` with GPUS x PER_GPU (8 x 64) *real* idle job processes started by
    its ``spawn_procs.py`` (``bench_env``), as ``bench_dashboard.py --scenario real`` does.
    The monitors run one after the other, ABCABC..., ``--runs`` times each; each run's CPU is
    user+system of the process over ``--seconds`` after a warm-up of ``--warm-up`` seconds,
    in % of one core. Prints each run, the medians and the recorder's ratio to the exporter
    (target: at most 1.2x).
``query``
    30 days of 8 GPUs x 64 processes (16 users, one Slurm job per process: 85 usage rows per
    GPU and hour; tests/support/history_synthetic.py) written straight into a database, then the
    medians of ``--repeat`` runs of ``HistoryReader.usage`` over the 30 days for each
    grouping (target: at most 1 s), and of ``gpu_series`` over 7 days.
``size``
    One day (``--day-hours`` hours, scaled to 24) of the simulated 8-GPU server with 512
    processes (``--demo``'s source, one sample every 10 s) recorded by the real writer; the
    bytes each table takes (SQLite's dbstat), per day, and the file at steady state after a
    year at the default retention (minute and usage hour rows 90 days, GPU hour rows, usage
    day rows and sessions a year), extrapolated from them (target: under 200 MB).

Usage, from the repository root::

    python tests/benchmarks/bench_record.py                 # all three
    python tests/benchmarks/bench_record.py cpu --runs 5 --seconds 60
    python tests/benchmarks/bench_record.py query size
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpumon.data.idle import IdleRule  # noqa: E402
from gpumon.data.usage import GROUPINGS  # noqa: E402
from gpumon.sampling.history import retention  # noqa: E402
from gpumon.sampling.history.reader import open_history  # noqa: E402
from gpumon.sampling.history.writer import HistoryWriter  # noqa: E402
from gpumon.sources.demo import DemoSource  # noqa: E402
from tests.benchmarks import bench_env  # noqa: E402
from tests.support import history_synthetic as synthetic  # noqa: E402

DAY = 86400
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User+system seconds of ``pid``, all its threads."""
    data = Path(f"/proc/{pid}/stat").read_bytes()
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def run_monitor(argv: list[str], env: dict[str, str], warm_up: float, seconds: float) -> float:
    """CPU % of one core of ``python -m gpumon ARGV`` over ``seconds``, after ``warm_up``."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gpumon", *argv],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(warm_up)
        if process.poll() is not None:
            raise bench_env.SetupError(f"gpumon {argv[0]} exited: {process.communicate()[1]}")
        start_cpu, start = cpu_seconds(process.pid), time.monotonic()
        time.sleep(seconds)
        used = cpu_seconds(process.pid) - start_cpu
        return 100.0 * used / (time.monotonic() - start)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def bench_cpu(args: argparse.Namespace, work: Path) -> None:
    library = bench_env.build_fake_library(Path(args.fakenvml).resolve())
    jobs = bench_env.FakeJobs(
        Path(args.fakenvml).resolve(), sys.executable, args.gpus, args.per_gpu
    )
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{library}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    interval = f"{args.interval:g}"
    monitors = {
        "record": ["record", "--interval", interval, "--db", str(work / "record.db")],
        "export": ["export", "--interval", interval, "--listen", "127.0.0.1:0"],
        "export --record": [
            "export", "--interval", interval, "--listen", "127.0.0.1:0", "--record",
            "--db", str(work / "export.db"),
        ],
    }  # fmt: skip
    results: dict[str, list[float]] = {name: [] for name in monitors}
    try:
        jobs.start()
        env["FAKENVML_CONFIG"] = str(jobs.config)
        busy0, steal0, total0 = bench_env.system_cpu()
        for run in range(args.runs):
            for name, argv in monitors.items():
                cpu = run_monitor(argv, env, args.warm_up, args.seconds)
                results[name].append(cpu)
                print(f"run {run + 1} {name:16} {cpu:6.2f} % of a core", flush=True)
        busy1, steal1, total1 = bench_env.system_cpu()
    finally:
        jobs.stop()
    print(
        f"\n{args.gpus} GPUs x {args.per_gpu} real processes, --interval {interval}, "
        f"{args.runs} runs of {args.seconds:g} s each (after {args.warm_up:g} s), interleaved"
    )
    print(
        f"machine: {100 * (busy1 - busy0) / max(1, total1 - total0):.0f} % busy, "
        f"{100 * (steal1 - steal0) / max(1, total1 - total0):.1f} % steal over the runs"
    )
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, value in medians.items():
        print(f"median {name:16} {value:6.2f} % of a core")
    for database in ("record.db", "export.db"):
        connection = sqlite3.connect(work / database)
        (samples,) = connection.execute("SELECT sum(samples) FROM gpu_minutes").fetchone()
        connection.close()
        print(f"{database}: {samples} GPU samples recorded over the runs")
    ratio = medians["record"] / medians["export"]
    print(f"record / export: {ratio:.2f}x (target: at most 1.2x)")
    print(f"export --record / export: {medians['export --record'] / medians['export']:.2f}x")


def bench_query(args: argparse.Namespace, work: Path) -> None:
    path = work / "month.db"
    start = 1_700_006_400
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    began = time.perf_counter()
    synthetic.fill(connection, start, 30, jobs_per_gpu=64, expected=False)
    (rows,) = connection.execute("SELECT count(*) FROM usage_hours").fetchone()
    connection.close()
    print(
        f"30 days of 8 GPUs x 64 processes: {rows} usage hour rows, "
        f"{path.stat().st_size / 1e6:.1f} MB, written in {time.perf_counter() - began:.1f} s"
    )
    reader = open_history(str(path))
    assert reader is not None
    end = start + 30 * DAY
    with reader:
        for by in GROUPINGS:
            times = []
            for _ in range(args.repeat):
                began = time.perf_counter()
                found = reader.usage(start, end, by)
                times.append(time.perf_counter() - began)
            print(
                f"usage(30 days, by={by:9}) {len(found):4} rows: median "
                f"{statistics.median(times) * 1000:7.1f} ms, first {times[0] * 1000:7.1f} ms "
                "(target: at most 1000 ms)"
            )
        gpu = reader.gpus()[0].uuid
        for bucket in (600, 3600):
            times = []
            for _ in range(args.repeat):
                began = time.perf_counter()
                points = reader.gpu_series(gpu, "power_draw_w", end - 7 * DAY, end, bucket_s=bucket)
                times.append(time.perf_counter() - began)
            print(
                f"gpu_series(7 days, {bucket:4} s buckets) {len(points)} points: median "
                f"{statistics.median(times) * 1000:.1f} ms"
            )


def table_bytes(path: Path) -> dict[str, int]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    finally:
        connection.close()
    found: dict[str, int] = {}
    for name, size in rows:
        table = re.sub(r"^sqlite_autoindex_(\w+?)_\d+$", r"\1", name)
        table = {"sessions_by_process": "sessions", "sessions_idle": "sessions"}.get(table, table)
        found[table] = found.get(table, 0) + int(size)
    return found


def kept(table: str, per_day: float, days: int) -> str:
    total = per_day * days / 1e6
    return f"  {table:12} {per_day / 1e6:6.2f} MB a day, kept {days} days: {total:5.1f} MB"


def bench_size(args: argparse.Namespace, work: Path) -> None:
    path = work / "day.db"
    clock = [float(1_700_006_400)]
    source = DemoSource(8, process_count=512, clock=lambda: clock[0], churn=args.churn)
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=10.0, history_days=90)
    samples = int(args.day_hours * 360)
    spent = 0.0
    for _ in range(samples):
        clock[0] += 10.0
        sample = source.sample()
        began = time.perf_counter()
        writer.record(sample)
        spent += time.perf_counter() - began
    writer.close()
    scale = 24 / args.day_hours
    tables = table_bytes(path)
    connection = sqlite3.connect(path, isolation_level=None)
    (sessions,) = connection.execute("SELECT count(*) FROM sessions").fetchone()
    # One day's usage as day rows: the day's hour rows rolled up.
    connection.execute("BEGIN")
    retention.prune(connection, clock[0] + 2 * DAY, history_days=1)
    connection.execute("COMMIT")
    connection.execute("VACUUM")
    connection.close()
    usage_day = table_bytes(path).get("usage_days", 0)
    print(
        f"{samples} samples ({args.day_hours:g} h at 10 s) of 8 GPUs x 512 processes, churn "
        f"{args.churn:g}/sample: {spent / samples * 1000:.2f} ms a sample to take in and write"
    )
    # Rows that come with time: a day's worth, kept 90 days or a year.
    kept_days = {"gpu_minutes": 90, "usage_hours": 90, "gpu_hours": 365}
    year = usage_day * 365
    for name, days in kept_days.items():
        per_day = tables.pop(name, 0) * scale
        year += per_day * days
        print(kept(name, per_day, days))
    print(kept("usage_days", usage_day, 365))
    # Sessions come with processes: the 512, and those that churn brings in a year.
    per_session = tables.pop("sessions", 0) / max(1, sessions)
    yearly_sessions = 512 + args.churn * 8640 * 365
    year += per_session * yearly_sessions
    print(
        f"  sessions     {per_session:.0f} bytes each; {yearly_sessions:.0f} in a year: "
        f"{per_session * yearly_sessions / 1e6:5.1f} MB"
    )
    year += sum(tables.values())  # the GPUs, meta, the schema: once
    print(
        f"a year at the default retention (minute and usage hour rows 90 days, the rest 365): "
        f"{year / 1e6:.0f} MB (target: under 200 MB)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", choices=("cpu", "query", "size", "all"), default="all")
    parser.add_argument("--fakenvml", default=str(ROOT.parent / "shared" / "fakenvml"))
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-gpu", type=int, default=64)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warm-up", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--day-hours", type=float, default=6.0)
    parser.add_argument("--churn", type=float, default=0.01)
    args = parser.parse_args(argv)
    parts = set(args.parts) if args.parts != "all" else {"all"}
    if "all" in parts:
        parts = {"cpu", "query", "size"}
    with tempfile.TemporaryDirectory(prefix="bench-record-") as directory:
        work = Path(directory)
        try:
            if "query" in parts:
                bench_query(args, work)
            if "size" in parts:
                bench_size(args, work)
            if "cpu" in parts:
                bench_cpu(args, work)
        except bench_env.SetupError as error:
            print(f"bench_record: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
