#!/usr/bin/env python3
"""Can hostile local clients take ``gpumon export`` offline? (a benchmark)

A script, not a pytest test (the name does not start with ``test_``); standard library and
gpumon only. It starts ``python -m gpumon export --demo`` (or, with ``--nvml-lib``, on that
NVML library) as a subprocess on a free loopback port, then, for each count of hostile
connections (``--hostile``, by default 0, 16 and 200), starts a separate attacker process
that holds that many connections open, and meanwhile makes ``--scrapes`` (20) scrapes one
after the other, each a new connection with a ``--timeout`` (3 s) for the whole answer,
asking as Prometheus does (OpenMetrics, gzip). For each count it prints: scrapes that
succeeded (200 with GPU series) of those tried, their p50 and p95 latency, the exporter's
peak RSS, thread count and open descriptors while attacked (``/proc/PID``), and the age of
the sample the last scrape got (sampling goes on).

The attacker (``attack``, also run by
tests/commands/export/test_export_hostile_connections.py) is one thread with ``selectors``; a
third of its connections each:

* ``idle``: connect and send nothing;
* ``slow-lines``: send ``GET /metrics HTTP/1.1`` one byte a second (slowloris);
* ``slow-headers``: send a request line, then one huge header 512 bytes at a time, 8 times
  a second (4 KiB/s: past a 16 KiB limit in 4 s).

A connection the server closes is opened again (after 0.1 s), so the attacker holds its
count whatever the server cuts.

Usage, from the repository root::

    python tests/benchmarks/bench_exporter_hostile.py
    python tests/benchmarks/bench_exporter_hostile.py --hostile 0,16,200,1000
    python tests/benchmarks/bench_exporter_hostile.py --nvml-lib /path/to/dir/with/libnvidia-ml
    python tests/benchmarks/bench_exporter_hostile.py --tree /tmp/exporter-old  # another tree
    python tests/benchmarks/bench_exporter_hostile.py attack --port 9402 --idle 5

``--tree DIR`` runs the gpumon of another checkout (e.g. ``git worktree add /tmp/old HEAD``)
with this interpreter, to compare before and after.

Exit status: 0 when every count got all its scrapes through, 1 when one did not (the
target: 20 of 20 with 200 hostile connections), 2 on error.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import re
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve()
#: What Prometheus 2.x sends.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
_REQUEST_LINE = b"GET /metrics HTTP/1.1\r\n"
_REOPEN_S = 0.1
_HEADER_PIECE = b"a" * 512
_HEADER_EVERY_S = 0.125
KINDS = ("idle", "slow-lines", "slow-headers")


# -- the attacker ----------------------------------------------------------------------------


@dataclass
class _Hostile:
    kind: str
    sock: socket.socket | None = None
    next_at: float = 0.0  # when it next sends, or opens again
    sent: int = 0


@dataclass
class Attacker:
    """Holds ``counts[kind]`` connections of each kind to ``host:port`` until stopped."""

    host: str
    port: int
    counts: dict[str, int]
    opened: int = 0
    cut: int = 0
    hostiles: list[_Hostile] = field(default_factory=list)

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        self.hostiles = [_Hostile(kind) for kind in KINDS for _ in range(self.counts[kind])]
        for hostile in self.hostiles:
            self._open(hostile, selector)
        print(f"ready {sum(h.sock is not None for h in self.hostiles)}", flush=True)
        while True:
            for key, _ in selector.select(0.05):
                hostile = key.data
                try:
                    if hostile.sock.recv(65536):
                        continue  # an answer (431, 503): read on until the server closes
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                self._drop(hostile, selector)
            now = time.monotonic()
            for hostile in self.hostiles:
                if hostile.next_at > now:
                    continue
                if hostile.sock is None:
                    self._open(hostile, selector)
                elif hostile.kind != "idle":
                    self._send(hostile, selector, now)

    def _open(self, hostile: _Hostile, selector: selectors.BaseSelector) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=1.0)
        except OSError:
            hostile.next_at = time.monotonic() + _REOPEN_S
            return
        sock.setblocking(False)
        hostile.sock, hostile.sent, hostile.next_at = sock, 0, time.monotonic()
        selector.register(sock, selectors.EVENT_READ, hostile)
        self.opened += 1
        if hostile.kind == "slow-headers":
            self._write(hostile, selector, _REQUEST_LINE + b"Host: x\r\nX-Huge: ")

    def _send(self, hostile: _Hostile, selector: selectors.BaseSelector, now: float) -> None:
        if hostile.kind == "slow-lines":
            piece = _REQUEST_LINE[hostile.sent % len(_REQUEST_LINE) :][:1]
            hostile.next_at = now + 1.0
        else:
            piece = _HEADER_PIECE
            hostile.next_at = now + _HEADER_EVERY_S
        self._write(hostile, selector, piece)

    def _write(self, hostile: _Hostile, selector: selectors.BaseSelector, data: bytes) -> None:
        assert hostile.sock is not None
        try:
            hostile.sent += hostile.sock.send(data)
        except BlockingIOError:
            pass
        except OSError:
            self._drop(hostile, selector)

    def _drop(self, hostile: _Hostile, selector: selectors.BaseSelector) -> None:
        if hostile.sock is not None:
            selector.unregister(hostile.sock)
            hostile.sock.close()
            hostile.sock = None
            self.cut += 1
        hostile.next_at = time.monotonic() + _REOPEN_S


def start_attacker(
    port: int, idle: int, slow_lines: int, slow_headers: int, host: str = "127.0.0.1"
) -> subprocess.Popen[str]:
    """The attacker in a process of its own, once it holds all its connections."""
    argv = [sys.executable, str(SCRIPT), "attack", "--host", host, "--port", str(port)]
    argv += ["--idle", str(idle), "--slow-lines", str(slow_lines)]
    argv += ["--slow-headers", str(slow_headers)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("ready"):
        process.kill()
        raise RuntimeError(f"the attacker did not start: {line!r}")
    return process


def stop(process: subprocess.Popen[str]) -> None:
    """End a process this script started."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def split(count: int) -> tuple[int, int, int]:
    """``count`` hostile connections as (idle, slow lines, slow headers)."""
    third = count // 3
    return third, third, count - 2 * third


