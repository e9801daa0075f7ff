"""``gpumon export``: a read-only Prometheus exporter (metrics: docs/prometheus.md).

One background thread samples the source every ``--interval`` seconds and hands each sample
to :class:`SampleCollector`, which turns it into metric families once; a scrape only yields
those, so scrapes never call NVML and concurrent scrapes cost next to nothing.

A value that is N/A, and every reading of a lost GPU, is left out rather than exported as a
fake 0; ``gpumon_gpu_up`` says which GPUs answered. prometheus_client is an optional extra
and is imported only when the exporter runs.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpumon.model import GpuStats, Sample

HELP = "serve Prometheus metrics over HTTP (needs: pip install 'gpumon[export]')"

DEFAULT_LISTEN = "127.0.0.1:9402"
GPU_LABELS = ("gpu", "uuid", "name")
PROCESS_LABELS = ("gpu", "uuid", "pid", "user", "process")
_PROCESS_NAME_MAX = 64
_DEMO_NOTE = " [DEMO: simulated data from gpumon --demo]"


@dataclass(frozen=True, slots=True)
class GpuMetric:
    """One per-GPU metric: the :class:`GpuStats` field it reads, times ``scale``."""

    name: str
    help: str
    field: str
    scale: float = 1.0
    kind: str = "gauge"

    def read(self, gpu: GpuStats) -> float | None:
        """The value to export, or ``None`` (N/A: no series)."""
        value = getattr(gpu, self.field)
        return None if value is None else float(value) * self.scale


_PCT = 0.01  # percent -> ratio (0-1), as Prometheus conventions ask
_MHZ = 1e6  # MHz -> Hz

GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("gpumon_gpu_temperature_celsius", "GPU core temperature.", "temperature_c"),
    GpuMetric(
        "gpumon_gpu_temperature_slowdown_celsius",
        "Temperature at which the GPU starts to slow itself down.",
        "temperature_slowdown_c",
    ),
    GpuMetric(
        "gpumon_gpu_temperature_shutdown_celsius",
        "Temperature at which the GPU shuts down.",
        "temperature_shutdown_c",
    ),
    GpuMetric("gpumon_gpu_fan_speed_ratio", "Fan speed, fraction of maximum.", "fan_pct", _PCT),
    GpuMetric("gpumon_gpu_power_draw_watts", "Power draw.", "power_draw_w"),
    GpuMetric("gpumon_gpu_power_limit_watts", "Enforced power limit.", "power_limit_w"),
    GpuMetric(
        "gpumon_gpu_memory_used_bytes",
        "GPU memory in use (reserved memory not counted, as in nvidia-smi).",
        "memory_used_bytes",
    ),
    GpuMetric("gpumon_gpu_memory_total_bytes", "Total GPU memory.", "memory_total_bytes"),
    GpuMetric(
        "gpumon_gpu_memory_reserved_bytes",
        "GPU memory reserved by the driver and firmware.",
        "memory_reserved_bytes",
    ),
    GpuMetric(
        "gpumon_gpu_utilization_ratio",
        "Fraction of the last sample period in which a kernel ran on the GPU.",
        "utilization_gpu_pct",
        _PCT,
    ),
    GpuMetric(
        "gpumon_gpu_memory_utilization_ratio",
        "Fraction of the last sample period in which GPU memory was read or written.",
        "utilization_memory_pct",
        _PCT,
    ),
    GpuMetric("gpumon_gpu_clock_sm_hertz", "SM clock.", "clock_sm_mhz", _MHZ),
    GpuMetric("gpumon_gpu_clock_memory_hertz", "Memory clock.", "clock_memory_mhz", _MHZ),
    GpuMetric(
        "gpumon_gpu_performance_state",
        "Performance state: 0 (P0, fastest) to 15 (P15, slowest).",
        "performance_state",
    ),
    GpuMetric(
        "gpumon_gpu_ecc_errors_uncorrected_volatile",
        "Uncorrected ECC errors since the driver was loaded.",
        "ecc_errors_uncorrected_volatile",
        kind="counter",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpumon.cli import interval_seconds

    parser.add_argument(
        "--listen",
        type=listen_address,
        default=listen_address(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default: {DEFAULT_LISTEN}, loopback only)",
    )
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=argparse.SUPPRESS,  # keeps `gpumon --interval N export` working
        metavar="SECONDS",
        help="seconds between samples (default: 1); scrapes read the latest sample",
    )


def listen_address(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:9402`` for IPv6); port 0 picks a free port."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT such as {DEFAULT_LISTEN}, got {text!r}"
        )
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(address).split("%")[0]).is_loopback for address in addresses
    )


def process_name(command: str | None) -> str:
    """The executable's base name (``python``), not the full command line: keeps labels short."""
    if not command:
        return ""
    return os.path.basename(command.split()[0])[:_PROCESS_NAME_MAX]


