"""`gpumon pick --prometheus URL`: N FREE GPUs of one node by default, as `HOST GPUS` for
`read host gpus < <(...)`; `--across-nodes` as node:index,...; a node whose name is no host
name is never offered; `--wait` asks again until a node has them."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from gpumon.cli import main
from gpumon.commands import cluster_pick as cp
from gpumon.commands import pick_cluster
from gpumon.data.cluster import ClusterSample, Node
from gpumon.sources import cluster_base
from tests.commands.test_cluster_output import (
    URL,
    answering,
    busy_node,
    cluster,
    dcgm_node,
    down_node,
    idle,
    node,
    run,
    utc,  # noqa: F401 (an autouse fixture: clock times in UTC)
)
from tests.support.cluster_fake import FakeClusterSource
from tests.support.ui_helpers import GIB, make_process, make_sample

FREE_BELOW = 1024**3


def free_node(name: str, count: int, **fields: object) -> Node:
    return node(name, make_sample(tuple(idle(index, **fields) for index in range(count))))


def test_n_gpus_of_one_node_the_node_whose_gpus_are_freest() -> None:
    fuller = free_node("node1", 4, memory_used_bytes=900 * 1024**2)  # FREE, but less empty
    emptier = free_node("node2", 2)
    found = cp.pick_one_node(cluster(fuller, emptier, busy_node("node3")), n=2,
                             free_below_bytes=FREE_BELOW)  # fmt: skip
    assert found.pick is not None and found.pick.line("index") == "node2 0,1"
    found = cp.pick_one_node(cluster(fuller, emptier), n=3, free_below_bytes=FREE_BELOW)
    assert found.pick is not None and found.pick.line("index") == "node1 0,1,2"


def test_a_node_without_n_free_gpus_is_not_picked_and_the_best_is_named() -> None:
    two = free_node("node2", 2)
    sample = cluster(busy_node("node1"), two, busy_node("node9"))
    found = cp.pick_one_node(sample, n=3, free_below_bytes=FREE_BELOW)
    assert found.pick is None and (found.best_node, found.best_count) == ("node2", 2)
    assert cp.one_node_failure_line(sample, found, 3) == (
        "gpumon pick: no node has 3 GPUs that qualify; the best, node2, has 2 "
        "(--across-nodes picks from several): node1: GPU 0: 1 process (alice), "
        "node9: GPU 0: 1 process (alice)"
    )


@pytest.mark.parametrize(
    "name",
    ["gpu node (10.0.0.7:9402)", "node1:9402", "-oProxyCommand=touch /tmp/x", "node\tone", ""],
)
def test_a_node_whose_name_is_no_host_name_is_never_offered(name: str) -> None:
    found = cp.pick_one_node(cluster(free_node(name, 2)), n=1, free_below_bytes=FREE_BELOW)
    assert found.pick is None
    assert found.reasons == (f"{name!r} is no host name to ssh to",)


@pytest.mark.parametrize("name", ["node1", "gpu-07.cluster.local", "10.0.0.7", "dgx_a100_3"])
def test_host_names_one_can_ssh_to(name: str) -> None:
    assert cp.safe_host_name(name)


def test_pick_prints_host_and_gpus_for_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, cluster(busy_node("node1"), free_node("gpu-07", 4)))
    code, out, err = run(["pick", "--prometheus", URL, "-n", "2"], capsys)
    assert (code, out, err) == (0, "gpu-07 0,1\n", "")
    read = subprocess.run(
        ["bash", "-c", 'read host gpus < <(printf "%s" "$0"); echo "[$host] [$gpus]"', out],
        capture_output=True,
        text=True,
        check=True,
    )
    assert read.stdout == "[gpu-07] [0,1]\n"


def test_pick_across_nodes_gives_node_index_of_free_gpus(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, cluster(busy_node("node1"), free_node("node2", 1)))
    code, out, err = run(["pick", "--prometheus", URL, "-n", "2", "--across-nodes"], capsys)
    assert (code, out, err) == (0, "node1:1,node2:0\n", "")


def test_no_node_with_n_is_exit_1_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, cluster(busy_node("node1"), free_node("node2", 1)))
    code, out, err = run(["pick", "--prometheus", URL, "-n", "2"], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("gpumon pick: no node has 2 GPUs that qualify; the best, node1, has 1")
    assert err.count("\n") == 1


def test_busy_ok_ranks_busy_gpus_on_one_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answering(monkeypatch, cluster(busy_node("node1")))
    code, out, err = run(["pick", "--prometheus", URL, "-n", "2", "--busy-ok"], capsys)
    assert (code, out) == (0, "node1 1,0\n")
    assert err == "gpumon pick: note: node1: GPU 0 runs 1 process\n"


class ClusterAnswers:
    """A cluster source that answers ``answers`` in turn, then the last for ever."""

    def __init__(self, *answers: ClusterSample) -> None:
        self.answers = list(answers)
        self.reads = 0
        self.closed = False

    def sample(self) -> ClusterSample:
        self.reads += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self) -> None:
        self.closed = True


def test_wait_asks_again_until_a_node_has_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (idle(0), idle(1))
    busy = cluster(node("node1", make_sample(gpus, (make_process(gpus[0], 7, user="bob"),))))
    freed = cluster(node("node1", make_sample(gpus)))
    source = ClusterAnswers(busy, busy, freed)
    opened: list[Any] = []

    def open_headless_source(settings: Any) -> ClusterAnswers:
        opened.append(settings)
        return source

    monkeypatch.setattr(cluster_base, "open_headless_source", open_headless_source)
    monkeypatch.setattr(pick_cluster, "POLL_FLOOR_S", 0.25)
    code, out, err = run(
        ["--interval", "0.25", "pick", "--prometheus", URL, "-n", "2", "--wait", "1m"], capsys
    )
    assert (code, out) == (0, "node1 0,1\n")
    assert err.startswith("gpumon pick: waited ") and err.count("\n") == 1
    assert (len(opened), source.reads, source.closed) == (1, 3, True)


def test_memory_in_use_without_a_process_is_not_free_in_a_cluster_either() -> None:
    held = free_node("node1", 2, memory_used_bytes=5 * GIB)
    found = cp.pick_one_node(cluster(held), n=1, free_below_bytes=FREE_BELOW)
    assert found.pick is None
    assert found.reasons[0] == (
        "node1: GPU 0: 5.0G in use by no listed process (FREE is under 1.0G)"
    )


def test_main_is_exit_2_for_a_cluster_without_a_server(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    assert main(["pick", "--cluster", "--wait", "5s"]) == 2
    assert "--cluster needs a Prometheus server" in capsys.readouterr().err


def test_a_uuid_a_shell_would_run_is_never_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """However a cluster sample came to hold it, a UUID that is no UUID is not printed into
    `ssh "$host" "CUDA_VISIBLE_DEVICES=$gpus ..."`: that GPU does not qualify, and says why."""
    bad = free_node("node1", 1, uuid="GPU-0;touch${IFS}/tmp/pwned;#")
    good = free_node("node2", 1, uuid="GPU-8f2f2c1a-1b2c-3d4e-5f60-718293a4b5c6")
    answering(monkeypatch, cluster(bad))
    code, out, err = run(["pick", "--prometheus", URL, "--format", "uuid"], capsys)
    assert (code, out) == (1, "")
    assert "node1: GPU 0 UUID unknown" in err and "pwned" not in err
    answering(monkeypatch, cluster(bad, good))
    for argv in ([], ["--across-nodes"]):
        code, out, _ = run(["pick", "--prometheus", URL, "--format", "uuid", *argv], capsys)
        assert code == 0 and "pwned" not in out
        assert "GPU-8f2f2c1a-1b2c-3d4e-5f60-718293a4b5c6" in out


# --- a large fleet: the rows choose which nodes are read GPU by GPU --------------------------


def large_fleet(*extra: Node) -> ClusterSample:
    """More nodes than a small fleet: node1.. with one FREE GPU each, a dcgm node (FREE
    unknown), a DOWN one, and ``extra``."""
    from gpumon.commands.cluster_fleet import SMALL_FLEET_NODES

    busy = [busy_node(f"node{index}") for index in range(1, SMALL_FLEET_NODES + 4)]
    return cluster(*busy, dcgm_node("dcgm1"), down_node("gone"), *extra)


def serving(monkeypatch: pytest.MonkeyPatch, answer: ClusterSample) -> FakeClusterSource:
    source = FakeClusterSource(answer)
    monkeypatch.setattr(cluster_base, "open_headless_source", lambda settings: source)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    return source


def test_one_node_pick_reads_only_nodes_whose_free_count_can_give_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = serving(monkeypatch, large_fleet(free_node("gpu-07", 4), free_node("gpu-08", 2)))
    code, out, err = run(["pick", "--prometheus", URL, "-n", "3"], capsys)
    assert (code, out, err) == (0, "gpu-07 0,1,2\n", "")
    assert source.calls == ["sample", "detail gpu-07"] and source.closed


def test_across_nodes_reads_the_freest_nodes_until_enough(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = serving(monkeypatch, large_fleet(free_node("gpu-07", 2)))
    argv = ["pick", "--prometheus", URL, "-n", "4", "--across-nodes"]
    code, out, err = run(argv, capsys)
    assert (code, err) == (0, "")
    assert out == "gpu-07:0,gpu-07:1,node1:1,node2:1\n"
    assert source.details == ["gpu-07", "node1", "node2"]  # 2 + 1 + 1 FREE: no more


def test_no_node_with_n_free_is_said_from_the_rows_without_reading_a_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = serving(monkeypatch, large_fleet())
    code, out, err = run(["pick", "--prometheus", URL, "-n", "2"], capsys)
    assert (code, out) == (1, "")
    assert err.startswith(
        "gpumon pick: no node has 2 GPUs that qualify; the best, node1, has 1 "
        "(--across-nodes picks from several): dcgm1 processes unknown (dcgm-exporter), "
        "gone DOWN since 22:05, node1: 1 FREE"
    )
    assert source.details == []


def test_unknown_and_down_nodes_are_never_read_nor_picked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [dcgm_node(f"dcgm{index}") for index in range(40)] + [down_node("gone")]
    source = serving(monkeypatch, cluster(*nodes))
    code, out, err = run(["pick", "--prometheus", URL, "--across-nodes"], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("gpumon pick: no GPU on 41 nodes qualifies (need 1): dcgm0 processes")
    assert source.details == []


def test_the_nodes_read_are_bounded_and_the_rest_are_counted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = serving(monkeypatch, large_fleet())
    monkeypatch.setattr(pick_cluster, "MAX_DETAILED_NODES", 2)
    code, out, err = run(["pick", "--prometheus", URL, "-n", "5", "--across-nodes"], capsys)
    assert (code, out) == (1, "")
    assert source.details == ["node1", "node2"]
    assert err.startswith("gpumon pick: only 2 GPUs on 37 nodes qualify (need 5): ")
    assert "33 more candidate nodes not read" in err
