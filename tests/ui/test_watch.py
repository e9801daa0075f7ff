"""``w``, tell me when: a watched GPU that becomes FREE, or a watched process that ends, brings
a notification, the terminal's bell and a desktop notification (OSC 9 and OSC 777, wrapped for
tmux inside tmux), once; the card says ``watching`` meanwhile and ``w`` again stops. The same
key in the cluster view watches a node's GPU. What reaches the terminal is read where Textual
writes it: its driver."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot

from gpumon.data.alerts import alert_sequence, notification_text
from gpumon.data.cluster import ClusterSample, ExporterKind, NodeState
from gpumon.data.model import GpuProcess, GpuStats, Sample
from gpumon.data.notes import GpuNote, gather_notes
from gpumon.sampling.watches import Watch, Watches
from gpumon.ui.cluster.node_history import NodeGpuScreen
from gpumon.ui.cluster.node_screen import NodeScreen
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.process_table import ProcessTable
from tests.support.ui_helpers import (
    FIXED_TIME,
    MIB,
    app_for,
    make_gpu,
    make_process,
    make_sample,
    screen_text,
)
from tests.ui.cluster.test_cluster_ui import cluster_app, gpu_is_free, make_cluster, shown

ESC, BEL = "\x1b", "\a"
SIZE = (120, 40)


def busy_server(*, gpu2_free: bool = False, gone: frozenset[int] = frozenset()) -> Sample:
    """Four busy GPUs, one process each (PIDs 100-103); with ``gpu2_free`` GPU 2's process
    has gone and its memory is back; PIDs in ``gone`` have ended."""
    gpus = [make_gpu(index) for index in range(4)]
    if gpu2_free:
        gpus[2] = replace(gpus[2], memory_used_bytes=3 * MIB, utilization_gpu_pct=0)
    processes = tuple(
        make_process(gpu, 100 + gpu.index, command=f"python train_{gpu.index}.py")
        for gpu in gpus
        if not (gpu2_free and gpu.index == 2) and 100 + gpu.index not in gone
    )
    return make_sample(tuple(gpus), processes)


def clock(timestamp_s: float) -> str:
    """``14:02``: when an alert says a GPU was FREE, in local time."""
    return time.strftime("%H:%M", time.localtime(timestamp_s))


def terminal_writes(app: App[Any]) -> list[str]:
    """From now on, everything the app writes to its terminal (through Textual's driver, as
    the screen's updates and the bell go), one string per write."""
    driver = app._driver
    assert driver is not None
    written: list[str] = []
    original = driver.write

    def write(data: str) -> None:
        written.append(data)
        original(data)

    driver.write = write  # type: ignore[method-assign]
    return written


def notices(app: App[Any]) -> list[str]:
    return [str(notification.message) for notification in app._notifications]


async def select_gpu(pilot: Pilot[Any], index: int) -> None:
    panel = pilot.app.query_one(GpuPanel)
    panel.focus()
    for _ in range(8):
        if panel.selected_gpu is not None and panel.selected_gpu.index == index:
            return
        await pilot.press("right")
    raise AssertionError(f"GPU {index} could not be selected")


def alerts(written: list[str]) -> list[str]:
    return [data for data in written if data.startswith(BEL)]


# -- the escapes ---------------------------------------------------------------------------


def test_the_alert_is_a_bell_then_osc_9_and_osc_777() -> None:
    sequence = alert_sequence("gpumon", "GPU 2 on node7 is FREE")
    body = "GPU 2 on node7 is FREE"
    assert sequence == f"{BEL}{ESC}]9;{body}{BEL}{ESC}]777;notify;gpumon;{body}{BEL}"


def test_inside_tmux_each_escape_passes_through_with_its_escs_doubled() -> None:
    sequence = alert_sequence("gpumon", "GPU 2 is FREE", tmux=True)
    assert sequence == (
        f"{BEL}{ESC}Ptmux;{ESC}{ESC}]9;GPU 2 is FREE{BEL}{ESC}\\"
        f"{ESC}Ptmux;{ESC}{ESC}]777;notify;gpumon;GPU 2 is FREE{BEL}{ESC}\\"
    )


@pytest.mark.parametrize(
    "hostile",
    [
        f"python {ESC}]0;owned{BEL} train.py",
        "python \x9b31m train.py \x9d8;;http://x\x9c",
        f"a{ESC}\\b\x07c\x00d\x7fe\r\nf",
    ],
)
def test_other_users_text_cannot_end_or_start_an_escape(hostile: str) -> None:
    body = notification_text(hostile)
    assert body.isprintable()
    assert not any(char in body for char in (ESC, BEL, "\x9b", "\x9c", "\x9d", "\x00", "\x7f"))
    sequence = alert_sequence("gpumon", f"PID 7 ({hostile}) has ended")
    # Exactly the bell and two escapes, each ended by the BEL this module put there.
    assert sequence.count(ESC) == 2 and sequence.count(BEL) == 3
    assert not any(0x80 <= ord(char) <= 0x9F for char in sequence)


def test_a_warning_on_the_same_gpu_comes_before_watching_whatever_the_sources_order() -> None:
    """A card's short border keeps its first notes: "claimed by" or "held idle" matter more
    than the user's own watch."""
    watches = Watches()
    watches.toggle(Watch(1, "GPU 1 (T4)"))
    claimed = GpuNote("claimed by alice 40 s ago", "note-warn")
    notes = gather_notes([lambda sample: watches.notes(), lambda sample: {1: [claimed]}], None)
    assert notes == {1: (claimed, GpuNote("watching"))}


# -- the dashboard: a GPU -----------------------------------------------------------------


async def test_a_watched_gpu_that_becomes_free_rings_once_and_stops_watching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TMUX", raising=False)
    app = app_for(busy_server())
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server())
        await pilot.pause()
        await select_gpu(pilot, 2)
        written = terminal_writes(app)
        await pilot.press("w")
        await pilot.pause()
        assert "watching" in screen_text(app)
        assert any("Watching GPU 2" in notice for notice in notices(app))
        for _ in range(3):  # still busy: nothing yet
            app.receive_sample(busy_server())
            await pilot.pause()
        assert alerts(written) == []
        app.receive_sample(busy_server(gpu2_free=True))
        await pilot.pause()
        expected = f"GPU 2 (NVIDIA Test Board) on testhost was FREE at {clock(FIXED_TIME)}"
        assert alerts(written) == [alert_sequence("gpumon", expected)]
        assert f"{ESC}]9;{expected}{BEL}" in alerts(written)[0]
        assert f"{ESC}]777;notify;gpumon;{expected}{BEL}" in alerts(written)[0]
        assert expected in notices(app)
        assert "watching" not in screen_text(app)
        app.receive_sample(busy_server(gpu2_free=True))  # told once: no second alert
        await pilot.pause()
        assert len(alerts(written)) == 1


