"""The Prometheus source: real Prometheus answers, replayed over HTTP on loopback.

The answers in tests/support/fixtures/prometheus were recorded from a real Prometheus scraping real
exporters (``record.py`` there says how, and regenerates them). A small HTTP server replays
them by query, so the source's whole path runs: its requests, urllib, JSON, the parser.
"""

from __future__ import annotations

import copy
import http.server
import json
import math
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon.commands.export.dcgm import DCGM_FIELDS
from gpumon.data import cluster
from gpumon.data.cluster import ExporterKind, NodeState
from gpumon.data.fields import FIELDS
from gpumon.data.free import free_gpu_indices
from gpumon.sources.prometheus import source as prometheus
from gpumon.sources.prometheus.aggregate import rows_queries
from gpumon.sources.prometheus.client import Backoff, PrometheusError, _api_entries, _Client
from gpumon.sources.prometheus.queries import DATA_QUERY, DCGM_READINGS, QUERIES, scrape_interval
from gpumon.sources.prometheus.source import PrometheusSource
from tests.support.hostile import unsafe_characters
from tests.support.prometheus_replay import (
    FIXTURES,
    ROLES,
    Replay,
    Reply,
    load,
    refreshes,
    series,
)

MIB = 1024**2
FREE_MIB = 1024


@pytest.fixture
def prom() -> Iterator[Replay]:
    replay = Replay()
    yield replay
    replay.close()


def source_for(replay: Replay, **options: Any) -> PrometheusSource:
    return PrometheusSource(replay.url, **options)


def sample_of(replay: Replay, scenario: str) -> cluster.ClusterSample:
    replay.serve(scenario)
    result = source_for(replay).sample(detail=True)
    assert result.error is None, result.error
    return result


# --- gpumon's exporter ----------------------------------------------------------------------


def test_a_gpumon_exporter_is_one_node_with_its_gpus_and_processes(prom: Replay) -> None:
    answers = load("demo")
    result = sample_of(prom, "demo")

    (node,) = result.nodes
    assert (node.name, node.exporter, node.state) == (
        "demo-gpu-server",
        ExporterKind.GPUMON,
        NodeState.UP,
    )
    assert node.job == "demo"
    assert node.sample.simulated and result.simulated
    assert node.sample.driver is not None and node.sample.driver.driver_version == "550.54.15"
    assert [gpu.index for gpu in node.gpus] == [0, 1, 2, 3]
    for info in series(answers["data"], "gpumon_gpu_info"):
        gpu = node.gpus[int(info["metric"]["gpu"])]
        assert (gpu.uuid, gpu.name, gpu.pci_bus_id) == (
            info["metric"]["uuid"],
            info["metric"]["name"],
            info["metric"]["pci_bus_id"],
        )
    served = series(answers["data"], "gpumon_process_gpu_memory_bytes")
    assert len(node.sample.processes) == len(served) > 0
    assert node.sample.processes_read
    for item in served:
        labels = item["metric"]
        (process,) = [p for p in node.sample.processes if p.pid == int(labels["pid"])]
        assert process.gpu_index == int(labels["gpu"])
        assert process.gpu_uuid == labels["uuid"]
        assert process.user == (labels.get("user") or None)
        assert process.command == (labels.get("process") or None)  # the base name only
        assert process.gpu_memory_bytes == int(float(item["value"][1]))
        assert process.job_id == labels.get("job_id")
        assert process.container_id == labels.get("container_id")
        assert (process.visible, process.is_current_user) == (True, False)
    assert all(gpu.processes_error is None for gpu in node.gpus)


def test_every_served_reading_comes_back_in_the_models_units(prom: Replay) -> None:
    """Ratios back to percent, hertz to MHz, through the field table's own scale."""
    answers = load("demo")
    (node,) = sample_of(prom, "demo").nodes
    checked = set()
    for spec_field in FIELDS:
        spec = spec_field.prometheus
        if spec is None or spec.kind == "state":
            continue
        name = spec.name + ("_total" if spec.kind == "counter" else "")
        for item in series(answers["data"], name):
            gpu = node.gpus[int(item["metric"]["gpu"])]
            expected = float(item["value"][1]) / spec.scale
            assert spec_field.read(gpu) == pytest.approx(expected, abs=0.5), name
            checked.add(spec_field.key)
    assert {"util", "mem_used", "temp", "power", "sm_clock", "pstate", "energy"} <= checked
    assert isinstance(node.gpus[0].utilization_gpu_pct, int)
    assert isinstance(node.gpus[0].clock_sm_mhz, int)
    assert isinstance(node.gpus[0].persistence_mode, bool)


