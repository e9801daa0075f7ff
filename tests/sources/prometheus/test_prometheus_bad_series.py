"""Answers no exporter should give: one bad series spoils only itself, never makes a GPU FREE;
a node naming more GPUs than a machine has is refused; an exporter serving an old sample (or
saying its sampler is stalled) is STALE; times that are not real moments read "unknown".

The recorded demo answers (tests/support/fixtures/prometheus) with one thing changed, replayed over
loopback HTTP; `gpumon once --prometheus` and `gpumon pick --prometheus` read them through
`main`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpumon.cli import main
from gpumon.commands.cluster_output import cluster_to_dict
from gpumon.data.cluster import ClusterSample, NodeState, summarize
from gpumon.data.free import free_gpu_indices
from gpumon.data.model import ProcessKind
from gpumon.sources.prometheus.nodes import MAX_GPUS_PER_NODE
from gpumon.sources.prometheus.source import PrometheusSource
from tests.commands.test_cluster_output import validator
from tests.support.prometheus_replay import ROLES, Replay, load, series

FREE_MIB = 1024
IDLE_GPU = 2  # the demo's one FREE GPU
SECOND = "gpu-node-2:9402"


@pytest.fixture
def prom() -> Iterator[Replay]:
    replay = Replay()
    yield replay
    replay.close()


def demo(targets: int = 1) -> dict[str, Any]:
    """The demo's answers for ``targets`` targets (the second is :data:`SECOND`)."""
    answers = copy.deepcopy(load("demo"))
    for role in ROLES:
        extra = []
        for item in copy.deepcopy(series(answers[role])) if targets > 1 else []:
            item["metric"]["instance"] = SECOND
            extra.append(item)
        answers[role]["data"]["result"] += extra
    return answers


def first_target(item: dict[str, Any]) -> bool:
    return item["metric"].get("instance") != SECOND


def data(answers: dict[str, Any], name: str, gpu: int | None = None) -> list[dict[str, Any]]:
    """The first target's series of ``name`` (on GPU ``gpu``)."""
    return [
        item
        for item in series(answers["data"], name)
        if first_target(item) and (gpu is None or item["metric"].get("gpu") == str(gpu))
    ]


def read(prom: Replay, answers: dict[str, Any]) -> ClusterSample:
    prom.serve(answers)
    result = PrometheusSource(prom.url).sample(detail=True)
    assert result.error is None, result.error
    validator().validate(json.loads(json.dumps(cluster_to_dict(result))))
    return result


def first_node(result: ClusterSample) -> Any:
    (node,) = [node for node in result.nodes if node.instance != SECOND]
    return node


# --- One bad series ----------------------------------------------------------------------------


def test_a_label_that_is_not_text_drops_only_its_series(prom: Replay) -> None:
    answers = demo()
    data(answers, "gpumon_gpu_temperature_celsius", 0)[0]["metric"]["gpu"] = 0
    data(answers, "gpumon_gpu_power_draw_watts", 1)[0]["metric"]["uuid"] = None
    data(answers, "gpumon_host_info")[0]["metric"]["extra"] = ["not", "text"]
    node = first_node(read(prom, answers))
    assert node.state is NodeState.UP and len(node.gpus) == 4
    assert node.gpus[0].temperature_c is None and node.gpus[1].power_draw_w is None
    assert node.gpus[0].utilization_gpu_pct is not None  # the rest of GPU 0 is read
    assert node.gpus[1].temperature_c is not None
    assert free_gpu_indices(node.sample, FREE_MIB) == {IDLE_GPU}


@pytest.mark.parametrize("value", ["1e308", "-5", "NaN", "+Inf", "1e30"])
def test_an_impossible_memory_reading_is_na_and_never_free(prom: Replay, value: str) -> None:
    answers = demo()
    data(answers, "gpumon_gpu_memory_used_bytes", IDLE_GPU)[0]["value"][1] = value
    node = first_node(read(prom, answers))
    assert node.state is NodeState.UP
    assert node.gpus[IDLE_GPU].memory_used_bytes is None
    assert node.gpus[IDLE_GPU].memory_total_bytes is not None
    assert free_gpu_indices(node.sample, FREE_MIB) == frozenset()


