"""Who uses what, as pure functions (gpumon.data.views): the process filter, command shortening,
the per-user summary and FREE. The dashboard, `once` and `pick` all read these, so a FREE
mark or a filter means the same everywhere; unknown is never free."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from gpumon.data.free import free_gpu_indices, is_free, processes_known
from gpumon.data.model import GpuProcess, GpuStats, MigInstance
from gpumon.data.views import (
    OTHER_NAMESPACE,
    UNKNOWN_USER,
    ProcessFilter,
    UserUsage,
    filter_processes,
    instance_processes,
    shorten_command,
    user_summary,
)
from tests.support.ui_helpers import GIB, MIB, make_gpu, make_process, make_sample

GPU0, GPU1, GPU3 = make_gpu(0), make_gpu(1), make_gpu(3)
IDLE = {"memory_used_bytes": 3 * MIB, "utilization_gpu_pct": 0}
THRESHOLD = 1024 * MIB

# A shared server: alice (the current user) trains on GPU 0 and 3, bob on 0, chen on 1.
ALICE_TRAIN = make_process(
    GPU0, 4100, user="alice", command="/opt/conda/bin/python3 train.py", is_current_user=True
)
ALICE_EVAL = make_process(
    GPU3, 4200, user="alice", command="python eval.py --ckpt last", is_current_user=True
)
BOB_TRAIN = make_process(GPU0, 5100, user="bob", command="python Train_GAN.py")
CHEN_SERVE = make_process(GPU1, 6100, user="chen", command="infer_server --port 8080")
PROCESSES = (ALICE_TRAIN, ALICE_EVAL, BOB_TRAIN, CHEN_SERVE)


def pids(processes: Iterable[GpuProcess]) -> list[int]:
    return [p.pid for p in processes]


# -- ProcessFilter ------------------------------------------------------------------------


def test_no_filter_is_inactive_and_shows_everything_in_order() -> None:
    no_filter = ProcessFilter()
    assert not no_filter.active
    assert no_filter.describe() == ""
    assert filter_processes(PROCESSES, no_filter) == PROCESSES
    assert filter_processes(iter(PROCESSES), no_filter) == PROCESSES  # any iterable


def test_gpu_zero_is_a_filter_not_no_filter() -> None:
    """GPU 0 is falsy: the filter on it must still be on."""
    only_gpu0 = ProcessFilter(gpu_index=0)
    assert only_gpu0.active
    assert pids(filter_processes(PROCESSES, only_gpu0)) == [4100, 5100]
    assert only_gpu0.describe() == "GPU 0"


def test_gpu_filter_keeps_only_that_gpus_processes() -> None:
    assert pids(filter_processes(PROCESSES, ProcessFilter(gpu_index=3))) == [4200]
    assert filter_processes(PROCESSES, ProcessFilter(gpu_index=7)) == ()


def test_mine_keeps_only_the_current_users_processes() -> None:
    mine = ProcessFilter(mine=True)
    assert mine.active
    assert pids(filter_processes(PROCESSES, mine)) == [4100, 4200]
    assert mine.describe() == "mine"


def test_mine_does_not_go_by_user_name() -> None:
    """Another "alice" process not marked as the current user's (another container's user
    of the same name) is not mine."""
    namesake = make_process(GPU1, 7100, user="alice", is_current_user=False)
    assert not ProcessFilter(mine=True).matches(namesake)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train", [4100, 5100]),  # in the command, any case: "Train_GAN.py" too
        ("TRAIN", [4100, 5100]),
        ("Alice", [4100, 4200]),  # the user
        ("5100", [5100]),  # the PID
        ("61", [6100]),  # part of a PID
        ("--port", [6100]),  # an argument
        ("conda", [4100]),  # the full command, not only what the table shows
        ("nobody", []),
    ],
)
def test_text_matches_user_command_or_pid_case_insensitively(
    text: str, expected: list[int]
) -> None:
    assert pids(filter_processes(PROCESSES, ProcessFilter(text=text))) == expected


def test_text_filter_survives_processes_without_user_or_command() -> None:
    """Another namespace's process has no user or command: the filter still finds its PID
    and does not fail on the missing text."""
    hidden = make_process(GPU1, 9876, user=None, command=None, visible=False)
    assert ProcessFilter(text="9876").matches(hidden)
    assert not ProcessFilter(text="python").matches(hidden)
    assert not ProcessFilter(text="None").matches(hidden)


def test_every_part_must_pass() -> None:
    combined = ProcessFilter(gpu_index=0, mine=True, text="train")
    assert pids(filter_processes(PROCESSES, combined)) == [4100]
    assert pids(filter_processes(PROCESSES, dataclasses.replace(combined, gpu_index=3))) == []
    assert pids(filter_processes(PROCESSES, dataclasses.replace(combined, mine=False))) == [
        4100,
        5100,
    ]


def test_describe_names_the_active_parts_in_order() -> None:
    assert ProcessFilter(gpu_index=3, mine=True, text="train").describe() == (
        'GPU 3 · mine · "train"'
    )
    assert ProcessFilter(text="train").describe() == '"train"'
    assert ProcessFilter(gpu_index=2, text="bob").describe() == 'GPU 2 · "bob"'
    assert ProcessFilter(mine=True, text="").describe() == "mine"


# -- shorten_command ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("/opt/conda/bin/python3 train.py", "python3 train.py"),
        ("/opt/conda/bin/python3 train.py --lr 3e-4", "python3 train.py --lr 3e-4"),
        ("/usr/bin/python", "python"),  # no arguments
        ("./run.sh --fast", "run.sh --fast"),
        ("python /data/scripts/train.py", "python /data/scripts/train.py"),  # arguments kept
        ("python train.py", "python train.py"),  # nothing to shorten
        ("/usr/lib/xorg/Xorg vt1 -displayfd 3", "Xorg vt1 -displayfd 3"),
        ("/opt/app/ --flag", "app --flag"),  # a trailing slash does not leave it empty
        ("/", "/"),
        ("", ""),
    ],
)
def test_shorten_command_keeps_the_program_name_and_every_argument(
    command: str, shown: str
) -> None:
    assert shorten_command(command) == shown


# -- user_summary --------------------------------------------------------------------------


def read_sm(processes: Iterable[GpuProcess]) -> list[GpuProcess]:
    """As NVML reads them without MIG: with an SM utilisation, so whether each is idle is
    known (the summary's idle figure is no lower bound)."""
    return [dataclasses.replace(process, sm_utilization_pct=0) for process in processes]


def test_user_summary_per_user_most_memory_first() -> None:
    processes = (
        make_process(GPU0, 1, user="bob", gpu_memory_bytes=10 * GIB),
        make_process(GPU0, 2, user="alice", gpu_memory_bytes=2 * GIB, is_current_user=True),
        make_process(GPU3, 3, user="alice", gpu_memory_bytes=4 * GIB, is_current_user=True),
        make_process(GPU1, 4, user="chen", gpu_memory_bytes=GIB),
        make_process(GPU3, 5, user="bob", gpu_memory_bytes=GIB),
    )
    assert user_summary(read_sm(processes)) == (
        UserUsage("bob", (0, 3), 11 * GIB, 2),
        UserUsage("alice", (0, 3), 6 * GIB, 2, is_current_user=True),
        UserUsage("chen", (1,), GIB, 1),
    )


def test_user_summary_gpus_listed_once_in_order() -> None:
    processes = tuple(
        make_process(make_gpu(index), pid, user="dana") for pid, index in enumerate((5, 1, 5, 0, 1))
    )
    (dana,) = user_summary(processes)
    assert dana.gpu_indices == (0, 1, 5)
    assert dana.process_count == 5


def test_user_summary_same_memory_sorted_by_name() -> None:
    processes = tuple(
        make_process(GPU0, pid, user=name, gpu_memory_bytes=GIB)
        for pid, name in enumerate(("emre", "bob", "dana"))
    )
    assert [u.user for u in user_summary(processes)] == ["bob", "dana", "emre"]


def test_user_summary_keeps_unknown_owners_and_other_namespaces() -> None:
    """An owner that cannot be read is "?", a process of another PID namespace is counted
    apart: both hold real GPU memory, neither is dropped nor merged into a user."""
    processes = (
        make_process(GPU0, 1, user="alice", gpu_memory_bytes=GIB),
        make_process(GPU0, 2, user=None, gpu_memory_bytes=2 * GIB),
        make_process(GPU1, 3, user=None, command=None, visible=False, gpu_memory_bytes=3 * GIB),
        # An invisible process is another namespace's even if a user name came with it.
        make_process(GPU3, 4, user="alice", visible=False, gpu_memory_bytes=4 * GIB),
    )
    summary = {u.user: u for u in user_summary(read_sm(processes))}
    assert set(summary) == {"alice", UNKNOWN_USER, OTHER_NAMESPACE}
    assert summary[OTHER_NAMESPACE] == UserUsage(OTHER_NAMESPACE, (1, 3), 7 * GIB, 2)
    assert summary[UNKNOWN_USER] == UserUsage(UNKNOWN_USER, (0,), 2 * GIB, 1)
    assert summary["alice"].gpu_memory_bytes == GIB
    assert UNKNOWN_USER == "?" and OTHER_NAMESPACE == "(other namespace)"


def test_user_summary_idle_memory_is_unknown_where_sm_utilisation_is() -> None:
    """Under MIG NVML has no SM utilisation: whether those processes are idle is unknown,
    so the users screen reads N/A (or a lower bound), not "none idle"; a desktop (graphics
    only) is never called idle, so it makes nothing unknown."""
    from gpumon.data.model import ProcessKind
    from gpumon.ui.dashboard.user_summary import usage_cells

    mig = make_process(GPU0, 1, user="alice", gpu_memory_bytes=20 * GIB)  # SM: None
    busy = dataclasses.replace(make_process(GPU1, 2, user="alice"), sm_utilization_pct=90)
    idle = dataclasses.replace(make_process(GPU1, 3, user="bob", gpu_memory_bytes=GIB),
                               sm_utilization_pct=0)  # fmt: skip
    desktop = make_process(GPU1, 4, user="carol", kind=ProcessKind.GRAPHICS)
    summary = {u.user: u for u in user_summary([mig, busy, idle, desktop], {idle.key})}
    assert summary["alice"].idle_unknown and usage_cells(summary["alice"])[-1] == "N/A"
    assert not summary["carol"].idle_unknown and usage_cells(summary["carol"])[-1] == "-"
    assert usage_cells(summary["bob"])[-1] == "1.0G"
    mixed = user_summary([mig, dataclasses.replace(idle, user="alice")], {idle.key})
    assert usage_cells(mixed[0])[-1] == ">=1.0G"


def test_user_summary_memory_na_is_a_lower_bound_not_zero() -> None:
    processes = (
        make_process(GPU0, 1, user="bob", gpu_memory_bytes=10 * GIB),
        make_process(GPU1, 2, user="bob", gpu_memory_bytes=None),
        make_process(GPU1, 3, user="chen", gpu_memory_bytes=None),
        make_process(GPU1, 4, user="chen", gpu_memory_bytes=None),
        make_process(GPU1, 5, user="dana", gpu_memory_bytes=GIB),
    )
    summary = {u.user: u for u in user_summary(processes)}
    # Some memory N/A: the sum of what is known, marked partial.
    assert summary["bob"].gpu_memory_bytes == 10 * GIB
    assert summary["bob"].memory_partial
    # All of it N/A: unknown (None), never 0, and nothing to call partial.
    assert summary["chen"].gpu_memory_bytes is None
    assert not summary["chen"].memory_partial
    assert summary["chen"].process_count == 2
    # All known: not partial.
    assert not summary["dana"].memory_partial
    # Unknown memory sorts after every known amount.
    assert [u.user for u in user_summary(processes)] == ["bob", "dana", "chen"]


def test_user_summary_unknown_memory_sorts_after_zero() -> None:
    """A user whose processes hold 0 B (known) comes before one whose memory is N/A, whatever
    their names: "most memory first" cannot put an unknown amount above a known one."""
    processes = (
        make_process(GPU0, 1, user="zed", gpu_memory_bytes=0),
        make_process(GPU0, 2, user="amy", gpu_memory_bytes=None),
    )
    assert [u.user for u in user_summary(processes)] == ["zed", "amy"]


def test_user_summary_marks_the_current_user() -> None:
    summary = user_summary(PROCESSES)
    assert [u.user for u in summary if u.is_current_user] == ["alice"]


def test_user_summary_of_no_processes_is_empty() -> None:
    assert user_summary(()) == ()


# -- processes_known, is_free, free_gpu_indices -------------------------------------------


def test_processes_known_only_when_read_and_not_lost_or_refused() -> None:
    sample = make_sample((GPU0,))
    assert processes_known(GPU0, sample)
    assert not processes_known(GPU0, make_sample((GPU0,), processes_read=False))
    lost = GpuStats(index=0, uuid=None, lost=True)
    assert not processes_known(lost, make_sample((lost,)))
    refused = make_gpu(0, processes_error="NVML: Insufficient Permissions")
    assert not processes_known(refused, make_sample((refused,)))


def test_idle_gpu_is_free() -> None:
    assert is_free(make_gpu(0, **IDLE), (), THRESHOLD, known=True)


def test_free_threshold_is_strict() -> None:
    """Below the threshold is free; at it, not."""
    just_below = make_gpu(0, memory_used_bytes=THRESHOLD - 1)
    at = make_gpu(0, memory_used_bytes=THRESHOLD)
    assert is_free(just_below, (), THRESHOLD, known=True)
    assert not is_free(at, (), THRESHOLD, known=True)
    assert is_free(make_gpu(0, memory_used_bytes=0), (), THRESHOLD, known=True)
    assert not is_free(make_gpu(0, memory_used_bytes=0), (), 0, known=True)


def test_a_gpu_with_a_process_is_not_free_however_little_memory() -> None:
    gpu = make_gpu(0, **IDLE)
    tiny = make_process(gpu, 1, gpu_memory_bytes=MIB)
    assert not is_free(gpu, (tiny,), THRESHOLD, known=True)
    # Even a process whose memory is N/A.
    assert not is_free(gpu, (make_process(gpu, 2, gpu_memory_bytes=None),), THRESHOLD, known=True)


@pytest.mark.parametrize(
    ("gpu", "known"),
    [
        (make_gpu(0, **IDLE), False),  # process list not read
        (make_gpu(0, **IDLE, processes_error="NVML: Insufficient Permissions"), True),
        (make_gpu(0, **IDLE, lost=True, lost_reason="fell off the bus"), True),
        (make_gpu(0, utilization_gpu_pct=0, memory_used_bytes=None), True),
        (make_gpu(0, **IDLE, mig_mode=True, mig_instances=None), True),
    ],
    ids=["not-known", "refused", "lost", "memory-na", "mig-unreadable"],
)
def test_unknown_is_never_free(gpu: GpuStats, known: bool) -> None:
    assert not is_free(gpu, (), THRESHOLD, known=known)


def test_mig_gpu_with_readable_idle_instances_can_be_free() -> None:
    instance = MigInstance(0, 0, 1, 0, "3g.40gb", "MIG-aaaa", 3 * MIB, 40 * GIB)
    idle_mig = make_gpu(0, **IDLE, mig_mode=True, mig_instances=(instance,))
    assert is_free(idle_mig, (), THRESHOLD, known=True)


def test_free_gpu_indices_of_a_shared_server() -> None:
    gpus = (
        make_gpu(0),  # busy: a process
        make_gpu(1, **IDLE),  # free
        make_gpu(2, memory_used_bytes=2 * GIB, utilization_gpu_pct=0),  # memory nobody lists
        make_gpu(3, **IDLE, processes_error="NVML: Insufficient Permissions"),
        GpuStats(index=4, uuid=None, lost=True),
        make_gpu(5, utilization_gpu_pct=0, memory_used_bytes=None),
        make_gpu(6, **IDLE, mig_mode=True, mig_instances=None),
        make_gpu(7, **IDLE),  # free
    )
    sample = make_sample(gpus, (make_process(gpus[0], 42, gpu_memory_bytes=MIB),))
    assert free_gpu_indices(sample, 1024) == frozenset({1, 7})
    # The threshold is in MiB: GPU 2's 2 GiB counts as free under a 4 GiB threshold.
    assert free_gpu_indices(sample, 4096) == frozenset({1, 2, 7})
    assert free_gpu_indices(sample, 0) == frozenset()


def test_no_gpu_is_free_when_process_lists_were_not_read() -> None:
    sample = make_sample((make_gpu(0, **IDLE), make_gpu(1, **IDLE)), processes_read=False)
    assert free_gpu_indices(sample, 1024) == frozenset()


def test_no_gpu_is_free_before_the_first_sample() -> None:
    assert free_gpu_indices(None, 1024) == frozenset()


def test_free_gpu_indices_are_nvml_indices_not_positions() -> None:
    sample = make_sample((make_gpu(2), make_gpu(5, **IDLE)))
    assert free_gpu_indices(sample, 1024) == frozenset({5})


def test_a_process_on_another_gpu_does_not_make_this_one_busy() -> None:
    gpus = (make_gpu(0, **IDLE), make_gpu(1, **IDLE))
    sample = make_sample(gpus, (make_process(gpus[1], 42),))
    assert free_gpu_indices(sample, 1024) == frozenset({0})


# -- instance_processes --------------------------------------------------------------------


def test_instance_processes_match_gpu_and_instance_ids() -> None:
    gpu = make_gpu(0, mig_mode=True)
    instance = MigInstance(0, 0, gpu_instance_id=1, compute_instance_id=0, profile="3g.40gb",
                           uuid="MIG-aaaa")  # fmt: skip
    inside = make_process(gpu, 1, gpu_instance_id=1, compute_instance_id=0)
    ci_unknown = make_process(gpu, 2, gpu_instance_id=1, compute_instance_id=None)
    other_ci = make_process(gpu, 3, gpu_instance_id=1, compute_instance_id=1)
    other_gi = make_process(gpu, 4, gpu_instance_id=2, compute_instance_id=0)
    no_mig = make_process(gpu, 5)
    other_gpu = make_process(make_gpu(1), 6, gpu_instance_id=1, compute_instance_id=0)
    processes = (inside, ci_unknown, other_ci, other_gi, no_mig, other_gpu)
    assert pids(instance_processes(instance, processes)) == [1, 2]
    # An instance whose compute instance id is unknown takes every process of its GPU instance.
    whole_gi = dataclasses.replace(instance, compute_instance_id=None)
    assert pids(instance_processes(whole_gi, processes)) == [1, 2, 3]
    # An instance whose GPU instance id is unknown cannot be matched to any process.
    unknown_gi = dataclasses.replace(instance, gpu_instance_id=None)
    assert instance_processes(unknown_gi, processes) == ()


def test_an_exited_process_is_counted_as_of_an_unknown_owner_not_another_namespace() -> None:
    """NVML still lists a PID that has exited (gpumon sees every host PID): its owner can no
    longer be read, but it was never another container's."""
    gpu = make_gpu(0)
    exited = make_process(gpu, 7, user=None, command=None, visible=False, exited=True)
    outside = make_process(gpu, 8, user=None, command=None, visible=False)
    names = [usage.user for usage in user_summary((exited, outside))]
    assert sorted(names) == sorted([UNKNOWN_USER, OTHER_NAMESPACE])


def test_the_text_table_tells_an_exited_process_from_one_outside_this_namespace() -> None:
    from gpumon.commands.once import render_table

    gpu = make_gpu(0)
    processes = (
        make_process(gpu, 7, user=None, command=None, visible=False, exited=True),
        make_process(gpu, 8, user=None, command=None, visible=False),
    )
    text = render_table(make_sample((gpu,), processes), width=200)
    assert "(exited: NVML still lists it)" in text
    assert "(not visible here: another PID namespace?)" in text
