"""ProcessInspector: joining NVML's PIDs with what psutil can (and cannot) read."""

from __future__ import annotations

import os
import pwd
import time

import psutil
import pytest

from gpumon.sources.host import cgroup, procfs
from gpumon.sources.host import inspector as host
from gpumon.sources.host.cgroup import NO_IDS, CgroupIds
from gpumon.sources.host.inspector import (
    NOT_VISIBLE,
    HostProcessInfo,
    ProcessInspector,
    sample_host,
)
from tests.support.fake_nvml import GIB, FakeProcess, FakeProcessTable, user_name
from tests.support.ui_helpers import make_gpu, make_process

MY_UID = 1000
OTHER_UID = 1001
NOW = 10_000.0


def inspector_for(table: FakeProcessTable) -> ProcessInspector:
    return ProcessInspector(
        process_factory=table,  # type: ignore[arg-type]
        current_uid=MY_UID,
        clock=lambda: NOW,
    )


def inspect_one(inspector: ProcessInspector, pid: int) -> HostProcessInfo:
    return inspector.inspect({pid})[pid]


def test_a_readable_process() -> None:
    table = FakeProcessTable(
        FakeProcess(
            10,
            create_time_s=NOW - 3600,
            uid=MY_UID,
            cmdline_parts=["python", "train.py", "--epochs", "3"],
            cpu_percents=[0.0, 180.0],
            rss=5 * GIB,
        )
    )
    inspector = inspector_for(table)

    first = inspect_one(inspector, 10)
    second = inspect_one(inspector, 10)

    assert second == HostProcessInfo(
        visible=True,
        user=user_name(MY_UID),
        command="python train.py --epochs 3",
        cpu_pct=180.0,
        rss_bytes=5 * GIB,
        elapsed_s=3600.0,
        is_current_user=True,
        create_time_s=NOW - 3600,
    )
    # psutil's first cpu_percent() only primes the counter: N/A, never a fake 0 %.
    assert first.cpu_pct is None
    assert first.rss_bytes == 5 * GIB


def test_another_users_process_is_not_mine() -> None:
    table = FakeProcessTable(FakeProcess(11, uid=OTHER_UID))

    info = inspect_one(inspector_for(table), 11)

    assert info.is_current_user is False
    assert info.user == user_name(OTHER_UID)


def test_uid_without_a_login_name_shows_the_number() -> None:
    uid = 3_999_123
    try:
        pwd.getpwuid(uid)
    except KeyError:
        pass
    else:  # pragma: no cover - only on a machine that really has this user
        pytest.skip(f"uid {uid} exists here")
    table = FakeProcessTable(FakeProcess(12, uid=uid))

    assert inspect_one(inspector_for(table), 12).user == str(uid)


