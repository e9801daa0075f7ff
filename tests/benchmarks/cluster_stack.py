"""A simulated fleet and a real Prometheus scraping it, for ``bench_cluster.py``.

:class:`Stack` starts ``fleet_sim.py`` and ``prometheus`` (temporary storage) and waits until
every target was scraped and two more intervals passed (the targets that go down after two
scrapes are down), and with ``--rules`` until the node rows are recorded; :meth:`Stack.stop`
ends both, TERM then KILL.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


class Stack:
    """The simulator and Prometheus for one size; :meth:`stop` ends both (TERM, then KILL)."""

    def __init__(self, args: argparse.Namespace, nodes: int, work: Path) -> None:
        self.args, self.nodes, self.work = args, nodes, work
        self.interval = args.scrape_interval or (15.0 if nodes < 2000 else 60.0)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.url = ""

    def _start(self, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        with open(self.work / f"{name}.log", "wb") as output:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=output)
        self.processes.append(process)
        return process

    def start(self) -> None:
        config_dir = self.work / "config"
        sim = [sys.executable, str(HERE / "fleet_sim.py"), "--nodes", str(self.nodes)]
        sim += ["--interval", f"{self.interval:g}", "--config-dir", str(config_dir), "--warm"]
        sim += [f"--rule-file={path}" for path in self.args.rules]
        process = self._start(sim, "fleet_sim")
        config = config_dir / "prometheus.yml"
        self._wait("the simulator", lambda: "serving" in self._log("fleet_sim"), process, 600)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        prometheus = [
            self.args.prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=2h",
            "--log.level=warn",
        ]
        process = self._start(prometheus, "prometheus")
        self._wait("Prometheus", lambda: _get(self.url + "/-/ready") is not None, process, 120)
        log(f"{self.nodes} nodes: Prometheus at {self.url}, scraping every {self.interval:g} s")
        first = time.monotonic()
        self._wait("every target scraped", self._all_scraped, process, 30 + 3 * self.interval)
        # Two more scrapes: the targets that go down after two are down, rates have two points.
        settle = 2.2 * self.interval - (time.monotonic() - first)
        time.sleep(max(0.0, settle))
        if self.args.rules:  # and the node rows recorded once, so that every round reads them
            self._wait("the node rules recorded", self._rules_recorded, process, 3 * self.interval)

    def _rules_recorded(self) -> bool:
        query = urllib.parse.urlencode({"query": "gpumon:node_rules_loaded"})
        body = _get(f"{self.url}/api/v1/query?{query}")
        return body is not None and bool(json.loads(body)["data"]["result"])

    def _log(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")

    def _all_scraped(self) -> bool:
        body = _get(self.url + "/api/v1/targets?state=active")
        if body is None:
            return False
        targets = json.loads(body)["data"]["activeTargets"]
        return len(targets) == self.nodes and all(t["health"] != "unknown" for t in targets)

    def _wait(
        self, what: str, check: Callable[[], bool], process: subprocess.Popen[bytes], limit: float
    ) -> None:
        deadline = time.monotonic() + limit
        while not check():
            if process.poll() is not None:
                raise RuntimeError(f"{what}: the process exited ({process.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not within {limit:.0f} s")
            time.sleep(0.5)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            body: bytes = answer.read()
            return body
    except OSError:
        return None
