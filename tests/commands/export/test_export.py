"""`gpumon export`: scraped over real HTTP on loopback and parsed with prometheus_client."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.commands.export import collector as export
from gpumon.commands.export.collector import SampleCollector
from gpumon.commands.export.http import Exporter
from gpumon.data.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    GpuUnavailable,
    HostStats,
    MigInstance,
    ProcessKind,
    Sample,
    UnavailableReason,
)

GIB = 1024**3
ROOT = Path(__file__).resolve().parents[3]
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


def no_driver_sample() -> Sample:
    """What NvmlSource reads on a machine without a driver."""
    return Sample(
        timestamp_s=0.0,
        host=HOST,
        driver=None,
        gpus=(),
        unavailable=GpuUnavailable(
            UnavailableReason.LIBRARY_NOT_FOUND, "No NVIDIA driver.", "NVML: not found", "hint"
        ),
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


class SlowSource:
    """A driver stuck in a call: ``sample()`` blocks until :meth:`release`."""

    simulated = False

    def __init__(self, sample: Sample) -> None:
        self.answer = sample
        self.gate = threading.Event()
        self.calls = 0
        self.closed = False

    def sample(self) -> Sample:
        self.calls += 1
        self.gate.wait()
        return self.answer

    def release(self) -> None:
        self.gate.set()

    def close(self) -> None:
        self.closed = True


Series = dict[str, dict[tuple[tuple[str, str], ...], float]]


def parse(text: str) -> Series:
    """name -> {sorted labels -> value}, parsed by prometheus_client's own parser."""
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return series


def scrape(port: int, path: str = "/metrics") -> Series:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return parse(response.read().decode())


def fetch(port: int, path: str = "/metrics", method: str = "GET") -> tuple[int, Any, bytes]:
    """Status, headers and body of one request, whatever the status."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def gpu_key(index: int, uuid: str) -> tuple[tuple[str, str], ...]:
    return (("gpu", str(index)), ("name", "NVIDIA A100-SXM4-80GB"), ("uuid", uuid))


Serve = Callable[..., Exporter]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start exporters on a free loopback port (after their first sample unless ``wait`` is
    False); stop them, and release slow sources, after the test."""
    started: list[Exporter] = []

    def start(
        source: Any, interval_s: float = 3600.0, wait: bool = True, **options: Any
    ) -> Exporter:
        exporter = Exporter(source, SampleCollector(), "127.0.0.1", 0, interval_s, **options)
        started.append(exporter)
        if wait:
            assert exporter.first_sample.wait(5)
        return exporter

    yield start
    for exporter in started:
        exporter.stop()
        if isinstance(exporter.source, SlowSource):
            exporter.source.release()


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
        "job_id": "",  # none: Prometheus reads an empty label as no label
        "container_id": "",
        "type": "C",
    }
    assert value == 11 * GIB
    assert by_pid["99999"][0]["user"] == "" and by_pid["99999"][0]["process"] == ""


def test_process_series_say_how_the_process_uses_the_gpu(serve: Serve) -> None:
    """The ``type`` label is nvidia-smi's Type column: a display server is G, not C, in the
    cluster view too (it reads this label)."""
    sample = make_sample()
    xorg = GpuProcess(0, UUID0, 2113, ProcessKind.GRAPHICS, 64 * 1024**2, "root", "/usr/lib/Xorg")
    both = GpuProcess(0, UUID0, 3131, ProcessKind.BOTH, GIB, "carol", "blender")
    sample = dataclasses.replace(sample, processes=(*sample.processes, xorg, both))
    series = scrape(serve(FakeSource(sample)).port)["gpumon_process_gpu_memory_bytes"]
    types = {dict(labels)["pid"]: dict(labels)["type"] for labels in series}
    assert types == {"4242": "C", "99999": "C", "2113": "G", "3131": "C+G"}


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


def test_a_lost_gpu_with_no_uuid_has_an_empty_uuid_label_and_joins_by_index(serve: Serve) -> None:
    """NVML never told the UUID of GPU 1 (lost at start): ``uuid=""``, never a made-up one.
    Processes join GPUs by index, so GPU 2's process (UUID not known either) keeps its series."""
    sample = make_sample()
    lost = GpuStats(index=1, uuid=None, name="NVIDIA A100-SXM4-80GB", lost=True)
    unread = dataclasses.replace(sample.gpus[2], uuid=None)
    on_gpu2 = GpuProcess(2, None, 5151, ProcessKind.COMPUTE, GIB, "carol", "python z.py")
    sample = dataclasses.replace(
        sample, gpus=(sample.gpus[0], lost, unread), processes=(*sample.processes, on_gpu2)
    )
    series = scrape(serve(FakeSource(sample)).port)
    assert series["gpumon_gpu_up"][gpu_key(1, "")] == 0.0
    assert series["gpumon_gpu_up"][gpu_key(2, "")] == 1.0
    memory = {
        dict(labels)["pid"]: dict(labels) for labels in series["gpumon_process_gpu_memory_bytes"]
    }
    assert memory["5151"]["uuid"] == "" and memory["5151"]["gpu"] == "2"


