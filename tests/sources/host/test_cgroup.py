"""Slurm job and container ids from ``/proc/PID/cgroup``: every layout a GPU server puts a
process in, on cgroup v1 and v2, and text built to pose as an id."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import timeit
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpumon.sources.host import cgroup
from gpumon.sources.host.cgroup import NO_IDS, CgroupIds, parse_cgroup, read_cgroup_ids
from gpumon.sources.host.inspector import ProcessInspector

FIXTURES = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "cgroup"

# What `squeue` and `docker ps` (`crictl ps`, `podman ps`) would show for each fixture.
EXPECTED: dict[str, CgroupIds] = {
    "slurm-v1.cgroup": CgroupIds("4812345", None),
    "slurm-v1-multiple-slurmd-batch.cgroup": CgroupIds("4812400", None),
    "slurm-v2.cgroup": CgroupIds("4812345", None),
    "slurm-v2-batch.cgroup": CgroupIds("4812346", None),
    "slurm-v2-extern.cgroup": CgroupIds("4812347", None),
    "slurm-v2-interactive.cgroup": CgroupIds("4812348", None),
    "slurm-v2-multiple-slurmd.cgroup": CgroupIds("4812349", None),
    "slurmstepd-itself-v2.cgroup": NO_IDS,
    "docker-v1.cgroup": CgroupIds(None, "bd014e0c6389"),
    "docker-v1-systemd-driver.cgroup": CgroupIds(None, "23e6c4a697bd"),
    "docker-v2.cgroup": CgroupIds(None, "23e6c4a697bd"),
    # Rootless engines name their containers' cgroups inside the user's own subtree, where
    # any name can be forged: not read.
    "docker-v2-rootless.cgroup": NO_IDS,
    "docker-v2-seen-from-another-cgroup-namespace.cgroup": CgroupIds(None, "def09f62a24b"),
    "kubernetes-containerd-v1.cgroup": CgroupIds(None, "ae2f2b7e1989"),
    "kubernetes-containerd-v2.cgroup": CgroupIds(None, "ae2f2b7e1989"),
    "kubernetes-crio-v2.cgroup": CgroupIds(None, "2d1d5cdabba0"),
    "kubernetes-crio-conmon-v2.cgroup": NO_IDS,
    "podman-rootful-v2.cgroup": CgroupIds(None, "b8f3426cef63"),
    "podman-rootless-v2.cgroup": NO_IDS,
    "podman-cgroupfs-v1.cgroup": CgroupIds(None, "b8f3426cef63"),
    "podman-conmon-v2.cgroup": NO_IDS,
    "host-user-session-v1.cgroup": NO_IDS,
    "host-user-session-v2.cgroup": NO_IDS,
    "host-user-service-v2.cgroup": NO_IDS,
    "host-system-service-v1.cgroup": NO_IDS,
    "host-system-service-v2.cgroup": NO_IDS,
    "host-root-v2.cgroup": NO_IDS,
    "slurm-and-docker-v1.cgroup": CgroupIds("4812350", "d602cb1cae1d"),
    # The job is Slurm's; the container sits in the step's user subtree: the user's to name.
    "slurm-and-podman-v2.cgroup": CgroupIds("4812351", None),
    # Cgroups a user made in their delegated subtrees, named like Slurm's and the engines'.
    "forged-slurm-in-user-manager-v2.cgroup": NO_IDS,
    "forged-slurm-in-user-manager-v1.cgroup": NO_IDS,
    "forged-docker-in-user-manager-v2.cgroup": NO_IDS,
    "forged-inside-a-slurm-job-v2.cgroup": CgroupIds("4812352", None),
    "forged-kubepods-below-root-v2.cgroup": NO_IDS,
    "hostile-escapes.cgroup": NO_IDS,
    "hostile-job-without-digits.cgroup": NO_IDS,
    "hostile-short-hex.cgroup": NO_IDS,
    "hostile-not-utf8.cgroup": NO_IDS,
    "garbage.cgroup": NO_IDS,
    "empty.cgroup": NO_IDS,
    # Copied from real machines (sandboxes whose cgroups are named with 32 hex digits).
    "recorded-sandbox-v1.cgroup": NO_IDS,
    "recorded-sandbox-v2.cgroup": NO_IDS,
}


def fixture_text(name: str) -> str:
    # As read_cgroup_ids decodes the file.
    return (FIXTURES / name).read_bytes().decode("utf-8", "replace")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_recorded_cgroup_file_gives_the_ids_a_user_expects(name: str) -> None:
    assert parse_cgroup(fixture_text(name)) == EXPECTED[name]


def test_every_fixture_has_an_expectation() -> None:
    on_disk = {path.name for path in FIXTURES.glob("*.cgroup")}
    assert on_disk == set(EXPECTED)


def test_v1_fixtures_are_whole_files_as_the_kernel_writes_them() -> None:
    """A v1 fixture has every controller line, ``name=systemd`` and the unified line, so the
    parser is tried against the lines that name no job or container too."""
    for name in EXPECTED:
        if "-v1" not in name:
            continue
        lines = fixture_text(name).splitlines()
        controllers = {line.split(":")[1] for line in lines}
        assert {"cpuset", "memory", "devices", "freezer", "pids", "name=systemd", ""} <= (
            controllers
        ), name
        if not name.startswith("recorded-"):  # a real file has what its kernel mounts
            assert len(lines) == 14, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ids_are_only_digits_or_hex_whatever_the_path_holds(name: str) -> None:
    ids = parse_cgroup(fixture_text(name))
    assert ids.job_id is None or re.fullmatch("[0-9]{1,20}", ids.job_id)
    assert ids.container_id is None or re.fullmatch("[0-9a-f]{12}", ids.container_id)


def test_a_slurm_job_and_a_container_each_win_on_the_first_line_that_names_one() -> None:
    """On v1 every controller names the same cgroup; a hybrid host's ``name=systemd`` line
    may name the container while the controllers are elsewhere: both count."""
    hexa = "ab" * 32
    text = (
        "4:memory:/slurm/uid_5/job_77/step_0/task_0\n"
        f"1:name=systemd:/system.slice/docker-{hexa}.scope\n"
        "0::/slurm/uid_5/job_99/step_0\n"
    )
    assert parse_cgroup(text) == CgroupIds("77", "abababababab")


def test_a_job_directory_outside_slurm_is_not_a_job() -> None:
    assert parse_cgroup("0::/user.slice/job_12345/step_0\n") == NO_IDS
    assert parse_cgroup("0::/slurm/job_12345/step_0\n") == NO_IDS  # v1 has uid_N between
    assert parse_cgroup("0::/slurm/uid_1000/job_12345\n") == CgroupIds("12345", None)


# -- reading /proc ---------------------------------------------------------------------------


def test_this_process_is_read_without_error() -> None:
    ids = read_cgroup_ids(os.getpid())
    assert isinstance(ids, CgroupIds)
    # Whatever this machine runs the tests in, the same text gives the same ids.
    assert ids == parse_cgroup(Path(f"/proc/{os.getpid()}/cgroup").read_text())


def test_a_missing_pid_is_in_no_job_and_no_container() -> None:
    missing = max(psutil.pids()) + 100_000
    assert read_cgroup_ids(missing) == NO_IDS
    assert read_cgroup_ids(-1) == NO_IDS


def test_a_file_that_cannot_be_read_gives_no_ids(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").mkdir()  # a directory: open works, read fails (EISDIR)
    assert read_cgroup_ids(7, proc=str(tmp_path)) == NO_IDS


def test_bytes_that_are_not_utf8_are_read_safely(tmp_path: Path) -> None:
    (tmp_path / "8").mkdir()
    for name in ("hostile-not-utf8.cgroup", "slurm-and-docker-v1.cgroup"):
        (tmp_path / "8" / "cgroup").write_bytes((FIXTURES / name).read_bytes())
        assert read_cgroup_ids(8, proc=str(tmp_path)) == EXPECTED[name]


def test_reading_the_ids_costs_microseconds() -> None:
    """Measured once per process, never per tick: even a slow CI machine is well under a
    millisecond a read (about 10 µs on a laptop)."""
    pid = os.getpid()
    runs = sorted(timeit.repeat(lambda: read_cgroup_ids(pid), number=100, repeat=7))
    assert runs[len(runs) // 2] / 100 < 1e-3


# -- the inspector reads them once per process -------------------------------------------------


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_real_child_gets_the_ids_of_its_cgroup_read_once(
    child: subprocess.Popen[bytes],
) -> None:
    asked: list[int] = []

    def read_from_fixture(pid: int) -> CgroupIds:
        asked.append(pid)
        return parse_cgroup(fixture_text("slurm-and-docker-v1.cgroup"))

    inspector = ProcessInspector(read_cgroup=read_from_fixture)

    infos = [inspector.inspect({child.pid})[child.pid] for _ in range(5)]

    assert all(info.visible for info in infos)
    assert {(info.job_id, info.container_id) for info in infos} == {("4812350", "d602cb1cae1d")}
    assert asked == [child.pid]  # once when first seen, not every tick


def test_by_default_a_real_child_gets_what_its_own_cgroup_file_says(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default reader is the real one, over ``/proc``."""
    monkeypatch.setattr(cgroup, "read_cgroup_ids", lambda pid: CgroupIds("1", "0123456789ab"))
    info = ProcessInspector().inspect({child.pid})[child.pid]
    assert info.visible
    assert (info.job_id, info.container_id) == ("1", "0123456789ab")
