"""The cluster end to end, with a real Prometheus server: two `gpumon export --demo` processes
on loopback, scraped every second; `gpumon once --prometheus URL --json` shows both nodes with
the GPUs each exporter serves on its own /metrics, and a stopped exporter's node turns DOWN;
`gpumon report --prometheus URL` sums who held them, from the contrib recording rules' series
and from the per-process ones, and names who holds memory idle now.

Needs the `prometheus` server binary (Debian's package `prometheus`; `.ci/run` installs it
when it runs as root): skips with that reason where it is missing. Everything started here is
stopped by the fixtures' finalizers, whatever the test's outcome.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client", reason="gpumon export needs prometheus_client")
PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="needs the Prometheus server binary `prometheus` on PATH "
        "(Debian: apt-get install prometheus; .ci/run installs it as root)",
    ),
]

ROOT = Path(__file__).resolve().parents[3]
#: Long enough for a slow CI machine, short enough that a hang fails the test in seconds.
START_S = 20.0
#: Scrapes every second: a stopped exporter is `up 0` at the next scrape.
DOWN_WITHIN_S = 10.0


class Started:
    """The processes a test started; :meth:`stop_all` ends each one (TERM, then KILL)."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as output:  # the child keeps its own descriptor
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT
            )
        self.processes.append(process)
        return process

    @staticmethod
    def stop(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def stop_all(self) -> None:
        for process in self.processes:
            self.stop(process)
        left = [process.args for process in self.processes if process.poll() is None]
        assert not left, f"still running: {left}"


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = START_S) -> Any:
    """``check()``'s first truthy answer, polled every 0.2 s; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


def fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            body: bytes = answer.read()
            return body
    except OSError:
        return None


def start_exporter(
    started: Started, log: Path, interval: str = "1", *more: str
) -> tuple[subprocess.Popen[bytes], int]:
    """`gpumon export --demo` on a free loopback port (port 0: it says which it got)."""
    argv = [sys.executable, "-m", "gpumon", "export", "--demo", "--interval", interval, *more]
    process = started.start([*argv, "--listen", "127.0.0.1:0"], log)
    marker = "serving http://127.0.0.1:"

    def port() -> int | None:
        text = log.read_text()
        if marker in text:
            return int(text.split(marker, 1)[1].split("/", 1)[0])
        if process.poll() is not None:
            pytest.fail(f"gpumon export exited {process.returncode}: {text}")
        return None

    return process, wait_for("gpumon export to listen", port)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_prometheus(
    started: Started, tmp_path: Path, targets: list[str], rules: tuple[Path, ...] = ()
) -> str:
    """Prometheus scraping ``targets`` every second (job gpumon), evaluating ``rules`` every
    second; its URL. A port taken between choosing and binding it: another one, up to three
    times."""
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: {json.dumps([str(path) for path in rules])}\n"
        "scrape_configs:\n  - job_name: gpumon\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    assert PROMETHEUS is not None
    for attempt in range(3):
        port = free_port()
        log = tmp_path / f"prometheus-{attempt}.log"
        process = started.start(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / f'tsdb-{attempt}'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            log,
        )
        url = f"http://127.0.0.1:{port}"

        def ready(process: subprocess.Popen[bytes] = process, url: str = url) -> str | None:
            if process.poll() is not None:
                return "exited"
            return "ready" if fetch(f"{url}/-/ready") is not None else None

        if wait_for("Prometheus to be ready", ready) == "ready":
            return url
    pytest.fail(f"Prometheus did not start: {(tmp_path / 'prometheus-2.log').read_text()}")


def targets_up(url: str, count: int) -> bool:
    body = fetch(f"{url}/api/v1/targets")
    if body is None:
        return False
    active = json.loads(body)["data"]["activeTargets"]
    return sum(target["health"] == "up" for target in active) == count


def once_json(url: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "once", "--prometheus", url, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def exporter_gpus(port: int) -> list[dict[str, Any]]:
    """The GPUs an exporter serves on its own /metrics: index, uuid, name, memory total."""
    from prometheus_client.parser import text_string_to_metric_families

    body = fetch(f"http://127.0.0.1:{port}/metrics")
    assert body is not None
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    totals = {
        sample.labels["uuid"]: sample.value
        for sample in families["gpumon_gpu_memory_total_bytes"].samples
    }
    return sorted(
        (
            {
                "index": int(sample.labels["gpu"]),
                "uuid": sample.labels["uuid"],
                "name": sample.labels["name"],
                "memory_total_bytes": int(totals[sample.labels["uuid"]]),
            }
            for sample in families["gpumon_gpu_info"].samples
        ),
        key=lambda gpu: gpu["index"],
    )


def by_instance(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["instance"]: node for node in document["nodes"]}


def test_once_shows_both_exporters_and_a_stopped_one_turns_down(
    started: Started, tmp_path: Path
) -> None:
    first, first_port = start_exporter(started, tmp_path / "export-1.log")
    _, second_port = start_exporter(started, tmp_path / "export-2.log")
    instances = [f"127.0.0.1:{first_port}", f"127.0.0.1:{second_port}"]
    url = start_prometheus(started, tmp_path, instances)
    wait_for("both targets up", lambda: targets_up(url, 2))

    def both_read() -> dict[str, Any] | None:
        document = once_json(url)
        nodes = by_instance(document)
        if set(nodes) == set(instances) and all(
            node["up"] and len(node["gpus"]) == 4 for node in nodes.values()
        ):
            return document
        return None

    document = wait_for("once --json to show both nodes up", both_read)
    assert document["error"] is None and document["simulated"] is True
    assert document["prometheus_url"] == url
    for instance, port in zip(instances, (first_port, second_port), strict=True):
        node = by_instance(document)[instance]
        assert (node["exporter"], node["job"], node["state"]) == ("gpumon", "gpumon", "up")
        # Both demos are "demo-gpu-server": two exporters are never merged into one node.
        assert node["name"] == f"demo-gpu-server ({instance})"
        assert node["simulated"] is True and node["last_seen"] is not None
        shown = [
            {key: gpu[key] for key in ("index", "uuid", "name", "memory_total_bytes")}
            for gpu in node["gpus"]
        ]
        assert shown == exporter_gpus(port)
        assert all(gpu["processes"] is not None for gpu in node["gpus"])

    Started.stop(first)

    def first_down() -> dict[str, Any] | None:
        document = once_json(url)
        # (Not only "not up": a node whose sampling lags under load reads STALE first.)
        return document if by_instance(document)[instances[0]]["state"] == "down" else None

    document = wait_for("the stopped exporter's node to turn DOWN", first_down, DOWN_WITHIN_S)
    down, alive = (by_instance(document)[instance] for instance in instances)
    assert (down["state"], down["up"]) == ("down", False)
    # Not asserted set: the source finds a last successful scrape on a 15 s grid, which an
    # exporter up for a few seconds may fall between.
    assert down["last_seen"] is None or down["last_seen"] < document["timestamp"]
    assert not any(gpu["free"] for gpu in down["gpus"])  # never idle GPUs
    assert alive["state"] == "up" and len(alive["gpus"]) == 4


# --- gpumon report --prometheus --------------------------------------------------------------

RECORDING_RULES = ROOT / "contrib" / "prometheus" / "gpumon-recording.yml"
REPORT_SCHEMA = ROOT / "gpumon" / "schema" / "report.schema.json"


def instant(url: str, query: str) -> list[dict[str, Any]]:
    body = fetch(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
    result: list[dict[str, Any]] = json.loads(body)["data"]["result"] if body else []
    return result


def report(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "report", "--prometheus", url, *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done


def report_json(url: str, *args: str) -> dict[str, Any]:
    import jsonschema

    document: dict[str, Any] = json.loads(report(url, *args, "--json").stdout)
    jsonschema.Draft202012Validator(json.loads(REPORT_SCHEMA.read_text())).validate(document)
    return document


def held_by_node(document: dict[str, Any]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in document["rows"]:
        totals[row["node"]] = totals.get(row["node"], 0.0) + row["gpu_hours_held"]
    return totals


def test_report_sums_who_held_the_gpus_of_both_nodes(started: Started, tmp_path: Path) -> None:
    """The demo's GPU 3 goes quiet after 61 samples (15 s at 0.25 s) and its process is IDLE
    3 s later (--idle-after 0.05): a current idle holder on each node."""
    ports = [
        start_exporter(started, tmp_path / f"export-{n}.log", "0.25", "--idle-after", "0.05")[1]
        for n in (1, 2)
    ]
    instances = [f"127.0.0.1:{port}" for port in ports]
    url = start_prometheus(started, tmp_path, instances, rules=(RECORDING_RULES,))
    wait_for("both targets up", lambda: targets_up(url, 2))
    wait_for("the recording rules", lambda: instant(url, "gpumon:usage_rules_loaded"))
    since = time.time()
    wait_for("an idle process", lambda: instant(url, "gpumon_process_idle_seconds > 0"), 40)
    time.sleep(max(0.0, since + 16 - time.time()))  # a whole step (15 s) of recorded series
    names = {f"demo-gpu-server ({instance})" for instance in instances}
    start = datetime.fromtimestamp(since, timezone.utc).isoformat()

    by_user = report_json(url, "--from", start)
    assert by_user["recording_rules"] is True and by_user["simulated"] is True
    period_h = (by_user["to_s"] - by_user["from_s"]) / 3600
    # What the exporters' data covers, read from Prometheus: within the period asked for.
    assert by_user["from_s"] <= by_user["recorded_from_s"] <= by_user["recorded_to_s"]
    assert by_user["recorded_to_s"] <= by_user["to_s"]
    assert {row["node"] for row in by_user["rows"]} == names
    for row in by_user["rows"]:
        assert 0 < row["gpu_hours_held"] <= 4 * period_h + 1e-9  # 4 GPUs a node at most
        assert row["gpu_hours_used"] <= row["gpu_hours_held"] + 1e-9
        assert row["idle_held_hours"] <= row["gpu_hours_held"] + 1e-9
        assert row["processes"] >= 1 and row["peak_memory_bytes"] > 0
    holders = by_user["idle_holders"]
    assert {holder["node"] for holder in holders} == names
    for holder in holders:
        assert holder["idle_s"] > 0 and holder["gpu"] == 3 and holder["gpu_memory_bytes"] > 0
    # Every demo process has an SM utilisation series: none whose idleness is unknown.
    assert by_user["idle_unknown_processes"] == 0

    by_gpu = report_json(url, "--from", start, "--by", "gpu")
    assert by_gpu["recording_rules"] is False  # the rules record per user only
    assert {row["node"] for row in by_gpu["rows"]} == names
    assert all(held > 0 for held in held_by_node(by_gpu).values())

    # Two minutes ago the rules were not running yet: the per-process series, by user.
    raw = report_json(url, "--since", "2m")
    assert raw["recording_rules"] is False
    assert {row["node"] for row in raw["rows"]} == names
    assert {row["user"] for row in by_user["rows"]} <= {row["user"] for row in raw["rows"]}
    # A GPU two users share counts once per GPU, once per user: never more by GPU (both
    # read the same way: the recorded samples are exact, the raw series sampled per step).
    raw_by_gpu = report_json(url, "--since", "2m", "--by", "gpu")
    for node, held in held_by_node(raw_by_gpu).items():
        assert 0 < held <= held_by_node(raw)[node] + 1e-9

    text = report(url, "--since", "30s").stdout
    assert text.startswith("GPU usage by user, ") and "DEMO (simulated data)" in text
    assert f"from Prometheus at {url} (sampled every " in text
    assert all(name in text for name in names)
    assert "Holding GPU memory idle now:" in text