def build_families(sample: Sample | None, sampling_errors: int = 0) -> list[Any]:
    """Turn one sample into prometheus_client metric families.

    Args:
        sample: the latest sample, or ``None`` when the latest attempt to read failed.
        sampling_errors: how many samples have failed since the exporter started.

    Returns:
        The families to expose; N/A values and lost GPUs' readings have no series.
    """
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    note = _DEMO_NOTE if sample is not None and sample.simulated else ""
    families: list[Any] = []

    def gauge(name: str, text: str, labels: Iterable[str] = ()) -> Any:
        family = GaugeMetricFamily(name, text + note, labels=list(labels))
        families.append(family)
        return family

    simulated = gauge("gpumon_simulated", "1 when the data is simulated (gpumon --demo).")
    simulated.add_metric([], 1.0 if sample is not None and sample.simulated else 0.0)
    errors = CounterMetricFamily(
        "gpumon_sampling_errors", "Samples that failed since the exporter started." + note
    )
    errors.add_metric([], float(sampling_errors))
    families.append(errors)
    if sample is None:
        return families

    gauge("gpumon_sample_timestamp_seconds", "When the exported sample was taken (Unix time).")
    families[-1].add_metric([], sample.timestamp_s)
    gauge("gpumon_sample_duration_seconds", "How long reading the exported sample took.")
    families[-1].add_metric([], sample.duration_s)
    if sample.driver is not None:
        info = gauge(
            "gpumon_driver_info",
            "Driver, CUDA driver and NVML versions (value always 1).",
            ("driver_version", "cuda_driver_version", "nvml_version"),
        )
        driver = sample.driver
        versions = (driver.driver_version, driver.cuda_driver_version, driver.nvml_version)
        info.add_metric([version or "" for version in versions], 1.0)

    gpu_info = gauge(
        "gpumon_gpu_info", "GPU identity (value always 1).", (*GPU_LABELS, "pci_bus_id")
    )
    up = gauge("gpumon_gpu_up", "1 when the GPU answered, 0 when it is lost.", GPU_LABELS)
    for gpu in sample.gpus:
        labels = _gpu_labels(gpu)
        gpu_info.add_metric([*labels, gpu.pci_bus_id or ""], 1.0)
        up.add_metric(labels, 0.0 if gpu.lost else 1.0)
    readable = [gpu for gpu in sample.gpus if not gpu.lost]
    for metric in GPU_METRICS:
        if metric.kind == "counter":
            family = CounterMetricFamily(metric.name, metric.help + note, labels=list(GPU_LABELS))
            families.append(family)
        else:
            family = gauge(metric.name, metric.help, GPU_LABELS)
        for gpu in readable:
            value = metric.read(gpu)
            if value is not None:
                family.add_metric(_gpu_labels(gpu), value)

    count = gauge("gpumon_gpu_processes", "Processes using the GPU.", GPU_LABELS)
    for gpu in readable:
        if gpu.processes_error is None:  # unknown is no series, never a fake 0
            count.add_metric(_gpu_labels(gpu), float(len(sample.processes_on(gpu.index))))
    memory = gauge(
        "gpumon_process_gpu_memory_bytes", "GPU memory used by one process.", PROCESS_LABELS
    )
    lost = {gpu.uuid for gpu in sample.gpus if gpu.lost}
    for process in sample.processes:
        if process.gpu_memory_bytes is None or process.gpu_uuid in lost:
            continue
        user = process.user or ""
        labels = [str(process.gpu_index), process.gpu_uuid or "", str(process.pid), user]
        memory.add_metric([*labels, process_name(process.command)], process.gpu_memory_bytes)
    return families