def test_a_user_name_lookup_that_failed_once_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LDAP or sssd not answering for a moment must not leave a user a number all day."""
    import pwd

    answers = iter([KeyError(4321), None])

    def getpwuid(uid: int) -> object:
        answer = next(answers)
        if isinstance(answer, KeyError):
            raise answer
        return type("Entry", (), {"pw_name": "dana"})()

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    table = FakeProcessTable(FakeProcess(31, uid=4321), FakeProcess(32, uid=4321))
    inspector = inspector_for(table)

    assert inspect_one(inspector, 31).user == "4321"
    assert inspect_one(inspector, 32).user == "dana"


def test_access_denied_on_cmdline_falls_back_to_name() -> None:
    table = FakeProcessTable(
        FakeProcess(20, process_name="vllm", errors={"cmdline": psutil.AccessDenied(20)})
    )

    info = inspect_one(inspector_for(table), 20)

    assert info.command == "vllm"
    assert info.visible is True


@pytest.mark.parametrize("parts", [[], [""], ["", " "]])
def test_empty_cmdline_falls_back_to_name(parts: list[str]) -> None:
    """No command line, or blank arguments only: the name, never an empty command."""
    table = FakeProcessTable(FakeProcess(21, cmdline_parts=parts, process_name="Xorg"))

    assert inspect_one(inspector_for(table), 21).command == "Xorg"


def test_nothing_about_the_command_readable() -> None:
    denied = psutil.AccessDenied(22)
    table = FakeProcessTable(FakeProcess(22, errors={"cmdline": denied, "name": denied}))

    info = inspect_one(inspector_for(table), 22)

    assert info.command is None
    assert info.visible is True
    assert info.user == user_name(1000)


def test_access_denied_on_usage_keeps_the_user() -> None:
    table = FakeProcessTable(
        FakeProcess(
            30,
            uid=OTHER_UID,
            errors={"cpu_percent": psutil.AccessDenied(30), "memory_info": psutil.AccessDenied(30)},
        )
    )
    inspector = inspector_for(table)

    inspect_one(inspector, 30)
    info = inspect_one(inspector, 30)

    assert (info.cpu_pct, info.rss_bytes) == (None, None)
    assert info.user == user_name(OTHER_UID)
    assert info.command == "python train.py"
    assert info.visible is True


def test_access_denied_on_uids_falls_back_to_username() -> None:
    table = FakeProcessTable(
        FakeProcess(31, user="svc-train", errors={"uids": psutil.AccessDenied(31)})
    )

    info = inspect_one(inspector_for(table), 31)

    assert info.user == "svc-train"
    assert info.is_current_user is False


def test_zombie_is_handled() -> None:
    zombie = psutil.ZombieProcess(40)
    table = FakeProcessTable(
        FakeProcess(40, errors={"cmdline": zombie, "cpu_percent": zombie}),
        FakeProcess(
            41,
            errors={"cmdline": zombie},
            process_name="python3",
            state=psutil.STATUS_ZOMBIE,
            rss=0,
        ),
    )

    infos = inspector_for(table).inspect({40, 41})

    assert infos[40].visible is False
    # Marked the way ps marks it, so an RSS of 0 beside GPU memory is not a mystery.
    assert infos[41].command == "python3 <defunct>"
    assert infos[41].visible is True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_real_unreaped_child_reads_defunct() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 5
        while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        info = inspect_one(ProcessInspector(), pid)
        assert info.visible is True
        assert info.command is not None and info.command.endswith(" <defunct>")
        assert info.user == pwd.getpwuid(os.getuid()).pw_name
    finally:
        os.waitpid(pid, 0)


def test_pid_outside_this_namespace_is_not_visible() -> None:
    table = FakeProcessTable()

    info = inspect_one(inspector_for(table), 4_000_000)

    assert info == NOT_VISIBLE
    assert info.visible is False


def test_process_exiting_between_two_inspections() -> None:
    table = FakeProcessTable(FakeProcess(50))
    inspector = inspector_for(table)

    assert inspect_one(inspector, 50).visible is True
    table.remove(50)
    assert inspect_one(inspector, 50).visible is False


def test_process_exiting_while_being_read() -> None:
    table = FakeProcessTable(FakeProcess(51, errors={"memory_info": psutil.NoSuchProcess(51)}))

    assert inspect_one(inspector_for(table), 51).visible is False


# -- 8. one psutil.Process per (pid, create time) ----------------------------------------------


def test_process_object_is_reused_across_inspections() -> None:
    table = FakeProcessTable(FakeProcess(60, cpu_percents=[0.0, 20.0, 30.0]))
    inspector = inspector_for(table)

    readings = [inspect_one(inspector, 60).cpu_pct for _ in range(3)]

    assert table.lookups(60) == 1
    (same_object,) = table.handed_out[60]
    assert same_object.cpu_calls == 3
    assert readings == [None, 20.0, 30.0]


def test_reused_pid_gets_a_fresh_process_object() -> None:
    table = FakeProcessTable(FakeProcess(70, create_time_s=100.0, cpu_percents=[0.0, 90.0]))
    inspector = inspector_for(table)
    inspect_one(inspector, 70)
    inspect_one(inspector, 70)

    # The job exits and the kernel hands its PID to a new process.
    table.add(
        FakeProcess(
            70,
            create_time_s=NOW - 5,
            uid=OTHER_UID,
            cmdline_parts=["python", "serve.py"],
            cpu_percents=[0.0, 12.0],
        )
    )
    info = inspect_one(inspector, 70)

    assert table.lookups(70) == 2
    assert info.command == "python serve.py"
    assert info.user == user_name(OTHER_UID)
    assert info.elapsed_s == 5.0
    # A new process: its counter is primed afresh, not a delta against the old one.
    assert info.cpu_pct is None
    assert inspect_one(inspector, 70).cpu_pct == 12.0


def test_pids_no_longer_asked_about_are_forgotten() -> None:
    table = FakeProcessTable(*(FakeProcess(pid) for pid in range(100, 200)))
    inspector = inspector_for(table)

    inspector.inspect(range(100, 200))
    inspector.inspect({100})
    inspector.inspect({150})

    # 150 was forgotten in between: looked up again and primed again.
    assert table.lookups(150) == 2
    assert table.lookups(100) == 1
    assert inspector.inspect({150})[150].cpu_pct == 50.0
    assert inspector.inspect(set()) == {}
    assert table.lookups(150) == 2
    assert inspector.inspect({150})[150].cpu_pct is None
    assert table.lookups(150) == 3


# -- the real thing ----------------------------------------------------------------------------


def test_the_current_process_for_real() -> None:
    inspector = ProcessInspector()
    pid = os.getpid()

    first = inspect_one(inspector, pid)
    sum(i * i for i in range(200_000))  # some CPU time for the second reading
    second = inspect_one(inspector, pid)

    assert first.visible is True
    assert first.user == pwd.getpwuid(os.getuid()).pw_name
    assert first.is_current_user is True
    assert first.command is not None
    assert "python" in first.command.lower()
    assert first.rss_bytes is not None
    assert first.rss_bytes > 0
    assert first.elapsed_s is not None
    assert first.elapsed_s >= 0
    assert first.cpu_pct is None
    assert isinstance(second.cpu_pct, float)
    assert second.cpu_pct >= 0


def test_host_sample_for_real() -> None:
    sample_host("box")  # the first reading only primes psutil's CPU counter
    host = sample_host("box")

    assert host.hostname == "box"
    assert host.memory_total_bytes is not None
    assert host.memory_used_bytes is not None
    assert 0 < host.memory_used_bytes <= host.memory_total_bytes
    assert host.cpu_pct is not None
    assert 0 <= host.cpu_pct <= 100


def test_escape_sequences_in_another_process_argv_never_reach_the_terminal() -> None:
    """A command line is data from another user: it must not set our clipboard or clear
    the screen of whoever is watching (OSC 52, CSI 2J, BEL, C1 controls)."""
    import subprocess
    import sys

    hostile = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b31m"
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", hostile],
        stdin=subprocess.DEVNULL,
    )
    try:
        # Wait until the new interpreter's argv is in place (just after exec it may not be).
        deadline = time.monotonic() + 10
        while "time.sleep(30)" not in " ".join(psutil.Process(child.pid).cmdline()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        info = ProcessInspector().inspect([child.pid])[child.pid]
    finally:
        child.kill()
        child.wait()
    assert info.command is not None
    assert "time.sleep(30)" in info.command
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in info.command)
    assert "?]52;c;cHduZWQ=??[2J?31m" in info.command


def test_the_first_host_cpu_reading_is_na_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil's first system-wide cpu_percent() has nothing to compare with: it is not 0 %."""
    monkeypatch.setattr(host, "_cpu_primed", False)
    assert host.sample_host().cpu_pct is None
    second = host.sample_host().cpu_pct
    assert second is not None and 0 <= second <= 100