def test_name_filter_returns_only_the_named_families(serve: Serve) -> None:
    # prometheus_client filters with ?name[]= only for collectors that describe() their names.
    port = serve(FakeSource(make_sample())).port
    query = "name[]=gpumon_gpu_up&name[]=gpumon_gpu_ecc_errors_uncorrected_volatile_total"
    series = scrape(port, f"/metrics?{query}")
    assert set(series) == {"gpumon_gpu_up", "gpumon_gpu_ecc_errors_uncorrected_volatile_total"}
    assert len(series["gpumon_gpu_up"]) == 3


def test_describe_names_every_family_collect_can_yield() -> None:
    collector = SampleCollector()
    described = {family.name for family in collector.describe()}
    collector.update(make_sample())
    assert {family.name for family in collector.collect()} <= described
    collector.sampling_failed()
    assert {family.name for family in collector.collect()} <= described
    assert {metric.name for metric in export.GPU_METRICS} <= described


def mig_and_jobs_sample() -> Sample:
    """GPU 0 in MIG mode with two instances (one with memory N/A) and a Slurm job's process;
    GPU 2 in MIG mode with instances NVML would not tell; a container's process on GPU 0."""
    sample = make_sample()
    instances = (
        MigInstance(0, 0, 1, 0, "3g.40gb", "MIG-aaaa", 10 * GIB, 40 * GIB),
        MigInstance(0, 1, 2, 0, "2g.20gb", "MIG-bbbb", None, None),
    )
    mig = dataclasses.replace(sample.gpus[0], mig_mode=True, mig_instances=instances)
    unreadable = dataclasses.replace(sample.gpus[2], mig_mode=True, mig_instances=None)
    in_job = dataclasses.replace(sample.processes[0], job_id="81234", gpu_instance_id=1)
    in_container = dataclasses.replace(sample.processes[2], container_id="0123456789ab")
    return dataclasses.replace(
        sample,
        gpus=(mig, sample.gpus[1], unreadable),
        processes=(in_job, sample.processes[1], in_container),
    )


def test_process_series_carry_job_and_container_ids(serve: Serve) -> None:
    series = scrape(serve(FakeSource(mig_and_jobs_sample())).port)
    by_pid = {
        dict(labels)["pid"]: dict(labels) for labels in series["gpumon_process_gpu_memory_bytes"]
    }
    assert (by_pid["4242"]["job_id"], by_pid["4242"]["container_id"]) == ("81234", "")
    assert (by_pid["99999"]["job_id"], by_pid["99999"]["container_id"]) == ("", "0123456789ab")


def test_mig_instances_have_series_of_their_own(serve: Serve) -> None:
    series = scrape(serve(FakeSource(mig_and_jobs_sample())).port)

    key = (
        ("compute_instance_id", "0"),
        ("gpu", "0"),
        ("gpu_instance_id", "1"),
        ("profile", "3g.40gb"),
        ("uuid", "MIG-aaaa"),
    )
    # Only the instance whose memory is known; none for GPU 2, whose instances are unknown.
    assert series["gpumon_mig_memory_used_bytes"] == {key: 10 * GIB}
    assert series["gpumon_mig_memory_total_bytes"] == {key: 40 * GIB}
    docs = (ROOT / "docs" / "prometheus.md").read_text()
    missing = sorted(name for name in series if f"`{name}`" not in docs)
    assert not missing


def test_a_lost_gpu_has_no_mig_series() -> None:
    sample = mig_and_jobs_sample()
    lost = dataclasses.replace(sample.gpus[0], lost=True)
    families = export.build_families(dataclasses.replace(sample, gpus=(lost,)))
    (used,) = [family for family in families if family.name == "gpumon_mig_memory_used_bytes"]
    assert used.samples == []


def test_host_info_names_the_machine_for_cluster_views(serve: Serve) -> None:
    """The Prometheus source names a node by ``gpumon_host_info``'s hostname."""
    series = scrape(serve(FakeSource(make_sample())).port)
    assert series["gpumon_host_info"] == {(("hostname", "node7"),): 1.0}


def test_no_host_info_without_a_sample() -> None:
    families = export.build_families(None, sampling_errors=1)
    assert "gpumon_host_info" not in {family.name for family in families}
