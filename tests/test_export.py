"""`gpumon export`: scraped over real HTTP on loopback and parsed with prometheus_client."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpumon import export
from gpumon.cli import main
from gpumon.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    GpuUnavailable,
    HostStats,
    ProcessKind,
    Sample,
    UnavailableReason,
)

GIB = 1024**3
ROOT = Path(__file__).resolve().parent.parent
HOST = HostStats("node7", None, None, None, None, None, None)
UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-11111111-1111-2222-3333-444444444444"
UUID2 = "GPU-22222222-1111-2222-3333-444444444444"


def make_sample(*, temperature: int = 61, simulated: bool = False) -> Sample:
    """GPU 0 healthy, GPU 1 lost, GPU 2 with N/A power and temperature."""
    gpus = (
        GpuStats(
            index=0,
            uuid=UUID0,
            name="NVIDIA A100-SXM4-80GB",
            pci_bus_id="00000000:07:00.0",
            fan_pct=None,
            temperature_c=temperature,
            temperature_slowdown_c=90,
            power_draw_w=312.5,
            power_limit_w=400.0,
            memory_used_bytes=12 * GIB,
            memory_total_bytes=80 * GIB,
            utilization_gpu_pct=87,
            utilization_memory_pct=40,
            clock_sm_mhz=1410,
            performance_state=0,
            ecc_errors_uncorrected_volatile=2,
        ),
        GpuStats(index=1, uuid=UUID1, name="NVIDIA A100-SXM4-80GB", lost=True),
        GpuStats(
            index=2,
            uuid=UUID2,
            name="NVIDIA A100-SXM4-80GB",
            memory_used_bytes=0,
            memory_total_bytes=80 * GIB,
            utilization_gpu_pct=0,
        ),
    )
    processes = (
        GpuProcess(0, UUID0, 4242, ProcessKind.COMPUTE, 11 * GIB, "alice", "/usr/bin/python3 x.py"),
        GpuProcess(0, UUID0, 4343, ProcessKind.COMPUTE, None, "bob", "python y.py"),
        GpuProcess(0, UUID0, 99999, ProcessKind.COMPUTE, GIB, None, None, visible=False),
    )
    return Sample(
        timestamp_s=1_700_000_000.0,
        host=HOST,
        driver=DriverInfo("550.54.15", "12.4", "12.550.54.15"),
        gpus=gpus,
        processes=processes,
        simulated=simulated,
        duration_s=0.012,
    )


class FakeSource:
    """Hands out the samples it was given, then repeats the last; may raise instead."""

    simulated = False

    def __init__(self, *samples: Sample | Exception) -> None:
        self.samples = list(samples)
        self.calls = 0
        self.closed = False

    def sample(self) -> Sample:
        self.calls += 1
        item = self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


def scrape(
    port: int, path: str = "/metrics"
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """name -> {sorted labels -> value}, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        text = response.read().decode()
    series: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return series


def gpu_key(index: int, uuid: str) -> tuple[tuple[str, str], ...]:
    return (("gpu", str(index)), ("name", "NVIDIA A100-SXM4-80GB"), ("uuid", uuid))


