#!/usr/bin/env python3
"""Benchmark the cluster view against a real Prometheus scraping a simulated fleet.

Per ``--nodes`` size: ``fleet_sim.py`` and a real ``prometheus`` (stopped when the size is
done, also on an error), then each ``--tree NAME=PATH`` (its ``python -m gpumon``, as
``bench_dashboard.py --gpumon-root``), interleaved over ``--rounds``: a refresh
(``PrometheusSource.sample()``, median of ``--refreshes``, and of those that read every row:
the rules evaluated since), its bytes (a counting proxy), Prometheus' own handler time (its
requests' added up: a refresh's run side by side), ``detail(name)`` where the tree has it,
``gpumon once --prometheus`` wall and RSS, and the dashboard's CPU and RSS at
``--interval 5`` in a pty.
``--fake-nodes``: the same over a fake API repeating the answers of ``--fake-from`` nodes.
Method and figures: docs/cluster.md, "What a refresh costs".

    git worktree add --detach /tmp/wt-34-before bf171ff
    python tests/benchmarks/bench_cluster.py --tree per-series=/tmp/wt-34-before \\
        --tree aggregate=. --nodes 100,1000 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_dashboard as pty_bench
import psutil
from cluster_stack import Stack, log
from prometheus_proxy import FakeApi, Proxy

MIB = 1024 * 1024
MAX_ANSWER_BYTES = 64 * MIB  # gpumon's cap on one answer (sources/prometheus/client.py)

# Runs inside the measured tree: refresh timings, Prometheus' own time, detail timings.
PROBE = r"""
import json, resource, sys, time, urllib.request
import gpumon
from gpumon.data.cluster import NodeState, rows_of
from gpumon.sources.prometheus.source import PrometheusSource
url, proxy, metrics_url, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def tag(name):
    urllib.request.urlopen(proxy + "/_tag?name=" + name, timeout=10).read()
def server_s():
    if metrics_url == "-":
        return None
    text = urllib.request.urlopen(metrics_url, timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("prometheus_http_request_duration_seconds_sum")
               and 'handler="/api/v1/query' in line)
out = {"gpumon": gpumon.__file__}
proxied = PrometheusSource(proxy, timeout_s=120)
tag("other")
proxied.sample()  # a source learns from its first answer (whether recording rules are there)
tag("refresh")
first = proxied.sample()
tag("other")
rows = rows_of(first, 1024)
out.update(rows=len(rows), up=sum(r.state is NodeState.UP for r in rows), error=first.error,
           path=getattr(first, "path", None))
source = PrometheusSource(url, timeout_s=120)
source.sample()
before, times, cpu, read = server_s(), [], [], []
for _ in range(runs):
    recorded = getattr(source, "_recorded", None)  # the rules' series read last, if any
    t, c = time.perf_counter(), time.process_time()
    sample = source.sample()
    times.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
    now = getattr(source, "_recorded", None)
    read.append(now is None or recorded is None or now[2] is not recorded[2])
    out["error"] = out["error"] or sample.error
after = server_s()
out.update(refresh_s=times, refresh_cpu_s=cpu, rows_read=read,
           server_s=None if before is None else (after - before) / runs)
if hasattr(source, "detail"):
    # The first UP nodes of the fleet (a fake API's copies keep these names too); opened
    # through the proxy first, so that it counts their bytes and records their answers.
    up = [r.name for r in rows if r.state is NodeState.UP]
    names = [n for n in up if "r" not in n.removeprefix("gpu-")][:5]
    tag("detail")
    for name in names:
        proxied.detail(name)
    tag("other")
    out["detail_s"], out["details"] = [], len(names)
    for name in names:
        t = time.perf_counter()
        source.detail(name)
        out["detail_s"].append(time.perf_counter() - t)
out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


@dataclass
class Tree:
    name: str
    root: Path
    env: dict[str, str]


