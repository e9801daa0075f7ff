"""`gpumon once`: each process line carries its SM utilisation where NVML gives one and the
terminal has room; the JSON keeps 0 % (a compute process that did no SM work) apart from
null (NVML cannot tell). One sample says nothing of idleness: without a history database
every process's ``idle_s`` is null, never 0."""

from __future__ import annotations

import dataclasses

from gpumon.commands import once
from gpumon.data.model import ProcessKind
from gpumon.sampling.snapshot import sample_to_dict
from tests.support.ui_helpers import GIB, MIB, make_gpu, make_process, make_sample

GPU = make_gpu(0)
LONG = "python train.py --config configs/llama-7b.yaml --bf16 --resume runs/0412/ckpt-1800.pt"


def sample(*, mig: bool = False):  # type: ignore[no-untyped-def]
    processes = (
        make_process(GPU, 2113, user="root", kind=ProcessKind.GRAPHICS,
                     gpu_memory_bytes=186 * MIB, command="/usr/lib/xorg/Xorg vt1"),
        make_process(GPU, 4242, user="alice", gpu_memory_bytes=11 * GIB, command=LONG,
                     sm_utilization_pct=87),
        make_process(GPU, 4343, user="bob", gpu_memory_bytes=4 * GIB, command="python eval.py",
                     sm_utilization_pct=0),
    )  # fmt: skip
    if mig:
        processes = tuple(dataclasses.replace(p, sm_utilization_pct=None) for p in processes)
    return make_sample((GPU,), processes)


def process_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("    ")]


def words(line: str) -> str:
    return " ".join(line.split())


def test_each_process_line_says_its_sm_utilisation() -> None:
    lines = process_lines(once.render_table(sample(), ascii_only=False))
    assert words(lines[0]).startswith("root 2113 186M SM N/A Xorg vt1")
    assert words(lines[1]).startswith("alice 4242 11.0G SM 87% python train.py")
    assert words(lines[2]).startswith("bob 4343 4.0G SM 0% python eval.py")
    assert len({line.index(" SM ") for line in lines}) == 1  # the cells line up
    assert len({line.index(" python") for line in lines[1:]}) == 1


def test_no_sm_cell_where_no_process_has_one() -> None:
    """MIG GPUs, and a cluster node's processes: the cell would read N/A on every line."""
    lines = process_lines(once.render_table(sample(mig=True), ascii_only=False))
    assert words(lines[1]).startswith("alice 4242 11.0G python train.py")
    assert not any("SM " in line for line in lines)


def test_a_narrow_terminal_keeps_the_command_rather_than_the_sm_cell() -> None:
    wide = process_lines(once.render_table(sample(), width=120, ascii_only=True))
    narrow = process_lines(once.render_table(sample(), width=48, ascii_only=True))
    assert "SM 87%" in wide[1] and wide[1].endswith("ckpt-1800.pt")
    assert not any("SM " in line for line in narrow)
    assert words(narrow[1]).startswith("alice 4242 11.0G python train.py")
    assert all(len(line) <= 48 for line in narrow)


def test_json_keeps_no_sm_work_apart_from_unknown_and_idleness_unknown_without_history() -> None:
    processes = sample_to_dict(sample())["gpus"][0]["processes"]
    by_pid = {entry["pid"]: entry for entry in processes}
    assert {pid: entry["sm_utilization_pct"] for pid, entry in by_pid.items()} == {
        2113: None,
        4242: 87,
        4343: 0,
    }
    assert all(entry.get("idle_s") is None for entry in processes)