# -- the /proc way: one read of /proc/PID/stat per PID per tick (Linux) ------------------------


class FakeStats:
    """``read_stat`` for ProcessInspector: /proc/PID/stat as the test says it is."""

    def __init__(self) -> None:
        self.stats: dict[int, procfs.ProcStat] = {}
        self.reads = 0

    def __call__(self, pid: int) -> procfs.ProcStat | None:
        self.reads += 1
        return self.stats.get(pid)

    def set(
        self, pid: int, *, cpu_s: float, start: int = 1, rss: int = GIB, zombie: bool = False
    ) -> None:
        ticks = round(cpu_s * procfs.CLOCK_TICKS)
        self.stats[pid] = procfs.ProcStat(zombie, ticks, start, rss)


def stat_inspector(table: FakeProcessTable, stats: FakeStats, now: list[float]) -> ProcessInspector:
    return ProcessInspector(
        process_factory=table,  # type: ignore[arg-type]
        current_uid=MY_UID,
        clock=lambda: NOW,
        read_stat=stats,
        monotonic=lambda: now[0],
    )


def test_by_stat_cpu_is_the_delta_of_cpu_time_over_wall_time() -> None:
    table = FakeProcessTable(FakeProcess(80, create_time_s=NOW - 60, uid=MY_UID))
    stats, now = FakeStats(), [100.0]
    inspector = stat_inspector(table, stats, now)

    stats.set(80, cpu_s=10.0, rss=3 * GIB)
    first = inspect_one(inspector, 80)
    now[0] += 2.0
    stats.set(80, cpu_s=13.0, rss=4 * GIB)  # 3 s of CPU in 2 s: 150 % of one core
    second = inspect_one(inspector, 80)

    assert first.cpu_pct is None  # nothing to compare with yet: N/A, not 0 %
    assert second.cpu_pct == pytest.approx(150.0)
    assert (first.rss_bytes, second.rss_bytes) == (3 * GIB, 4 * GIB)
    assert second.elapsed_s == 60.0 and second.is_current_user is True
    assert second.command == "python train.py"
    # What never changes was read once, with psutil; the rest with one stat read per tick.
    assert table.lookups(80) == 1 and stats.reads == 2