def test_names_states_mig_and_a_lost_gpu(prom: Replay) -> None:
    """gpumon's exporter on dgx-07 (recorded from a fixed sample): clock reasons by name,
    the compute mode, MIG instances, GPU 3 lost with its identity kept."""
    result = sample_of(prom, "shared_host")
    (node,) = [node for node in result.nodes if node.exporter is ExporterKind.GPUMON]
    gpu0, gpu1, gpu2, gpu3 = node.gpus
    assert gpu0.clock_event_reasons == ("sw_power_cap", "sync_boost")
    assert gpu1.clock_event_reasons == ("gpu_idle",)
    assert gpu0.compute_mode == "Default"
    assert gpu0.utilization_gpu_pct == 97 and gpu0.memory_used_bytes == 60 * 1024**3
    assert gpu0.energy_j == pytest.approx(123456.5)
    assert gpu2.utilization_gpu_pct is None  # MIG: N/A, as the exporter leaves it out
    assert gpu2.mig_mode is True
    assert gpu2.mig_instances is not None
    assert [(m.index, m.gpu_instance_id, m.profile) for m in gpu2.mig_instances] == [
        (0, 1, "3g.40gb"),
        (1, 2, "3g.40gb"),
    ]
    assert gpu2.mig_instances[0].memory_used_bytes == 20 * 1024**3
    assert gpu3.lost and gpu3.temperature_c is None and gpu3.uuid is not None
    assert free_gpu_indices(node.sample, FREE_MIB) == {1}
    assert [(p.pid, p.job_id, p.container_id) for p in node.sample.processes] == [
        (41234, "81234", None),
        (5150, None, "0123456789ab"),
        (5151, None, "0123456789ab"),
    ]


def test_partial_data_reads_unknown_never_free(prom: Replay) -> None:
    """GPU 1 has no memory reading and no process count (the exporter leaves out what it
    does not know); GPU 0 counts two processes and lists one (the other's memory is N/A)."""
    (node,) = sample_of(prom, "partial").nodes
    gpu0, gpu1, _ = node.gpus
    assert gpu1.memory_used_bytes is None and gpu1.memory_total_bytes is not None
    assert gpu1.processes_error is not None
    assert gpu0.processes_error is not None and "counts 2" in gpu0.processes_error
    assert free_gpu_indices(node.sample, FREE_MIB) == frozenset()
    assert cluster.summarize(node, FREE_MIB).free_gpus == 0


def test_nan_readings_are_na(prom: Replay) -> None:
    answers = load("nan")
    nan_series = [
        item for item in series(answers["data"]) if item["value"][1] == "NaN"
    ]  # recorded: Prometheus passes NaN on as the string "NaN"
    assert {item["metric"]["__name__"] for item in nan_series} == {
        "gpumon_gpu_temperature_celsius",
        "gpumon_gpu_power_draw_watts",
    }
    (node,) = sample_of(prom, "nan").nodes
    assert node.gpus[0].temperature_c is None and node.gpus[0].power_draw_w is None
    assert node.gpus[1].temperature_c == 30 and node.gpus[1].power_draw_w == 55.5


def test_hostile_labels_are_made_safe(prom: Replay) -> None:
    """Host, GPU, user and process names come from other machines: escapes, bidi overrides
    and C1 controls recorded through a real Prometheus reach the model defused."""
    (node,) = sample_of(prom, "hostile").nodes
    (process,) = node.sample.processes
    texts = [node.name, node.sample.host.hostname, node.gpus[0].name, process.user, process.command]
    assert all(text for text in texts)
    for text in texts:
        assert unsafe_characters(text or "") == [], text
    assert node.name.startswith("evil?]0;owned?host")


# --- dcgm-exporter --------------------------------------------------------------------------


def test_a_dcgm_exporter_node_has_its_readings_and_no_processes(prom: Replay) -> None:
    (node,) = sample_of(prom, "dcgm").nodes
    assert (node.name, node.exporter, node.state) == ("dgx-07", ExporterKind.DCGM, NodeState.UP)
    gpu0, gpu1 = node.gpus
    assert gpu0.uuid == "GPU-5f2a3c1e-0d7b-4a51-9c1f-6b8e2d4f1a00"
    assert (gpu0.name, gpu0.pci_bus_id) == ("NVIDIA A100-SXM4-80GB", "00000000:07:00.0")
    assert gpu0.utilization_gpu_pct == 87 and gpu0.utilization_memory_pct == 41
    assert gpu0.memory_used_bytes == 40854 * MIB and gpu0.memory_free_bytes == 40183 * MIB
    assert gpu0.memory_total_bytes == (40854 + 40183 + 483) * MIB
    assert gpu0.temperature_c == 61 and gpu0.power_draw_w == pytest.approx(312.457)
    assert gpu0.clock_sm_mhz == 1410 and gpu0.energy_j == pytest.approx(8123456.789)
    # What dcgm-exporter's defaults do not serve is N/A, never 0.
    assert gpu0.fan_pct is None and gpu0.power_limit_w is None and gpu0.performance_state is None
    assert node.sample.driver is None
    assert not node.sample.processes_read and node.sample.processes == ()
    summary = cluster.summarize(node, FREE_MIB)
    assert summary.free_gpus is None and summary.top_user is None
    assert gpu1.memory_used_bytes == 0


