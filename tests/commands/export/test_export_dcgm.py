"""`gpumon export --dcgm-compat`: dcgm-exporter's series, as dashboards made for it query them.

Scraped over real HTTP, in both formats Prometheus may get (its text format, and OpenMetrics,
which Prometheus asks for first), and parsed with prometheus_client's parsers.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gpumon.commands.export.collector import SampleCollector, build_families
from gpumon.commands.export.dcgm import DCGM_FIELDS, DCGM_LABELS
from gpumon.commands.export.http import Exporter
from gpumon.data.model import Sample
from tests.commands.export.test_export import GIB, UUID0, UUID2, FakeSource, make_sample
from tests.commands.export.test_export_cli import start_process

MIB = 1024**2
OPENMETRICS = "application/openmetrics-text; version=1.0.0"

#: dcgm-exporter's counters that gpumon serves untyped (OpenMetrics would add _total).
UNTYPED = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
}
#: Every default counter of dcgm-exporter that NVML can tell (18 of its 26), with
#: dcgm-exporter's units.
COMPAT_NAMES = UNTYPED | {
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
}
#: Labels dcgm-exporter adds to one series only.
XID_LABELS = ("err_code", "err_msg")

#: What Grafana dashboard 12239 ("NVIDIA DCGM Exporter Dashboard") queries, panel by panel,
#: each filtered by its `instance` and `gpu` variables (both from DCGM_FI_DEV_GPU_TEMP).
DASHBOARD_12239 = {
    "GPU Temperature": "DCGM_FI_DEV_GPU_TEMP",
    "GPU Avg. Temp": "DCGM_FI_DEV_GPU_TEMP",
    "GPU Power Usage": "DCGM_FI_DEV_POWER_USAGE",
    "GPU Power Total": "DCGM_FI_DEV_POWER_USAGE",
    "GPU SM Clocks": "DCGM_FI_DEV_SM_CLOCK",
    "GPU Utilization": "DCGM_FI_DEV_GPU_UTIL",
    "GPU Framebuffer Mem Used": "DCGM_FI_DEV_FB_USED",
    # Needs DCGM's profiling module: gpumon cannot serve it (documented).
    "Tensor Core Utilization": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
}

Series = dict[str, dict[tuple[tuple[str, str], ...], float]]


def compat_sample() -> Sample:
    """make_sample()'s GPUs with every field dcgm-exporter serves: GPU 0 complete, GPU 1
    lost, GPU 2 with N/A power, temperature and clocks."""
    sample = make_sample()
    gpu0 = dataclasses.replace(
        sample.gpus[0],
        clock_memory_mhz=1593,
        memory_used_bytes=12 * GIB + 300 * MIB + 5,  # not whole MiB: dcgm-exporter floors
        memory_reserved_bytes=512 * MIB,
        energy_j=123_456.789,
        utilization_encoder_pct=3,
        utilization_decoder_pct=17,
        temperature_memory_c=72,
        pcie_replays=5,
        remapped_rows_correctable=2,
        remapped_rows_uncorrectable=1,
        remapped_rows_pending=False,
        remapped_rows_failed=True,
        xid_last=79,
        xid_count=1,
    )
    return dataclasses.replace(sample, gpus=(gpu0, *sample.gpus[1:]))


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    server = Exporter(
        FakeSource(compat_sample()),
        SampleCollector(dcgm_compat=True),
        "127.0.0.1",
        0,
        3600.0,
    )
    assert server.first_sample.wait(5)
    yield server
    server.stop()


def fetch(port: int, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode()


def dcgm_series(text: str, openmetrics: bool = False) -> tuple[Series, dict[str, str]]:
    """DCGM_* sample name -> {labels: value}, and family name -> type."""
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    series: Series = {}
    types: dict[str, str] = {}
    for family in parse(text):
        if not family.name.startswith("DCGM_"):
            continue
        types[family.name] = family.type
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            series.setdefault(sample.name, {})[key] = sample.value
    return series, types


def labels(index: int, uuid: str, bus: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            {
                "gpu": str(index),
                "UUID": uuid,
                "pci_bus_id": bus,
                "device": f"nvidia{index}",
                "modelName": "NVIDIA A100-SXM4-80GB",
                "Hostname": "node7",
            }.items()
        )
    )


GPU0 = labels(0, UUID0, "00000000:07:00.0")
GPU2 = labels(2, UUID2, "")


@pytest.mark.parametrize("accept", [None, OPENMETRICS], ids=["text", "openmetrics"])
def test_compat_series_have_dcgm_exporter_names_units_and_labels(
    exporter: Exporter, accept: str | None
) -> None:
    content_type, text = fetch(exporter.port, accept)
    assert ("openmetrics" in content_type) == (accept is not None)
    series, types = dcgm_series(text, openmetrics=accept is not None)

    assert set(series) == COMPAT_NAMES  # the exact names: no _total added to any
    for name in COMPAT_NAMES:
        extra = XID_LABELS if name == "DCGM_FI_DEV_XID_ERRORS" else ()
        for key in series[name]:
            assert tuple(name for name, _ in key) == tuple(sorted((*DCGM_LABELS, *extra)))
        # every one for the complete GPU
        assert GPU0 in {tuple(item for item in key if item[0] not in extra) for key in series[name]}
    # dcgm-exporter's units: C, W, MHz, percent, MiB (whole), mJ.
    assert series["DCGM_FI_DEV_GPU_TEMP"][GPU0] == 61
    assert series["DCGM_FI_DEV_POWER_USAGE"][GPU0] == 312.5
    assert series["DCGM_FI_DEV_SM_CLOCK"][GPU0] == 1410
    assert series["DCGM_FI_DEV_MEM_CLOCK"][GPU0] == 1593
    assert series["DCGM_FI_DEV_GPU_UTIL"][GPU0] == 87
    assert series["DCGM_FI_DEV_MEM_COPY_UTIL"][GPU0] == 40
    assert series["DCGM_FI_DEV_FB_USED"][GPU0] == 12 * 1024 + 300
    assert series["DCGM_FI_DEV_FB_RESERVED"][GPU0] == 512
    assert series["DCGM_FI_DEV_FB_FREE"][GPU0] == 80 * 1024 - (12 * 1024 + 300) - 512 - 1
    assert series["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][GPU0] == 123_456_789
    assert series["DCGM_FI_DEV_MEMORY_TEMP"][GPU0] == 72
    assert series["DCGM_FI_DEV_ENC_UTIL"][GPU0] == 3
    assert series["DCGM_FI_DEV_DEC_UTIL"][GPU0] == 17
    assert series["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][GPU0] == 5
    assert series["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"][GPU0] == 2
    assert series["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"][GPU0] == 1
    assert series["DCGM_FI_DEV_ROW_REMAP_FAILURE"][GPU0] == 1
    xid = (*GPU0, ("err_code", "79"), ("err_msg", "GPU has fallen off the bus"))
    assert series["DCGM_FI_DEV_XID_ERRORS"] == {tuple(sorted(xid)): 79}
    assert {types[name] for name in COMPAT_NAMES - UNTYPED} == {"gauge"}
    assert {types[name] for name in UNTYPED} == {"unknown"}


def test_lost_gpus_and_na_readings_have_no_compat_series(exporter: Exporter) -> None:
    series, _ = dcgm_series(fetch(exporter.port)[1])
    every_gpu = {dict(key)["gpu"] for values in series.values() for key in values}
    assert "1" not in every_gpu  # lost: no readings, not zeros
    # GPU 2 reports memory and utilisation only; without v2 memory info free is total - used.
    assert {name for name, values in series.items() if GPU2 in values} == {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
    }
    assert series["DCGM_FI_DEV_FB_FREE"][GPU2] == 80 * 1024


def test_gpumon_metrics_stay_and_compat_is_off_by_default() -> None:
    sample = compat_sample()
    plain = {family.name for family in build_families(sample)}
    compat = {family.name for family in build_families(sample, dcgm_compat=True)}
    assert not any(name.startswith("DCGM_") for name in plain)
    assert compat == plain | COMPAT_NAMES


def test_grafana_12239_panels_find_their_series(exporter: Exporter) -> None:
    series, _ = dcgm_series(fetch(exporter.port)[1])
    # The dashboard's variables: label_values(DCGM_FI_DEV_GPU_TEMP, instance / gpu).
    assert {dict(key)["gpu"] for key in series["DCGM_FI_DEV_GPU_TEMP"]} == {"0"}
    working = [panel for panel, name in DASHBOARD_12239.items() if series.get(name)]
    assert len(working) == 7
    assert set(DASHBOARD_12239) - set(working) == {"Tensor Core Utilization"}


def test_simulated_compat_series_say_so() -> None:
    sample = dataclasses.replace(compat_sample(), simulated=True)
    families = build_families(sample, dcgm_compat=True)
    dcgm = [family for family in families if family.name.startswith("DCGM_")]
    assert dcgm and all("[DEMO" in family.documentation for family in dcgm)
    assert any(f.name == "gpumon_simulated" and f.samples[0].value == 1 for f in families)


def test_every_compat_field_is_documented() -> None:
    from tests.commands.export.test_export import ROOT

    docs = (ROOT / "docs" / "prometheus.md").read_text()
    assert {field.name for field in DCGM_FIELDS} == COMPAT_NAMES
    missing = [name for name in COMPAT_NAMES if f"`{name}`" not in docs]
    assert not missing
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" in docs  # says why that panel stays empty


def test_demo_exporter_process_with_dcgm_compat() -> None:
    process = start_process(
        "--demo", "--demo-gpus", "2", "--dcgm-compat", "--listen", "127.0.0.1:0"
    )
    try:
        assert process.stderr is not None
        match = re.search(r"127\.0\.0\.1:(\d+)/metrics", process.stderr.readline())
        assert match
        series, _ = dcgm_series(fetch(int(match.group(1)))[1])
        # The demo's RTX A6000 (GDDR6) has no memory temperature and no row remapping.
        assert set(series) == COMPAT_NAMES - {
            "DCGM_FI_DEV_MEMORY_TEMP",
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        }
        assert len(series["DCGM_FI_DEV_GPU_UTIL"]) == 2
        assert {dict(key)["Hostname"] for key in series["DCGM_FI_DEV_GPU_UTIL"]} == {
            "demo-gpu-server"
        }
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_compat_exposition(exporter: Exporter) -> None:
    """promtool's linter on the whole scrape, compat series included: the only complaints are
    dcgm-exporter's own camelCase label names (``modelName``, ``Hostname``) and its
    ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER`` name, kept for compatibility; anything else fails."""
    _, text = fetch(exporter.port)
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    expected = re.compile(
        r"DCGM_\w+ label names should be written in 'snake_case' not 'camelCase'"
        r"|DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'"
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    problems = [line for line in lines if not expected.fullmatch(line)]
    assert not problems, problems
    assert lines  # the camelCase labels (modelName, ...) are there, as dcgm-exporter has them
