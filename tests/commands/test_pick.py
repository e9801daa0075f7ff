"""`gpumon pick`: which GPUs qualify, how they rank, what a script gets on stdout and why not."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from gpumon.cli import main
from gpumon.commands import pick
from gpumon.commands.pick import UNCLAIMED_NOTE, failure_line, indices_match_cuda, resolve_format
from gpumon.config.text import percentage, size_bytes
from gpumon.data import ranking
from gpumon.data.model import GpuStats, GpuUnavailable, MigInstance, Sample, UnavailableReason
from gpumon.data.ranking import rank
from tests.support.pick_helpers import serve
from tests.support.ui_helpers import GIB, MIB, make_gpu, make_process, make_sample
from tests.test_cli import run_gpumon


def idle_gpu(index: int, **fields: object) -> GpuStats:
    values: dict[str, object] = dict(
        memory_used_bytes=4 * MIB,
        memory_free_bytes=24 * GIB - 4 * MIB,
        utilization_gpu_pct=0,
    )
    values.update(fields)
    return make_gpu(index, **values)


def mig_gpu(index: int, instances: tuple[MigInstance, ...] | None, **fields: object) -> GpuStats:
    return make_gpu(
        index, mig_mode=True, mig_instances=instances, utilization_gpu_pct=None, **fields
    )


def instance(gpu_index: int, index: int, *, used_gib: float = 0, **fields: Any) -> MigInstance:
    values: dict[str, Any] = dict(
        gpu_index=gpu_index,
        index=index,
        gpu_instance_id=index + 1,
        compute_instance_id=0,
        profile="3g.40gb",
        uuid=f"MIG-{gpu_index:04x}{index:04x}-1111-2222-3333-444444444444",
        memory_used_bytes=int(used_gib * GIB),
        memory_total_bytes=40 * GIB,
    )
    values.update(fields)
    return MigInstance(**values)


def labels(picked: tuple[ranking.Candidate, ...]) -> list[str]:
    return [candidate.label for candidate in picked]


# --- ranking -------------------------------------------------------------------------------


def test_identical_gpus_are_picked_by_nvml_index() -> None:
    sample = make_sample(tuple(idle_gpu(index) for index in (3, 1, 0, 2)))
    picked, reasons = rank(sample, n=3)
    assert labels(picked) == ["GPU 0", "GPU 1", "GPU 2"]
    assert reasons == ()


def test_emptier_memory_first_then_less_busy_then_fewer_processes() -> None:
    gpus = (
        idle_gpu(0, memory_used_bytes=1 * GIB),  # one process
        idle_gpu(1, memory_used_bytes=8 * GIB),  # no process, a third of its memory used
        idle_gpu(2, memory_used_bytes=2 * GIB, utilization_gpu_pct=40),
        idle_gpu(3, memory_used_bytes=2 * GIB, utilization_gpu_pct=10),
        idle_gpu(4, memory_used_bytes=0),  # two processes
    )
    processes = (
        make_process(gpus[0], 100),
        make_process(gpus[4], 101),
        make_process(gpus[4], 102),
    )
    picked, _ = rank(make_sample(gpus, processes), n=5)
    assert labels(picked) == ["GPU 0", "GPU 4", "GPU 3", "GPU 2", "GPU 1"]


def test_a_full_busy_gpu_without_listed_processes_comes_after_an_idle_one_with_a_process() -> None:
    """Another container's job holds 75 of 79.6 GB at 100 %: NVML lists no process of it
    here. The GPU beside it runs one small process and is idle: that one is the freer."""
    total = int(79.6 * GIB)
    gpus = (
        idle_gpu(2, memory_used_bytes=75 * GIB, memory_free_bytes=total - 75 * GIB,
                 utilization_gpu_pct=100),
        idle_gpu(3, memory_used_bytes=600 * MIB, memory_free_bytes=total - 600 * MIB,
                 utilization_gpu_pct=0),
    )  # fmt: skip
    picked, reasons = rank(make_sample(gpus, (make_process(gpus[1], 4242),)), n=1)
    assert labels(picked) == ["GPU 3"]
    assert reasons == ()


@pytest.mark.parametrize("seed", range(20))
def test_a_gpu_with_most_of_its_memory_used_never_comes_before_an_emptier_one(seed: int) -> None:
    import random

    rng = random.Random(seed)
    total = 80 * GIB
    gpus = []
    processes = []
    for index in range(8):
        used = rng.randrange(0, total)
        gpu = idle_gpu(index, memory_used_bytes=used, memory_free_bytes=total - used,
                       utilization_gpu_pct=rng.randrange(0, 101))  # fmt: skip
        gpus.append(gpu)
        processes += [make_process(gpu, 1000 * index + n) for n in range(rng.randrange(0, 4))]
    picked, _ = rank(make_sample(tuple(gpus), tuple(processes)), n=8)
    shares = [candidate.memory_used_share() or 0.0 for candidate in picked]
    for position, share in enumerate(shares):
        if share > 0.5:
            assert all(later >= share - 0.1 for later in shares[position + 1 :]), shares


def test_a_busy_gpu_is_still_picked_when_it_is_among_the_freest() -> None:
    gpus = (idle_gpu(0), idle_gpu(1, memory_used_bytes=20 * GIB))
    picked, reasons = rank(make_sample(gpus, (make_process(gpus[1], 7),)), n=2)
    assert labels(picked) == ["GPU 0", "GPU 1"]
    assert reasons == ()


def test_lost_and_unknown_process_lists_are_never_picked() -> None:
    gpus = (
        make_gpu(0, uuid=None, lost=True, lost_reason="fell off the bus"),
        idle_gpu(1, processes_error="Not Supported"),
        idle_gpu(2, memory_used_bytes=30 * GIB),
    )
    picked, reasons = rank(make_sample(gpus), n=1)
    assert labels(picked) == ["GPU 2"]
    assert reasons == ("GPU 0 LOST", "GPU 1 process list unknown")


def test_no_gpu_is_picked_when_the_process_lists_were_not_read() -> None:
    sample = make_sample((idle_gpu(0), idle_gpu(1)), processes_read=False)
    picked, reasons = rank(sample, n=1)
    assert picked == ()
    assert reasons == ("GPU 0 process list unknown", "GPU 1 process list unknown")


def test_min_free_memory_leaves_out_full_and_unknown_memory() -> None:
    gpus = (
        idle_gpu(0, memory_free_bytes=10 * GIB),
        idle_gpu(1, memory_free_bytes=None),
        idle_gpu(2, memory_free_bytes=20 * GIB),
    )
    picked, reasons = rank(make_sample(gpus), n=1, min_free_bytes=20 * GIB)
    assert labels(picked) == ["GPU 2"]
    assert reasons == ("GPU 0 has 10.0G free (need 20.0G)", "GPU 1 memory free N/A")


def test_max_utilization_leaves_out_busy_and_unknown_utilisation() -> None:
    gpus = (
        idle_gpu(0, utilization_gpu_pct=51),
        idle_gpu(1, utilization_gpu_pct=None),
        idle_gpu(2, utilization_gpu_pct=50, memory_used_bytes=10 * GIB),
    )
    picked, reasons = rank(make_sample(gpus), n=1, max_utilization_pct=50)
    assert labels(picked) == ["GPU 2"]
    assert reasons == ("GPU 0 is 51% busy (max 50%)", "GPU 1 utilisation N/A")


def test_both_thresholds_missed_are_named_together() -> None:
    gpu = idle_gpu(0, utilization_gpu_pct=90, memory_free_bytes=1 * GIB)
    _, reasons = rank(make_sample((gpu,)), min_free_bytes=2 * GIB, max_utilization_pct=10)
    assert reasons == ("GPU 0 has 1.0G free (need 2.0G) and is 90% busy (max 10%)",)


def test_with_uuids_a_gpu_whose_uuid_is_unknown_is_not_picked() -> None:
    gpus = (idle_gpu(0, uuid=None), idle_gpu(1, memory_used_bytes=1 * GIB))
    picked, reasons = rank(make_sample(gpus), n=1, output_format="uuid")
    assert [candidate.value("uuid") for candidate in picked] == [gpus[1].uuid]
    assert reasons == ("GPU 0 UUID unknown",)
    picked, _ = rank(make_sample(gpus), n=1, output_format="index")
    assert [candidate.value("index") for candidate in picked] == ["0"]


# --- MIG -----------------------------------------------------------------------------------


def test_a_mig_gpu_offers_its_instances_by_mig_uuid() -> None:
    busy, idle = instance(0, 0, used_gib=30), instance(0, 1, used_gib=0.5)
    gpu = mig_gpu(0, (busy, idle))
    process = make_process(gpu, 9, gpu_instance_id=busy.gpu_instance_id, compute_instance_id=0)
    picked, reasons = rank(make_sample((gpu,), (process,)), n=1, output_format="uuid")
    assert labels(picked) == ["GPU 0 MIG 1"]
    assert picked[0].value("uuid") == idle.uuid
    assert picked[0].memory_free_bytes == int(39.5 * GIB)
    assert reasons == ()


def test_the_process_in_a_mig_instance_counts_against_that_instance_only() -> None:
    first, second = instance(0, 0), instance(0, 1)
    gpu = mig_gpu(0, (first, second))
    process = make_process(gpu, 9, gpu_instance_id=first.gpu_instance_id, compute_instance_id=0)
    picked, _ = rank(make_sample((gpu,), (process,)), n=1, output_format="uuid")
    assert labels(picked) == ["GPU 0 MIG 1"]
    assert picked[0].process_count == 0


def test_mig_instances_compete_with_whole_gpus() -> None:
    gpus = (idle_gpu(0, memory_used_bytes=2 * GIB), mig_gpu(1, (instance(1, 0, used_gib=1),)))
    picked, _ = rank(make_sample(gpus), n=1, output_format="uuid")
    assert labels(picked) == ["GPU 1 MIG 0"]


def test_mig_instances_are_not_offered_for_more_than_one_gpu() -> None:
    """CUDA uses one MIG instance per process: two MIG UUIDs would give a job one device."""
    gpus = (idle_gpu(0), mig_gpu(1, (instance(1, 0), instance(1, 1))))
    picked, reasons = rank(make_sample(gpus), n=2, output_format="uuid")
    assert labels(picked) == ["GPU 0"]
    assert reasons == ("GPU 1 in MIG mode (a CUDA process uses one MIG instance: -n 1)",)


def test_mig_instances_are_not_offered_as_indices() -> None:
    gpus = (idle_gpu(0, memory_used_bytes=5 * GIB), mig_gpu(1, (instance(1, 0),)))
    picked, reasons = rank(make_sample(gpus), n=1, output_format="index")
    assert labels(picked) == ["GPU 0"]
    assert reasons == ("GPU 1 in MIG mode (its instances need --format uuid)",)


def test_a_mig_gpu_whose_instances_are_unreadable_or_absent_is_not_picked() -> None:
    gpus = (mig_gpu(0, None), mig_gpu(1, ()))
    picked, reasons = rank(make_sample(gpus), n=1, output_format="uuid")
    assert picked == ()
    assert reasons == ("GPU 0 MIG instances unreadable", "GPU 1 in MIG mode without instances")


def test_a_process_not_placed_in_a_mig_instance_makes_every_instance_unknown() -> None:
    gpu = mig_gpu(0, (instance(0, 0), instance(0, 1)))
    process = make_process(gpu, 9)  # no gpu_instance_id: could be in either
    picked, reasons = rank(make_sample((gpu,), (process,)), n=1, output_format="uuid")
    assert picked == ()
    assert reasons == ("GPU 0 processes not matched to MIG instances",)


def test_a_process_in_an_instance_whose_id_was_not_read_makes_every_instance_unknown() -> None:
    """bob's process runs in GPU instance 1, whose id NVML did not give: the instance he
    runs in must not be picked as free."""
    gpu = mig_gpu(0, (instance(0, 0, gpu_instance_id=None), instance(0, 1)))
    process = make_process(gpu, 9, gpu_instance_id=1, compute_instance_id=0)
    picked, reasons = rank(make_sample((gpu,), (process,)), n=1, output_format="uuid")
    assert picked == ()
    assert reasons == ("GPU 0 processes not matched to MIG instances",)


def test_max_utilization_under_mig_passes_only_instances_without_processes() -> None:
    """Under MIG utilisation is N/A by design: an instance with no process cannot be busy,
    one with processes might be, and unknown is not free."""
    used, idle = instance(0, 0), instance(0, 1, used_gib=1)
    gpu = mig_gpu(0, (used, idle))
    process = make_process(gpu, 9, gpu_instance_id=used.gpu_instance_id, compute_instance_id=0)
    sample = make_sample((gpu,), (process,))
    picked, reasons = rank(sample, n=1, max_utilization_pct=20, output_format="uuid")
    assert labels(picked) == ["GPU 0 MIG 1"]
    assert reasons == ("GPU 0 MIG 0 runs processes, utilisation N/A under MIG (max 20%)",)


def test_min_free_memory_applies_to_the_instance_memory() -> None:
    small = instance(0, 0, used_gib=0, memory_total_bytes=10 * GIB)
    large = instance(0, 1, used_gib=5)
    gpu = mig_gpu(0, (small, large))
    picked, reasons = rank(make_sample((gpu,)), n=1, min_free_bytes=20 * GIB, output_format="uuid")
    assert labels(picked) == ["GPU 0 MIG 1"]
    assert reasons == ("GPU 0 MIG 0 has 10.0G free (need 20.0G)",)


# --- index or UUID -------------------------------------------------------------------------


def test_auto_gives_indices_when_every_gpu_is_the_same_model() -> None:
    sample = make_sample((idle_gpu(0), idle_gpu(1)))
    assert indices_match_cuda(sample, {})
    assert resolve_format("auto", sample, {}) == "index"


def test_auto_gives_uuids_when_cuda_may_count_fastest_first() -> None:
    sample = make_sample((idle_gpu(0, name="NVIDIA GeForce GTX 1080"), idle_gpu(1)))
    assert resolve_format("auto", sample, {}) == "uuid"
    assert resolve_format("auto", sample, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}) == "uuid"
    assert resolve_format("auto", sample, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == "index"


@pytest.mark.parametrize(
    "odd_gpu",
    [
        make_gpu(1, lost=True),
        mig_gpu(1, (instance(1, 0),)),
        mig_gpu(1, None),
    ],
    ids=["lost", "mig", "mig-unreadable"],
)
def test_auto_gives_uuids_when_a_lost_or_mig_gpu_can_shift_the_numbers(odd_gpu: GpuStats) -> None:
    sample = make_sample((idle_gpu(0), odd_gpu))
    assert resolve_format("auto", sample, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == "uuid"


def test_an_explicit_format_is_kept() -> None:
    mixed = make_sample((idle_gpu(0, name="NVIDIA GeForce GTX 1080"), idle_gpu(1)))
    assert resolve_format("index", mixed, {}) == "index"
    assert resolve_format("uuid", make_sample((idle_gpu(0),)), {}) == "uuid"


# --- the failure line ----------------------------------------------------------------------


def test_too_few_is_one_line_naming_why_the_others_do_not_qualify() -> None:
    gpus = (
        idle_gpu(0),
        make_gpu(1, lost=True),
        idle_gpu(2, utilization_gpu_pct=97),
        idle_gpu(3, processes_error="Insufficient Permissions"),
    )
    picked, reasons = rank(make_sample(gpus), n=2, max_utilization_pct=50)
    line = failure_line(picked, reasons, 2, gpu_count=4)
    assert line == (
        "gpumon pick: only 1 of 4 GPUs qualifies (need 2): GPU 1 LOST, "
        "GPU 2 is 97% busy (max 50%), GPU 3 process list unknown"
    )


def test_failure_line_wording() -> None:
    lost = make_sample((make_gpu(0, lost=True),))
    picked, reasons = rank(lost)
    assert failure_line(picked, reasons, 1, gpu_count=1) == (
        "gpumon pick: the only GPU does not qualify (need 1): GPU 0 LOST"
    )
    two = make_sample((idle_gpu(0), idle_gpu(1)))
    picked, reasons = rank(two, n=3)
    assert failure_line(picked, reasons, 3, gpu_count=2) == "gpumon pick: only 2 GPUs here (need 3)"
    assert failure_line((), (), 1, gpu_count=0) == "gpumon pick: no GPU found (need 1)"
    many = make_sample(tuple(make_gpu(index, lost=True) for index in range(20)))
    picked, reasons = rank(many)
    line = failure_line(picked, reasons, 1, gpu_count=20, simulated=True)
    assert line.startswith("gpumon pick: simulated GPUs (--demo): none of 20 GPUs qualifies")
    assert line.endswith("GPU 11 LOST, 8 more")
    assert "\n" not in line


# --- the command ---------------------------------------------------------------------------


def run_pick(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    sample: Sample,
    environ: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """``gpumon pick ARGV`` over ``sample``: exit status, stdout, stderr."""
    opened = serve(monkeypatch, sample)
    monkeypatch.setattr(pick.os, "environ", environ or {})
    # --no-claim: a GPU one run printed is not ranked last in the next (claims have tests).
    code = main(["pick", "--no-claim", *argv])
    # The freest GPU is the one with no process: pick must read the process lists.
    assert opened and all(source.options["processes"] for source in opened)
    assert all(source.closed for source in opened)
    out, err = capsys.readouterr()
    return code, out, err.replace(UNCLAIMED_NOTE + "\n", "")  # said after each pick here


def four_gpus() -> Sample:
    gpus = (
        idle_gpu(0, memory_used_bytes=9 * GIB),
        idle_gpu(1, processes_error="Insufficient Permissions"),
        idle_gpu(2),
        idle_gpu(3, memory_used_bytes=512 * MIB),
    )
    return make_sample(gpus, (make_process(gpus[0], 42),))


def test_prints_the_picked_indices_comma_separated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_pick(monkeypatch, capsys, ["-n", "2"], four_gpus()) == (0, "2,3\n", "")


def test_prints_uuids_when_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = four_gpus()
    code, out, err = run_pick(monkeypatch, capsys, ["--format", "uuid"], sample)
    assert (code, out, err) == (0, f"{sample.gpus[2].uuid}\n", "")


def test_a_picked_gpu_with_processes_is_noted_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_pick(monkeypatch, capsys, ["-n", "3", "--busy-ok"], four_gpus())
    assert (code, out) == (0, "2,3,0\n")
    assert err == (
        "gpumon pick: note: GPU 0 runs 1 process (fewer than 3 GPUs without processes qualify)\n"
    )


def test_a_lone_busy_gpu_is_noted_in_words_for_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = idle_gpu(0)
    sample = make_sample((gpu,), (make_process(gpu, 1), make_process(gpu, 2)))
    code, out, err = run_pick(monkeypatch, capsys, ["--busy-ok"], sample)
    assert (code, out) == (0, "0\n")
    assert err == "gpumon pick: note: GPU 0 runs 2 processes (no GPU without processes qualifies)\n"


def test_explicit_indices_on_mixed_models_get_a_note(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = make_sample((idle_gpu(0, name="NVIDIA GeForce GTX 1080"), idle_gpu(1)))
    code, out, err = run_pick(monkeypatch, capsys, ["--format", "index"], sample)
    assert (code, out) == (0, "0\n")
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in err
    code, out, err = run_pick(
        monkeypatch, capsys, ["--format", "index"], sample, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    )
    assert (code, out, err) == (0, "0\n", "")


def test_auto_with_a_lost_gpu_prints_uuids(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CUDA may not count a GPU that fell off the bus: the indices after it would shift."""
    sample = make_sample((make_gpu(0, lost=True, uuid=None), idle_gpu(1)))
    assert run_pick(monkeypatch, capsys, [], sample) == (0, f"{sample.gpus[1].uuid}\n", "")


