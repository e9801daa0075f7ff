"""The signal guard (gpumon.sources.host.signals) against REAL child processes of this test.

Nothing here mocks ``os.kill``: a signal that is sent really ends a child, and one that is
refused leaves it running. Another user's process needs two uids, so those tests run only as
root (as on CI): the target runs as ``nobody`` and the guard runs in a forked child that
drops to yet another uid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from gpumon.data.model import GpuProcess, ProcessKind
from gpumon.sources.host.signals import SignalResult, refusal, send_signal

GIB = 1024**3
#: ``nobody``: owns the other user's process in the root-only tests.
OTHER_UID = 65534
#: Neither root nor ``nobody``: the user the guard runs as in those tests.
THIRD_UID = 65533

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a process of another uid can only be started as root"
)

# Python, not `sleep`: a test run in the background of a shell inherits SIGINT ignored, and
# SIGINT must end the child. The marker lets `pgrep -f gpumon-signal-test` find leftovers.
_OWN_CHILD = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)  # gpumon-signal-test\n"
)


class Children:
    """Child processes of one test: each is killed if still running and always reaped."""

    def __init__(self) -> None:
        self._started: list[subprocess.Popen[bytes]] = []

    def own(self) -> subprocess.Popen[bytes]:
        """A child of the current user, ready to take SIGINT, SIGTERM or SIGKILL."""
        child = subprocess.Popen([sys.executable, "-c", _OWN_CHILD], stdout=subprocess.PIPE)
        self._started.append(child)
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        return child

    def of_user(self, uid: int) -> subprocess.Popen[bytes]:
        """A child running as ``uid`` (root only): `sleep`, since this interpreter may not
        be readable by that uid."""
        child = subprocess.Popen(["sleep", "120"], user=uid, group=uid, extra_groups=[], cwd="/")
        self._started.append(child)
        return child

    def close(self) -> None:
        for child in self._started:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)
            if child.stdout is not None:
                child.stdout.close()
        assert all(child.returncode is not None for child in self._started)


@pytest.fixture
def children() -> Iterator[Children]:
    started = Children()
    yield started
    started.close()


def process_of(child: subprocess.Popen[bytes], **fields: object) -> GpuProcess:
    """The child as the monitor would list it, with its real create time."""
    values: dict[str, object] = dict(
        gpu_index=0,
        gpu_uuid="GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
        pid=child.pid,
        kind=ProcessKind.COMPUTE,
        gpu_memory_bytes=2 * GIB,
        user="alice",
        command="python train.py",
        is_current_user=True,
        create_time_s=psutil.Process(child.pid).create_time(),
    )
    values.update(fields)
    return GpuProcess(**values)  # type: ignore[arg-type]


def assert_alive(child: subprocess.Popen[bytes]) -> None:
    """The child is still running a moment later: no signal ended it."""
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.3)


def ended_by(child: subprocess.Popen[bytes]) -> int:
    """The signal that ended the child (waits for it)."""
    return -child.wait(timeout=10)


@pytest.fixture
def no_signal_may_leave(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """A tripwire, not a mock: any attempt to send a signal fails the test instead of
    reaching a process (for PIDs where a real signal would hit the test runner or more)."""
    attempts: list[tuple[object, ...]] = []

    def tripwire(*args: object) -> None:
        attempts.append(args)
        raise AssertionError(f"a signal was sent: {args}")

    monkeypatch.setattr(os, "kill", tripwire)
    monkeypatch.setattr(signal, "pidfd_send_signal", tripwire, raising=False)
    return attempts


def run_as(uid: int, work: Callable[[], dict[str, object]]) -> dict[str, object]:
    """Run ``work`` in a forked child that has dropped from root to ``uid``; return what it
    returned (JSON through a pipe). The child never returns into pytest."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            payload = work()
            payload["uid"] = os.getuid()
            os.write(write_end, json.dumps(payload).encode())
            status = 0
        except BaseException as error:
            os.write(write_end, json.dumps({"error": repr(error)}).encode())
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        data = reader.read()
    os.waitpid(pid, 0)
    result: dict[str, object] = json.loads(data)
    assert "error" not in result, result
    assert result["uid"] == uid
    return result