@pytest.mark.parametrize("value", ["-1", "NaN", "1e308", "2.5", "-Inf"])
def test_a_process_count_that_is_not_a_count_is_unknown_never_free(
    prom: Replay, value: str
) -> None:
    answers = demo(targets=2)
    data(answers, "gpumon_gpu_processes", IDLE_GPU)[0]["value"][1] = value
    result = read(prom, answers)
    node = first_node(result)
    assert node.state is NodeState.UP and node.sample.processes_read
    assert node.gpus[IDLE_GPU].processes_error is not None
    assert free_gpu_indices(node.sample, FREE_MIB) == frozenset()
    assert summarize(node, FREE_MIB).free_gpus == 0
    (other,) = [n for n in result.nodes if n.instance == SECOND]
    assert free_gpu_indices(other.sample, FREE_MIB) == {IDLE_GPU}


def test_readings_past_what_nvml_gives_are_na(prom: Replay) -> None:
    answers = demo()
    data(answers, "gpumon_gpu_utilization_ratio", 0)[0]["value"][1] = "1.5"  # 150 %
    data(answers, "gpumon_gpu_performance_state", 1)[0]["value"][1] = "99"
    data(answers, "gpumon_gpu_clock_sm_hertz", 3)[0]["value"][1] = "-1e9"
    spoiled = set()
    processes = data(answers, "gpumon_process_gpu_memory_bytes")
    for item, value in zip(processes, ["1e308", "-1"], strict=False):
        item["value"][1] = value
        spoiled.add(int(item["metric"]["pid"]))
    node = first_node(read(prom, answers))  # and the JSON validates
    assert node.gpus[0].utilization_gpu_pct is None
    assert node.gpus[1].performance_state is None and node.gpus[3].clock_sm_mhz is None
    for process in node.sample.processes:  # still listed: their GPUs are not free
        assert (process.gpu_memory_bytes is None) is (process.pid in spoiled)


def test_a_dcgm_reading_that_overflows_is_na(prom: Replay) -> None:
    answers = copy.deepcopy(load("dcgm"))
    series(answers["data"], "DCGM_FI_DEV_FB_USED")[0]["value"][1] = "1e308"  # MiB
    (node,) = read(prom, answers).nodes
    assert node.gpus[0].memory_used_bytes is None and node.gpus[0].temperature_c == 61


# --- More GPUs than a machine has ----------------------------------------------------------


def with_gpus(answers: dict[str, Any], indices: range) -> dict[str, Any]:
    (info,) = data(answers, "gpumon_gpu_info", 0)
    for index in indices:
        item = copy.deepcopy(info)
        item["metric"].update(gpu=str(index), uuid=f"GPU-{index:08d}")
        answers["data"]["data"]["result"].append(item)
    return answers


@pytest.mark.parametrize(
    ("indices", "claimed"),
    [(range(4, MAX_GPUS_PER_NODE + 1), 65), (range(64, 65), 65), (range(4, 100_000, 999), 99905)],
    ids=["65-gpus", "index-64", "sparse"],
)
def test_a_node_claiming_more_gpus_than_nvml_allows_is_refused(
    prom: Replay, indices: range, claimed: int
) -> None:
    result = read(prom, with_gpus(demo(targets=2), indices))
    node = first_node(result)
    assert node.state is NodeState.STALE
    # Only the GPUs its identity series named in the last hour, without a reading.
    assert [gpu.index for gpu in node.gpus] == [0, 1, 2, 3]
    assert all(gpu.memory_used_bytes is None for gpu in node.gpus)
    assert summarize(node, FREE_MIB).free_gpus is None
    assert node.problem == f"refused: its exporter claims {claimed} GPUs; a node has at most 64"
    (other,) = [n for n in result.nodes if n.instance == SECOND]
    assert other.state is NodeState.UP and len(other.gpus) == 4


