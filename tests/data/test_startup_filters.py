"""The start-up filters: ``--only`` (NVML indices, GPU and MIG UUIDs or their prefixes),
``--only-visible`` (``CUDA_VISIBLE_DEVICES`` read as CUDA reads it) and ``--user``, the same
in the dashboard and in ``gpumon once`` (text and JSON)."""

from __future__ import annotations

import io
import json
import pwd
from dataclasses import replace
from typing import Any

import pytest
from textual.pilot import Pilot

from gpumon.cli import main
from gpumon.config import Settings
from gpumon.data.model import GpuStats, MigInstance, Sample
from gpumon.data.selection import (
    GpuSelection,
    index_ranges,
    select_gpus,
    selection_from,
    visible_gpus,
)
from gpumon.sampling import snapshot
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.widgets.bars import HeaderBar
from gpumon.ui.widgets.process_table import ProcessTable
from tests.commands.test_once import validate
from tests.support.ui_helpers import (
    GIB,
    MIB,
    app_for,
    make_gpu,
    make_process,
    make_sample,
    screen_text,
)

SIZE = (120, 40)
USERS = ("alice", "bob")


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-aaaa-bbbb-cccc-dddddddddddd"


def server(count: int = 8, *, names: dict[int, str] | None = None) -> Sample:
    """``count`` GPUs; GPU n runs PID 100+n (alice's for even n, bob's for odd), which holds
    all its memory, and GPU 5 is FREE; GPU 6 is in MIG mode with two instances; ``names``
    gives some GPUs other models."""
    gpus: list[GpuStats] = []
    for index in range(count):
        gpu = make_gpu(index, name=(names or {}).get(index, "NVIDIA A100-SXM4-80GB"))
        if index == 5:
            gpu = replace(gpu, memory_used_bytes=3 * MIB, utilization_gpu_pct=0)
        if index == 6:
            instances = (
                MigInstance(6, 0, 1, 0, "3g.40gb", "MIG-11111111-2222-3333-4444-555555555555"),
                MigInstance(6, 1, 2, 0, "3g.40gb", "MIG-66666666-2222-3333-4444-555555555555"),
            )
            gpu = replace(gpu, mig_mode=True, mig_instances=instances)
        gpus.append(gpu)
    processes = tuple(
        make_process(gpu, 100 + gpu.index, user=USERS[gpu.index % 2], gpu_memory_bytes=12 * GIB)
        for gpu in gpus
        if gpu.index != 5
    )
    return make_sample(tuple(gpus), processes)


def shown(sample: Sample, selection: GpuSelection) -> list[int]:
    return [gpu.index for gpu in select_gpus(sample, selection).sample.gpus]


def visible(value: str | None, *, order: str = "", count: int = 8, **kw: Any) -> list[int] | None:
    environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    if order:
        environ["CUDA_DEVICE_ORDER"] = order
    selection = selection_from((), True, environ)
    return visible_gpus(selection.visible, server(count, **kw).gpus, selection.pci_bus_order)[0]


def visible_notes(value: str | None, **kw: Any) -> list[str]:
    sample = server(**kw)
    return visible_gpus(value, sample.gpus, False)[1]


# -- --only --------------------------------------------------------------------------------


def test_only_takes_nvml_indices_gpu_uuids_mig_uuids_and_unique_prefixes() -> None:
    sample = server()
    assert shown(sample, GpuSelection(only=("0", "3"))) == [0, 3]
    assert shown(sample, GpuSelection(only=(uuid(4), "GPU-00000001"))) == [1, 4]
    assert shown(sample, GpuSelection(only=("MIG-66666666",))) == [6]  # the GPU holding it
    assert shown(sample, GpuSelection(only=(uuid(2).upper(),))) == [2]  # hex: any case


def test_only_cuts_the_processes_with_their_gpus() -> None:
    selected = select_gpus(server(), GpuSelection(only=("0", "3")))
    assert [p.pid for p in selected.sample.processes] == [100, 103]
    assert selected.total == 8 and selected.describe() == "GPUs 0,3 of 8"
    assert selected.missing == () and selected.notes == ()