def test_by_stat_a_reused_pid_is_a_new_process() -> None:
    table = FakeProcessTable(FakeProcess(81, uid=MY_UID, cmdline_parts=["python", "old.py"]))
    stats, now = FakeStats(), [100.0]
    inspector = stat_inspector(table, stats, now)
    stats.set(81, cpu_s=50.0, start=1000)
    inspect_one(inspector, 81)

    table.add(FakeProcess(81, uid=OTHER_UID, cmdline_parts=["python", "new.py"]))
    stats.set(81, cpu_s=0.5, start=2000)  # another start time: another process
    now[0] += 1.0
    info = inspect_one(inspector, 81)

    assert info.command == "python new.py"
    assert info.user == user_name(OTHER_UID)
    assert info.cpu_pct is None  # not a delta against the old process's CPU time
    assert table.lookups(81) == 2


def test_by_stat_gone_and_zombie() -> None:
    table = FakeProcessTable(FakeProcess(82, process_name="python3", cmdline_parts=[]))
    stats, now = FakeStats(), [100.0]
    inspector = stat_inspector(table, stats, now)
    stats.set(82, cpu_s=1.0, zombie=True, rss=0)

    assert inspect_one(inspector, 82).command == "python3 <defunct>"
    del stats.stats[82]
    assert inspect_one(inspector, 82) == NOT_VISIBLE
    assert inspect_one(inspector, 83) == NOT_VISIBLE  # never seen, not here


# -- Slurm job and container: read once per process -------------------------------------------


class FakeCgroups:
    """``read_cgroup`` for a ProcessInspector: the ids each PID has now; counts reads."""

    def __init__(self) -> None:
        self.ids: dict[int, CgroupIds] = {}
        self.reads: list[int] = []

    def __call__(self, pid: int) -> CgroupIds:
        self.reads.append(pid)
        return self.ids.get(pid, NO_IDS)


def test_job_and_container_are_read_once_and_again_for_a_reused_pid() -> None:
    table = FakeProcessTable(FakeProcess(90, create_time_s=100.0), FakeProcess(91))
    cgroups = FakeCgroups()
    cgroups.ids[90] = CgroupIds("4812345", None)
    cgroups.ids[91] = CgroupIds(None, "0123456789ab")
    inspector = ProcessInspector(
        process_factory=table,  # type: ignore[arg-type]
        current_uid=MY_UID,
        clock=lambda: NOW,
        read_cgroup=cgroups,
    )

    for _ in range(3):
        infos = inspector.inspect({90, 91})
    assert (infos[90].job_id, infos[90].container_id) == ("4812345", None)
    assert (infos[91].job_id, infos[91].container_id) == (None, "0123456789ab")
    assert sorted(cgroups.reads) == [90, 91]  # once each, not every tick

    # The job ends; its PID goes to a process in a container.
    table.add(FakeProcess(90, create_time_s=NOW - 5))
    cgroups.ids[90] = CgroupIds(None, "fedcba987654")
    info = inspect_one(inspector, 90)
    assert (info.job_id, info.container_id) == (None, "fedcba987654")
    assert sorted(cgroups.reads) == [90, 90, 91]


def test_by_stat_job_and_container_are_read_once() -> None:
    table = FakeProcessTable(FakeProcess(92, uid=MY_UID))
    stats, now = FakeStats(), [100.0]
    cgroups = FakeCgroups()
    cgroups.ids[92] = CgroupIds("77", "abcdef012345")
    inspector = ProcessInspector(
        process_factory=table,  # type: ignore[arg-type]
        current_uid=MY_UID,
        clock=lambda: NOW,
        read_stat=stats,
        monotonic=lambda: now[0],
        read_cgroup=cgroups,
    )
    stats.set(92, cpu_s=1.0)
    infos = [inspect_one(inspector, 92) for _ in range(4)]
    assert {(info.job_id, info.container_id) for info in infos} == {("77", "abcdef012345")}
    assert cgroups.reads == [92]