def test_64_gpus_are_a_node(prom: Replay) -> None:
    node = first_node(read(prom, with_gpus(demo(), range(4, MAX_GPUS_PER_NODE))))
    assert node.state is NodeState.UP and len(node.gpus) == 64 and node.problem is None


# --- An exporter that answers with an old sample ---------------------------------------------


def evaluated_at(answers: dict[str, Any]) -> float:
    return float(series(answers["data"])[0]["value"][0])


def scraped_at(answers: dict[str, Any]) -> float:
    (fact,) = [
        item
        for item in series(answers["targets"])
        if first_target(item) and item["metric"]["gpumon_fact"] == "scraped"
    ]
    return float(fact["value"][1])


def aged(answers: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The first target's sample ``seconds`` old by its timestamp (the age the exporter
    reports itself, which would be believed first, is left out)."""
    (stamp,) = data(answers, "gpumon_sample_timestamp_seconds")
    stamp["value"][1] = repr(evaluated_at(answers) - seconds)
    for age in data(answers, "gpumon_sample_age_seconds"):
        answers["data"]["data"]["result"].remove(age)
    return answers


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def test_a_sample_older_than_three_scrape_intervals_is_stale(
    prom: Replay, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo is scraped every second: its sample 4 s old is a sampler stuck behind a live
    exporter. Its GPUs are the last known, none FREE, none picked."""
    result = read(prom, aged(demo(), 4.0))
    assert result.scrape_interval_s == pytest.approx(1.0, abs=0.1)
    node = first_node(result)
    assert node.state is NodeState.STALE
    assert node.problem == "the exporter serves an old sample: its last sample is 4s old"
    assert node.last_seen_s == pytest.approx(evaluated_at(prom.answers) - 4.0, abs=0.001)
    assert len(node.gpus) == 4 and summarize(node, FREE_MIB).free_gpus is None
    code, out, err = run(["pick", "--prometheus", prom.url, "-n", "1"], capsys)
    assert (code, out) == (1, "")
    assert "stale, last seen" in err and "old sample" in err
    code, out, _ = run(["once", "--prometheus", prom.url], capsys)
    assert code == 0 and "FREE" not in out.split("\n", 1)[1]
    assert "1 node (0 up, 1 stale)  0 GPUs up, 0 FREE" in out.splitlines()[0]


def test_a_sample_two_intervals_old_is_current(prom: Replay) -> None:
    node = first_node(read(prom, aged(demo(), 2.0)))
    assert node.state is NodeState.UP and node.problem is None


def stalled(answers: dict[str, Any], *, gpu_series: bool) -> dict[str, Any]:
    (stamp,) = data(answers, "gpumon_sample_timestamp_seconds")
    flag = copy.deepcopy(stamp)
    flag["metric"]["__name__"] = "gpumon_sampler_stalled"
    flag["value"][1] = "1"
    age = copy.deepcopy(stamp)
    age["metric"]["__name__"] = "gpumon_sample_age_seconds"
    age["value"][1] = "125.5"
    kept = series(answers["data"])
    if not gpu_series:  # what the exporter serves while stuck: health, no GPU
        kept = [item for item in kept if "gpu" not in item["metric"]]
        kept = [item for item in kept if item is not stamp]
    answers["data"]["data"]["result"] = [*kept, flag, age]
    return answers


def test_an_exporter_saying_its_sampler_is_stalled_is_stale(prom: Replay) -> None:
    node = first_node(read(prom, stalled(demo(), gpu_series=True)))
    assert node.state is NodeState.STALE
    assert node.problem == "the exporter's sampler is stalled: its last sample is 2m old"
    assert summarize(node, FREE_MIB).free_gpus is None