def test_every_dcgm_series_gpumon_can_serve_is_read_back(prom: Replay) -> None:
    """gpumon's ``--dcgm-compat`` series (dcgm-exporter's names, units and labels) of a demo
    sample, served as a dcgm-only target, read back as the sample's values."""
    from gpumon.commands.export.collector import build_families
    from gpumon.sources.demo import DemoSource

    assert {item.name for item in DCGM_FIELDS} <= set(DCGM_READINGS)
    truth = DemoSource(seed=3, clock=lambda: 1_700_000_000.0).sample()
    result = []
    for family in build_families(truth, dcgm_compat=True):
        if family.name.startswith("DCGM_"):
            for item in family.samples:
                labels = {
                    "__name__": item.name,
                    "instance": "dgx:9400",
                    "job": "dcgm",
                    **item.labels,
                }
                result.append({"metric": labels, "value": [1_700_000_001.0, repr(item.value)]})
    answers = copy.deepcopy(load("dcgm"))
    answers["data"]["data"]["result"] = result
    for item in series(answers["targets"]):
        item["metric"]["instance"] = "dgx:9400"
        if item["metric"]["gpumon_fact"] in ("scraped", "last_up"):
            item["value"][1] = "1700000000.5"
        item["value"][0] = 1_700_000_001.0
    answers["identity"]["data"]["result"] = []
    prom.serve(answers)
    (node,) = source_for(prom).sample(detail=True).nodes
    assert node.exporter is ExporterKind.DCGM
    for gpu, real in zip(node.gpus, truth.gpus, strict=True):
        assert gpu.uuid == real.uuid and gpu.name == real.name
        assert gpu.temperature_c == real.temperature_c
        assert gpu.power_draw_w == pytest.approx(real.power_draw_w)
        assert gpu.utilization_gpu_pct == real.utilization_gpu_pct
        assert gpu.utilization_memory_pct == real.utilization_memory_pct
        assert (
            gpu.clock_sm_mhz == real.clock_sm_mhz and gpu.clock_memory_mhz == real.clock_memory_mhz
        )
        assert real.memory_used_bytes is not None and gpu.memory_used_bytes is not None
        assert abs(gpu.memory_used_bytes - real.memory_used_bytes) < MIB  # whole MiB
        assert gpu.energy_j == pytest.approx(real.energy_j, abs=0.001)
    assert node.state is NodeState.UP


def test_two_exporters_on_one_host_are_two_nodes(prom: Replay) -> None:
    """gpumon's exporter and dcgm-exporter both on dgx-07: never merged, each named with its
    instance."""
    result = sample_of(prom, "shared_host")
    assert len(result.nodes) == 2
    assert {node.exporter for node in result.nodes} == {ExporterKind.GPUMON, ExporterKind.DCGM}
    for node in result.nodes:
        assert node.name == f"dgx-07 ({node.instance})"
        assert node.sample.host.hostname == "dgx-07"


def test_a_target_serving_both_kinds_is_gpumons(prom: Replay) -> None:
    """``gpumon export --dcgm-compat`` serves both: its own, richer series are read."""
    answers = copy.deepcopy(load("demo"))
    dcgm = copy.deepcopy(series(load("dcgm")["data"], "DCGM_FI_DEV_GPU_TEMP"))
    instance = series(answers["data"])[0]["metric"]["instance"]
    for item in dcgm:
        item["metric"].update(instance=instance, job="demo", Hostname="demo-gpu-server")
    answers["data"]["data"]["result"] += dcgm
    prom.serve(answers)
    (node,) = source_for(prom).sample(detail=True).nodes
    assert node.exporter is ExporterKind.GPUMON and node.sample.processes_read


# --- Staleness ------------------------------------------------------------------------------


def test_a_stopped_exporter_is_down_with_its_identity_and_times(prom: Replay) -> None:
    """Recorded: one demo exporter up, one stopped 6 s before the queries, one port nothing
    ever listened on; all in one job."""
    result = sample_of(prom, "down")
    (up,) = [node for node in result.nodes if node.state is NodeState.UP]
    (never,) = [node for node in result.nodes if node.exporter is ExporterKind.UNKNOWN]
    (stopped,) = [node for node in result.nodes if node not in (up, never)]
    assert (up.state, up.exporter) == (NodeState.UP, ExporterKind.GPUMON)
    assert (stopped.state, stopped.exporter) == (NodeState.DOWN, ExporterKind.GPUMON)
    # Named by its host label even though it serves nothing now, beside its twin.
    assert stopped.name == f"demo-gpu-server ({stopped.instance})"
    assert up.name == f"demo-gpu-server ({up.instance})"
    assert [gpu.uuid for gpu in stopped.gpus] == [gpu.uuid for gpu in up.gpus]
    assert all(gpu.utilization_gpu_pct is None for gpu in stopped.gpus)  # no reading is made up
    assert stopped.last_seen_s is not None and stopped.down_since_s is not None
    assert stopped.last_seen_s < stopped.down_since_s <= result.timestamp_s
    assert result.timestamp_s - stopped.down_since_s < 25  # stopped ~6 s before, 15 s steps
    assert (never.state, never.exporter, never.name) == (
        NodeState.DOWN,
        ExporterKind.UNKNOWN,
        never.instance,
    )
    assert never.last_seen_s is None and never.down_since_s is None
    for node in (stopped, never):
        assert not node.usable
        assert cluster.summarize(node, FREE_MIB).free_gpus is None
    assert result.scrape_interval_s == pytest.approx(1.0, abs=0.1)  # measured, not configured