def test_fake_pids_never_read_this_hosts_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    """A look-alike process table's PIDs are not this host's: PID 1 here is init, whatever
    its cgroup says."""

    def refuse(pid: int) -> CgroupIds:
        raise AssertionError(f"read /proc/{pid}/cgroup")

    monkeypatch.setattr(cgroup, "read_cgroup_ids", refuse)
    info = inspect_one(inspector_for(FakeProcessTable(FakeProcess(1))), 1)
    assert info.visible and (info.job_id, info.container_id) == (None, None)


def test_read_proc_stat_of_a_real_busy_child() -> None:
    """The parser against the real file: a child burning CPU reads near 100 %."""
    import subprocess
    import sys

    if not procfs.proc_is_readable():
        pytest.skip("no /proc")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.time() + 30\nwhile time.time() < end: pass",
        ],
        stdin=subprocess.DEVNULL,
    )
    try:
        inspector = ProcessInspector()
        inspect_one(inspector, child.pid)
        time.sleep(0.5)
        info = inspect_one(inspector, child.pid)
        stat = procfs.read_proc_stat(child.pid)
    finally:
        child.kill()
        child.wait()
    assert stat is not None and stat.zombie is False and stat.rss_bytes > 0
    assert info.cpu_pct is not None and 20.0 < info.cpu_pct < 150.0  # a loaded CI box shares it
    assert procfs.read_proc_stat(child.pid) is None  # reaped: gone


# --- a new PID read from /proc directly: what psutil would say, in fewer reads ---------------


def test_a_new_pid_reads_as_psutil_reads_it_without_psutil(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Owner, command line (argv with spaces, escapes and bytes that are not UTF-8) and start
    time, read from /proc for a real child, are what the psutil way reads; the boot time is
    read once for all the new PIDs of a sample, not once per PID."""
    import subprocess
    import sys

    if not procfs.proc_is_readable():
        pytest.skip("no /proc")
    argv: list[str | bytes] = [
        sys.executable,
        "-c",
        "import time; time.sleep(30)",
        "two words",
        "\x1b[2J",
        b"\xff",
    ]
    children = [subprocess.Popen(argv, stdin=subprocess.DEVNULL) for _ in range(3)]
    boot_reads = []
    real_boot_time = psutil.boot_time

    def counted_boot_time() -> float:
        boot_reads.append(1)
        return real_boot_time()

    try:
        pids = [child.pid for child in children]
        deadline = time.monotonic() + 10
        while not all("time.sleep(30)" in " ".join(psutil.Process(p).cmdline()) for p in pids):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        monkeypatch.setattr(psutil, "boot_time", counted_boot_time)
        direct = ProcessInspector().inspect(pids)
        by_psutil = ProcessInspector(process_factory=lambda pid: psutil.Process(pid)).inspect(pids)
    finally:
        for child in children:
            child.kill()
            child.wait()
    for pid in pids:
        assert (direct[pid].user, direct[pid].command, direct[pid].create_time_s) == (
            by_psutil[pid].user,
            by_psutil[pid].command,
            by_psutil[pid].create_time_s,
        )
        assert direct[pid].is_current_user is True
    command = direct[pids[0]].command
    assert command is not None and command.endswith("time.sleep(30) two words ?[2J \\xff")
    assert len(boot_reads) == 1


def test_a_new_pid_that_exits_while_being_read_has_exited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process that ends between its stat read and the rest of its discovery is gone
    (EXITED where gpumon sees every PID), not a live row of an unknown user and command."""
    import subprocess
    import sys

    if not procfs.proc_is_readable():
        pytest.skip("no /proc")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], stdin=subprocess.DEVNULL
    )
    real_read_uid = host.read_real_uid

    def exit_first(pid: int) -> int | None:
        child.kill()
        child.wait()  # reaped: its /proc entry is gone
        return real_read_uid(pid)

    monkeypatch.setattr(host, "read_real_uid", exit_first)
    try:
        info = ProcessInspector(sees_every_pid=True).inspect([child.pid])[child.pid]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert info == host.EXITED


