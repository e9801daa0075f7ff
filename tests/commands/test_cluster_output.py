"""A cluster in the headless modes: `once --prometheus` text and JSON (and its schema), and
`pick --prometheus`'s ranking, from hand-built cluster samples; then both through `main`."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from gpumon.cli import main
from gpumon.commands import cluster_fleet as cf
from gpumon.commands import cluster_output as co
from gpumon.commands import cluster_pick as cp
from gpumon.data.cluster import ClusterSample, ExporterKind, Node, NodeState
from gpumon.data.model import GpuStats, Sample
from gpumon.sources import cluster_base
from tests.support.cluster_fake import FakeClusterSource
from tests.support.ui_helpers import FIXED_TIME, GIB, MIB, make_gpu, make_process, make_sample

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "gpumon" / "schema"
URL = "http://prometheus.example:9090"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Clock times (DOWN since 22:05) in UTC, whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def idle(index: int, **fields: object) -> GpuStats:
    values: dict[str, object] = dict(
        memory_used_bytes=4 * MIB, memory_free_bytes=24 * GIB, utilization_gpu_pct=0
    )
    values.update(fields)
    return make_gpu(index, **values)


def node(
    name: str,
    sample: Sample,
    *,
    state: NodeState = NodeState.UP,
    exporter: ExporterKind = ExporterKind.GPUMON,
    **fields: Any,
) -> Node:
    values: dict[str, Any] = dict(
        instance=f"{name}:9402", job="gpumon", last_seen_s=FIXED_TIME, down_since_s=None
    )
    values.update(fields)
    return Node(name=name, exporter=exporter, state=state, sample=sample, **values)


def busy_node(name: str) -> Node:
    """GPU 0 runs alice's job; GPU 1 is idle."""
    gpus = (make_gpu(0), idle(1))
    return node(name, make_sample(gpus, (make_process(gpus[0], 100, user="alice"),)))


def dcgm_node(name: str) -> Node:
    sample = dataclasses.replace(make_sample((idle(0), idle(1))), processes_read=False)
    return node(name, sample, exporter=ExporterKind.DCGM, instance=f"{name}:9400", job="dcgm")


def down_node(name: str) -> Node:
    return node(
        name,
        make_sample((idle(0),)),
        state=NodeState.DOWN,
        last_seen_s=FIXED_TIME - 600,
        down_since_s=FIXED_TIME - 500,
    )


def stale_node(name: str) -> Node:
    return node(name, busy_node(name).sample, state=NodeState.STALE, last_seen_s=FIXED_TIME - 420)


def cluster(*nodes: Node, **fields: Any) -> ClusterSample:
    values: dict[str, Any] = dict(scrape_interval_s=15.0)
    values.update(fields)
    return ClusterSample(FIXED_TIME, URL, tuple(nodes), **values)


def mixed() -> ClusterSample:
    return cluster(busy_node("node10"), dcgm_node("node2"), down_node("node3"), stale_node("node4"))


def blocks(text: str) -> dict[str, list[str]]:
    """Node name -> its header line and the lines indented below it."""
    result: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines()[1:]:
        if not line:
            break
        if not line.startswith(co.INDENT):
            current = result.setdefault(line.split()[0], [])
        current.append(line)
    return result


# --- text -----------------------------------------------------------------------------------


def test_nodes_print_in_natural_order_each_with_its_state() -> None:
    text = co.render_cluster(mixed())
    headers = [lines[0] for lines in blocks(text).values()]
    assert [header.split()[0] for header in headers] == ["node2", "node3", "node4", "node10"]
    assert "  UP  dcgm-exporter (no process data)  2 GPUs" in headers[0]
    assert "  DOWN since 22:05  gpumon  1 GPU (last known)" in headers[1]
    assert "  stale, last seen 22:06  gpumon  2 GPUs (last known)" in headers[2]
    assert headers[3] == "node10  UP  gpumon  2 GPUs"


