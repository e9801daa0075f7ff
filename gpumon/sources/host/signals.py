"""Signals to a GPU process, sent only where it is safe: the dashboard's T, K and I.

Only the current user's own processes (root: any), never in read-only mode, and never a PID
that now names another process: a process is known by its PID and create time, and on Linux
the check and the signal go through a pidfd (:func:`send_signal`). No Textual here.
"""

from __future__ import annotations

import os
import pwd
import signal
from dataclasses import dataclass
from typing import Literal

import psutil

from gpumon.data.format import error_text, safe_text
from gpumon.data.model import GpuProcess
from gpumon.sources.host.pidfd import open_pidfd

#: psutil's create time is the kernel's start time in clock ticks (1/100 s) plus the boot
#: time: the same process always gives the same float. Half a tick absorbs rounding and still
#: tells apart two processes started one tick apart.
CREATE_TIME_TOLERANCE_S = 0.005

Outcome = Literal["sent", "gone", "refused"]


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What became of a signal: ``outcome`` (``"sent"``, ``"gone"``: exited or PID reused,
    ``"refused"``) for code, ``message`` (one line naming the signal and PID) for a notification.
    """

    outcome: Outcome
    message: str


class _Stop(Exception):
    """A check failed: nothing is sent. ``reason`` is said before "nothing sent"."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


def refusal(process: GpuProcess, *, readonly: bool, current_uid: int | None = None) -> str | None:
    """Why no signal may be sent to ``process``, before even asking the user; else ``None``.

    Refused: read-only mode; a PID not of this namespace or gpumon itself; a process whose
    create time is unknown (a recycled PID could not be told apart), that has exited or whose
    PID names another process now; and one whose live owner is not the current user (root: any).
    ``current_uid`` defaults to ``os.getuid()``. The refusal is one line ending "nothing sent".
    """
    try:
        seen_create_time_s = _check_before_asking(process, readonly=readonly)
        _check_live(process.pid, seen_create_time_s, current_uid=current_uid)
    except _Stop as stop:
        return f"{stop.reason}: nothing sent"
    except (OSError, psutil.Error) as error:
        return f"PID {process.pid} could not be checked ({error_text(error)}): nothing sent"
    return None


def send_signal(
    process: GpuProcess, sig: signal.Signals, *, readonly: bool, current_uid: int | None = None
) -> SignalResult:
    """Send ``sig`` to ``process`` if :func:`refusal` allows it and it is still that process.

    On Linux through a pidfd opened before the create time and owner are checked, so a recycled
    PID is never signalled; elsewhere ``os.kill`` after the same checks. Never raises: every
    failure is a :class:`SignalResult`.
    """
    name = sig.name
    pid = process.pid
    pidfd: int | None = None
    try:
        seen_create_time_s = _check_before_asking(process, readonly=readonly)
        pidfd = open_pidfd(pid)
        _check_live(pid, seen_create_time_s, current_uid=current_uid)
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except _Stop as stop:
        return SignalResult(stop.outcome, f"{stop.reason}: {name} not sent")
    except (ProcessLookupError, psutil.NoSuchProcess):
        return SignalResult("gone", f"PID {pid} has already exited: {name} not sent")
    except (PermissionError, psutil.AccessDenied) as error:
        return SignalResult(
            "refused", f"Not permitted to signal PID {pid} ({error_text(error)}): {name} not sent"
        )
    except (OSError, psutil.Error) as error:
        return SignalResult("refused", f"PID {pid}: {error_text(error)}: {name} not sent")
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return SignalResult("sent", f"{name} sent to PID {pid}")


def _check_before_asking(process: GpuProcess, *, readonly: bool) -> float:
    """Raise :class:`_Stop` when what the monitor saw already rules a signal out; else
    return the create time the monitor saw."""
    pid = process.pid
    if readonly:
        raise _Stop("refused", "Read-only mode (--readonly)")
    if pid <= 0:  # os.kill(0 or -1) would signal a process group or every process
        raise _Stop("refused", f"PID {pid} is not a process")
    if not process.visible:
        raise _Stop("refused", f"PID {pid} is not visible in this PID namespace")
    if pid == os.getpid():
        raise _Stop("refused", f"PID {pid} is gpumon itself")
    if process.create_time_s is None:
        raise _Stop("refused", f"The start time of PID {pid} is unknown (simulated or unreadable)")
    return process.create_time_s


def _check_live(pid: int, seen_create_time_s: float, *, current_uid: int | None) -> None:
    """Raise :class:`_Stop` when the PID is gone, names another process, or is not the
    user's. The uid is read first and the create time last: a create time that still matches
    proves the uid read before it was the same process's."""
    try:
        live = psutil.Process(pid)
        uid = live.uids().real
        zombie = live.status() == psutil.STATUS_ZOMBIE
        # A new object: psutil caches a Process's create time from when it was made.
        create_time_s = psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, ProcessLookupError):
        raise _Stop("gone", f"PID {pid} has already exited") from None
    if abs(create_time_s - seen_create_time_s) > CREATE_TIME_TOLERANCE_S:
        raise _Stop("gone", f"PID {pid} now belongs to another process")
    if zombie:  # a signal to it "succeeds" and does nothing
        raise _Stop("gone", f"PID {pid} has already exited (its parent has not reaped it yet)")
    me = os.getuid() if current_uid is None else current_uid
    if me != 0 and uid != me:
        raise _Stop("refused", f"PID {pid} belongs to {_user_name(uid)}, not to you")


def _user_name(uid: int) -> str:
    try:
        return f"{safe_text(pwd.getpwuid(uid).pw_name)} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
