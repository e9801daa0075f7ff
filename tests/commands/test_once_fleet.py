"""`gpumon once --cluster` on the aggregate path: the fleet's summary line and one line per
node from the rows; per-GPU lines for every node of a small fleet, for the `--node` ones of a
large one; JSON with rows and fleet always. Read through the contract's fake source."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema
import pytest

from gpumon.commands import cluster_fleet as cf
from gpumon.commands import cluster_output as co
from gpumon.data.cluster import ClusterSample, LabelCount, NodeState, Ranked
from gpumon.sources import cluster_base
from tests.commands.test_cluster_output import (
    URL,
    busy_node,
    cluster,
    dcgm_node,
    down_node,
    run,
    stale_node,
    utc,  # noqa: F401 (an autouse fixture: clock times in UTC)
    validator,
)
from tests.support.cluster_fake import FakeClusterSource, rows_only

LARGE = cf.SMALL_FLEET_NODES + 8


def large_fleet() -> ClusterSample:
    """More nodes than a small fleet has: node1.. busy on GPU 0, a dcgm, a DOWN, a stale."""
    busy = [busy_node(f"node{index}") for index in range(1, LARGE - 2)]
    return cluster(*busy, dcgm_node("dcgm1"), down_node("gone"), stale_node("late"))


def serving(monkeypatch: pytest.MonkeyPatch, answer: ClusterSample) -> list[FakeClusterSource]:
    """The cluster source is a fake answering ``answer``; returns the sources opened."""
    sources: list[FakeClusterSource] = []

    def open_headless_source(settings: Any) -> FakeClusterSource:
        sources.append(FakeClusterSource(answer))
        return sources[-1]

    monkeypatch.setattr(cluster_base, "open_headless_source", open_headless_source)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    return sources


def by_name(lines: list[str]) -> dict[str, str]:
    return {line.split()[0]: line for line in lines if line and not line.startswith(" ")}


def test_a_large_fleet_is_one_line_per_node_without_reading_any_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = serving(monkeypatch, large_fleet())
    code, out, err = run(["once", "--cluster", "--prometheus", URL], capsys)
    assert (code, err) == (0, "")
    assert sources[0].calls == ["sample"] and sources[0].closed
    lines = out.splitlines()
    assert f"{LARGE} nodes ({LARGE - 2} up, 1 DOWN, 1 stale)" in lines[0]
    assert f"{2 * (LARGE - 2)} GPUs up, {LARGE - 3} FREE, {LARGE - 3} busy" in lines[0]
    assert "(1 node cannot tell)" in lines[0] and lines[0].endswith("raw queries")
    header = next(line for line in lines if line.startswith("NODE"))
    assert header.split() == list(cf.ROW_COLUMNS.values())
    rows = by_name(lines[lines.index(header) + 1 :])
    assert len(rows) == LARGE and "python" not in out  # no process line
    assert rows["node7"].split()[:4] == ["node7", "UP", "2", "1"]
    assert "alice" in rows["node7"]


def test_unknown_is_never_free_in_the_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serving(monkeypatch, large_fleet())
    _, out, _ = run(["once", "--cluster", "--prometheus", URL], capsys)
    rows = by_name(out.splitlines())
    assert rows["dcgm1"].split()[:4] == ["dcgm1", "UP", "2", "N/A"]
    assert rows["dcgm1"].endswith("dcgm-exporter (no process data)")
    assert rows["gone"].split()[:4] == ["gone", "DOWN", "1", "N/A"]
    assert rows["gone"].endswith("since 22:05 gpumon")
    assert rows["late"].split()[:4] == ["late", "stale", "2", "N/A"]
    assert "alice" not in rows["late"] and "last seen 22:06" in rows["late"]


def test_node_reads_the_gpus_of_the_nodes_named_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = serving(monkeypatch, large_fleet())
    argv = ["once", "--prometheus", URL, "--node", "node7", "--node", "dcgm1:9400"]
    code, out, err = run(argv, capsys)
    assert (code, err) == (0, "")
    assert sources[0].calls == ["sample", "detail node7", "detail dcgm1:9400"]
    blocks = out.split("\n\n")[0].splitlines()
    assert "node7  UP  gpumon  2 GPUs" in blocks  # its header, then its GPU lines
    assert any("alice" in line and "python job_100.py" in line for line in blocks)
    assert "dcgm1  UP  dcgm-exporter (no process data)  2 GPUs" in blocks
    assert "node8" in by_name(blocks)  # every other node keeps its line
    assert out.split("\n\n")[1].splitlines()[1].split()[:2] == ["alice", "node7:0"]


def test_a_small_fleet_prints_every_nodes_gpus_as_before(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    small = cluster(busy_node("node1"), dcgm_node("node2"), down_node("node3"))
    sources = serving(monkeypatch, small)
    code, out, _ = run(["once", "--cluster", "--prometheus", URL], capsys)
    assert code == 0 and sources[0].calls == ["sample", "sample detail"]
    assert "NODE  STATE" not in out and "node1  UP  gpumon  2 GPUs" in out
    assert out == co.render_cluster(FakeClusterSource(small).sample(detail=True))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["once", "--cluster", "--node", "nope"], f"--node nope: no such node at {URL}"),
        (["once", "--demo", "--node", "node1"], "--node names a cluster's node"),
    ],
)
def test_a_node_that_is_not_there_is_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    serving(monkeypatch, large_fleet())
    monkeypatch.setenv("GPUMON_PROMETHEUS_URL", URL)
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"gpumon: error: {message}")
    assert err.count("\n") == 1


def test_json_has_rows_and_fleet_always_and_nodes_where_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serving(monkeypatch, large_fleet())
    code, out, _ = run(["once", "--cluster", "--prometheus", URL, "--json"], capsys)
    document = json.loads(out)
    validator().validate(document)
    assert code == 0 and document["nodes"] == [] and document["path"] == "raw queries"
    assert len(document["rows"]) == LARGE
    fleet = document["fleet"]
    assert (fleet["nodes"], fleet["down"], fleet["stale"]) == (LARGE, 1, 1)
    assert (fleet["free_gpus"], fleet["free_unknown"]) == (LARGE - 3, 1)
    rows = {row["name"]: row for row in document["rows"]}
    assert [rows[name]["free_gpus"] for name in ("node1", "dcgm1", "gone", "late")] == [
        1,
        None,
        None,
        None,
    ]
    assert rows["gone"]["state"] == "down" and rows["gone"]["up"] is False
    code, out, _ = run(["once", "--prometheus", URL, "--json", "--node", "gone"], capsys)
    (node,) = json.loads(out)["nodes"]
    assert node["name"] == "gone" and not any(gpu["free"] for gpu in node["gpus"])


def test_the_schema_refuses_a_free_count_on_a_row_that_is_not_up() -> None:
    document = co.cluster_to_dict(rows_only(large_fleet()))
    validator().validate(document)
    down = next(row for row in document["rows"] if row["state"] == "down")
    down["free_gpus"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(document)


def test_labels_top_lists_and_demo_are_said_above_the_rows() -> None:
    answer = rows_only(large_fleet())
    assert answer.fleet is not None and answer.rows is not None
    fleet = dataclasses.replace(
        answer.fleet,
        by_label=(LabelCount("partition", "a100", 16, 4),),
        top_users=(Ranked("alice", 40 * 1024**3),),
        idle_held_bytes=12 * 1024**3,
    )
    rows = (dataclasses.replace(answer.rows[0], simulated=True), *answer.rows[1:])
    text = co.render_cluster(dataclasses.replace(answer, fleet=fleet, rows=rows))
    first, labels, hottest, users = text.splitlines()[:4]
    assert "12.0G idle-held" in first and first.endswith("DEMO (simulated data)")
    assert labels == "by label: partition=a100 16 GPUs, 4 FREE"
    assert hottest.startswith("hottest: ") and users == "users holding most: alice 40.0G"
    assert by_name(text.splitlines())[rows[0].name].endswith("gpumon DEMO")


def test_a_row_says_its_state_in_its_colour_only_when_asked() -> None:
    text = co.render_cluster(rows_only(large_fleet()), color=True)
    down = next(line for line in text.splitlines() if "gone" in line)
    assert down.startswith("\x1b[1;31m") and NodeState.DOWN.value.upper() in down
    assert "\x1b[" not in co.render_cluster(rows_only(large_fleet()))


def test_on_a_narrow_terminal_the_counts_get_a_line_of_their_own() -> None:
    """At 80 columns the server's address must not push the FREE count off the line."""
    answer = FakeClusterSource(large_fleet()).sample()
    wide = co.render_cluster(answer).splitlines()
    narrow = co.render_cluster(answer, width=80).splitlines()
    assert len(wide[0]) > 80 and "FREE" in wide[0]
    assert narrow[0] == f"{URL}  2023-11-14 22:13:20  raw queries"
    assert narrow[1].startswith(f"{LARGE} nodes (") and f"{LARGE - 3} FREE" in narrow[1]
    assert narrow[2:] == wide[1:]


def test_a_small_fleets_json_rows_agree_with_its_gpus(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    small = cluster(busy_node("node1"), dcgm_node("node2"), down_node("node3"))
    serving(monkeypatch, small)
    code, out, _ = run(["once", "--cluster", "--prometheus", URL, "--json"], capsys)
    document = json.loads(out)
    validator().validate(document)
    rows = {row["name"]: row["free_gpus"] for row in document["rows"]}
    free = {
        node["name"]: sum(gpu["free"] for gpu in node["gpus"]) if node["up"] else None
        for node in document["nodes"]
    }
    assert code == 0 and rows == {"node1": 1, "node2": None, "node3": None}
    assert free == {"node1": 1, "node2": 0, "node3": None}  # dcgm: none free, count unknown
    assert document["fleet"]["free_gpus"] == 1