def test_the_summary_line_counts_nodes_by_state_and_free_gpus() -> None:
    first = co.render_cluster(mixed()).splitlines()[0]
    assert first.startswith(f"{URL}  2023-11-14 22:13:20  ")
    assert "4 nodes (2 up, 1 DOWN, 1 stale)" in first
    # node10's GPU 1 is FREE, its GPU 0 busy; dcgm's idle GPUs are unknown, never free
    assert first.endswith("4 GPUs up, 1 FREE, 1 busy (1 node cannot tell)")


def test_gpu_lines_are_onces_own_and_free_only_on_an_up_node_with_processes() -> None:
    from gpumon.data.text_table import gpu_lines

    found = blocks(co.render_cluster(mixed()))
    node10 = busy_node("node10").sample
    expected = gpu_lines(node10, free=frozenset({1}), ascii_only=False)
    assert found["node10"][1:] == [co.INDENT + line for line in expected]
    assert found["node10"][-1].endswith("| FREE")
    for name in ("node2", "node3", "node4"):  # dcgm: unknown; DOWN, stale: not now
        assert not any("FREE" in line for line in found[name]), name


def test_processes_show_only_under_an_up_node() -> None:
    found = blocks(co.render_cluster(mixed()))
    assert any("alice" in line and "python job_100.py" in line for line in found["node10"])
    assert not any("alice" in line for line in found["node4"])  # stale: they may be gone
    assert not any("not listed" in line for line in found["node2"])  # dcgm: none read


def test_the_users_table_spans_the_cluster_and_names_what_it_leaves_out() -> None:
    both = cluster(busy_node("node1"), busy_node("node2"), dcgm_node("node3"), down_node("n4"))
    tail = co.render_cluster(both).split("\n\n", 1)[1].splitlines()
    assert tail[0].split() == ["USER", "GPUS", "GPU-MEM", "PROCS"]
    assert tail[1].split() == ["alice", "node1:0", "node2:0", "4.0G", "2"]
    assert tail[2] == "not counted: n4 (DOWN), node3 (processes unknown)"


def test_no_processes_drops_processes_free_and_users() -> None:
    text = co.render_cluster(mixed(), show_processes=False)
    assert "alice" not in text and "FREE" not in text and "USER" not in text
    assert text.splitlines()[0].endswith("4 GPUs up")


def test_by_user_puts_the_users_table_in_place_of_processes() -> None:
    text = co.render_cluster(mixed(), by_user=True)
    assert "python job_100.py" not in text
    assert "alice  node10:0" in text


def test_a_node_without_gpu_series_says_so() -> None:
    text = co.render_cluster(cluster(node("gone", make_sample(()), state=NodeState.STALE)))
    assert blocks(text)["gone"] == [
        "gone  stale, last seen 22:13  gpumon  0 GPUs",
        "  (no GPU series)",
    ]


def test_simulated_nodes_are_labelled_demo() -> None:
    demo = node("sim", dataclasses.replace(busy_node("sim").sample, simulated=True))
    text = co.render_cluster(cluster(demo, busy_node("real")))
    lines = text.splitlines()
    assert "DEMO (simulated data)" in lines[0]
    assert "DEMO" in blocks(text)["sim"][0] and "DEMO" not in blocks(text)["real"][0]


def test_colour_only_when_asked() -> None:
    assert "\x1b[" not in co.render_cluster(mixed())
    painted = co.render_cluster(mixed(), color=True)
    assert "\x1b[1;31mDOWN since 22:05\x1b[0m" in painted


def test_down_on_another_day_shows_the_date() -> None:
    old = node("old", make_sample(()), state=NodeState.DOWN, down_since_s=FIXED_TIME - 86_400)
    assert cf.state_text(old, FIXED_TIME) == "DOWN since 2023-11-13 22:13"
    unknown = node("x", make_sample(()), state=NodeState.DOWN, last_seen_s=None)
    assert cf.state_text(unknown, FIXED_TIME) == "DOWN"
    assert cf.clock(FIXED_TIME, math.nan) == "2023-11-14 22:13"  # today? not known: the date