def guard_result(process: GpuProcess, current_uid: int | None = None) -> dict[str, object]:
    """What the guard says and does, as JSON-able values (for :func:`run_as`)."""
    before = refusal(process, readonly=False, current_uid=current_uid)
    result = send_signal(process, signal.SIGTERM, readonly=False, current_uid=current_uid)
    return {"refusal": before, "outcome": result.outcome, "message": result.message}


# --- the current user's own processes ---------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_an_own_process_gets_the_signal(children: Children, sig: signal.Signals) -> None:
    child = children.own()
    process = process_of(child)

    assert refusal(process, readonly=False) is None
    result = send_signal(process, sig, readonly=False)

    assert result == SignalResult("sent", f"{sig.name} sent to PID {child.pid}")
    assert ended_by(child) == sig


def test_without_pidfds_the_same_checks_run_before_os_kill(
    children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not Linux, or a kernel before 5.3: os.kill, after the same create-time check."""
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    recycled, own = children.own(), children.own()
    stale = process_of(recycled, create_time_s=psutil.Process(recycled.pid).create_time() - 60)

    assert send_signal(stale, signal.SIGTERM, readonly=False).outcome == "gone"
    assert send_signal(process_of(own), signal.SIGTERM, readonly=False).outcome == "sent"
    assert ended_by(own) == signal.SIGTERM
    assert_alive(recycled)


def test_a_process_that_has_exited_is_gone(children: Children) -> None:
    child = children.own()
    process = process_of(child)
    child.kill()
    child.wait(timeout=10)

    assert refusal(process, readonly=False) == f"PID {child.pid} has already exited: nothing sent"
    result = send_signal(process, signal.SIGTERM, readonly=False)
    assert result == SignalResult("gone", f"PID {child.pid} has already exited: SIGTERM not sent")


def test_a_zombie_has_already_exited_and_is_not_reported_as_signalled(
    children: Children,
) -> None:
    """A child that exited but is not reaped yet: kill() "succeeds" on it and does nothing."""
    child = children.own()
    process = process_of(child)
    child.kill()
    for _ in range(200):  # not waited for: it stays a zombie until the fixture reaps it
        if psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.01)
    assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE
    result = send_signal(process, signal.SIGTERM, readonly=False)
    assert result.outcome == "gone"
    assert "has already exited" in result.message and "not sent" in result.message
    assert "not reaped" in result.message


@pytest.mark.parametrize("shift_s", [-3600.0, -0.02, 0.02, 5.0])
def test_a_reused_pid_is_never_signalled(children: Children, shift_s: float) -> None:
    """The table showed another process under this PID (its create time differs): the
    process that has the PID now is left alone, even one tick apart."""
    child = children.own()
    real = psutil.Process(child.pid).create_time()
    seen = process_of(child, create_time_s=real + shift_s)

    expected = f"PID {child.pid} now belongs to another process"
    assert refusal(seen, readonly=False) == f"{expected}: nothing sent"
    assert send_signal(seen, signal.SIGKILL, readonly=False) == SignalResult(
        "gone", f"{expected}: SIGKILL not sent"
    )
    assert_alive(child)


def test_readonly_refuses_everything(children: Children) -> None:
    child = children.own()
    process = process_of(child)

    assert refusal(process, readonly=True) == "Read-only mode (--readonly): nothing sent"
    result = send_signal(process, signal.SIGKILL, readonly=True)
    assert result == SignalResult("refused", "Read-only mode (--readonly): SIGKILL not sent")
    assert_alive(child)


def test_a_process_not_visible_here_is_refused(children: Children) -> None:
    """NVML lists a PID of another PID namespace: the same number here is someone else."""
    child = children.own()
    process = process_of(child, visible=False)

    assert "not visible in this PID namespace" in (refusal(process, readonly=False) or "")
    assert send_signal(process, signal.SIGKILL, readonly=False).outcome == "refused"
    assert_alive(child)


def test_an_unknown_create_time_is_refused(children: Children) -> None:
    """Without a create time a recycled PID cannot be told apart (and demo processes have
    none: their PIDs are made up)."""
    child = children.own()
    process = process_of(child, create_time_s=None)

    assert "start time of PID" in (refusal(process, readonly=False) or "")
    assert send_signal(process, signal.SIGKILL, readonly=False).outcome == "refused"
    assert_alive(child)


@pytest.mark.parametrize("pid", [0, -1, os.getpid()])
def test_never_a_process_group_every_process_or_gpumon_itself(
    pid: int, no_signal_may_leave: list[tuple[object, ...]]
) -> None:
    """kill(0) signals the process group, kill(-1) every process the user may signal."""
    process = GpuProcess(
        0, None, pid, ProcessKind.COMPUTE, GIB, is_current_user=True, create_time_s=1.0
    )
    assert refusal(process, readonly=False) is not None
    for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
        assert send_signal(process, sig, readonly=False).outcome == "refused"
    assert no_signal_may_leave == []


def test_the_owner_is_read_from_the_live_process(children: Children) -> None:
    """``is_current_user`` says mine, but the live process belongs to another uid than the
    one signals are sent for: refused, even where the kernel would allow it (as root)."""
    child = children.own()
    process = process_of(child, is_current_user=True)
    someone_else = os.getuid() + 1

    reason = refusal(process, readonly=False, current_uid=someone_else)
    assert reason is not None
    assert f"PID {child.pid} belongs to" in reason
    assert f"uid {os.getuid()}), not to you: nothing sent" in reason
    result = send_signal(process, signal.SIGKILL, readonly=False, current_uid=someone_else)
    assert result.outcome == "refused"
    assert_alive(child)


# --- another user's processes -------------------------------------------------------------


@needs_root
def test_another_users_process_is_refused_to_a_non_root_user(children: Children) -> None:
    """The guard runs as a third uid (not root, not the owner): refused by gpumon itself,
    before the kernel would say no, and the target lives on."""
    target = children.of_user(OTHER_UID)
    process = process_of(target, user="nobody", is_current_user=True)

    result = run_as(THIRD_UID, lambda: guard_result(process))

    owner = f"PID {target.pid} belongs to nobody (uid {OTHER_UID}), not to you"
    assert result["refusal"] == f"{owner}: nothing sent"
    assert result["outcome"] == "refused"
    assert result["message"] == f"{owner}: SIGTERM not sent"
    assert_alive(target)


@needs_root
def test_the_kernel_refusing_is_reported_not_raised(children: Children) -> None:
    """Were the guard to let it through (here: told it runs for the owner's uid), the
    kernel's EPERM comes back as "refused", never as an exception."""
    target = children.of_user(OTHER_UID)
    process = process_of(target)

    result = run_as(THIRD_UID, lambda: guard_result(process, current_uid=OTHER_UID))

    assert result["outcome"] == "refused"
    assert result["message"] == (
        f"Not permitted to signal PID {target.pid} (Operation not permitted): SIGTERM not sent"
    )
    assert_alive(target)


@needs_root
def test_a_non_root_user_may_signal_an_own_process(children: Children) -> None:
    target = children.of_user(OTHER_UID)
    process = process_of(target)

    result = run_as(OTHER_UID, lambda: guard_result(process))

    assert result == {
        "refusal": None,
        "outcome": "sent",
        "message": f"SIGTERM sent to PID {target.pid}",
        "uid": OTHER_UID,
    }
    assert ended_by(target) == signal.SIGTERM


@needs_root
def test_root_may_signal_another_users_process(children: Children) -> None:
    target = children.of_user(OTHER_UID)
    process = process_of(target, user="nobody", is_current_user=False)

    assert refusal(process, readonly=False) is None
    assert send_signal(process, signal.SIGTERM, readonly=False).outcome == "sent"
    assert ended_by(target) == signal.SIGTERM


@pytest.mark.skipif(os.geteuid() == 0, reason="as root every process may be signalled")
def test_as_a_user_init_is_someone_elses() -> None:
    """Not root: a process of another uid (here init, PID 1) is refused before asking. Only
    refusal() runs: nothing is ever sent to PID 1."""
    init = psutil.Process(1)
    if init.uids().real == os.getuid():
        pytest.skip("PID 1 belongs to this user here (a rootless container)")
    process = GpuProcess(0, None, 1, ProcessKind.COMPUTE, GIB, create_time_s=init.create_time())
    reason = refusal(process, readonly=False)
    assert reason is not None and "PID 1 belongs to" in reason