def test_a_stalled_exporter_without_gpu_series_keeps_the_last_known_gpus(prom: Replay) -> None:
    source = PrometheusSource(prom.url)
    prom.serve(demo())
    (before,) = source.sample(detail=True).nodes
    prom.serve(stalled(demo(), gpu_series=False))
    (after,) = source.sample(detail=True).nodes
    assert after.state is NodeState.STALE and after.sample == before.sample
    assert after.problem is not None and "sampler is stalled" in after.problem
    assert after.last_seen_s == pytest.approx(scraped_at(prom.answers) - 125.5, abs=0.001)
    # A first sample: the identities.
    (fresh,) = PrometheusSource(prom.url).sample(detail=True).nodes
    assert fresh.state is NodeState.STALE and len(fresh.gpus) == 4


# --- Times that are not real moments --------------------------------------------------------

ABSURD = [float("nan"), float("inf"), 1e300, -5.0, 1e12]


def absurd_times(answers: dict[str, Any], value: float, *, everywhere: bool) -> dict[str, Any]:
    """The first target's times (every series' evaluation time with ``everywhere``) absurd."""
    for role in ROLES:
        for item in series(answers[role]):
            if everywhere or first_target(item):
                item["value"][0] = value
            fact = item["metric"].get("gpumon_fact")
            if first_target(item) and fact in ("scraped", "last_up", "interval"):
                item["value"][1] = repr(value)
    (stamp,) = data(answers, "gpumon_sample_timestamp_seconds")
    stamp["value"][1] = repr(value)
    return answers


@pytest.mark.parametrize("value", ABSURD, ids=["nan", "inf", "1e300", "negative", "year-33658"])
@pytest.mark.parametrize("everywhere", [False, True], ids=["one-node", "every-series"])
def test_absurd_times_are_unknown_and_crash_nothing(
    prom: Replay, capsys: pytest.CaptureFixture[str], value: float, everywhere: bool
) -> None:
    answers = absurd_times(demo(targets=2), value, everywhere=everywhere)
    result = read(prom, answers)
    assert 1e9 < result.timestamp_s < 1e10
    node = first_node(result)
    assert node.last_seen_s is None and node.down_since_s is None
    assert node.state is NodeState.STALE
    code, out, _ = run(["once", "--prometheus", prom.url], capsys)
    assert code == 0 and "gpu-node-2" not in out.splitlines()[0]
    code, out, _ = run(["once", "--prometheus", prom.url, "--json"], capsys)
    document = json.loads(out)
    validator().validate(document)
    (entry,) = [entry for entry in document["nodes"] if entry["instance"] != SECOND]
    assert (entry["last_seen"], entry["down_since"]) == (None, None)
    code, out, _ = run(["pick", "--prometheus", prom.url, "-n", "1", "--across-nodes"], capsys)
    if not everywhere:  # the other node is current: its idle GPU is picked
        assert (code, out) == (0, f"demo-gpu-server ({SECOND}):{IDLE_GPU}\n")


# --- Process type ----------------------------------------------------------------------------