def _gpu_labels(gpu: GpuStats) -> list[str]:
    return [str(gpu.index), gpu.uuid or "", gpu.name or ""]


class SampleCollector:
    """A prometheus_client collector that yields the families of the latest sample.

    :meth:`update` builds the families once per sample (in the sampling thread); ``collect``
    only hands out that immutable list, so scrapes are cheap and never touch NVML.
    """

    def __init__(self) -> None:
        self._sampling_errors = 0
        self._families: list[Any] = build_families(None)

    def update(self, sample: Sample) -> None:
        """Expose ``sample`` from the next scrape on."""
        self._families = build_families(sample, self._sampling_errors)

    def sampling_failed(self) -> None:
        """The latest read failed: expose no GPU series rather than stale ones."""
        self._sampling_errors += 1
        self._families = build_families(None, self._sampling_errors)

    def collect(self) -> Iterator[Any]:
        yield from self._families  # one reference read: a scrape sees one whole sample


class Exporter:
    """The HTTP server plus the sampling thread. ``stop()`` ends both."""

    def __init__(
        self, source: Any, collector: SampleCollector, host: str, port: int, interval_s: float
    ) -> None:
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

        self.source = source
        self.collector = collector
        self.interval_s = interval_s
        self._stop = threading.Event()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path == "/metrics":
                return list(metrics_app(environ, start_response))
            if path == "/" and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"gpumon exporter: metrics at /metrics\n"]
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: metrics are at /metrics\n"]

        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("_Server", (ThreadingWSGIServer,), {"address_family": family})

        class QuietHandler(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape every 15 s is not news

        self._server: Any = make_server(host, port, app, server_class, handler_class=QuietHandler)
        self.port = int(self._server.server_address[1])
        self._threads = [
            threading.Thread(target=self._server.serve_forever, name="gpumon-http", daemon=True),
            threading.Thread(target=self._sample_forever, name="gpumon-sampler", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _sample_forever(self) -> None:
        # The next read is scheduled after this one ends: slow reads never pile up.
        started = time.monotonic()
        last_error = ""
        while not self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started))):
            started = time.monotonic()
            try:
                sample = self.source.sample()
            except Exception as error:
                if str(error) != last_error:  # once per distinct error, not every interval
                    print(f"gpumon export: warning: sampling failed: {error}", file=sys.stderr)
                last_error = str(error)
                self.collector.sampling_failed()
            else:
                last_error = ""
                self.collector.update(sample)

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop serving and sampling; True when the sampler ended (a hung read may not)."""
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(timeout_s)
        return not any(thread.is_alive() for thread in self._threads)


def run(args: argparse.Namespace) -> int:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        print(
            "gpumon export: error: prometheus_client is not installed: "
            "pip install 'gpumon[export]'",
            file=sys.stderr,
        )
        return 1
    from gpumon.snapshot import report_unavailable
    from gpumon.sources import open_source

    host, port = args.listen
    interval_s = float(getattr(args, "interval", 1.0))
    source = open_source(
        demo=args.demo, demo_gpus=args.demo_gpus, demo_processes=args.demo_processes
    )
    first = source.sample()
    if first.unavailable is not None and not first.simulated:
        source.close()
        report_unavailable(first.unavailable)
        return 1
    if not is_loopback(host):
        print(
            f"gpumon export: warning: listening on {host}, not loopback: anyone who can reach "
            "it can read GPU metrics, user names and PIDs",
            file=sys.stderr,
        )
    collector = SampleCollector()
    collector.update(first)
    try:
        exporter = Exporter(source, collector, host, port, interval_s)
    except OSError as error:
        source.close()
        print(f"gpumon export: error: cannot listen on {host}:{port}: {error}", file=sys.stderr)
        return 1
    return _serve_until_signalled(exporter, host, first.simulated)


def _serve_until_signalled(exporter: Exporter, host: str, simulated: bool) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    shown = f"[{host}]" if ":" in host else host
    demo = " (DEMO: simulated data)" if simulated else ""
    print(
        f"gpumon export: serving http://{shown}:{exporter.port}/metrics{demo}, "
        f"sampling every {exporter.interval_s:g} s; Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if exporter.stop():
            exporter.source.close()  # not while a hung read still uses it
    return 0