Serve = Callable[..., export.Exporter]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start exporters on a free loopback port; stop them after the test."""
    started: list[export.Exporter] = []

    def start(source: FakeSource, interval_s: float = 3600.0) -> export.Exporter:
        collector = export.SampleCollector()
        collector.update(source.sample())
        exporter = export.Exporter(source, collector, "127.0.0.1", 0, interval_s)
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        exporter.stop()


def test_scrape_names_labels_and_values_match_the_sample(serve: Serve) -> None:
    exporter = serve(FakeSource(make_sample()))
    series = scrape(exporter.port)
    key0 = gpu_key(0, UUID0)
    assert series["gpumon_gpu_temperature_celsius"] == {key0: 61.0}
    assert series["gpumon_gpu_temperature_slowdown_celsius"] == {key0: 90.0}
    assert series["gpumon_gpu_power_draw_watts"] == {key0: 312.5}
    assert series["gpumon_gpu_power_limit_watts"] == {key0: 400.0}
    assert series["gpumon_gpu_memory_used_bytes"][key0] == 12 * GIB
    assert series["gpumon_gpu_memory_total_bytes"][key0] == 80 * GIB
    assert series["gpumon_gpu_utilization_ratio"][key0] == pytest.approx(0.87)
    assert series["gpumon_gpu_memory_utilization_ratio"][key0] == pytest.approx(0.40)
    assert series["gpumon_gpu_clock_sm_hertz"] == {key0: 1.41e9}
    assert series["gpumon_gpu_performance_state"] == {key0: 0.0}
    assert series["gpumon_gpu_ecc_errors_uncorrected_volatile_total"] == {key0: 2.0}
    assert series["gpumon_gpu_processes"][key0] == 3
    assert series["gpumon_simulated"] == {(): 0.0}
    assert series["gpumon_sample_timestamp_seconds"] == {(): 1_700_000_000.0}
    assert series["gpumon_driver_info"] == {
        (("cuda_driver_version", "12.4"), ("driver_version", "550.54.15"),
         ("nvml_version", "12.550.54.15")): 1.0
    }  # fmt: skip


def test_na_readings_have_no_series_rather_than_zero(serve: Serve) -> None:
    series = scrape(serve(FakeSource(make_sample())).port)
    key2 = gpu_key(2, UUID2)
    # GPU 2 reports no temperature or power: absent. Its real zeros stay zeros.
    assert key2 not in series["gpumon_gpu_temperature_celsius"]
    assert key2 not in series["gpumon_gpu_power_draw_watts"]
    assert "gpumon_gpu_fan_speed_ratio" not in series  # no GPU has a fan reading
    assert series["gpumon_gpu_memory_used_bytes"][key2] == 0.0
    assert series["gpumon_gpu_utilization_ratio"][key2] == 0.0


def test_lost_gpu_is_down_and_has_no_readings(serve: Serve) -> None:
    series = scrape(serve(FakeSource(make_sample())).port)
    key1 = gpu_key(1, UUID1)
    assert series["gpumon_gpu_up"] == {gpu_key(0, UUID0): 1.0, key1: 0.0, gpu_key(2, UUID2): 1.0}
    assert tuple(sorted((("pci_bus_id", ""), *key1))) in {
        tuple(sorted(labels)) for labels in series["gpumon_gpu_info"]
    }
    for name, values in series.items():
        if name not in ("gpumon_gpu_up", "gpumon_gpu_info"):
            assert all(dict(labels).get("uuid") != UUID1 for labels in values), name


def test_a_refused_process_list_has_no_process_count_rather_than_zero(serve: Serve) -> None:
    sample = make_sample()
    refused = dataclasses.replace(sample.gpus[2], processes_error="NVML: Insufficient Permissions")
    sample = dataclasses.replace(sample, gpus=(*sample.gpus[:2], refused))
    series = scrape(serve(FakeSource(sample)).port)
    assert gpu_key(2, UUID2) not in series["gpumon_gpu_processes"]
    assert gpu_key(0, UUID0) in series["gpumon_gpu_processes"]
    assert series["gpumon_gpu_up"][gpu_key(2, UUID2)] == 1.0  # the GPU itself still reads


def test_process_memory_series_use_short_labels(serve: Serve) -> None:
    series = scrape(serve(FakeSource(make_sample())).port)["gpumon_process_gpu_memory_bytes"]
    by_pid = {dict(labels)["pid"]: (dict(labels), value) for labels, value in series.items()}
    # PID 4343 has no GPU memory reading: no series.
    assert set(by_pid) == {"4242", "99999"}
    labels, value = by_pid["4242"]
    assert labels == {
        "gpu": "0",
        "uuid": UUID0,
        "pid": "4242",
        "user": "alice",
        "process": "python3",
    }
    assert value == 11 * GIB
    assert by_pid["99999"][0]["user"] == "" and by_pid["99999"][0]["process"] == ""


def test_every_scraped_metric_is_documented(serve: Serve) -> None:
    docs = (ROOT / "docs" / "prometheus.md").read_text()
    series = scrape(serve(FakeSource(make_sample())).port)
    names = set(series) | {
        metric.name + ("_total" if metric.kind == "counter" else "")
        for metric in export.GPU_METRICS
    }
    missing = sorted(name for name in names if f"`{name}`" not in docs)
    assert not missing


def test_scrapes_follow_the_sampling_thread(serve: Serve) -> None:
    source = FakeSource(make_sample(temperature=61), make_sample(temperature=75))
    exporter = serve(source, interval_s=0.05)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if scrape(exporter.port)["gpumon_gpu_temperature_celsius"][gpu_key(0, UUID0)] == 75:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the exporter never showed the second sample")
    calls = source.calls
    for _ in range(5):
        scrape(exporter.port)
    assert source.calls - calls <= 3  # scrapes do not sample; only the 50 ms timer does


def test_a_failed_sample_drops_gpu_series_and_counts_the_error(serve: Serve) -> None:
    exporter = serve(FakeSource(make_sample(), RuntimeError("driver hiccup")), interval_s=0.05)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        series = scrape(exporter.port)
        if series["gpumon_sampling_errors_total"][()] >= 1:
            break
        time.sleep(0.02)
    assert "gpumon_gpu_up" not in series
    assert "gpumon_gpu_temperature_celsius" not in series


def test_demo_is_labelled_in_value_and_help(serve: Serve) -> None:
    exporter = serve(FakeSource(make_sample(simulated=True)))
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    assert re.search(r"^gpumon_simulated 1\.0$", text, re.MULTILINE)
    assert "# HELP gpumon_gpu_temperature_celsius GPU core temperature. [DEMO" in text


def test_read_only_and_only_metrics_path(serve: Serve) -> None:
    port = serve(FakeSource(make_sample())).port
    post = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=5)
    assert refused.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/admin", timeout=5)
    assert missing.value.code == 404


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9402", ("127.0.0.1", 9402)), ("[::1]:80", ("::1", 80)), ("host:0", ("host", 0))],
)
def test_listen_address_parses(text: str, expected: tuple[str, int]) -> None:
    assert export.listen_address(text) == expected


@pytest.mark.parametrize("text", ["9402", ":9402", "host:", "host:port", "host:70000", ""])
def test_malformed_listen_is_one_line_and_exit_2(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        export.listen_address(text)
    with pytest.raises(SystemExit) as exited:
        main(["export", "--demo", "--listen", text])
    assert exited.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_loopback_detection() -> None:
    assert export.is_loopback("127.0.0.1") and export.is_loopback("::1")
    assert export.is_loopback("localhost")
    assert not export.is_loopback("0.0.0.0")


def test_missing_prometheus_client_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    assert main(["export", "--demo", "--listen", "127.0.0.1:0"]) == 1
    assert "pip install 'gpumon[export]'" in capsys.readouterr().err


def test_no_driver_exits_1_at_start_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    unavailable = Sample(
        timestamp_s=0.0,
        host=HOST,
        driver=None,
        gpus=(),
        unavailable=GpuUnavailable(
            UnavailableReason.LIBRARY_NOT_FOUND, "No NVIDIA driver.", "NVML: not found", "hint"
        ),
    )
    source = FakeSource(unavailable)
    monkeypatch.setattr("gpumon.sources.open_source", lambda **kwargs: source)
    assert main(["export", "--listen", "127.0.0.1:0"]) == 1
    assert capsys.readouterr().err.startswith("gpumon: no NVIDIA GPU data: No NVIDIA driver.")
    assert source.closed


def start_process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpumon", "export", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ},
    )


def test_no_driver_on_this_machine_exits_1() -> None:
    from gpumon.sources.nvml import NvmlSource

    probe = NvmlSource()
    has_driver = probe.unavailable is None
    probe.close()
    if has_driver:
        pytest.skip("this machine has a working NVIDIA driver")
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "export", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("gpumon: no NVIDIA GPU data: ")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_demo_exporter_process_serves_and_exits_0_on_signal(signum: int) -> None:
    process = start_process("--demo", "--demo-gpus", "2", "--listen", "127.0.0.1:0")
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics \(DEMO", banner)
        assert match, banner
        series = scrape(int(match.group(1)))
        assert series["gpumon_simulated"] == {(): 1.0}
        assert len(series["gpumon_gpu_up"]) == 2
        process.send_signal(signum)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_non_loopback_listen_warns() -> None:
    process = start_process("--demo", "--listen", "0.0.0.0:0")
    try:
        assert process.stderr is not None
        warning = process.stderr.readline()
        assert "warning: listening on 0.0.0.0, not loopback" in warning
        assert "serving" in process.stderr.readline()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