def test_series_older_than_three_scrape_intervals_are_stale(prom: Replay) -> None:
    """The demo's answers as Prometheus gives them 200 s after scraping stopped."""
    result = sample_of(prom, "stale")
    (node,) = result.nodes
    assert node.state is NodeState.STALE
    assert node.last_seen_s == pytest.approx(result.timestamp_s - 200, abs=2)
    assert len(node.gpus) == 4  # the last known GPUs are kept...
    assert cluster.summarize(node, FREE_MIB).free_gpus is None  # ...and never free


def test_staleness_uses_the_servers_clock_not_ours(prom: Replay) -> None:
    """A client clock a day off must not make every node stale."""
    prom.serve("demo")
    result = source_for(prom, clock=lambda: time.time() + 86_400).sample(detail=True)
    assert [node.state for node in result.nodes] == [NodeState.UP]


def test_a_node_that_goes_down_keeps_its_last_readings(prom: Replay) -> None:
    source = source_for(prom)
    prom.serve("demo")
    (before,) = source.sample(detail=True).nodes
    answers = copy.deepcopy(load("demo"))
    for item in series(answers["targets"]):
        if item["metric"]["gpumon_fact"] == "scraped":  # and told down: up 0
            down = copy.deepcopy(item)
            down["metric"]["gpumon_fact"], down["value"][1] = "up", "0"
            answers["targets"]["data"]["result"].append(down)
    answers["data"]["data"]["result"] = []
    prom.serve(answers)
    (after,) = source.sample(detail=True).nodes
    assert after.state is NodeState.DOWN
    assert after.name == before.name and after.sample == before.sample
    assert after.gpus[0].utilization_gpu_pct == before.gpus[0].utilization_gpu_pct


def test_a_target_gone_from_prometheus_is_stale(prom: Replay) -> None:
    """Removed from the scrape config: no ``up`` now, seen within the hour."""
    answers = copy.deepcopy(load("demo"))
    (scraped,) = [i for i in series(answers["targets"]) if i["metric"]["gpumon_fact"] == "scraped"]
    scraped["metric"]["gpumon_fact"] = "last_up"  # told for a target not up now
    answers["targets"]["data"]["result"] = [scraped]
    answers["data"]["data"]["result"] = []
    prom.serve(answers)
    (node,) = source_for(prom).sample(detail=True).nodes
    assert node.state is NodeState.STALE and node.last_seen_s is not None


def test_an_exporter_that_serves_no_gpu_series_is_stale(prom: Replay) -> None:
    """gpumon's exporter drops its GPU series when a sample fails (``up`` stays 1): the node
    is STALE with its last known GPUs, not UP with none, and none of them is free."""
    source = source_for(prom)
    prom.serve("demo")
    (before,) = source.sample(detail=True).nodes
    failing = copy.deepcopy(load("demo"))
    failing["data"]["data"]["result"] = [
        item
        for item in series(failing["data"])
        if item["metric"]["__name__"] == "gpumon_simulated"  # what such a scrape still has
    ]
    prom.serve(failing)
    (after,) = source.sample(detail=True).nodes
    assert (after.state, after.exporter) == (NodeState.STALE, ExporterKind.GPUMON)
    assert after.sample == before.sample
    assert cluster.summarize(after, FREE_MIB).free_gpus is None
    (fresh,) = source_for(prom).sample(detail=True).nodes  # a first sample: the hour's identities
    assert fresh.state is NodeState.STALE and len(fresh.gpus) == 4
    assert fresh.name == "demo-gpu-server"


def test_extra_labels_of_thanos_or_federation_change_nothing(prom: Replay) -> None:
    answers = copy.deepcopy(load("demo"))
    for role in ROLES:
        for item in series(answers[role]):
            item["metric"]["prometheus_replica"] = "prom-0"
    prom.serve(answers)
    (node,) = source_for(prom).sample(detail=True).nodes
    (expected,) = sample_of(prom, "demo").nodes
    assert node == expected
    assert node.sample.simulated