def test_a_gpu_that_is_not_here_or_a_prefix_of_several_is_named() -> None:
    selected = select_gpus(server(4), GpuSelection(only=("2", "9", "GPU-0000000")))
    assert [gpu.index for gpu in selected.sample.gpus] == [2]
    assert selected.missing == (
        "--only 9: no such GPU here (GPUs here: 0-3)",
        "--only GPU-0000000: matches GPUs 0, 1, 2, 3; give more of the UUID",
    )


def test_the_header_words() -> None:
    assert index_ranges([0, 1, 2, 3, 6]) == "0-3,6"
    assert index_ranges([0, 1, 5]) == "0,1,5"
    assert select_gpus(server(), GpuSelection(only=("2",))).describe() == "GPU 2 of 8"
    assert select_gpus(server(), GpuSelection(only_visible=True, visible="-1")).describe() == (
        "no GPU of 8"
    )


# -- --only-visible: CUDA_VISIBLE_DEVICES as CUDA reads it ---------------------------------


def test_unset_means_every_gpu() -> None:
    assert visible(None) is None
    assert shown(server(), selection_from((), True, {})) == list(range(8))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1,3", [1, 3]),
        ("3,1", [3, 1]),  # CUDA's order: cuda:0 is GPU 3
        (" 2 , 0 ", [2, 0]),
        ("1abc", [1]),  # CUDA reads the leading number
        (f"{uuid(4)},{uuid(2)}", [4, 2]),
        ("GPU-00000007", [7]),  # a unique prefix
        ("MIG-11111111-2222-3333-4444-555555555555", [6]),
        ("MIG-GPU-00000006-aaaa-bbbb-cccc-dddddddddddd/1/0", [6]),  # the old MIG form
        ("0,2,-1,1", [0, 2]),  # the first entry that is no GPU ends the list
        ("0,9,1", [0]),
        (f"0,{uuid(1)}", [0]),  # indices and UUIDs do not mix
        ("-1", []),
        ("", []),  # set but empty: CUDA sees no GPU
        ("garbage", []),
        ("GPU-0000000", []),  # a prefix of several GPUs names none
        ("1,1", []),  # a GPU named twice: CUDA sees none
    ],
)
def test_cuda_visible_devices_forms(value: str, expected: list[int]) -> None:
    assert visible(value, order="PCI_BUS_ID") == expected


def test_no_gpu_visible_or_a_list_cut_short_is_said_in_one_line() -> None:
    assert visible_notes("-1") == [
        "CUDA_VISIBLE_DEVICES='-1': CUDA sees no GPU ('-1' is no GPU here)"
    ]
    assert visible_notes("") == ["CUDA_VISIBLE_DEVICES='': CUDA sees no GPU (it is empty)"]
    assert visible_notes("nope") == [
        "CUDA_VISIBLE_DEVICES='nope': CUDA sees no GPU ('nope' is no GPU here)"
    ]
    assert visible_notes("0,2,-1,1") == [
        "CUDA_VISIBLE_DEVICES='0,2,-1,1': CUDA stops at '-1' (no GPU here): it sees only 0,2"
    ]
    assert visible_notes("1,1") == [
        "CUDA_VISIBLE_DEVICES='1,1' names GPU 1 twice: CUDA sees no GPU"
    ]
    assert visible_notes("0,1") == []


def test_indices_of_different_gpus_without_pci_bus_order_are_taken_in_nvml_order_and_said() -> None:
    mixed = {0: "NVIDIA GeForce RTX 4090", 1: "NVIDIA GeForce GTX 1080"}
    assert visible("1", names=mixed) == [1]
    (note,) = visible_notes("1", names=mixed)
    assert "CUDA_DEVICE_ORDER is not PCI_BUS_ID" in note and "NVML's order" in note
    # Said only where it matters: identical GPUs, PCI_BUS_ID, or UUIDs.
    assert visible_notes("1") == []
    assert visible("1", names=mixed, order="PCI_BUS_ID") == [1]
    sample = server(names=mixed)
    assert visible_gpus("1", sample.gpus, True)[1] == []
    assert visible_gpus(uuid(1), sample.gpus, False)[1] == []