async def test_the_free_notice_says_when_and_goes_once_the_gpu_is_taken_again() -> None:
    """The notice stays ten minutes: "was FREE at 22:13" dates it, and once the GPU is busy
    again it is taken down rather than left claiming FREE."""
    app = app_for(busy_server())
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server())
        await pilot.pause()
        await select_gpu(pilot, 2)
        await pilot.press("w")
        free = replace(busy_server(gpu2_free=True), timestamp_s=FIXED_TIME + 120)
        app.receive_sample(free)
        await pilot.pause()
        expected = f"GPU 2 (NVIDIA Test Board) on testhost was FREE at {clock(FIXED_TIME + 120)}"
        assert [notice for notice in notices(app) if "was FREE" in notice] == [expected]
        app.receive_sample(free)  # still FREE: still said
        await pilot.pause()
        assert expected in notices(app)
        app.receive_sample(busy_server())  # taken again
        await pilot.pause()
        assert not [notice for notice in notices(app) if "was FREE" in notice]


async def test_inside_tmux_the_alert_is_wrapped_for_passthrough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TMUX", "/tmp/tmux-1000/default,4242,0")
    app = app_for(busy_server())
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server())
        await pilot.pause()
        await select_gpu(pilot, 2)
        written = terminal_writes(app)
        await pilot.press("w")
        app.receive_sample(busy_server(gpu2_free=True))
        await pilot.pause()
        (alert,) = alerts(written)
        body = f"GPU 2 (NVIDIA Test Board) on testhost was FREE at {clock(FIXED_TIME)}"
        assert alert == f"{BEL}{ESC}Ptmux;{ESC}{ESC}]9;{body}{BEL}{ESC}\\" + (
            f"{ESC}Ptmux;{ESC}{ESC}]777;notify;gpumon;{body}{BEL}{ESC}\\"
        )


async def test_w_again_stops_watching() -> None:
    app = app_for(busy_server())
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server())
        await pilot.pause()
        await select_gpu(pilot, 1)
        written = terminal_writes(app)
        await pilot.press("w")
        await pilot.pause()
        assert "watching" in screen_text(app)
        await pilot.press("w")
        await pilot.pause()
        assert "watching" not in screen_text(app)
        assert any("Stopped watching GPU 1" in notice for notice in notices(app))
        app.receive_sample(busy_server(gpu2_free=True))
        free_1 = busy_server()
        gpus = list(free_1.gpus)
        gpus[1] = replace(gpus[1], memory_used_bytes=0)
        app.receive_sample(replace(free_1, gpus=tuple(gpus), processes=free_1.processes[::2]))
        await pilot.pause()
        assert alerts(written) == []