_INTERVALS_TEST = """
rule_files: []
tests:
  - interval: 15s
    input_series:
      - series: 'up{instance="old:1", job="j"}'
        values: '1x40'
      - series: 'up{instance="young:1", job="j"}'
        values: '_x31 1x8'
      - series: 'up{instance="new:1", job="j"}'
        values: '_x38 1x1'
    promql_expr_test:
      - expr: 'EXPRESSION'
        eval_time: 10m7s
        exp_samples:
          - labels: '{instance="old:1", job="j"}'
            value: 15
          - labels: '{instance="young:1", job="j"}'
            value: 15
      - expr: 'EXPRESSION'
        eval_time: 10m
        exp_samples:
          - labels: '{instance="old:1", job="j"}'
            value: 15
          - labels: '{instance="young:1", job="j"}'
            value: 15
"""


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian: prometheus)")
def test_the_scrape_interval_is_measured_over_the_longest_window_a_target_is_older_than(
    tmp_path: Path,
) -> None:
    """Every 15 s: over 5 min for a target scraped for 10, over 1 min for one scraped for 2
    (from the scrape before the window, so that the span holds as many intervals as the
    window's scrapes, also where a scrape is at the window's very start); none yet for one
    first scraped 37 s before."""
    test = tmp_path / "intervals.test.yml"
    test.write_text(_INTERVALS_TEST.replace("EXPRESSION", scrape_interval()))
    result = subprocess.run(
        ["promtool", "test", "rules", test.name],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_targets_of_jobs_without_gpus_are_not_nodes(prom: Replay) -> None:
    """Prometheus' own target (or node_exporter's) is not a GPU node."""
    answers = copy.deepcopy(load("demo"))
    for item in copy.deepcopy(series(answers["targets"])):
        item["metric"].update(instance="127.0.0.1:9090", job="prometheus")
        answers["targets"]["data"]["result"].append(item)
    prom.serve(answers)
    assert [node.job for node in source_for(prom).sample(detail=True).nodes] == ["demo"]


def test_nothing_scraped_is_no_node_and_no_error(prom: Replay) -> None:
    result = sample_of(prom, "empty")
    assert result.nodes == () and not result.stale and result.scrape_interval_s is None


# --- Scale ----------------------------------------------------------------------------------


def cluster_of(count: int) -> dict[str, Any]:
    """The demo target's answers repeated for ``count`` targets."""
    answers = load("demo")
    grown = copy.deepcopy(answers)
    for role in ROLES:
        result = []
        for number in range(count):
            for item in copy.deepcopy(series(answers[role])):
                item["metric"]["instance"] = f"gpu-node-{number:03d}:9402"
                result.append(item)
        grown[role]["data"]["result"] = result
    return grown


def test_a_refresh_costs_the_same_queries_for_2_or_100_nodes(prom: Replay) -> None:
    counts = {}
    for size in (2, 100):
        prom.serve(cluster_of(size))
        prom.requests.clear()
        result = source_for(prom).sample(detail=True)
        assert len(result.nodes) == size
        assert len({node.name for node in result.nodes}) == size  # one host name, unique names
        counts[size] = list(prom.queries)
    # The node rows' aggregate queries (from the rules first: not recorded here), then the
    # per-series path's three queries.
    rows = [rows_queries(1024, rules=True), rows_queries(1024, rules=False)]
    assert refreshes(counts[2], *rows)[0] == refreshes(counts[100], *rows)[0]
    asked, expected = refreshes(counts[2], *rows, *([q] for q in QUERIES))
    assert asked == expected


def test_the_data_query_names_every_field_of_the_table() -> None:
    """One selector for all series; gpumon's names come from the field table, not a copy."""
    names = set(DATA_QUERY.split('"')[1].split("|"))
    for spec_field in FIELDS:
        spec = spec_field.prometheus
        assert spec is not None
        assert spec.name + ("_total" if spec.kind == "counter" else "") in names
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"} <= names
    assert {"gpumon_host_info", "gpumon_process_gpu_memory_bytes", "gpumon_gpu_up"} <= names


# --- Failures -------------------------------------------------------------------------------


def failing_after_success(prom: Replay, reply: Reply, **options: Any) -> tuple[Any, Any, Any]:
    source = source_for(prom, **options)
    prom.serve("down")
    good = source.sample(detail=True)
    assert good.error is None
    prom.reply = reply
    return source, good, source.sample(detail=True)


def assert_kept_and_marked(good: Any, bad: Any) -> None:
    assert bad.error and "\n" not in bad.error
    assert bad.stale
    assert [node.name for node in bad.nodes] == [node.name for node in good.nodes]
    assert [node.sample for node in bad.nodes] == [node.sample for node in good.nodes]
    for before, after in zip(good.nodes, bad.nodes, strict=True):
        # Data that is no longer current is never counted free; DOWN stays DOWN.
        expected = NodeState.STALE if before.state is NodeState.UP else before.state
        assert after.state is expected


PROMETHEUS_ERROR = b'{"status":"error","errorType":"unavailable","error":"query queue full"}'
VECTOR = b'{"status":"success","data":{"resultType":"vector","result":['
ENTRY = b'{"metric":{"__name__":"up","instance":"a:1","job":"j"},"value":[1,"1"]}'


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(401, b"Unauthorized"), "HTTP 401"),
        (Reply(403, b"Forbidden"), "HTTP 403"),
        (Reply(500, b"<html>oops</html>"), "HTTP 500"),
        (Reply(503, PROMETHEUS_ERROR), "query queue full"),
        (Reply(200, b"<html>Grafana login</html>"), "not JSON"),
        (Reply(200, b'{"status": "success", "data": "\xff\xfe\xfd"}'), "not JSON"),
        (Reply(200, b'{"hello": "world"}'), "not Prometheus' API JSON"),
        (
            Reply(422, b'{"status":"error","errorType":"execution","error":"too many samples"}'),
            "too many samples",
        ),
        (Reply(200, b"\x1f\x8b broken", {"Content-Encoding": "gzip"}), "gzip"),
        # Laid out as Prometheus writes answers, whose entries are read one at a time.
        (Reply(200, VECTOR + ENTRY + b"," + ENTRY[:30]), "not JSON"),
        (Reply(200, VECTOR + ENTRY + b"," + ENTRY + b",]}}"), "not JSON"),
        (Reply(200, VECTOR + ENTRY + ENTRY + b"]}}"), "not JSON"),
        (Reply(200, VECTOR + ENTRY + b"]}} and more"), "not JSON"),
        (Reply(200, VECTOR + ENTRY + b'],"result":[' + ENTRY + b"]}}"), "two results"),
        (Reply(200, VECTOR + ENTRY + b']},"status":"error","error":"said last"}'), "said last"),
    ],
    ids=[
        *("401", "403", "500", "503", "html", "not-utf-8", "other-json", "422", "bad-gzip"),
        *("cut-short", "comma-before-end", "no-comma", "more-after", "two-results", "error-last"),
    ],
)
def test_an_error_keeps_the_last_nodes_marked_stale(
    prom: Replay, reply: Reply, expected: str
) -> None:
    _, good, bad = failing_after_success(prom, reply)
    assert_kept_and_marked(good, bad)
    assert expected in bad.error
    assert bad.error.startswith(f"Prometheus at {prom.url}")