def test_a_mig_uuid_whose_gpu_cannot_be_told_is_not_no_gpu() -> None:
    """A job handed CUDA_VISIBLE_DEVICES=MIG-...; as a non-root user NVML refuses the MIG
    instances: which GPU holds it is unknown, not "CUDA sees no GPU"."""
    sample = server(2)
    gpus = (replace(sample.gpus[0], mig_mode=True, mig_instances=None), sample.gpus[1])
    value = "MIG-00000100-1111-2222-3333-000000000001"
    shown, notes = visible_gpus(value, gpus, False)
    assert shown == [0]
    assert notes == [
        f"CUDA_VISIBLE_DEVICES: cannot tell which GPU holds {value!r} (the MIG instances of "
        "GPU 0 cannot be read here): kept"
    ]


def test_only_and_only_visible_together_show_what_both_name() -> None:
    selection = GpuSelection(only=("0", "1", "2"), only_visible=True, visible="2,3,1")
    assert shown(server(), selection) == [1, 2]


# -- gpumon once ---------------------------------------------------------------------------


def run_once(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], sample: Sample, environ: dict[str, str]
) -> tuple[int, str]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(snapshot, "take_sample", lambda settings, **options: sample)
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    return main(argv), out.getvalue()


def gpu_lines(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines() if line.startswith("[")]


def test_once_only_shows_those_gpus_their_processes_and_their_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status, text = run_once(monkeypatch, ["once", "--only", "0,3"], server(), {})
    assert status == 0
    assert gpu_lines(text) == ["[0]", "[3]"]
    assert "100" in text and "103" in text and "101" not in text
    users = text.split("\n\n")[1].splitlines()
    assert [line.split()[:2] for line in users[1:]] == [["alice", "0"], ["bob", "3"]]


def test_once_only_json_has_those_gpus_and_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    status, text = run_once(monkeypatch, ["--only", "0,3,5", "once", "--json"], server(), {})
    assert status == 0
    document = json.loads(text)
    validate(document)
    assert [gpu["index"] for gpu in document["gpus"]] == [0, 3, 5]
    assert [gpu["free"] for gpu in document["gpus"]] == [False, False, True]
    assert [(u["user"], u["gpus"]) for u in document["users"]] == [("alice", [0]), ("bob", [3])]


def test_once_only_visible_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    status, text = run_once(
        monkeypatch,
        ["once", "--only-visible", "--json"],
        server(),
        {"CUDA_VISIBLE_DEVICES": f"{uuid(7)},MIG-11111111"},
    )
    assert status == 0
    document = json.loads(text)
    validate(document)
    assert [gpu["index"] for gpu in document["gpus"]] == [6, 7]


def test_once_with_no_gpu_visible_says_so_and_shows_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, text = run_once(
        monkeypatch, ["once", "--only-visible"], server(), {"CUDA_VISIBLE_DEVICES": "-1"}
    )
    assert status == 0 and gpu_lines(text) == []
    assert capsys.readouterr().err == (
        "gpumon: CUDA_VISIBLE_DEVICES='-1': CUDA sees no GPU ('-1' is no GPU here)\n"
    )


def test_once_only_a_gpu_that_is_not_here_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, text = run_once(monkeypatch, ["once", "--only", "0,9", "--json"], server(4), {})
    assert status == 2 and text == ""
    assert capsys.readouterr().err == (
        "gpumon: error: --only 9: no such GPU here (GPUs here: 0-3)\n"
    )


def test_once_user_lists_only_their_processes_and_free_still_counts_everyone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pwd, "getpwnam", lambda name: name)  # bob has an account here
    status, text = run_once(monkeypatch, ["once", "--user", "bob"], server(4), {})
    assert status == 0
    assert gpu_lines(text) == ["[0]", "[1]", "[2]", "[3]"]
    process_lines = [line for line in text.splitlines() if line.startswith("    ")]
    assert [line.split()[0] for line in process_lines] == ["bob", "bob"]
    assert "FREE" not in text  # alice's GPUs 0 and 2 are busy, shown or not
    assert "not listed" not in text  # alice's memory is not "held by processes not listed"
    users = text.split("\n\n")[1].splitlines()
    assert [line.split()[0] for line in users[1:]] == ["bob"]

    status, text = run_once(monkeypatch, ["once", "--user", "bob", "--json"], server(4), {})
    document = json.loads(text)
    validate(document)
    assert [[p["user"] for p in gpu["processes"]] for gpu in document["gpus"]] == [
        [],
        ["bob"],
        [],
        ["bob"],
    ]
    assert [gpu["free"] for gpu in document["gpus"]] == [False] * 4
    assert [gpu["memory_unlisted_bytes"] for gpu in document["gpus"]] == [0] * 4
    assert [u["user"] for u in document["users"]] == ["bob"]