def test_auto_on_mixed_models_prints_uuids(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = make_sample((idle_gpu(0, name="NVIDIA GeForce GTX 1080"), idle_gpu(1)))
    assert run_pick(monkeypatch, capsys, [], sample) == (0, f"{sample.gpus[0].uuid}\n", "")


def test_too_few_exits_1_with_one_line_and_nothing_on_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_pick(monkeypatch, capsys, ["-n", "4", "--busy-ok"], four_gpus())
    assert (code, out) == (1, "")
    assert err == "gpumon pick: only 3 of 4 GPUs qualify (need 4): GPU 1 process list unknown\n"


def test_simulated_gpus_are_labelled_on_stderr_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = make_sample((idle_gpu(0), idle_gpu(1)), simulated=True)
    code, out, err = run_pick(monkeypatch, capsys, ["-n", "2", "--demo"], sample)
    assert (code, out, err) == (0, "0,1\n", "gpumon pick: simulated GPUs (--demo)\n")
    code, out, err = run_pick(monkeypatch, capsys, ["-n", "3", "--demo"], sample)
    assert (code, out) == (1, "")
    assert err == "gpumon pick: simulated GPUs (--demo): only 2 GPUs here (need 3)\n"


def test_no_driver_exits_1_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = make_sample(
        (),
        driver=None,
        unavailable=GpuUnavailable(
            UnavailableReason.DRIVER_NOT_LOADED, "The NVIDIA driver is not loaded.", "NVML: x"
        ),
    )
    code, out, err = run_pick(monkeypatch, capsys, [], sample)
    assert (code, out) == (1, "")
    assert "The NVIDIA driver is not loaded." in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-n", "0"], "argument -n/--count: must be at least 1 (got 0)"),
        (["-n", "two"], "argument -n/--count: not a whole number"),
        (["--min-free-memory", "20"], "needs a unit"),
        (["--min-free-memory", "20X"], "unknown unit 'X'"),
        (["--min-free-memory=-1G"], "not a size"),
        (["--max-utilization", "101"], "must be from 0 to 100"),
        (["--max-utilization", "-5"], "not a percentage"),
        (["--format", "cuda"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["pick", *argv])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("gpumon pick: error: ") and message in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20G", 20 * GIB),
        ("20GiB", 20 * GIB),
        ("20gb", 20 * GIB),  # GPU memory is sold in powers of 1024: an "80GB" A100 has 80 GiB
        ("512M", 512 * MIB),
        ("512MiB", 512 * MIB),
        ("1.5G", 3 * GIB // 2),
        ("4096B", 4096),
        ("2 T", 2 * 1024 * GIB),
        ("0", 0),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert size_bytes(text) == expected


@pytest.mark.parametrize("text", ["20", "", "G", "1_0G", "1e3G", "\u0663G", "2P", "9" * 400 + "T"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        size_bytes(text)


def test_percentages() -> None:
    assert [percentage(text) for text in ("0", "100", "50%", "12.5")] == [0, 100, 50, 12.5]
    for text in ("101", "-1", "nan", "1e1"):
        with pytest.raises(argparse.ArgumentTypeError):
            percentage(text)


# --- end to end ----------------------------------------------------------------------------


def test_demo_pick_two_is_a_cuda_visible_devices_value() -> None:
    result = run_gpumon("pick", "--demo", "-n", "2", "--busy-ok")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"\d+,\d+\n", result.stdout)
    assert "simulated GPUs (--demo)" in result.stderr


def test_demo_pick_too_many_exits_1_with_one_line_and_empty_stdout() -> None:
    result = run_gpumon("pick", "--demo", "-n", "99")
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "need 99" in lines[0] and "simulated GPUs (--demo)" in lines[0]


def test_pick_among_the_gpus_cuda_visible_devices_names_with_only_visible(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spawner handed the user GPUs 2 and 3: --only-visible picks among them (the output
    replaces the variable, so it stays in NVML's numbers); without it pick says it chose
    among every GPU; --only names GPUs as the dashboard's does."""
    sample = make_sample(tuple(idle_gpu(index) for index in range(4)))
    environ = {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    code, out, err = run_pick(monkeypatch, capsys, ["-n", "2", "--only-visible"], sample, environ)
    assert (code, out, err) == (0, "2,3\n", "")
    code, out, err = run_pick(monkeypatch, capsys, ["-n", "2"], sample, environ)
    assert (code, out) == (0, "0,1\n")
    assert "CUDA_VISIBLE_DEVICES is set (2,3): picked among every GPU here" in err
    code, out, _ = run_pick(monkeypatch, capsys, ["--only", "1,3", "-n", "2"], sample)
    assert (code, out) == (0, "1,3\n")
    code, out, err = run_pick(monkeypatch, capsys, ["--only", "7"], sample)
    assert (code, out) == (
        2,
        "",
    ) and err == "gpumon pick: --only 7: no such GPU here (GPUs here: 0-3)\n"
    with pytest.raises(SystemExit) as refused:  # no process filter: a busy GPU is not free
        run_pick(monkeypatch, capsys, ["--user", "alice"], sample)
    assert refused.value.code == 2
