"""Who uses what in `gpumon once`: the per-user summary after the processes, `--by-user` in
their place, the JSON `users` list; unknown owners and other namespaces kept, GPUs whose
processes are unknown left out with a note."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from typing import Any

import pytest

from gpumon.cli import main
from gpumon.commands import once
from gpumon.data import painting
from gpumon.data.model import GpuStats, Sample
from gpumon.sampling import snapshot
from tests.commands.test_once import GIB, gpu, process, troubled_sample, validate

HEADER = ["USER", "GPUS", "GPU-MEM", "PROCS"]


def shared_server() -> Sample:
    """alice on GPUs 0 and 1 (6 GiB), bob on 1 (10 GiB, one process with memory N/A), an
    owner that cannot be read on 0, a process of another PID namespace on 1; GPU 2 lost,
    GPU 3's process list refused."""
    gpus = (
        gpu(0),
        gpu(1),
        GpuStats(index=2, uuid="GPU-00000002-lost", name="NVIDIA A100-SXM4-80GB", lost=True),
        gpu(3, processes_error="NVML: Insufficient Permissions"),
    )
    processes = (
        process(gpus[0], 100, user="alice", gpu_memory_bytes=2 * GIB, is_current_user=True),
        process(gpus[1], 100, user="alice", gpu_memory_bytes=4 * GIB, is_current_user=True),
        process(gpus[1], 200, user="bob", gpu_memory_bytes=10 * GIB),
        process(gpus[1], 201, user="bob", gpu_memory_bytes=None),
        process(gpus[0], 300, user=None, gpu_memory_bytes=GIB),
        process(gpus[1], 400, user=None, command=None, visible=False, gpu_memory_bytes=3 * GIB),
    )
    return dataclasses.replace(troubled_sample(), gpus=gpus, processes=processes)


def run_once(monkeypatch: pytest.MonkeyPatch, *argv: str, sample: Sample | None = None) -> str:
    sample = sample if sample is not None else shared_server()
    monkeypatch.setattr(snapshot, "take_sample", lambda settings, **options: sample)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["once", "--color", "never", *argv]) == 0
    return out.getvalue()


def user_rows(text: str) -> list[list[str]]:
    """The rows of the per-user table (header first), split on runs of spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == HEADER)
    rows = []
    for line in lines[start:]:
        if not line or line.startswith(("not counted", "(no process")):
            break
        rows.append([cell.strip() for cell in line.split("  ") if cell])
    return rows


def test_summary_follows_the_processes_most_memory_first(monkeypatch: pytest.MonkeyPatch) -> None:
    text = run_once(monkeypatch)

    lines = text.splitlines()
    last_process = max(i for i, line in enumerate(lines) if line.startswith("    "))
    header_at = next(i for i, line in enumerate(lines) if line.split() == HEADER)
    assert header_at > last_process
    assert user_rows(text) == [
        HEADER,
        ["bob", "1", "≥10.0G", "2"],  # one process with memory N/A: a lower bound
        ["alice", "0,1", "6.0G", "2"],
        ["(other namespace)", "1", "3.0G", "1"],
        ["?", "0", "1.0G", "1"],
    ]


def test_gpus_with_unknown_processes_get_a_note_and_are_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = run_once(monkeypatch)

    assert text.splitlines()[-1] == "not counted: GPUs 2, 3 (processes unknown)"
    assert all("2" not in row[1] and "3" not in row[1] for row in user_rows(text)[1:])


def test_by_user_prints_the_table_in_place_of_the_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = run_once(monkeypatch, "--by-user")

    assert not [line for line in text.splitlines() if line.startswith("    ")]
    assert len([line for line in text.splitlines() if line.startswith("[")]) == 4
    assert user_rows(text)[0] == HEADER and len(user_rows(text)) == 5
    assert "not counted: GPUs 2, 3" in text


def test_by_user_with_no_process_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    idle = dataclasses.replace(shared_server(), gpus=(gpu(0), gpu(1)), processes=())

    assert once.render_users(idle) == ""  # plain once: nothing to sum up, no block
    text = run_once(monkeypatch, "--by-user", sample=idle)
    assert user_rows(text) == [HEADER]
    assert "(no process on the GPUs whose processes are known)" in text


def test_no_processes_has_no_summary_and_excludes_by_user(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "USER" not in run_once(monkeypatch, "--no-processes")
    with pytest.raises(SystemExit) as exit_info:
        main(["once", "--by-user", "--no-processes"])
    assert exit_info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_the_current_users_row_is_bold_and_ascii_marks_a_lower_bound() -> None:
    text = once.render_users(shared_server(), color=True, ascii_only=True)
    alice = next(line for line in text.splitlines() if "alice" in line)
    assert alice.startswith(f"\x1b[{painting.BOLD}m")
    assert ">=10.0G" in text and "≥" not in text


def test_hostile_user_names_stay_one_safe_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """User names are other users' text, made safe where read; the summary keeps them so."""
    from tests.support.hostile import hostile_source, unsafe_characters

    sample = hostile_source().sample()
    text = once.render_users(sample)
    assert unsafe_characters(text, allow="\n") == []
    assert len(text.splitlines()) >= 3


# --- JSON -----------------------------------------------------------------------------------


def users_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    users: list[dict[str, Any]] = document["users"]
    return users


def test_json_users_list(monkeypatch: pytest.MonkeyPatch) -> None:
    document = json.loads(run_once(monkeypatch, "--json"))

    validate(document)
    assert users_of(document) == [
        {
            "user": "bob",
            "visible": True,
            "current_user": False,
            "gpus": [1],
            "gpu_memory_bytes": 10 * GIB,
            "gpu_memory_partial": True,
            "process_count": 2,
        },
        {
            "user": "alice",
            "visible": True,
            "current_user": True,
            "gpus": [0, 1],
            "gpu_memory_bytes": 6 * GIB,
            "gpu_memory_partial": False,
            "process_count": 2,
        },
        {
            "user": None,  # another PID namespace
            "visible": False,
            "current_user": False,
            "gpus": [1],
            "gpu_memory_bytes": 3 * GIB,
            "gpu_memory_partial": False,
            "process_count": 1,
        },
        {
            "user": None,  # owner not readable
            "visible": True,
            "current_user": False,
            "gpus": [0],
            "gpu_memory_bytes": GIB,
            "gpu_memory_partial": False,
            "process_count": 1,
        },
    ]


def test_json_by_user_is_the_same_document(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = json.loads(run_once(monkeypatch, "--json"))
    by_user = json.loads(run_once(monkeypatch, "--json", "--by-user"))
    assert by_user == plain


def test_json_users_of_the_demo_validate_and_add_up() -> None:
    from gpumon.sources.demo import DemoSource

    sample = DemoSource(gpu_count=8, process_count=20).sample()
    document = json.loads(json.dumps(snapshot.sample_to_dict(sample)))

    validate(document)
    assert sum(user["process_count"] for user in users_of(document)) == 20
    assert document["simulated"] is True