NOT_MOMENTS = [None, math.nan, math.inf, -math.inf, 1e300, -5.0, 0.0, 1e12]


@pytest.mark.parametrize("value", NOT_MOMENTS)
def test_a_time_that_is_not_a_real_moment_reads_unknown_everywhere(value: float | None) -> None:
    """NaN, Inf, 1e300, negative, the year 33658: "unknown" in text, null in JSON, and the
    other nodes are read and picked as ever."""
    from gpumon.sampling.snapshot import iso_timestamp

    assert cf.clock(value, FIXED_TIME) == "unknown"
    assert iso_timestamp(value) is None
    odd = node(
        "odd", make_sample((idle(0),)), state=NodeState.DOWN, last_seen_s=value, down_since_s=value
    )
    assert cf.state_text(odd, FIXED_TIME) == "DOWN"
    sample = dataclasses.replace(cluster(odd, busy_node("node1")), timestamp_s=value)
    assert co.render_cluster(sample).startswith(f"{URL}  unknown  2 nodes (1 up, 1 DOWN)")
    document = co.cluster_to_dict(sample)
    validator().validate(json.loads(json.dumps(document, allow_nan=False)))
    assert (document["timestamp"], document["timestamp_s"]) == (None, None)
    (entry,) = [entry for entry in document["nodes"] if entry["name"] == "odd"]
    assert (entry["last_seen"], entry["down_since"]) == (None, None)
    picked, reasons = cp.rank_cluster(sample, n=1)
    assert values(picked) == ["node1:1"] and reasons == ("odd DOWN",)


def test_a_nodes_problem_is_said_with_its_state() -> None:
    stuck = dataclasses.replace(
        stale_node("node4"), problem="the exporter's sampler is stalled: its last sample is 7m old"
    )
    expected = (
        "stale, last seen 22:06 (the exporter's sampler is stalled: its last sample is 7m old)"
    )
    assert cf.state_text(stuck, FIXED_TIME) == expected
    assert blocks(co.render_cluster(cluster(stuck)))["node4"][0].startswith(f"node4  {expected}")
    _, reasons = cp.rank_cluster(cluster(stuck), n=1)
    assert reasons == (f"node4 {expected}",)
    (entry,) = co.cluster_to_dict(cluster(stuck))["nodes"]
    assert entry["problem"] == stuck.problem


# --- JSON and its schema ---------------------------------------------------------------------


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SCHEMA_DIR / name).read_text())
    return document


def validator() -> jsonschema.Draft202012Validator:
    """The cluster schema, its GPU objects resolved from once.schema.json by their $id."""
    once, cluster_schema = load("once.schema.json"), load("once-cluster.schema.json")
    registry: Registry[Any] = Registry().with_resources(
        [(schema["$id"], Resource.from_contents(schema)) for schema in (once, cluster_schema)]
    )
    return jsonschema.Draft202012Validator(
        cluster_schema,
        registry=registry,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )


