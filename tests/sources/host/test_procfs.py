"""Reading /proc directly: the owner, the command line as psutil joins it, and a /proc
mounted to hide other users' PIDs."""

from __future__ import annotations

import os

import pytest

from gpumon.sources.host import procfs


def test_a_process_cannot_forge_its_owner_through_its_name() -> None:
    """The owner is parsed from /proc/PID/status, whose first line is the name a process
    sets itself (prctl PR_SET_NAME): a name with a line break and a Uid line of its own
    does not make another user's process ours, or ours another user's."""
    import subprocess
    import sys

    if not procfs.proc_is_readable():
        pytest.skip("no /proc")
    forged = os.getuid() + 4242
    code = (
        "import ctypes, time\n"
        f"ctypes.CDLL(None).prctl(15, b'x\\nUid:\\t{forged}\\t{forged}', 0, 0, 0)\n"
        "print('named', flush=True)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"named\n"
        uid = procfs.read_real_uid(child.pid)
    finally:
        child.kill()
        child.wait()
    assert uid == os.getuid()


@pytest.mark.parametrize(
    ("cmdline", "command"),
    [
        (b"python\0train.py\0--lr\0\0", "python train.py --lr "),  # an empty last argument
        (b"python\0a b\0", "python a b"),
        (b"title set by the process ", "title set by the process"),  # setproctitle: spaces
        (b"title\0padding", "title?padding"),  # no NUL at the end: split at spaces only
        (b"\0", ""),
        (b"a\r\nb\0", "a?b"),  # psutil reads it as text: \r\n and \r are one \n each
        (b"a\rb\r\n", "a?b?"),
        (b"tab\there\x9b\xe2\x80\xae\0", "tab?here\\x9b\\u202e"),  # C1 byte, bidi override
    ],
)
def test_command_line_text_is_psutils_join(cmdline: bytes, command: str) -> None:
    assert procfs.command_line_text(cmdline) == command


@pytest.mark.parametrize(
    ("options", "hides"),
    [
        ("rw", False),
        ("rw,hidepid=0", False),
        ("rw,hidepid=1", False),
        ("rw,hidepid=noaccess", False),
        ("rw,hidepid=2", True),
        ("rw,hidepid=invisible", True),
        ("rw,hidepid=ptraceable", True),
        ("rw,subset=pid", True),
    ],
)
def test_proc_mounted_to_hide_pids_means_a_missing_pid_may_be_alive(
    options: str, hides: bool
) -> None:
    mountinfo = (
        "21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        f"22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc {options}\n"
        "23 22 0:22 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw,hidepid=2\n"
    )
    assert procfs.proc_hides_pids(mountinfo) is hides