# -- the scraper and the exporter -----------------------------------------------------------


@dataclass
class Scrape:
    ok: bool
    seconds: float
    sample_age_s: float | None = None


def scrape(port: int, timeout_s: float) -> Scrape:
    """One scrape as Prometheus makes it, on a new connection, within ``timeout_s`` in all."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request(
            "GET", "/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        )
        response = connection.getresponse()
        body = response.read()
        if response.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    except (OSError, http.client.HTTPException):
        return Scrape(False, time.monotonic() - started)
    finally:
        connection.close()
    took = time.monotonic() - started
    if took > timeout_s or response.status != 200 or b"gpumon_gpu_up{" not in body:
        return Scrape(False, took)
    stamp = re.search(rb"^gpumon_sample_timestamp_seconds (\S+)$", body, re.MULTILINE)
    age = None if stamp is None else time.time() - float(stamp.group(1))
    return Scrape(True, took, age)


def proc_status(pid: int) -> tuple[float, int, int]:
    """RSS in MiB, threads and open descriptors of process ``pid``."""
    text = Path(f"/proc/{pid}/status").read_text()
    rss = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
    threads = re.search(r"^Threads:\s+(\d+)", text, re.MULTILINE)
    assert rss is not None and threads is not None
    return int(rss.group(1)) / 1024, int(threads.group(1)), len(os.listdir(f"/proc/{pid}/fd"))


def start_exporter(tree: Path, nvml_lib: str | None) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-m", "gpumon", "export", "--listen", "127.0.0.1:0"]
    if nvml_lib is None:
        argv += ["--demo"]
    elif nvml_lib != "system":
        env["LD_LIBRARY_PATH"] = f"{nvml_lib}:{env.get('LD_LIBRARY_PATH', '')}"
    process = subprocess.Popen(argv, cwd=tree, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    banner = ""
    while "serving" not in banner:
        banner = process.stderr.readline()
        if not banner:
            raise RuntimeError(f"gpumon export exited {process.wait()}")
    match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", banner)
    assert match, banner
    return process, int(match.group(1))


@dataclass
class Row:
    hostile: int
    scrapes: list[Scrape]
    rss_mib: float
    threads: int
    fds: int

    def line(self) -> str:
        ok = [s for s in self.scrapes if s.ok]
        times = sorted(s.seconds * 1000 for s in ok)
        p50 = f"{statistics.median(times):.1f}" if times else "-"
        p95 = f"{times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]:.1f}" if times else "-"
        age = next((s.sample_age_s for s in reversed(ok) if s.sample_age_s is not None), None)
        shown_age = "-" if age is None else f"{age:.1f}"
        return (
            f"| {self.hostile:>7} | {len(ok):>2}/{len(self.scrapes):<2} | {p50:>8} | {p95:>8} "
            f"| {self.rss_mib:>9.1f} | {self.threads:>7} | {self.fds:>5} | {shown_age:>14} |"
        )


HEADER = (
    "| hostile | ok/N  | p50 (ms) | p95 (ms) | RSS (MiB) | threads |   fds | sample age (s) |\n"
    "|---------|-------|----------|----------|-----------|---------|-------|----------------|"
)


def attacked(pid: int, port: int, hostile: int, args: argparse.Namespace) -> Row:
    attacker = start_attacker(port, *split(hostile)) if hostile else None
    try:
        time.sleep(args.settle)  # the tricklers are mid-request, the idle ones idle
        peak = proc_status(pid)
        scrapes = []
        for _ in range(args.scrapes):
            scrapes.append(scrape(port, args.timeout))
            peak = tuple(map(max, peak, proc_status(pid)))  # type: ignore[assignment]
            time.sleep(args.every)
        return Row(hostile, scrapes, *peak)
    finally:
        if attacker is not None:
            stop(attacker)


def benchmark(args: argparse.Namespace) -> int:
    exporter, port = start_exporter(Path(args.tree).resolve(), args.nvml_lib)
    try:
        print(f"gpumon export from {args.tree} (pid {exporter.pid}, port {port})")
        print(f"{args.scrapes} scrapes, {args.timeout:g} s timeout each, {args.every:g} s apart")
        print(HEADER, flush=True)
        missed = False
        for hostile in args.hostile:
            row = attacked(exporter.pid, port, hostile, args)
            print(row.line(), flush=True)
            missed |= sum(s.ok for s in row.scrapes) < len(row.scrapes)
    finally:
        stop(exporter)
    return 1 if missed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    attack = sub.add_parser("attack", help="hold hostile connections until killed")
    attack.add_argument("--host", default="127.0.0.1")
    attack.add_argument("--port", type=int, required=True)
    for kind in KINDS:
        attack.add_argument(f"--{kind}", type=int, default=0)
    parser.add_argument("--hostile", default="0,16,200", help="counts, comma-separated")
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=3.0, help="per scrape, seconds")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between scrapes")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before scraping")
    parser.add_argument("--nvml-lib", help="DIR with libnvidia-ml.so.1, or 'system' (no --demo)")
    parser.add_argument("--tree", default=str(ROOT), help="the gpumon checkout to run")
    args = parser.parse_args(argv)
    if args.command == "attack":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        counts = {kind: getattr(args, kind.replace("-", "_")) for kind in KINDS}
        try:
            Attacker(args.host, args.port, counts).run()
        except KeyboardInterrupt:
            pass
        return 0
    args.hostile = [int(count) for count in args.hostile.split(",")]
    try:
        return benchmark(args)
    except (OSError, RuntimeError) as error:
        print(f"bench_exporter_hostile: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
