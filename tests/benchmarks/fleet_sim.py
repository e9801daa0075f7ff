#!/usr/bin/env python3
"""A fleet of synthetic GPU nodes in one process, for a real Prometheus to scrape.

Serves N exporters at ``/node/NNNNN/metrics`` with gpumon's own exposition code (a share with
its dcgm-exporter names) over seeded samples: 8 GPUs, 2 processes per GPU in use, some GPUs
free or held idle, some nodes DOWN (500, down after two scrapes, or a closed port). Writes
``prometheus.yml`` and ``file_sd`` targets setting ``instance``, ``__metrics_path__`` and
``partition``. A page is rendered at most once per scrape interval and kept gzipped, so one
process serves thousands of targets. gpumon's nodes say they are simulated.

    python tests/benchmarks/fleet_sim.py --nodes 1000 --interval 15 --config-dir /tmp/fleet
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import socket
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpumon.commands.export.collector import (  # noqa: E402
    exporter_families,
    label_value,
    sample_families,
)
from gpumon.commands.export.dcgm import dcgm_families  # noqa: E402
from gpumon.commands.export.exposition import CONTENT_TYPE, render  # noqa: E402
from gpumon.data.idle import Activity  # noqa: E402
from gpumon.data.model import (  # noqa: E402
    DriverInfo,
    GpuProcess,
    GpuStats,
    HostStats,
    ProcessKind,
    Sample,
)

GIB, MIB = 1024**3, 1024**2
MEMORY_TOTAL = 80 * GIB - 519 * MIB  # an H100 80GB as NVML reports it
RESERVED = 519 * MIB
COMMANDS = ("python", "torchrun", "python3", "jupyter-lab", "accelerate", "deepspeed")
HEALTHY, ANSWERS_500, GOES_DOWN, CLOSED = "up", "500", "goes-down", "closed"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One simulated node: what it serves and how it is reached."""

    number: int
    host: str
    dcgm: bool
    partition: str
    health: str  # HEALTHY, ANSWERS_500, GOES_DOWN or CLOSED

    @property
    def path(self) -> str:
        return f"/node/{self.number:05d}/metrics"

    @property
    def instance(self) -> str:
        return f"{self.host}:{9400 if self.dcgm else 9101}"