def test_the_cluster_schema_is_valid_and_strict() -> None:
    schema = load("once-cluster.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    for definition in [schema, *schema["$defs"].values()]:
        assert definition["additionalProperties"] is False
        assert set(definition["required"]) == set(definition["properties"])


def test_json_validates_and_has_each_nodes_state_and_gpus() -> None:
    document = co.cluster_to_dict(mixed())
    validator().validate(document)
    assert document["prometheus_url"] == URL and document["error"] is None
    assert document["timestamp"] == "2023-11-14T22:13:20.000Z"
    by_name = {entry["name"]: entry for entry in document["nodes"]}
    assert list(by_name) == ["node2", "node3", "node4", "node10"]
    down = by_name["node3"]
    assert (down["state"], down["up"], down["exporter"]) == ("down", False, "gpumon")
    assert down["last_seen"] == "2023-11-14T22:03:20.000Z"
    assert down["down_since"] == "2023-11-14T22:05:00.000Z"
    assert by_name["node2"]["instance"] == "node2:9400" and by_name["node2"]["job"] == "dcgm"


def test_json_gpus_are_once_jsons_and_free_only_on_an_up_node() -> None:
    from gpumon.sampling.snapshot import sample_to_dict

    by_name = {entry["name"]: entry for entry in co.cluster_to_dict(mixed())["nodes"]}
    assert by_name["node10"]["gpus"] == sample_to_dict(busy_node("node10").sample)["gpus"]
    assert [gpu["free"] for gpu in by_name["node10"]["gpus"]] == [False, True]
    for name in ("node2", "node3", "node4"):
        for gpu in by_name[name]["gpus"]:
            assert gpu["free"] is False and gpu["processes"] is None, name


def test_the_schema_refuses_a_free_gpu_on_a_node_that_is_not_up() -> None:
    document = co.cluster_to_dict(mixed())
    stale = next(entry for entry in document["nodes"] if entry["state"] == "stale")
    stale["gpus"][1]["free"] = True
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(document)


def test_an_unreachable_server_is_a_valid_document_with_its_error() -> None:
    failed = cluster(error="connection refused", stale=True)
    document = co.cluster_to_dict(failed)
    validator().validate(document)
    assert (document["error"], document["stale"], document["nodes"]) == (
        "connection refused",
        True,
        [],
    )


def test_every_cluster_field_is_described_in_the_docs() -> None:
    docs = (ROOT / "docs" / "json-schema.md").read_text()
    schema = load("once-cluster.schema.json")
    names = set(schema["properties"])
    for part in ("node", "row", "fleet"):
        names |= set(schema["$defs"][part]["properties"])
    assert sorted(name for name in names if f"`{name}`" not in docs) == []
    assert "once-cluster.schema.json" in docs


# --- pick -----------------------------------------------------------------------------------


def values(picked: tuple[cp.ClusterCandidate, ...], output_format: str = "index") -> list[str]:
    return [candidate.value(output_format) for candidate in picked]


def test_the_freest_gpus_of_the_cluster_rank_as_picks_then_by_node_and_index() -> None:
    a = node("node10", make_sample((idle(0), idle(1, memory_used_bytes=0))))
    b = node("node9", make_sample((idle(0), idle(1, utilization_gpu_pct=30))))
    c = busy_node("node1")
    picked, reasons = cp.rank_cluster(cluster(a, b, c), n=5)
    assert values(picked) == ["node10:1", "node1:1", "node9:0", "node10:0", "node9:1"]
    assert reasons == ()
    picked, _ = cp.rank_cluster(cluster(a, b, c), n=6)
    assert values(picked)[-1] == "node1:0"  # the one with a process comes last


def test_down_stale_and_dcgm_nodes_are_never_picked_and_say_why() -> None:
    picked, reasons = cp.rank_cluster(mixed(), n=8)
    assert values(picked) == ["node10:1", "node10:0"]
    assert reasons == (
        "node2 processes unknown (dcgm-exporter)",
        "node3 DOWN since 22:05",
        "node4 stale, last seen 22:06",
    )


def test_thresholds_apply_per_gpu_with_the_nodes_name() -> None:
    picked, reasons = cp.rank_cluster(
        cluster(busy_node("node1")), n=1, min_free_bytes=20 * GIB, max_utilization_pct=50
    )
    assert values(picked) == ["node1:1"]
    assert reasons == ("node1: GPU 0 memory free N/A and is 73% busy (max 50%)",)


def test_uuid_format_names_node_and_uuid() -> None:
    picked, _ = cp.rank_cluster(cluster(busy_node("node1")), n=1, output_format="uuid")
    assert values(picked, "uuid") == ["node1:GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"]


@pytest.mark.parametrize(
    ("nodes", "n", "line"),
    [
        ((), 1, f"gpumon pick: Prometheus at {URL} knows no GPU node (need 1)"),
        (
            ("busy", "dcgm"),
            3,
            "gpumon pick: only 2 GPUs on 2 nodes qualify (need 3): "
            "dcgm processes unknown (dcgm-exporter)",
        ),
        (("down",), 1, "gpumon pick: no GPU on 1 node qualifies (need 1): down DOWN since 22:05"),
        (("busy",), 4, "gpumon pick: only 2 GPUs on 1 node qualify (need 4)"),
    ],
)
def test_the_failure_line_says_how_many_and_why(nodes: tuple[str, ...], n: int, line: str) -> None:
    makers = {"busy": busy_node, "dcgm": dcgm_node, "down": down_node}
    sample = cluster(*(makers[name](name) for name in nodes))
    picked, reasons = cp.rank_cluster(sample, n=n)
    assert cp.cluster_failure_line(sample, picked, reasons, n) == line


# --- through the command line ---------------------------------------------------------------


def answering(monkeypatch: pytest.MonkeyPatch, *answers: ClusterSample) -> list[Any]:
    """The cluster source is a :class:`FakeClusterSource` of ``answers``; returns the
    settings it was opened with, then the sources opened."""
    opened: list[Any] = []

    def open_headless_source(settings: Any) -> FakeClusterSource:
        opened.append(settings)
        return FakeClusterSource(*answers)

    monkeypatch.setattr(cluster_base, "open_headless_source", open_headless_source)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    return opened


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_once_prometheus_prints_the_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = answering(monkeypatch, mixed())
    code, out, err = run(["once", "--prometheus", URL], capsys)
    assert (code, err) == (0, "")
    assert out == co.render_cluster(FakeClusterSource(mixed()).sample(detail=True))
    assert opened[0].prometheus_url == URL


def test_once_prometheus_json_validates(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, mixed())
    code, out, _ = run(["--prometheus", URL, "once", "--json"], capsys)
    assert code == 0
    validator().validate(json.loads(out))


def test_an_unreachable_server_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, cluster(error="connection refused", stale=True))
    code, out, err = run(["once", "--prometheus", URL], capsys)
    assert (code, out) == (1, "")
    assert err == f"gpumon: cannot read Prometheus at {URL}: connection refused\n"
    code, out, err = run(["once", "--prometheus", URL, "--json"], capsys)
    assert code == 1 and json.loads(out)["error"] == "connection refused"
    assert err.count("\n") == 1


