#!/usr/bin/env python3
"""Cost of ``gpumon report --cluster --since 7d`` against a real Prometheus (a benchmark).

Writes N nodes' history as OpenMetrics text (the series the usage report reads: host info,
sample time, per-process memory, SM utilisation and idle seconds, and the usage recording
rules' series as Prometheus would have recorded them), turns it into TSDB blocks with
``promtool tsdb create-blocks-from openmetrics``, starts ``prometheus`` on them and times
:func:`~gpumon.sources.prometheus.usage.cluster_usage` (this tree's, and with ``--before
COMMIT`` that commit's usage module beside it): wall time, bytes answered and Prometheus'
own samples per query (``stats=all``). Not collected by pytest; figures: docs/cluster.md.

    python tests/benchmarks/bench_report_cluster.py --nodes 1000 --before 8ae4e6a
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpumon.data.periods import Period  # noqa: E402
from gpumon.sources.prometheus.client import PrometheusError  # noqa: E402
from gpumon.sources.prometheus.rollup import HOURLY, HOURLY_MARKER  # noqa: E402
from gpumon.sources.prometheus.source import PrometheusSource  # noqa: E402

GIB = 1024**3
RECORDED_VALUES = {  # per user and node: one GPU held, half used, known, not idle
    "instance_user:gpumon_gpus_held:count": "1",
    "instance_user:gpumon_gpus_used:sum": "0.5",
    "instance_user:gpumon_gpus_used_known:count": "1",
    "instance_user:gpumon_gpus_held_idle:count": "0",
    "instance_user:gpumon_process_gpu_memory_bytes:max": str(20 * GIB),
}


def write_history(path: Path, nodes: int, processes: int, span: range, args: Any) -> int:
    """The OpenMetrics text of ``nodes`` nodes' samples at the times in ``span`` (of
    ``args.days`` days ending at ``span``'s own end); its sample count."""
    first_s, end_s = args.end_s - args.days * 86400, args.end_s

    def grid(step_s: int) -> range:
        start = max(span.start, first_s)
        start = first_s + -(-(start - first_s) // step_s) * step_s
        return range(start, min(span.stop, end_s + 1), step_s)

    scrapes, evaluations = grid(args.scrape_s), grid(args.eval_s)
    # The hourly group: an evaluation 5.5 minutes past each hour, the first a whole hour in.
    hours = range(
        first_s + 3930 + -(-(max(span.start, first_s + 3930) - first_s - 3930) // 3600) * 3600,
        min(span.stop, end_s + 1),
        3600,
    )
    per_hour = 3600 // args.eval_s
    count = 0

    def family(name: str, series: Sequence[tuple[str, str | None]], times: range) -> None:
        nonlocal count
        out.write(f"# TYPE {name} gauge\n")
        for labels, value in series:  # value None: the sample's own time
            out.write("".join(f"{name}{{{labels}}} {value or t} {t}\n" for t in times))
            count += len(times)

    def node(n: int) -> str:
        return f'instance="node{n:05d}:9402",job="gpumon"'

    hosts = [f'{node(n)},hostname="node{n:05d}"' for n in range(nodes)]
    pairs = [(n, p, f'user="user{(n + p) % 97}"') for n in range(nodes) for p in range(processes)]
    procs = [f'{node(n)},gpu="{p}",uuid="GPU-{n}-{p}",pid="{1000 + p}",{u}' for n, p, u in pairs]
    pids = [f'{node(n)},pid="{1000 + p}",{u}' for n, p, u in pairs]
    users = sorted({f"{node(n)},{u}" for n, _, u in pairs})
    per_node = [(node(n), "0") for n in range(nodes)]
    with path.open("w", encoding="ascii") as out:
        family("gpumon_host_info", [(labels, "1") for labels in hosts], scrapes)
        family("gpumon_sample_timestamp_seconds", [(node(n), None) for n in range(nodes)], scrapes)
        family("gpumon_simulated", per_node, scrapes)
        memory = str(20 * GIB)
        family("gpumon_process_gpu_memory_bytes", [(ls, memory) for ls in procs], scrapes)
        family("gpumon_process_sm_utilization_ratio", [(ls, "0.5") for ls in procs], scrapes)
        family("gpumon_process_idle_seconds", [(labels, "0") for labels in procs], scrapes)
        recorded: dict[str, Sequence[tuple[str, str | None]]] = {
            **{name: [(ls, value) for ls in users] for name, value in RECORDED_VALUES.items()},
            "instance_user:gpumon_processes_started:count": [(ls, "0") for ls in users],
            "instance_user_pid:gpumon_process_gpu_memory_bytes:group": [(ls, "1") for ls in pids],
            "instance_hostname:gpumon_simulated:max": [(labels, "0") for labels in hosts],
            "gpumon:usage_sample_time:max": [("", None)],
            "gpumon:usage_rules_loaded": [("", "1")],
            "gpumon:usage_rules_interval_seconds": [("", str(args.eval_s))],
        }
        for name, series in recorded.items():
            family(name, series, evaluations)
        for name, series in recorded.items():
            if name in HOURLY:  # a sum of an hour's samples, or their most
                rolled = HOURLY[name].endswith("_sum_1h")
                scale = [
                    (labels, str(float(v or 0) * per_hour) if rolled else v) for labels, v in series
                ]
                family(HOURLY[name], scale, hours)
        family(HOURLY_MARKER, [("", None)], hours)
        out.write("# EOF\n")
    return count


def load_usage(commit: str | None) -> Any:
    """This tree's usage module, or ``commit``'s beside it (same package, other file)."""
    if commit is None:
        from gpumon.sources.prometheus import usage

        return usage
    text = subprocess.run(
        ["git", "show", f"{commit}:gpumon/sources/prometheus/usage.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "usage_before.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("gpumon.sources.prometheus.usage_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Measured:
    """A source that keeps each request (path and form) to replay it with ``stats=all``."""

    def __init__(self, source: PrometheusSource) -> None:
        self.source, self.url = source, source.url
        self.asked: list[tuple[str, dict[str, str]]] = []

    def query(self, expression: str, at_s: float) -> Any:
        self.asked.append(("/api/v1/query", {"query": expression, "time": f"{at_s:.3f}"}))
        return self.source.query(expression, at_s)

    def query_range(self, expression: str, start_s: float, end_s: float, step_s: float) -> Any:
        form = {"query": expression, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}"}
        self.asked.append(("/api/v1/query_range", {**form, "step": f"{step_s:g}"}))
        return self.source.query_range(expression, start_s, end_s, step_s)


def replay(url: str, path: str, form: dict[str, str]) -> str:
    """Bytes, Prometheus' time and samples of one request (no timeout of gpumon's)."""
    body = urllib.parse.urlencode({**form, "stats": "all"}).encode()
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{url}{path}", body, timeout=600) as answer:
            text = answer.read()
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code} {json.loads(error.read()).get('error', '')[:80]}"
    wall = time.perf_counter() - started
    stats = json.loads(text)["data"].get("stats", {})
    samples = stats.get("samples", {})
    return (
        f"{len(text) / 1e6:.2f} MB, {wall:.2f} s, samples total "
        f"{samples.get('totalQueryableSamples', '?')} peak {samples.get('peakSamples', '?')}"
    )


def measure(label: str, usage: Any, url: str, period: Period, timeout_s: float) -> None:
    source = Measured(PrometheusSource(url, timeout_s=timeout_s))
    started = time.perf_counter()
    try:
        report = usage.cluster_usage(source, period, "user", period.end_s)
        first = report.rows[0] if report.rows else None
        outcome = f"{len(report.rows)} rows, recording rules {report.recording_rules}" + (
            f"; first: {first.key}@{first.node} held {first.gpu_hours_held:.1f} GPU-h, "
            f"{first.processes} processes"
            if first
            else ""
        )
    except PrometheusError as error:
        outcome = f"failed: {error}"
    print(f"{label}: {time.perf_counter() - started:.2f} s wall ({outcome})")
    for path, form in source.asked:
        print(f"  {path.rsplit('/', 1)[1]:11} {form['query'][:60]!r}: {replay(url, path, form)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=1, help="per node (one user each)")
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--scrape-s", type=int, default=240, help="raw samples' interval")
    parser.add_argument("--eval-s", type=int, default=60, help="the rules' interval")
    parser.add_argument("--before", metavar="COMMIT", help="also time this commit's usage module")
    parser.add_argument("--timeout", type=float, default=5.0, help="gpumon's per-request limit")
    parser.add_argument("--keep", type=Path, help="a data directory to reuse (made if absent)")
    parser.add_argument("--port", type=int, default=19099)
    args = parser.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (Debian package prometheus)")
    work = args.keep or Path(tempfile.mkdtemp(prefix="gpumon-bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    data, end_s = work / "data", int(time.time()) // 3600 * 3600
    if not data.exists():
        # One file per 2-hour block: promtool reads its whole input once per block.
        started, count, converting = time.perf_counter(), 0, None
        args.end_s = end_s
        for block_s in range((end_s - args.days * 86400) // 7200 * 7200, end_s + 1, 7200):
            text = work / f"history-{block_s}.om"
            count += write_history(
                text, args.nodes, args.processes, range(block_s, block_s + 7200), args
            )
            if converting is not None and converting.wait() != 0:
                sys.exit("promtool failed")
            converting = subprocess.Popen(
                f"promtool tsdb create-blocks-from openmetrics -q {text} {data} && rm {text}",
                shell=True,
            )
        if converting is not None and converting.wait() != 0:
            sys.exit("promtool failed")
        print(f"{count:,} samples written in {time.perf_counter() - started:.0f} s")
        (work / "end_s").write_text(str(end_s))
    end_s = int((work / "end_s").read_text())
    config = work / "prometheus.yml"
    config.write_text("global:\n  evaluation_interval: 1m\n")
    url = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{args.port}", "--storage.tsdb.retention.time=30d"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        period = Period(float(end_s - args.days * 86400), float(end_s))
        print(f"{args.nodes} nodes x {args.processes} processes, {args.days} days, raw every "
              f"{args.scrape_s} s, rules every {args.eval_s} s")  # fmt: skip
        if args.before:
            measure(f"before ({args.before})", load_usage(args.before), url, period, args.timeout)
        measure("after (this tree)", load_usage(None), url, period, args.timeout)
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
