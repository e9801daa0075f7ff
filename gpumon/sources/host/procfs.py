"""Reading ``/proc`` directly (Linux): one read per process per tick where psutil takes
several, and the checks on what this ``/proc`` can see.

Every function returns ``None`` or False when the file cannot be read; text from other users'
processes is made safe here (:func:`gpumon.data.format.safe_text`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpumon.data.format import safe_text


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What ``/proc/PID/stat`` says of a process: the part that changes every tick."""

    zombie: bool
    cpu_ticks: int  # user + system time, in clock ticks
    start_ticks: int  # start time since boot: with the PID, the identity of a process
    rss_bytes: int


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_proc_stat(pid: int) -> ProcStat | None:
    """One read of ``/proc/PID/stat``; ``None`` when no such process is visible here. (psutil
    reads ``statm`` too, behind several layers: this is most of the per-tick saving.)
    """
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # Field 2, the command name, is in parentheses and may itself hold spaces and ")".
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcStat(
            zombie=fields[0] == b"Z",
            cpu_ticks=int(fields[11]) + int(fields[12]),  # utime, stime (fields 14, 15)
            start_ticks=int(fields[19]),  # starttime (field 22)
            rss_bytes=int(fields[21]) * _PAGE_BYTES,  # rss in pages (field 24)
        )
    except (IndexError, ValueError):
        return None


def read_real_uid(pid: int) -> int | None:
    """The real user id of process ``pid`` (``/proc/PID/status``, as psutil's
    ``uids().real``); ``None`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as file:
            data = file.read(16384)
    except OSError:
        return None
    start = data.find(b"\nUid:")
    try:
        return int(data[start + 5 :].split(None, 1)[0]) if start >= 0 else None
    except (IndexError, ValueError):
        return None


def read_command_line(pid: int) -> str | None:
    """Process ``pid``'s command line as psutil's ``" ".join(cmdline())`` makes it, made safe;
    ``None`` when it cannot be read or holds no command (a zombie, a kernel thread, blanks).
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            data = file.read()
    except OSError:
        return None
    text = command_line_text(data)
    return text if text.strip() else None  # argv [""]: no command, not an empty one


def command_line_text(data: bytes) -> str:
    """:func:`read_command_line`'s text of a ``/proc/PID/cmdline``."""
    # psutil's encoding and error handler (surrogateescape), and its text mode's newlines
    text = os.fsdecode(data).replace("\r\n", "\n").replace("\r", "\n")
    separator = "\0" if text.endswith("\0") else " "
    if text.endswith(separator):
        text = text[:-1]
    return safe_text(text.replace("\0", " ") if separator == "\0" else text)


def proc_is_readable() -> bool:
    """True when this system has a readable ``/proc/PID/stat`` (Linux)."""
    return read_proc_stat(os.getpid()) is not None


def uses_a_gpu_device(pid: int, proc: str = "/proc") -> bool:
    """True when process ``pid`` here has an NVIDIA device file open (``/dev/nvidia*``), as
    every process NVML lists does; False also when its descriptors cannot be read (another
    user's, unless root)."""
    base = f"{proc}/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return False
    for name in names[:4096]:  # a bound on a process with very many files open
        try:
            if os.readlink(f"{base}/{name}").startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    return False


def proc_hides_pids(mountinfo: str, proc: str = "/proc") -> bool:
    """True when ``mountinfo`` (``/proc/self/mountinfo``'s text) mounts ``proc`` with an
    option that hides other users' PIDs (``hidepid=2``, ``invisible``, ``ptraceable``) or
    shows no PIDs at all (``subset=pid``)."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[4] != proc or " - " not in line:
            continue
        super_options = line.partition(" - ")[2].split()
        for option in (super_options[-1] if super_options else "").split(","):
            name, _, value = option.partition("=")
            if name == "subset" or (
                name == "hidepid" and value not in ("0", "1", "off", "noaccess")
            ):
                return True
    return False