def test_the_process_type_label_is_read_and_unknown_without_it(
    prom: Replay, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = demo()
    processes = data(answers, "gpumon_process_gpu_memory_bytes")
    for item, kind in zip(processes, ["G", "C+G", "C", "weird"], strict=False):
        item["metric"]["type"] = kind
    for item in processes[4:]:
        item["metric"].pop("type", None)  # as an exporter older than the label serves them
    node = first_node(read(prom, answers))
    by_pid = {process.pid: process.kind for process in node.sample.processes}
    pids = [int(item["metric"]["pid"]) for item in processes]
    assert [by_pid[pid] for pid in pids[:4]] == [
        ProcessKind.GRAPHICS,
        ProcessKind.BOTH,
        ProcessKind.COMPUTE,
        ProcessKind.UNKNOWN,
    ]
    assert all(by_pid[pid] is ProcessKind.UNKNOWN for pid in pids[4:])
    _, out, _ = run(["once", "--prometheus", prom.url, "--json"], capsys)
    shown = {
        process["pid"]: process["type"]
        for entry in json.loads(out)["nodes"]
        for gpu in entry["gpus"]
        for process in gpu["processes"] or ()
    }
    assert [shown[pid] for pid in pids[:4]] == ["G", "C+G", "C", None]


# --- UUIDs: printed by `pick --format uuid` into a remote shell's command line ----------------

#: What a label may say in place of a UUID: shell syntax, spaces, a newline, a comma (two
#: devices), non-ASCII look-alikes, no prefix, too long.
NO_UUIDS = [
    "GPU-4;touch${IFS}/tmp/pwned;#",
    "GPU-$(id)",
    "GPU-`id`",
    "GPU-a b",
    "GPU-1\nGPU-2",
    "GPU-1,GPU-2",
    "GPU-'x'",
    "GPU-\uff44\uff45\uff41\uff44",  # fullwidth "dead"
    "GPU-",
    "8f2f2c1a-1b2c-3d4e-5f60-718293a4b5c6",
    "GPU-" + "a" * 97,
]


def with_uuid(answers: dict[str, Any], uuid: str) -> dict[str, Any]:
    """Every series of the first target names its GPU ``uuid`` (``UUID`` for dcgm-exporter)."""
    for role in ("data", "identity"):
        for item in series(answers[role]):
            for label in ("uuid", "UUID"):
                if first_target(item) and label in item["metric"]:
                    item["metric"][label] = uuid
    return answers


@pytest.mark.parametrize("uuid", NO_UUIDS)
def test_a_uuid_label_that_is_no_uuid_is_unknown_and_never_printed(
    prom: Replay, capsys: pytest.CaptureFixture[str], uuid: str
) -> None:
    """`read host gpus < <(gpumon pick --prometheus URL --format uuid)`, then
    `ssh "$host" "CUDA_VISIBLE_DEVICES=$gpus ..."`: a label is not handed to that shell."""
    node = first_node(read(prom, with_uuid(demo(), uuid)))
    assert [gpu.uuid for gpu in node.gpus] == [None] * 4
    assert all(process.gpu_uuid is None for process in node.sample.processes)
    assert free_gpu_indices(node.sample, FREE_MIB) == {IDLE_GPU}  # the rest is read
    code, out, err = run(["pick", "--prometheus", prom.url, "--format", "uuid"], capsys)
    assert (code, out) == (1, "")
    assert f"GPU {IDLE_GPU} UUID unknown" in err and uuid not in err


@pytest.mark.parametrize(
    "uuid",
    [
        "GPU-8f2f2c1a-1b2c-3d4e-5f60-718293a4b5c6",
        "MIG-8f2f2c1a-1b2c-3d4e-5f60-718293a4b5c6",  # driver R470 and later
        "MIG-GPU-8f2f2c1a-1b2c-3d4e-5f60-718293a4b5c6/1/0",  # before R470: GPU/gi/ci
    ],
)
def test_nvidias_uuids_are_read_and_printed(
    prom: Replay, capsys: pytest.CaptureFixture[str], uuid: str
) -> None:
    node = first_node(read(prom, with_uuid(demo(), uuid)))
    assert [gpu.uuid for gpu in node.gpus] == [uuid] * 4
    code, out, _ = run(["pick", "--prometheus", prom.url, "--format", "uuid"], capsys)
    assert (code, out) == (0, f"{node.name} {uuid}\n")


def test_a_mig_instance_whose_uuid_is_no_uuid_is_never_printed(
    prom: Replay, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = copy.deepcopy(load("shared_host"))
    for item in series(answers["data"]):
        if item["metric"].get("__name__", "").startswith("gpumon_mig_"):
            item["metric"]["uuid"] = "MIG-1;reboot"
    prom.serve(answers)
    result = PrometheusSource(prom.url).sample(detail=True)
    instances = [m for n in result.nodes for g in n.gpus for m in g.mig_instances or ()]
    assert instances and all(instance.uuid is None for instance in instances)