def test_an_answer_laid_out_as_prometheus_writes_it_is_decoded_an_entry_at_a_time() -> None:
    """Each entry is decoded as it is read (what is not kept of it is freed), so a broken
    entry is found only once those before it are read."""
    client = _Client("http://prometheus.example", {}, None, None, 5.0, None)
    entries = _api_entries((VECTOR + ENTRY + b"," + ENTRY[:30]).decode(), client)
    assert next(entries)["metric"]["instance"] == "a:1"
    with pytest.raises(PrometheusError, match="not JSON"):
        next(entries)


@pytest.mark.parametrize("scenario", ["demo", "dcgm", "down", "mig", "nan", "hostile"])
def test_an_answer_laid_out_with_spaces_gives_the_same_rows(prom: Replay, scenario: str) -> None:
    """Answers laid out as Prometheus writes them are read an entry at a time; the same
    answers with spaces (as another server may write them) are read whole, to the same rows."""
    prom.serve(scenario)
    compact = source_for(prom).sample()
    prom.reply = Reply(spaced=True)
    spaced = source_for(prom).sample()
    assert compact.error is None and spaced.error is None, (compact.error, spaced.error)
    assert compact.rows and spaced.rows == compact.rows
    assert spaced.fleet == compact.fleet


def test_a_server_that_never_answers_times_out(prom: Replay) -> None:
    """Only the request that hangs gets the short timeout: the healthy first sample has a
    generous one, so a loaded machine cannot fail it."""
    source = source_for(prom, timeout_s=30)
    prom.serve("down")
    good = source.sample(detail=True)
    assert good.error is None, good.error
    source._client.timeout_s = 0.3  # as PrometheusSource(timeout_s=0.3) sets it
    prom.reply = Reply(hang_s=10)
    started = time.monotonic()
    bad = source.sample(detail=True)
    assert time.monotonic() - started < 5  # the hang is 10 s: the timeout ended it
    assert_kept_and_marked(good, bad)
    assert "no answer within 0.3 s" in bad.error


def test_connection_refused_never_raises() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = PrometheusSource(f"http://127.0.0.1:{port}", timeout_s=1).sample(detail=True)
    assert result.stale and result.nodes == ()
    assert result.error is not None and "cannot connect" in result.error


def test_retries_back_off_and_reset_on_success(prom: Replay) -> None:
    source = source_for(prom)
    prom.serve("demo")
    prom.reply = Reply(503, PROMETHEUS_ERROR)
    delays = []
    for _ in range(8):
        source.sample(detail=True)
        delays.append(source.next_retry_s)
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]
    prom.reply = Reply()
    assert source.sample(detail=True).error is None and source.next_retry_s is None


def test_backoff_alone() -> None:
    backoff = Backoff(initial_s=0.5, maximum_s=3)
    assert backoff.delay_s is None
    assert [backoff.failed() for _ in range(5)] == [0.5, 1, 2, 3, 3]
    backoff.succeeded()
    assert backoff.delay_s is None and backoff.failed() == 0.5


def test_an_unexpected_answer_shape_is_an_error_not_a_crash(prom: Replay) -> None:
    answers = load("demo")
    answers["targets"] = {"status": "success", "data": {"resultType": "vector", "result": [1, {}]}}
    prom.serve(answers)
    result = source_for(prom).sample(detail=True)  # malformed entries are skipped
    assert result.error is None


# --- Access ---------------------------------------------------------------------------------

TOKEN = "s3cr3t-t0ken-value"
PASSWORD = "hunter2-pass"