@dataclass(slots=True)
class Fleet:
    """The nodes, their cached pages (gzipped) and how often each was scraped."""

    nodes: list[NodeSpec]
    seed: int
    gpus: int
    per_gpu: int
    free_share: float
    idle_share: float
    interval_s: float
    users: int = 300
    pages: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # number -> (tick, gz)
    scrapes: dict[int, int] = field(default_factory=dict)
    renders: int = 0
    render_s: float = 0.0

    def page(self, spec: NodeSpec, now: float) -> bytes:
        """The node's page for the current scrape interval, gzipped (rendered once per tick)."""
        tick = int(now // self.interval_s)
        cached = self.pages.get(spec.number)
        if cached is not None and cached[0] == tick:
            return cached[1]
        started = time.perf_counter()
        text = self.render(spec, tick, now)
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
        body = compressor.compress(text) + compressor.flush()
        self.pages[spec.number] = (tick, body)
        self.renders += 1
        self.render_s += time.perf_counter() - started
        return body

    def render(self, spec: NodeSpec, tick: int, now: float) -> bytes:
        sample, activities = self.sample(spec, tick, now)
        if spec.dcgm:
            families = dcgm_families(sample, "", label_value)
        else:
            families = exporter_families(True, 0, age_s=0.4, stalled=False)
            families += sample_families(sample, activities=activities)
        return b"".join(text for _, text in render(families))

    def sample(self, spec: NodeSpec, tick: int, now: float) -> tuple[Sample, dict]:
        """Seeded by (seed, node): which GPUs are free, idle-held or busy, and who runs what,
        stay; utilisation, temperature and power move with the tick."""
        fixed = random.Random(f"{self.seed}-{spec.number}")
        moving = random.Random(f"{self.seed}-{spec.number}-{tick}")
        gpus, processes, activities = [], [], {}
        pid = 10_000 + fixed.randrange(50_000)
        for index in range(self.gpus):
            roll = fixed.random()
            state = "free" if roll < self.free_share else "busy"
            if state == "busy" and roll < self.free_share + self.idle_share:
                state = "idle"
            used = 0
            util = 0 if state != "busy" else moving.randint(35, 100)
            serial = f"{fixed.getrandbits(32):08x}-{spec.number:04x}-4{index:03x}-8000"
            uuid = f"GPU-{serial}-{fixed.getrandbits(48):012x}"
            if state != "free":
                for _ in range(self.per_gpu):
                    pid += fixed.randint(1, 400)
                    memory = fixed.randint(2, 30) * GIB
                    used += memory
                    user = f"user{int(fixed.paretovariate(1.2) * 7) % self.users:03d}"
                    process = GpuProcess(
                        index,
                        uuid,
                        pid,
                        ProcessKind.COMPUTE,
                        memory,
                        user=user,
                        command=fixed.choice(COMMANDS) + " train.py",
                        sm_utilization_pct=0 if state == "idle" else util // self.per_gpu,
                        job_id=str(4_000_000 + fixed.randrange(100_000)),
                    )
                    processes.append(process)
                    quiet = 3_600.0 + fixed.randrange(40_000) if state == "idle" else 0.0
                    activities[process.key] = Activity(quiet, idle=state == "idle")
            used = min(MEMORY_TOTAL, used + 5 * MIB)
            temperature = 32 + util * 0.45 + moving.uniform(-2, 2)
            gpus.append(
                GpuStats(
                    index=index,
                    uuid=uuid,
                    name="NVIDIA H100 80GB HBM3",
                    pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                    persistence_mode=True,
                    display_active=False,
                    performance_state=0 if util else 5,
                    temperature_c=round(temperature),
                    temperature_slowdown_c=87,
                    temperature_shutdown_c=92,
                    temperature_memory_c=round(temperature + 6),
                    power_draw_w=round(70 + util * 6.2 + moving.uniform(0, 9), 1),
                    power_limit_w=700.0,
                    energy_j=round(now * (70 + util * 6.2), 3),
                    memory_used_bytes=used,
                    memory_total_bytes=MEMORY_TOTAL,
                    memory_free_bytes=max(0, MEMORY_TOTAL - RESERVED - used),
                    memory_reserved_bytes=RESERVED,
                    utilization_gpu_pct=util,
                    utilization_memory_pct=util // 3,
                    utilization_encoder_pct=0,
                    utilization_decoder_pct=0,
                    pcie_rx_bytes_per_s=moving.randrange(1 << 30) if util else 0,
                    pcie_tx_bytes_per_s=moving.randrange(1 << 28) if util else 0,
                    clock_graphics_mhz=1980 if util else 345,
                    clock_sm_mhz=1980 if util else 345,
                    clock_memory_mhz=2619,
                    clock_event_reasons=() if util else ("idle",),
                    compute_mode="Default",
                    ecc_errors_uncorrected_volatile=0,
                    pcie_replays=0,
                    remapped_rows_correctable=0,
                    remapped_rows_uncorrectable=0,
                    remapped_rows_pending=False,
                    remapped_rows_failed=False,
                    xid_last=0,
                    xid_count=0,
                    mig_mode=False,
                )
            )
        host = HostStats(spec.host, cpu_pct=moving.uniform(5, 60), cpu_count=128)
        sample = Sample(
            timestamp_s=now,
            host=host,
            driver=DriverInfo("550.90.07", "12.4", "12.550.90.07"),
            gpus=tuple(gpus),
            processes=tuple(processes),
            simulated=True,
            duration_s=0.012,
        )
        return sample, activities


def make_nodes(
    count: int, seed: int, dcgm_share: float, down_share: float, partitions: list[str]
) -> list[NodeSpec]:
    """``count`` nodes: every ``1/dcgm_share``-th a dcgm-exporter, a ``down_share`` DOWN (a third
    each answering 500, going down after two scrapes, on a closed port), partitions in
    contiguous blocks as a site racks them."""
    chooser = random.Random(seed)
    nodes = []
    for number in range(1, count + 1):
        dcgm = chooser.random() < dcgm_share
        health = HEALTHY
        if chooser.random() < down_share:
            health = (ANSWERS_500, GOES_DOWN, CLOSED)[number % 3]
        partition = partitions[(number - 1) * len(partitions) // count]
        nodes.append(NodeSpec(number, f"gpu-{number:05d}", dcgm, partition, health))
    return nodes


async def serve_connection(
    fleet: Fleet, by_path: dict[str, NodeSpec], reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:  # fmt: skip
    """HTTP/1.1 with keep-alive (Prometheus keeps one connection per target)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split()
            path = parts[1].split("?", 1)[0] if len(parts) > 1 else ""
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (x.partition(":") for x in lines[1:])
                if k
            }
            spec = by_path.get(path)
            status, body, extra = "404 Not Found", b"not found\n", ""
            if spec is not None:
                seen = fleet.scrapes.get(spec.number, 0)
                fleet.scrapes[spec.number] = seen + 1
                if spec.health == ANSWERS_500 or (spec.health == GOES_DOWN and seen >= 2):
                    status, body = "500 Internal Server Error", b"simulated failure\n"
                else:
                    status, body = "200 OK", fleet.page(spec, time.time())
                    if "gzip" in headers.get("accept-encoding", ""):
                        extra = "Content-Encoding: gzip\r\n"
                    else:
                        body = zlib.decompress(body, 31)
            content = CONTENT_TYPE if status.startswith("200") else "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content}\r\n{extra}"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


def write_config(
    directory: Path,
    fleet: Fleet,
    port: int,
    closed_port: int,
    scrape_timeout_s: float,
    rule_files: list[Path] = [],  # noqa: B006 (read only)
) -> Path:
    """``prometheus.yml`` with one job per exporter kind reading its ``file_sd`` file, and
    ``rule_files`` evaluated at the scrape interval."""
    directory.mkdir(parents=True, exist_ok=True)
    for job, dcgm in (("gpumon", False), ("dcgm", True)):
        targets = [
            {
                "targets": [f"127.0.0.1:{closed_port if n.health == CLOSED else port}"],
                "labels": {
                    "instance": n.instance,
                    "__metrics_path__": n.path,
                    "partition": n.partition,
                },
            }
            for n in fleet.nodes
            if n.dcgm == dcgm
        ]
        temporary = directory / f".targets-{job}.json"
        temporary.write_text(json.dumps(targets, indent=1))
        temporary.replace(directory / f"targets-{job}.json")
    interval = f"{fleet.interval_s:g}s"
    config = directory / "prometheus.yml"
    jobs = "".join(
        f"  - job_name: {job}\n    file_sd_configs:\n"
        f"      - files: ['{directory}/targets-{job}.json']\n"
        for job in ("gpumon", "dcgm")
    )
    config.write_text(
        f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {scrape_timeout_s:g}s\n"
        f"  evaluation_interval: {interval}\n"
        f"rule_files: {json.dumps([str(path.resolve()) for path in rule_files])}\n"
        f"scrape_configs:\n{jobs}"
    )
    return config


async def main_async(args: argparse.Namespace) -> None:
    partitions = [p for p in args.partitions.split(",") if p]
    nodes = make_nodes(args.nodes, args.seed, args.dcgm_share, args.down_share, partitions)
    fleet = Fleet(
        nodes, args.seed, args.gpus, args.per_gpu, args.free_share, args.idle_share, args.interval
    )
    by_path = {n.path: n for n in nodes}
    server = await asyncio.start_server(
        lambda r, w: serve_connection(fleet, by_path, r, w), args.host, args.port, backlog=1024
    )
    port = server.sockets[0].getsockname()[1]
    closed = socket.socket()  # bound, never listening: connections to it are refused
    closed.bind((args.host, 0))
    timeout = min(10.0, args.interval)
    closed_port = closed.getsockname()[1]
    config = write_config(args.config_dir, fleet, port, closed_port, timeout, args.rule_file)
    if args.warm:  # render every page once now, so that the first scrapes do not wait
        for spec in nodes:
            fleet.page(spec, time.time())
    down = sum(n.health != HEALTHY for n in nodes)
    print(
        f"serving http://{args.host}:{port}/node/NNNNN/metrics: {len(nodes)} nodes "
        f"({sum(n.dcgm for n in nodes)} dcgm-exporter, {down} DOWN), config {config}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=args.report_every)
            except TimeoutError:
                if fleet.renders:
                    print(
                        f"{time.strftime('%H:%M:%S')} scrapes {sum(fleet.scrapes.values())}, "
                        f"renders {fleet.renders} "
                        f"({fleet.render_s / fleet.renders * 1000:.1f} ms each)",
                        flush=True,
                    )
    closed.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--per-gpu", type=int, default=2, help="processes per GPU in use")
    parser.add_argument("--interval", type=float, default=15.0, help="scrape interval, seconds")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--dcgm-share", type=float, default=0.2, help="nodes on dcgm-exporter")
    parser.add_argument("--down-share", type=float, default=0.03, help="nodes DOWN")
    parser.add_argument("--free-share", type=float, default=0.2, help="GPUs with no process")
    parser.add_argument("--idle-share", type=float, default=0.1, help="GPUs held idle")
    parser.add_argument("--partitions", default="h100,a100,l40s,debug")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--config-dir", type=Path, required=True)
    parser.add_argument(
        "--rule-file", type=Path, action="append", default=[], help="recording rules to load"
    )
    parser.add_argument("--warm", action="store_true", help="render every page before serving")
    parser.add_argument("--report-every", type=float, default=60.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main_async(parse_args()))