def test_once_user_with_no_process_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pwd, "getpwnam", lambda name: name)  # carol has an account here
    status, text = run_once(monkeypatch, ["once", "--user", "carol"], server(4), {})
    assert status == 0
    assert text.rstrip().endswith("No process of carol.")


def test_the_filters_are_refused_for_a_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["once", "--prometheus", "http://prometheus.example:9090", "--only", "0"]
    status, text = run_once(monkeypatch, argv, server(), {})
    assert status == 2 and text == ""
    assert "--only, --only-visible and --user" in capsys.readouterr().err


# -- the dashboard -------------------------------------------------------------------------


def dashboard(sample: Sample, **settings: Any) -> GpumonApp:
    return app_for(sample, settings=Settings(**settings))


async def show(app: GpumonApp, pilot: Pilot[Any], sample: Sample) -> str:
    app.receive_sample(sample)
    await pilot.pause()
    return screen_text(app)


def header_line(app: GpumonApp) -> str:
    region = app.query_one(HeaderBar).region
    return screen_text(app).splitlines()[region.y]


def table_rows(app: GpumonApp) -> list[list[str]]:
    table = app.query_one(ProcessTable)
    region = table.region
    lines = screen_text(app).splitlines()[region.y : region.bottom]
    return [line.split() for line in lines[ProcessTable.TOP_LINES :] if line.split()[1:2]]


async def test_the_dashboard_shows_only_the_gpus_named_and_says_so_in_the_header() -> None:
    app = dashboard(server(), only_gpus=("0", "3"))
    async with app.run_test(size=SIZE) as pilot:
        text = await show(app, pilot, server())
        assert " GPU 0 " in text and " GPU 3 " in text
        assert not any(f" GPU {index} " in text for index in (1, 2, 4, 5, 6, 7))
        assert "GPUs 0,3 of 8" in header_line(app)
        assert [row[1] for row in table_rows(app) if row[1].isdigit()] == ["100", "103"]


async def test_the_dashboard_and_once_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "4,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    _, text = run_once(monkeypatch, ["once", "--only-visible"], server(), environ)
    app = dashboard(server(), only_visible=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = await show(app, pilot, server())
        cards = [index for index in range(8) if f" GPU {index} " in screen]
    assert [f"[{index}]" for index in cards] == gpu_lines(text) == ["[1]", "[4]"]


async def test_a_gpu_not_here_is_said_in_a_notification() -> None:
    app = dashboard(server(4), only_gpus=("1", "9"))
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, server(4))
        await show(app, pilot, server(4))
        messages = [str(n.message) for n in app._notifications]
        assert messages.count("--only 9: no such GPU here (GPUs here: 0-3)") == 1
        assert "GPU 1 of 4" in header_line(app)


async def test_user_shows_only_that_users_rows_the_title_says_so_and_escape_clears() -> None:
    app = dashboard(server(4), user_filter="bob")
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, server(4))
        table = app.query_one(ProcessTable)
        assert table.title_text().strip() == "Processes 2 of 4  filter: user bob"
        assert {row[2] for row in table_rows(app) if row[1].isdigit()} == {"bob"}
        table.focus()
        await pilot.press("escape")
        await pilot.pause()
        assert table.title_text().strip() == "Processes 4"
        assert {row[2] for row in table_rows(app) if row[1].isdigit()} == {"alice", "bob"}


def test_the_dashboard_refuses_them_for_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    from gpumon.cli import _dashboard_app

    settings = Settings(prometheus_url="http://prometheus.example:9090", user_filter="bob")
    assert _dashboard_app(settings) is None
    assert "--only, --only-visible and --user" in capsys.readouterr().err