def test_headers_and_basic_auth_are_sent(prom: Replay) -> None:
    prom.serve("demo")
    PrometheusSource(prom.url, headers={"Authorization": f"Bearer {TOKEN}"}).sample(detail=True)
    assert {headers["authorization"] for _, _, headers in prom.requests} == {f"Bearer {TOKEN}"}
    prom.requests.clear()
    PrometheusSource(
        prom.url, basic_auth=("alice", PASSWORD), headers={"X-Scope-OrgID": "t1"}
    ).sample(detail=True)
    _, _, headers = prom.requests[0]
    assert headers["authorization"].startswith("Basic ") and headers["x-scope-orgid"] == "t1"
    prom.requests.clear()
    host = prom.url.removeprefix("http://")
    source = PrometheusSource(f"http://alice:{PASSWORD}@{host}/")
    assert source.url == prom.url  # no credentials in what is shown
    source.sample(detail=True)
    assert prom.requests[0][2]["authorization"].startswith("Basic ")
    assert prom.requests[0][0] == "/api/v1/query"


def test_a_path_prefix_is_kept(prom: Replay) -> None:
    prom.serve("demo")
    PrometheusSource(prom.url + "/prometheus/").sample(detail=True)
    assert {path for path, _, _ in prom.requests} == {"/prometheus/api/v1/query"}


def test_credentials_never_appear_in_errors_or_repr(prom: Replay) -> None:
    """Even a server that echoes the Authorization header back in its error: a 401 shows
    none of the server's text, a 500 shows it with every credential masked."""
    host = prom.url.removeprefix("http://")
    source = PrometheusSource(
        f"http://bob:{PASSWORD}@{host}",
        headers={"Authorization": f"Bearer {TOKEN}", "X-Api-Key": TOKEN},
    )
    echo = json.dumps(
        {"status": "error", "errorType": "auth", "error": f"bad token Bearer {TOKEN} {PASSWORD}"}
    ).encode()
    for status in (401, 500):
        prom.reply = Reply(status, echo)
        result = source.sample(detail=True)
        assert result.error is not None and f"HTTP {status}" in result.error
        shown = [result.error, repr(source), str(result), source.url]
        for text in shown:
            assert TOKEN not in text and PASSWORD not in text, text
        assert ("bad token" in result.error) is (status == 500)
    assert "bad token *** ***" in result.error
    assert "X-Api-Key" in repr(source)  # header names are fine to show
    with pytest.raises(PrometheusError) as raised:
        source.history("anything", 0, "util")
    assert TOKEN not in str(raised.value) and PASSWORD not in str(raised.value)


class Redirecting(http.server.BaseHTTPRequestHandler):
    target = ""
    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.target:
            self.send_response(302)
            self.send_header("Location", self.target)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


def test_a_redirect_is_not_followed_and_credentials_stay_home() -> None:
    elsewhere = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Elsewhere", (Redirecting,), {"seen": []})
    )
    port = elsewhere.server_address[1]
    first = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0),
        type("First", (Redirecting,), {"seen": [], "target": f"http://127.0.0.1:{port}/x"}),
    )
    for server in (elsewhere, first):
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
    try:
        url = f"http://127.0.0.1:{first.server_address[1]}"
        source = PrometheusSource(url, headers={"Authorization": f"Bearer {TOKEN}"})
        result = source.sample(detail=True)
    finally:
        for server in (elsewhere, first):
            server.shutdown()
            server.server_close()
    assert result.error is not None
    assert f"redirects to http://127.0.0.1:{port}/x;" in result.error
    assert first.RequestHandlerClass.seen[0]["authorization"] == f"Bearer {TOKEN}"  # type: ignore[attr-defined]
    assert elsewhere.RequestHandlerClass.seen == []  # type: ignore[attr-defined]


def test_gzip_answers_are_read(prom: Replay) -> None:
    prom.serve("demo")
    prom.reply = Reply(gzip=True)
    result = source_for(prom).sample(detail=True)
    assert result.error is None and len(result.nodes) == 1
    assert all(headers.get("accept-encoding") == "gzip" for _, _, headers in prom.requests)


@pytest.mark.parametrize(
    "url", ["ftp://prom:9090", "prom:9090", "http://", "http://host:port/", "  "]
)
def test_a_bad_url_is_refused_at_once(url: str) -> None:
    with pytest.raises(ValueError):
        PrometheusSource(url)


def test_an_unreadable_ca_file_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="CA file"):
        PrometheusSource("https://prom:9090", ca_file=str(tmp_path / "missing.pem"))


@pytest.fixture
def https_replay(prom: Replay, tmp_path: Path) -> Iterator[tuple[Replay, Path]]:
    """The replay server behind TLS with a certificate of a private CA (openssl)."""
    import shutil
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    prom.server.socket = context.wrap_socket(prom.server.socket, server_side=True)
    prom.url = prom.url.replace("http://", "https://")
    yield prom, cert


