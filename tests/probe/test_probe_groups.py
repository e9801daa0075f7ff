"""The probe child's process group: killed while its leader is unreaped, never once the
number may name someone else's group (the atexit hook and the quit watchdog kill by number)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpumon.probe import child_process
from gpumon.probe.protocol import StepEvent
from gpumon.probe.runner import run_probe
from tests.probe.test_probe_runner import REQUEST, Recorder
from tests.support.fake_children import gone, script

ROOT = Path(__file__).resolve().parents[2]
HAS_PIDFDS = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
PIDFDS_ONLY = pytest.mark.skipif(not HAS_PIDFDS, reason="pidfds are Linux's (>= 5.3)")


def open_pidfds() -> int:
    """How many pidfds this process holds."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[pidfd]"
        except OSError:
            continue
    return count


def reaped(pid: int, within_s: float = 10.0) -> bool:
    """True once no process, not even a zombie, has ``pid``."""
    deadline = time.monotonic() + within_s
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def killpg_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The process groups sent a signal through ``os.killpg`` (sent for real too)."""
    calls: list[int] = []
    real_killpg = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        calls.append(pgid)
        real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    return calls


async def test_a_child_reaped_after_the_reap_timeout_leaves_nothing_to_kill_at_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child stuck in the driver for longer than REAP_TIMEOUT_S is reaped later, by the
    child watcher: from then on its number is free, and the exit hook forgets it."""
    monkeypatch.setattr(child_process, "REAP_TIMEOUT_S", 0.0)
    pidfds_before = open_pidfds()
    outcome = await run_probe(REQUEST, command=script("hanging"), timeout_s=1.0)
    assert outcome.timed_out and outcome.pid is not None
    deadline = time.monotonic() + 10
    while outcome.pid in child_process.LIVE_GROUPS and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert outcome.pid not in child_process.LIVE_GROUPS
    assert open_pidfds() == pidfds_before


@PIDFDS_ONLY
def test_the_exit_hook_sends_nothing_to_a_group_whose_leader_was_reaped(
    killpg_calls: list[int],
) -> None:
    """The entry outlived the event loop (``gpumon probe`` returned before the child died):
    its number may already name another process group, so nothing goes to it."""
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)  # fmt: skip
    pidfds_before = open_pidfds()
    child_process.track_group(leader.pid)
    try:
        leader.kill()
        leader.wait()
        child_process.kill_live_children()
        assert killpg_calls == []
        assert leader.pid not in child_process.LIVE_GROUPS
        assert open_pidfds() == pidfds_before
    finally:
        child_process.forget_group(leader.pid)
        leader.kill()


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfds", "no-pidfds"])
async def test_the_exit_hook_kills_a_running_probe_and_its_group(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also where pidfds are missing (not Linux, a kernel before 5.3): the group goes by its
    number then, as it always did."""
    if pidfds and not HAS_PIDFDS:
        pytest.skip("pidfds are Linux's (>= 5.3)")
    if not pidfds:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    recorder = Recorder()
    task = asyncio.ensure_future(run_probe(REQUEST, command=script("hanging"), on_event=recorder))
    try:
        await asyncio.wait_for(recorder.hello.wait(), 10)
        while not (started := [e for e in recorder.events if isinstance(e, StepEvent)]):
            await asyncio.sleep(0.05)
        grandchild = int(started[0].value.split()[1])
        child_process.kill_live_children()
        assert gone(recorder.pid) and gone(grandchild)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert recorder.pid not in child_process.LIVE_GROUPS


REUSE = """
import os, subprocess, sys, time
import gpumon.probe.child_process as children

leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
children.track_group(leader.pid)
leader.kill()
leader.wait()  # reaped by someone else than gpumon's own end_child: a late reap
# The number comes round again (on a busy server: pid_max wrapped around).
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(leader.pid - 1))
other = subprocess.Popen(["sleep", "60"], user=65534, group=65534, start_new_session=True)
assert other.pid == leader.pid == os.getpgid(other.pid), (other.pid, leader.pid)
children.kill_live_children()
time.sleep(0.2)
print("killed" if other.poll() is not None else "alive")
other.kill()
"""


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="reusing a PID on purpose takes root (a PID namespace of its own)",
)
def test_root_never_kills_the_group_that_took_over_a_reaped_childs_number() -> None:
    """The real thing: root's gpumon, another user's process group with the old number."""
    result = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
         textwrap.dedent(REUSE)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if result.returncode != 0 and "unshare:" in result.stderr:
        pytest.skip(f"no PID namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "alive"