async def test_a_gpu_free_already_is_said_at_once_and_not_watched() -> None:
    app = app_for(busy_server(gpu2_free=True))
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server(gpu2_free=True))
        await pilot.pause()
        await select_gpu(pilot, 2)
        written = terminal_writes(app)
        await pilot.press("w")
        await pilot.pause()
        assert "GPU 2 is FREE now: nothing to wait for." in notices(app)
        assert "watching" not in screen_text(app)
        assert alerts(written) == []


async def test_a_gpu_whose_processes_are_unknown_never_fires() -> None:
    """A lost process list with the memory back is unknown, not FREE."""
    app = app_for(busy_server())
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server())
        await pilot.pause()
        await select_gpu(pilot, 2)
        written = terminal_writes(app)
        await pilot.press("w")
        refused = busy_server(gpu2_free=True)
        gpus = list(refused.gpus)
        gpus[2] = replace(gpus[2], processes_error="Insufficient Permissions")
        app.receive_sample(replace(refused, gpus=tuple(gpus)))
        await pilot.pause()
        assert alerts(written) == []
        assert "watching" in screen_text(app)


# -- the dashboard: a process -------------------------------------------------------------


async def watch_process(app: GpumonApp, pilot: Pilot[Any], pid: int) -> None:
    table = app.query_one(ProcessTable)
    table.focus()
    for _ in range(8):
        process = table.cursor_process
        if process is not None and process.pid == pid:
            break
        await pilot.press("down")
    assert table.cursor_process is not None and table.cursor_process.pid == pid
    await pilot.press("w")
    await pilot.pause()


async def test_a_watched_process_that_ends_rings_and_its_gpu_says_so_meanwhile() -> None:
    app = app_for(busy_server())
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server())
        await pilot.pause()
        written = terminal_writes(app)
        await watch_process(app, pilot, 101)
        assert "watching PID 101" in screen_text(app)
        app.receive_sample(busy_server(gone=frozenset({103})))  # another one ends
        await pilot.pause()
        assert alerts(written) == []
        app.receive_sample(busy_server(gone=frozenset({101, 103})))
        await pilot.pause()
        expected = "PID 101 (python train_1.py) on GPU 1 of testhost has ended"
        assert alerts(written) == [alert_sequence("gpumon", expected)]
        assert expected in notices(app)
        assert "watching PID 101" not in screen_text(app)


async def test_a_process_nvml_still_lists_after_it_exited_has_ended() -> None:
    app = app_for(busy_server())
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(busy_server())
        await pilot.pause()
        written = terminal_writes(app)
        await watch_process(app, pilot, 102)
        sample = busy_server()
        processes = tuple(
            replace(p, exited=True, visible=False) if p.pid == 102 else p for p in sample.processes
        )
        app.receive_sample(replace(sample, processes=processes))
        await pilot.pause()
        assert len(alerts(written)) == 1 and "PID 102" in alerts(written)[0]


async def test_a_hostile_command_reaches_the_terminal_only_as_plain_text() -> None:
    hostile = f"python {ESC}]52;c;cm0gLXJmIH4K{BEL} x.py"
    gpus = tuple(make_gpu(index) for index in range(2))
    processes: tuple[GpuProcess, ...] = (make_process(gpus[0], 500, command=hostile),)
    app = app_for(make_sample(gpus, processes))
    async with app.run_test(size=SIZE) as pilot:
        app.receive_sample(make_sample(gpus, processes))
        await pilot.pause()
        written = terminal_writes(app)
        await watch_process(app, pilot, 500)
        app.receive_sample(make_sample(gpus))
        await pilot.pause()
        (alert,) = alerts(written)
        # The bell and two escapes of gpumon's own; the command's ESC and BEL read "?".
        assert alert.count(ESC) == 2 and alert.count(BEL) == 3
        assert "PID 500 (python ?]52;c;cm0gLXJmIH4K? x.py)" in alert


# -- the cluster view ---------------------------------------------------------------------


def with_gpu(cluster: ClusterSample, node: str, index: int, gpu: GpuStats) -> ClusterSample:
    """``cluster`` with GPU ``index`` of ``node`` replaced by ``gpu`` and its processes gone
    (a FREE GPU: no process, little memory)."""
    nodes = []
    for each in cluster.nodes:
        if each.name == node:
            gpus = tuple(gpu if g.index == index else g for g in each.gpus)
            processes = tuple(p for p in each.sample.processes if p.gpu_index != index)
            each = replace(each, sample=replace(each.sample, gpus=gpus, processes=processes))
        nodes.append(each)
    return replace(cluster, nodes=tuple(nodes))


