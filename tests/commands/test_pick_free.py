"""`gpumon pick` picks FREE GPUs by default (no process, little memory in use); thresholds
decide instead when given, `--busy-ok` ranks every GPU as pick used to; never a lost GPU or
one whose processes are unknown. Too few: exit 1, one line naming why each other GPU does
not qualify, with its users, then what would help."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.commands.pick_wait import MAX_REASONS
from gpumon.data.model import GpuProcess, Sample
from tests.support.pick_helpers import GIB, MIB, gpu, job, sample, serve


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    served: Sample,
    *argv: str,
) -> tuple[int, str, str]:
    serve(monkeypatch, served)
    # --no-claim: what one run printed is not ranked last in the next (claims have tests).
    code = main(["pick", "--no-claim", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def every_gpu_busy() -> Sample:
    """Five GPUs, each running jobs: where pick used to hand out busy GPUs."""
    gpus = tuple(gpu(index, utilization_gpu_pct=10 * index) for index in range(5))
    processes: list[GpuProcess] = []
    for index, owners in enumerate((["alice"], ["bob"], ["carol"], ["dave"], ["alice", "bob"])):
        processes += [
            job(gpus[index], 100 * index + n, user=owner) for n, owner in enumerate(owners)
        ]
    return sample(gpus, tuple(processes))


def test_a_server_whose_every_gpu_runs_jobs_has_none_to_pick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(monkeypatch, capsys, every_gpu_busy(), "-n", "2")
    assert (code, out) == (1, "")
    assert err == (
        "gpumon pick: none of 5 GPUs qualifies (need 2): GPU 0: 1 process (alice), "
        "GPU 1: 1 process (bob), GPU 2: 1 process (carol), GPU 3: 1 process (dave), "
        "GPU 4: 2 processes (alice, bob)\n"
        "gpumon pick: would help: --busy-ok (shares the freest: GPU 0, GPU 1), "
        "--min-free-memory 23G (GPU 1 has 24.0G free), --wait (until 2 are free)\n"
    )


def test_busy_ok_ranks_every_gpu_as_pick_used_to(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(monkeypatch, capsys, every_gpu_busy(), "-n", "2", "--busy-ok")
    assert (code, out) == (0, "0,1\n")
    assert err.startswith("gpumon pick: note: GPU 0 runs 1 process, GPU 1 runs 1 process")


def test_only_free_gpus_qualify_by_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (
        gpu(0, memory_used_bytes=0),  # runs a job of another PID namespace's...
        gpu(1, memory_used_bytes=2 * GIB),  # ...memory held by a process NVML does not list
        gpu(2, memory_used_bytes=1000 * MIB),  # a little memory in use: FREE below 1024 MiB
        gpu(3, memory_used_bytes=None),
    )
    served = sample(gpus, (job(gpus[0], 7, user="eve", visible=False),))
    code, out, err = run(monkeypatch, capsys, served, "-n", "2")
    assert (code, out) == (1, "")
    assert err == (
        "gpumon pick: only 1 of 4 GPUs qualifies (need 2): GPU 0: 1 process (other namespace), "
        "GPU 1: 2.0G in use by no listed process (FREE is under 1.0G), "
        "GPU 3: memory in use N/A\n"
        "gpumon pick: would help: --busy-ok (shares the freest: GPU 2, GPU 1), "
        "--min-free-memory 23G (GPU 1 has 24.0G free), --wait (until 2 are free)\n"
    )
    assert run(monkeypatch, capsys, served)[:2] == (0, "2\n")


def test_the_free_threshold_is_the_setting_from_flag_environment_or_config(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    served = sample((gpu(0, memory_used_bytes=2 * GIB),))
    assert run(monkeypatch, capsys, served)[0] == 1
    assert run(monkeypatch, capsys, served, "--free-threshold", "4096")[:2] == (0, "0\n")
    monkeypatch.setenv("GPUMON_FREE_THRESHOLD_MIB", "4096")
    assert run(monkeypatch, capsys, served)[:2] == (0, "0\n")
    monkeypatch.delenv("GPUMON_FREE_THRESHOLD_MIB")
    config = tmp_path / "config.toml"
    config.write_text("free_threshold_mib = 4096\n")
    assert main(["--config", str(config), "pick"]) == 0
    assert capsys.readouterr().out == "0\n"


def test_thresholds_decide_instead_so_a_gpu_with_processes_can_qualify(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (gpu(0, utilization_gpu_pct=20), gpu(1, utilization_gpu_pct=90))
    served = sample(gpus, (job(gpus[0], 1), job(gpus[1], 2, user="bob")))
    code, out, err = run(monkeypatch, capsys, served, "--max-utilization", "50")
    assert (code, out) == (0, "0\n")
    code, out, err = run(monkeypatch, capsys, served, "--min-free-memory", "20G", "-n", "2")
    assert (code, out) == (0, "0,1\n")
    code, out, err = run(monkeypatch, capsys, served, "--max-utilization", "50", "-n", "2")
    assert (code, out) == (1, "")
    assert err == "gpumon pick: only 1 of 2 GPUs qualifies (need 2): GPU 1 is 90% busy (max 50%)\n"


@pytest.mark.parametrize("argv", [[], ["--busy-ok"], ["--max-utilization", "100"]])
def test_never_a_lost_gpu_or_one_whose_processes_are_unknown(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served = sample(
        (gpu(0, lost=True, uuid=None, lost_reason="fell off the bus"),
         gpu(1, processes_error="Insufficient Permissions"))
    )  # fmt: skip
    code, out, err = run(monkeypatch, capsys, served, *argv)
    assert (code, out) == (1, "")
    assert err.splitlines()[0].endswith(": GPU 0 LOST, GPU 1 process list unknown")


def test_the_failure_line_stays_one_line_on_a_big_server_before_what_would_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = tuple(gpu(index) for index in range(20))
    crowd = tuple(job(gpus[3], n, user=f"user{n}") for n in range(6))
    served = sample(gpus, crowd + tuple(job(g, 100 + g.index) for g in gpus if g.index != 3))
    code, out, err = run(monkeypatch, capsys, served)
    assert (code, out) == (1, "")
    failure, helps = err.splitlines()
    assert "GPU 3: 6 processes (user0, user1, user2, 3 more)" in failure
    assert failure.endswith(f", {20 - MAX_REASONS} more")
    assert helps.startswith("gpumon pick: would help: --busy-ok")


def test_print_config_shows_what_pick_shares(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--print-config", "--claim-seconds", "30", "--claims-dir", "/tmp/c"]
    assert main([*argv, "--free-threshold", "2048"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "free_threshold_mib = 2048  # --free-threshold" in lines
    assert "claim_seconds = 30  # --claim-seconds" in lines
    assert 'claims_dir = "/tmp/c"  # --claims-dir' in lines