@dataclass
class Result:
    """Every measurement of one tree at one size, over the rounds."""

    refresh_ms: list[float] = field(default_factory=list)
    refresh_cpu_ms: list[float] = field(default_factory=list)
    read_ms: list[float] = field(default_factory=list)  # refreshes that read every row
    server_ms: list[float] = field(default_factory=list)
    detail_ms: list[float] = field(default_factory=list)
    wire_kib: list[float] = field(default_factory=list)
    raw_kib: list[float] = field(default_factory=list)
    detail_kib: list[float] = field(default_factory=list)
    probe_rss_mib: list[float] = field(default_factory=list)
    once_s: list[float] = field(default_factory=list)
    once_rss_mib: list[float] = field(default_factory=list)
    dash_cpu_pct: list[float] = field(default_factory=list)
    dash_rss_mib: list[float] = field(default_factory=list)
    dash_first_s: list[float] = field(default_factory=list)
    query_ms: dict[str, float] = field(default_factory=dict)  # one refresh's, asked alone
    notes: list[str] = field(default_factory=list)


def probe(tree: Tree, url: str, proxy: Proxy, metrics_url: str, runs: int) -> dict[str, Any]:
    """One probe process in ``tree``: its JSON (see PROBE), or ``{"failed": text}``."""
    proxy.tallies.clear()
    argv = [sys.executable, "-c", PROBE, url, proxy.url, metrics_url, str(runs)]
    done = subprocess.run(
        argv, cwd=tree.root, env=tree.env, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        return {"failed": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["tallies"] = {tag: vars(tally) for tag, tally in proxy.tallies.items()}
    return out


def run_once(tree: Tree, url: str) -> tuple[float, float, int, str]:
    """``gpumon once --prometheus URL``: (wall s, peak RSS MiB, exit status, its last line
    on stderr)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpumon", "once", "--prometheus", url],
            cwd=tree.root,
            env=tree.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        said = errors.read().decode(errors="replace").strip().splitlines()
    wall = time.perf_counter() - started
    return wall, usage.ru_maxrss / 1024, process.returncode, (said or [""])[-1][:200]


def run_dashboard(tree: Tree, url: str, seconds: float, warmup: float) -> dict[str, Any]:
    """The cluster dashboard in a pty: first frame, then CPU and peak RSS over the window."""
    env = {**pty_bench.child_environment(), **{"PYTHONPATH": tree.env["PYTHONPATH"]}}
    command = [sys.executable, "-m", "gpumon", "--prometheus", url, "--interval", "5"]
    started = time.perf_counter()
    proc, master = pty_bench.spawn_in_pty(
        command, columns=pty_bench.COLUMNS, rows=pty_bench.ROWS, env=env, cwd=str(tree.root)
    )
    rule = pty_bench.FrameRule(markers=("gpu-0",))
    reader = pty_bench.PtyReader(master, answer_queries=True, rule=rule)
    reader.start()
    out: dict[str, Any] = {}
    try:
        process = psutil.Process(proc.pid)
        rss = 0
        if not reader.first_frame.wait(120):
            out["error"] = (
                "no node name on the screen within 120 s: "
                + " | ".join(
                    line.strip() for line in reader.screen_text().splitlines() if line.strip()
                )[-200:]
            )
            return out
        out["first_frame_s"] = reader.first_frame_at - started  # type: ignore[operator]
        time.sleep(warmup)
        cpu0, t0 = pty_bench.cpu_seconds(process)[0], time.perf_counter()
        while time.perf_counter() < t0 + seconds and proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                rss = max(rss, pty_bench.tree_rss(process))
            time.sleep(0.5)
        if proc.poll() is not None:
            out["error"] = f"exited with status {proc.returncode}"
            return out
        cpu1, t1 = pty_bench.cpu_seconds(process)[0], time.perf_counter()
        hwm = pty_bench.vm_hwm_bytes(proc.pid) or 0
        out.update(cpu_pct=(cpu1 - cpu0) / (t1 - t0) * 100, rss_mib=max(rss, hwm) / MIB)
        return out
    finally:
        pty_bench.stop_child(proc, master)
        reader.stop()
        reader.join(2.0)
        os.close(master)


def query_times(url: str, keys: Sequence[str]) -> dict[str, float]:
    """Each request of a refresh asked again on its own: Prometheus' time (ms) per query."""
    times = {}
    for key in keys:
        path, _, form = key.partition("?")
        started = time.perf_counter()
        with contextlib.suppress(OSError):
            request = urllib.request.Request(url + path, data=form.encode(), method="POST")
            request.add_header("Accept-Encoding", "gzip")
            with urllib.request.urlopen(request, timeout=300) as answer:
                answer.read()
        query = urllib.parse.parse_qs(form).get("query", [path])[0]
        times[query] = (time.perf_counter() - started) * 1000
    return times


def measure(
    tree: Tree,
    url: str,
    proxy: Proxy,
    metrics_url: str,
    args: argparse.Namespace,
    result: Result,
    with_once: bool = True,
) -> None:
    log(f"  {tree.name}: refresh x{args.refreshes} ...")
    out = probe(tree, url, proxy, metrics_url, args.refreshes)
    if "failed" in out:
        result.notes.append(f"probe failed: {out['failed']}")
        log(f"  {tree.name}: probe failed: {out['failed']}")
    else:
        if out.get("error"):
            result.notes.append(f"refresh error: {out['error']}")
        result.refresh_ms += [s * 1000 for s in out["refresh_s"]]
        result.refresh_cpu_ms += [s * 1000 for s in out["refresh_cpu_s"]]
        pairs = zip(out["refresh_s"], out["rows_read"], strict=True)
        result.read_ms += [s * 1000 for s, read in pairs if read]
        if out.get("server_s") is not None:
            result.server_ms.append(out["server_s"] * 1000)
        result.detail_ms += [s * 1000 for s in out.get("detail_s", [])]
        tallies = out["tallies"]
        if args.query_times and metrics_url != "-" and not result.query_ms:
            result.query_ms = query_times(url, tallies.get("refresh", {}).get("keys", []))
        if "refresh" in tallies:
            result.wire_kib.append(tallies["refresh"]["wire_bytes"] / 1024)
            result.raw_kib.append(tallies["refresh"]["raw_bytes"] / 1024)
        if "detail" in tallies and out.get("details"):
            result.detail_kib.append(tallies["detail"]["raw_bytes"] / 1024 / out["details"])
        result.probe_rss_mib.append(out["rss_mib"])
        note = f"{out['rows']} rows, {out['up']} up, path {out.get('path')}"
        if note not in result.notes:
            result.notes.append(note)
    if with_once:
        wall, rss, status, said = run_once(tree, url)
        result.once_s.append(wall)
        result.once_rss_mib.append(rss)
        if status != 0 or said:
            result.notes.append(f"once exited {status}: {said}")
    if args.dashboard_seconds > 0:
        log(f"  {tree.name}: dashboard {args.dashboard_seconds:g} s ...")
        dash = run_dashboard(tree, url, args.dashboard_seconds, args.dashboard_warmup)
        if "error" in dash:
            result.notes.append(f"dashboard: {dash['error']}")
        else:
            result.dash_cpu_pct.append(dash["cpu_pct"])
            result.dash_rss_mib.append(dash["rss_mib"])
            result.dash_first_s.append(dash["first_frame_s"])


def cell(values: Sequence[float], digits: int = 0) -> str:
    """``median [min-max]``, or ``-``."""
    if not values:
        return "-"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:,.{digits}f}"
    return f"{median:,.{digits}f} [{min(values):,.{digits}f}-{max(values):,.{digits}f}]"


COLUMNS = (
    ("refresh ms", "refresh_ms", 0),
    ("refresh CPU ms", "refresh_cpu_ms", 0),
    ("refresh ms, every row read", "read_ms", 0),
    ("KiB/refresh wire (raw)", None, 0),
    ("Prometheus ms/refresh", "server_ms", 0),
    ("detail ms", "detail_ms", 0),
    ("detail KiB", "detail_kib", 0),
    ("once s", "once_s", 2),
    ("once RSS MiB", "once_rss_mib", 0),
    ("dashboard CPU %", "dash_cpu_pct", 1),
    ("dashboard RSS MiB", "dash_rss_mib", 0),
    ("first frame s", "dash_first_s", 1),
)


def print_table(results: dict[tuple[str, str], Result]) -> None:
    print("| nodes | tree | " + " | ".join(name for name, _, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    for (size, tree), result in results.items():
        cells = []
        for _, key, digits in COLUMNS:
            if key is None:
                wire, raw = cell(result.wire_kib), cell(result.raw_kib)
                cells.append("-" if wire == "-" else f"{wire} ({raw})")
            else:
                cells.append(cell(getattr(result, key), digits))
        if any(note.startswith(("refresh error", "probe failed")) for note in result.notes):
            cells[0] = f"fails after {cells[0]}"  # the time until the error, see the notes
        print(f"| {size} | {tree} | " + " | ".join(cells) + " |")
    print()
    for (size, tree), result in results.items():
        if result.notes:
            print(f"{size} {tree}: " + "; ".join(dict.fromkeys(result.notes)))
        for query, ms in sorted(result.query_ms.items(), key=lambda item: -item[1])[:5]:
            print(f"  {ms:9,.0f} ms  {' '.join(query.split())[:150]}")


def trees_of(specs: Sequence[str]) -> list[Tree]:
    trees = []
    for spec in specs:
        name, _, path = spec.partition("=")
        root = Path(path or ".").expanduser().resolve()
        if not (root / "gpumon" / "__init__.py").is_file():
            raise SystemExit(f"--tree {spec}: {root} holds no gpumon/")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(root) + (
            os.pathsep + env["PYTHONPATH"] if "PYTHONPATH" in env else ""
        )
        trees.append(Tree(name, root, env))
    return trees


@contextlib.contextmanager
def stopped_on_signal() -> Iterator[None]:
    """SIGTERM as Ctrl+C, so that every ``finally`` stops what it started."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH (repeatable)")
    parser.add_argument("--nodes", default="100,1000", help="real sizes, comma-separated")
    parser.add_argument("--fake-nodes", type=int, default=10000, help="0: no fake API")
    parser.add_argument(
        "--fake-from", type=int, default=1000, help="the real size whose answers it repeats"
    )
    parser.add_argument(
        "--max-nodes",
        action="append",
        default=[],
        help="NAME=N: measure tree NAME only up to N nodes (one that cannot cope)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--refreshes", type=int, default=7, help="timed refreshes per round")
    parser.add_argument("--dashboard-seconds", type=float, default=60.0, help="0: none")
    parser.add_argument("--dashboard-warmup", type=float, default=5.0)
    parser.add_argument("--scrape-interval", type=float, default=None)
    parser.add_argument("--rules", type=Path, action="append", default=[])
    parser.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument(
        "--query-times", action="store_true", help="time each query of a refresh alone, once"
    )
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    args = parser.parse_args(argv)
    trees = trees_of(args.tree or ["this=."])
    limits = {name: int(n) for name, _, n in (spec.partition("=") for spec in args.max_nodes)}

    def trees_at(size: int) -> list[Tree]:
        return [tree for tree in trees if size <= limits.get(tree.name, size)]

    sizes = [int(n) for n in args.nodes.split(",") if n]
    results: dict[tuple[str, str], Result] = {}
    recorded: dict[str, bytes] = {}
    base = args.fake_from if args.fake_from in sizes else max(sizes)
    log(f"load average at start: {os.getloadavg()}")
    with stopped_on_signal(), tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        for size in sizes:
            stack = Stack(args, size, Path(tmp) / str(size))
            stack.work.mkdir()
            proxy = Proxy("", MAX_ANSWER_BYTES)
            try:
                stack.start()
                proxy.upstream = stack.url
                proxy.start()
                for number in range(args.rounds):
                    log(f"{size} nodes, round {number + 1}/{args.rounds}")
                    for tree in trees_at(size):
                        result = results.setdefault((f"{size:,}", tree.name), Result())
                        metrics = stack.url + "/metrics"
                        measure(tree, stack.url, proxy, metrics, args, result)
                if size == base:
                    recorded = dict(proxy.recorded)
            finally:
                proxy.stop()
                stack.stop()
                log(f"{size} nodes: Prometheus and the simulator stopped")
        if args.fake_nodes and recorded:
            copies = max(1, round(args.fake_nodes / base))
            fake = FakeApi(recorded, copies, MAX_ANSWER_BYTES).start()
            proxy = Proxy(fake.url, MAX_ANSWER_BYTES).start()
            try:
                label = f"{base * copies:,} (fake API)"
                for number in range(args.rounds):
                    log(f"{label}, round {number + 1}/{args.rounds}")
                    for tree in trees_at(base * copies):
                        result = results.setdefault((label, tree.name), Result())
                        measure(tree, fake.url, proxy, "-", args, result, with_once=False)
            finally:
                proxy.stop()
                fake.stop()
    log(f"load average at end: {os.getloadavg()}")
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps({f"{k[0]} {k[1]}": vars(v) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