def freed(cluster: ClusterSample, node: str, index: int) -> ClusterSample:
    gpu = next(g for n in cluster.nodes if n.name == node for g in n.gpus if g.index == index)
    return with_gpu(cluster, node, index, replace(gpu, memory_used_bytes=5 * MIB))


def with_state(cluster: ClusterSample, node: str, state: NodeState) -> ClusterSample:
    nodes = tuple(replace(n, state=state) if n.name == node else n for n in cluster.nodes)
    return replace(cluster, nodes=nodes)


async def open_node_gpu(app: Any, pilot: Pilot[Any], node: str, index: int) -> None:
    app.push_screen(NodeScreen(node))
    await pilot.pause()
    panel = app.screen.query_one(GpuPanel)
    panel.focus()
    for _ in range(8):
        if panel.selected_gpu is not None and panel.selected_gpu.index == index:
            return
        await pilot.press("right")
    raise AssertionError(f"GPU {index} of {node} could not be selected")


async def test_w_on_a_nodes_gpu_rings_when_it_becomes_free_and_only_while_the_node_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TMUX", raising=False)
    assert not gpu_is_free(2, 1)
    cluster = make_cluster(10)
    app = cluster_app(cluster)
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot, cluster)
        await open_node_gpu(app, pilot, "node2", 1)
        written = terminal_writes(app)
        await pilot.press("w")
        await pilot.pause()
        assert "watching" in screen_text(app)
        # FREE on a node that is DOWN: its readings are old, nothing is told.
        await shown(app, pilot, with_state(freed(cluster, "node2", 1), "node2", NodeState.DOWN))
        assert alerts(written) == []
        # Another node's GPU 1 becoming FREE is not this one.
        await shown(app, pilot, freed(cluster, "node3", 1))
        assert alerts(written) == []
        await shown(app, pilot, freed(cluster, "node2", 1))
        at = clock(freed(cluster, "node2", 1).timestamp_s)
        expected = f"GPU 1 (NVIDIA H100 80GB HBM3) on node2 was FREE at {at}"
        assert alerts(written) == [alert_sequence("gpumon", expected)]
        assert expected in notices(app)
        assert "watching" not in screen_text(app)
        await shown(app, pilot, cluster)  # node2's GPU 1 taken again: the notice goes
        assert expected not in notices(app)


async def test_the_gpu_screen_watches_too_and_w_again_stops() -> None:
    cluster = make_cluster(10)
    app = cluster_app(cluster)
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot, cluster)
        app.push_screen(NodeGpuScreen("node2", 1))
        await pilot.pause()
        written = terminal_writes(app)
        await pilot.press("w")
        await pilot.pause()
        assert "watching" in screen_text(app).splitlines()[0]
        await pilot.press("w")
        await pilot.pause()
        assert "watching" not in screen_text(app).splitlines()[0]
        await shown(app, pilot, freed(cluster, "node2", 1))
        assert alerts(written) == []
        await pilot.press("w")
        await pilot.pause()
        assert "GPU 1 of node2 is FREE now: nothing to wait for." in notices(app)


async def test_a_dcgm_node_cannot_be_watched_it_never_tells_free() -> None:
    cluster = make_cluster(100)
    app = cluster_app(cluster)
    async with app.run_test(size=SIZE) as pilot:
        await shown(app, pilot, cluster)
        dcgm = next(n for n in cluster.nodes if n.exporter is ExporterKind.DCGM)
        await open_node_gpu(app, pilot, dcgm.name, 0)
        await pilot.press("w")
        await pilot.pause()
        assert any("cannot be watched" in n or "none can be watched" in n for n in notices(app))
        assert len(app.watches) == 0


# -- the help ------------------------------------------------------------------------------


async def test_both_helps_list_w() -> None:
    app = app_for(busy_server())
    async with app.run_test(size=(100, 200)) as pilot:
        app.receive_sample(busy_server())
        await pilot.press("question_mark")
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "│ w tell me when the selected GPU is FREE, or the process" in text
    cluster = cluster_app()
    async with cluster.run_test(size=(100, 200)) as pilot:
        await shown(cluster, pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        text = " ".join(screen_text(cluster).split())
        assert "│ w tell me when this GPU is FREE (its node UP)" in text


def test_a_watched_process_whose_pid_is_reused_at_once_has_ended() -> None:
    """The job ended and a new process got its PID within one interval: the watch fires."""
    from gpumon.sampling.watches import is_done, process_watch
    from tests.support.ui_helpers import make_gpu, make_process, make_sample

    gpu = make_gpu(0)
    job = make_process(gpu, 4242, create_time_s=1000.0)
    watch = process_watch(job)
    assert not is_done(watch, make_sample((gpu,), (job,)), set())
    newcomer = replace(job, create_time_s=2000.0, command="python other.py")
    assert is_done(watch, make_sample((gpu,), (newcomer,)), set())