def test_an_error_that_names_the_server_is_not_said_twice() -> None:
    failed = cluster(error=f"Prometheus at {URL}: HTTP 401 Unauthorized", stale=True)
    assert co.read_failure(failed) == f"Prometheus at {URL}: HTTP 401 Unauthorized"


def test_a_server_without_gpu_nodes_is_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, cluster())
    code, out, err = run(["once", "--prometheus", URL], capsys)
    assert (code, out) == (1, "")
    assert "knows no GPU node" in err and err.count("\n") == 1


def test_pick_prometheus_prints_node_index(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, mixed())
    argv = ["pick", "--prometheus", URL, "-n", "2", "--across-nodes", "--busy-ok"]
    code, out, err = run(argv, capsys)
    assert (code, out) == (0, "node10:1,node10:0\n")
    assert (
        err == "gpumon pick: note: node10:GPU 0 runs 1 process (too few GPUs without processes)\n"
    )
    code, out, err = run(["pick", "--prometheus", URL, "-n", "3", "--across-nodes"], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("gpumon pick: only 1 GPU on 4 nodes qualifies (need 3): node2 ")
    assert err.endswith(", node10: GPU 0: 1 process (alice)\n")


def test_a_configured_url_alone_leaves_once_and_pick_on_this_machine(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A shared home's config must not turn `CUDA_VISIBLE_DEVICES=$(gpumon pick)` into a
    cluster pick: only --prometheus on the command line, or --cluster, does."""
    opened = answering(monkeypatch, mixed())
    config = tmp_path / "config.toml"
    config.write_text(f'prometheus_url = "{URL}"\n')
    code, out, _ = run(["--config", str(config), "pick", "--demo"], capsys)
    assert code == 0 and ":" not in out and opened == []
    code, out, _ = run(["--config", str(config), "pick", "--cluster", "-n", "1"], capsys)
    assert (code, out) == (0, "node10 1\n")  # HOST GPUS
    code, out, _ = run(["--config", str(config), "once", "--cluster"], capsys)
    assert code == 0 and out.startswith(URL)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["once", "--cluster", "--demo", "--prometheus", URL], "--demo and --prometheus"),
        (["pick", "--demo", "--prometheus", URL], "--demo and --prometheus: choose one"),
        (["--prometheus", URL, "status"], "gpumon status reads this machine's GPUs"),
        (["--prometheus", URL, "export"], "gpumon export reads this machine's GPUs"),
    ],
)
def test_a_cluster_asked_for_where_it_cannot_be_is_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    opened = answering(monkeypatch, mixed())
    code, out, err = run(argv, capsys)
    assert (code, out, opened) == (2, "", [])
    assert err.startswith("gpumon: error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["once", "--cluster"], {}, "--cluster needs a Prometheus server: --prometheus URL"),
        (["pick", "--cluster"], {}, "--cluster needs a Prometheus server"),
        (["once", "--cluster", "--demo"], {"GPUMON_PROMETHEUS_URL": URL}, "--demo and --cluster"),
    ],
)
def test_cluster_without_a_server_or_with_the_demo_is_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    environ: dict[str, str],
    message: str,
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err.startswith("gpumon: error: ") and message in err and err.count("\n") == 1


def test_open_cluster_source_hands_every_setting_to_the_source() -> None:
    import ssl

    from gpumon.config import load_settings

    ca = ssl.get_default_verify_paths().cafile  # the system's bundle: a real PEM file
    if ca is None:
        pytest.skip("no system CA bundle to stand in for a private CA")
    flags = {
        "prometheus_url": URL,
        "prometheus_headers": ("X-Scope-OrgID: lab", "Authorization-Proxy: Bearer s3cr3t"),
        "prometheus_ca_file": ca,
        "prometheus_timeout_s": 2.5,
    }
    environ = {"GPUMON_PROMETHEUS_USER": "ops", "GPUMON_PROMETHEUS_PASSWORD": "hunter2"}
    settings = load_settings(flags, {**environ, "XDG_CONFIG_HOME": "/nonexistent"})
    assert cluster_base.request_headers(settings) == {
        "X-Scope-OrgID": "lab",
        "Authorization-Proxy": "Bearer s3cr3t",
    }
    source = cluster_base.open_cluster_source(settings)
    assert source.url == URL
    shown = repr(source)
    assert "X-Scope-OrgID" in shown and "2.5" in shown and ca in shown
    assert "s3cr3t" not in shown and "hunter2" not in shown and "basic_auth=***" in shown


def test_an_unreadable_ca_file_is_one_line_naming_its_setting_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    missing = tmp_path / "nope.pem"
    argv = ["once", "--prometheus", URL, "--prometheus-ca-file", str(missing)]
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err == f"gpumon: error: --prometheus-ca-file: {missing}: no such file\n"


def test_the_headless_cluster_modes_import_no_textual() -> None:
    import subprocess

    code = (
        "import sys; from gpumon.commands import cluster_output, once, pick;"
        "from gpumon.sources import cluster_base;"
        "assert 'textual' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_output_goes_to_stdout_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, mixed())
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["once", "--prometheus", URL, "--color", "never"]) == 0
    assert capsys.readouterr().err == ""