def test_https_verifies_the_certificate_and_takes_a_ca_file(
    https_replay: tuple[Replay, Path],
) -> None:
    prom, cert = https_replay
    prom.serve("demo")
    refused = PrometheusSource(prom.url, timeout_s=2).sample(detail=True)
    assert refused.error is not None and "certificate" in refused.error
    trusted = PrometheusSource(prom.url, ca_file=str(cert), timeout_s=2).sample(detail=True)
    assert trusted.error is None and len(trusted.nodes) == 1


def test_a_custom_opener_is_used() -> None:
    """The ``opener`` hook (anything with ``open(request, timeout=)``)."""

    class Answer:
        headers: dict[str, str] = {}

        def __init__(self, body: bytes) -> None:
            self.chunks = [body, b""]

        def read(self, size: int) -> bytes:
            return self.chunks.pop(0)

        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *args: object) -> None:
            pass

    answers = load("dcgm")
    seen = []

    class Opener:
        def open(self, request: Any, *, timeout: float) -> Answer:
            query = urllib.parse.parse_qs(request.data.decode())["query"][0]
            seen.append((request.full_url, timeout))
            if query not in QUERIES:  # the node rows' aggregate queries: no row recorded
                return Answer(b'{"status":"success","data":{"resultType":"vector","result":[]}}')
            return Answer(json.dumps(answers[ROLES[QUERIES.index(query)]]).encode())

    source = PrometheusSource("http://prom:9090", opener=Opener(), timeout_s=2.5)
    result = source.sample(detail=True)
    assert [node.name for node in result.nodes] == ["dgx-07"]
    assert seen == [("http://prom:9090/api/v1/query", 2.5)] * 9  # 3 from the rules, 3 raw


# --- history --------------------------------------------------------------------------------


def recorded_history() -> tuple[dict[str, Any], list[list[Any]]]:
    answer = json.loads((FIXTURES / "history.json").read_text())
    return answer, answer["data"]["result"][0]["values"]


def test_history_reads_a_range_query_in_the_models_units(prom: Replay) -> None:
    answer, values = recorded_history()
    last = values[-1][0]
    prom.serve("demo")
    source = source_for(prom, clock=lambda: float(last) + 0.4)
    (node,) = source.sample(detail=True).nodes
    prom.range_answer = answer
    prom.requests.clear()
    points = source.history(node.name, 0, "util", seconds=20, step=1)
    path, form, _ = prom.requests[-1]
    assert path == "/api/v1/query_range"
    assert form["query"] == (
        f'max(gpumon_gpu_utilization_ratio{{instance="{node.instance}",gpu="0",job="demo"}})'
    )
    assert float(form["step"]) == 1 and float(form["end"]) - float(form["start"]) == 20
    # One point per step: Prometheus' values in percent, None where it has none.
    assert len(points) == 21
    recorded = {float(t): float(v) * 100 for t, v in values}
    for moment, value in points:
        if moment in recorded:
            assert value == pytest.approx(recorded[moment])
        else:
            assert value is None
    assert sum(value is not None for _, value in points) == len(values)


def test_history_has_gaps_where_prometheus_has_no_value(prom: Replay) -> None:
    answer, values = recorded_history()
    holed = copy.deepcopy(answer)
    holed["data"]["result"][0]["values"] = [
        [t, "NaN" if number == 3 else v] for number, (t, v) in enumerate(values) if number != 5
    ]
    prom.range_answer = holed
    source = source_for(prom, clock=lambda: float(values[-1][0]))
    points = dict(source.history("127.0.0.1:1", 0, "temp", seconds=20, step=1))
    assert points[float(values[3][0])] is None  # NaN
    assert points[float(values[5][0])] is None  # missing
    assert points[float(values[4][0])] == float(values[4][1])


def test_history_of_fields_without_numbers_or_series(prom: Replay) -> None:
    source = source_for(prom)
    with pytest.raises(ValueError):
        source.history("x", 0, "no_such_field")
    with pytest.raises(ValueError):
        source.history("x", 0, "clock_events")
    prom.serve("dcgm")
    (node,) = source.sample(detail=True).nodes
    assert source.history(node.name, 0, "pcie_rx") == []  # no such dcgm series is read
    prom.range_answer = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    prom.requests.clear()
    points = source.history(node.name, 1, "mem_used", seconds=60, step=15)
    assert "DCGM_FI_DEV_FB_USED" in prom.queries[0]
    assert len(points) == 5 and all(value is None for _, value in points)


def test_history_errors_are_one_safe_line(prom: Replay) -> None:
    prom.reply = Reply(500, b"boom")
    with pytest.raises(PrometheusError, match="HTTP 500"):
        source_for(prom).history("x", 0, "util")


def test_the_api_other_modules_use_is_documented() -> None:
    """Other modules are built on these docstrings: each thing they use has one."""
    source = prometheus.PrometheusSource
    documented = (source, source.sample, source.next_retry_s, source.history, Backoff)
    assert all(len((each.__doc__ or "").strip()) > 20 for each in documented)
    assert "opener" in (source.__doc__ or "") and PrometheusError.__doc__
    assert math.isclose(prometheus.DEFAULT_SCRAPE_INTERVAL_S, 15.0)