def test_a_blank_command_line_from_proc_is_no_command() -> None:
    """argv [""] (a NUL alone in /proc/PID/cmdline) reads as no command, so the row shows
    the process's name, never an empty command."""
    import subprocess
    import sys

    if not procfs.proc_is_readable():
        pytest.skip("no /proc")
    # Python with argv [""] reads its program from stdin: alive until stdin closes.
    child = subprocess.Popen([""], executable=sys.executable, stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).cmdline() != [""]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        text = procfs.read_command_line(child.pid)
        info = ProcessInspector().inspect([child.pid])[child.pid]
        name = psutil.Process(child.pid).name()
    finally:
        child.kill()
        child.wait()
    assert text is None
    assert info.command == name and name


def test_a_process_listed_again_after_a_clock_step_keeps_its_create_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NVML leaves a process out of one sample and lists it again after the wall clock
    stepped (psutil's boot time moves with it): it is the same process, with the same create
    time (its identity in the store and on the detail screen), not another one; the
    inspector remembers the newest FORGOTTEN_MAX identities."""
    if not procfs.proc_is_readable():
        pytest.skip("no /proc")
    pid = os.getpid()
    parent = os.getppid()
    inspector = ProcessInspector()
    first = inspector.inspect([pid, parent])
    inspector.inspect([])  # left out of a sample: forgotten, its identity remembered
    real_boot_time = psutil.boot_time
    monkeypatch.setattr(psutil, "boot_time", lambda: real_boot_time() + 1.0)  # a clock step
    again = inspector.inspect([pid])
    assert again[pid].create_time_s == first[pid].create_time_s
    fresh = ProcessInspector().inspect([pid])[pid]  # a new run knows only the clock's
    assert fresh.create_time_s == pytest.approx((first[pid].create_time_s or 0) + 1.0)
    monkeypatch.setattr(host, "FORGOTTEN_MAX", 1)
    inspector.inspect([])  # the parent was forgotten first: only pid's identity is kept
    both = inspector.inspect([pid, parent])
    assert both[pid].create_time_s == first[pid].create_time_s
    assert both[parent].create_time_s == pytest.approx((first[parent].create_time_s or 0) + 1.0)


# --- a PID NVML lists that /proc lacks: exited, or outside this namespace -------------------


def test_a_missing_pid_has_exited_where_gpumon_sees_every_pid() -> None:
    table = FakeProcessTable()
    factory = table  # type: ignore[assignment]
    seeing = ProcessInspector(process_factory=factory, current_uid=MY_UID, sees_every_pid=True)
    blind = ProcessInspector(process_factory=factory, current_uid=MY_UID, sees_every_pid=False)
    assert seeing.inspect({4242})[4242] == host.EXITED
    assert blind.inspect({4242})[4242] == NOT_VISIBLE
    assert host.EXITED.exited and not host.EXITED.visible


@pytest.mark.real_pid_namespace
def test_a_reaped_child_reads_exited_in_the_host_namespace() -> None:
    """The real thing: psutil and /proc, a PID that was a process a moment ago."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    info = ProcessInspector().inspect({child.pid})[child.pid]
    in_host_namespace = os.readlink("/proc/self/ns/pid") == "pid:[4026531836]"
    if not in_host_namespace:
        assert not host.sees_every_host_pid()
    assert info.exited is host.sees_every_host_pid()
    assert not info.visible


def test_outside_the_host_pid_namespace_a_colliding_pid_is_not_taken_for_nvmls() -> None:
    """In a container NVML lists the host's PIDs: a process here with the same number (a
    `sleep`, no NVIDIA device open) is not shown as the GPU's process, nor signalled."""
    import signal as signals
    import subprocess

    from gpumon.sources.host.signals import refusal

    child = subprocess.Popen(["sleep", "60"])
    try:
        foreign = ProcessInspector(sees_every_pid=False, foreign_namespace=True)
        info = foreign.inspect({child.pid})[child.pid]
        assert info == NOT_VISIBLE and not info.visible
        gpu = make_gpu(0)
        process = make_process(gpu, child.pid, visible=info.visible, create_time_s=1.0)
        assert f"PID {child.pid} is not visible in this PID namespace" in (
            refusal(process, readonly=False) or ""
        )
        # In the host's namespace the same PID is that process.
        assert ProcessInspector(foreign_namespace=False).inspect({child.pid})[child.pid].visible
        assert child.poll() is None
    finally:
        child.send_signal(signals.SIGKILL)
        child.wait()
