"""The process detail's host reads: full command, parent chain, CUDA variables of one's own
processes only, and a reused PID never read as the old process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from gpumon.sources.host import details as process_details
from gpumon.sources.host.details import read_process_details


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "1,0", "SECRET_TOKEN": "hunter2"}
    environment.pop("CUDA_DEVICE_ORDER", None)
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--lr", "3e-4", "\x1b[31mred"],
        env=environment,
    )
    time.sleep(0.2)
    yield process
    process.kill()
    process.wait()


def test_own_process_shows_its_command_chain_and_cuda_variables(
    child: subprocess.Popen[bytes],
) -> None:
    details = read_process_details(child.pid)
    assert details.visible and details.own
    assert details.command is not None
    assert "--lr 3e-4" in details.command
    assert "\x1b" not in details.command  # other users' text is made safe, as everywhere
    assert details.ancestors[0].pid == os.getpid()  # the launcher chain starts at its parent
    assert all(ancestor.pid > 1 for ancestor in details.ancestors)
    assert details.cuda_environment == {"CUDA_VISIBLE_DEVICES": "1,0", "CUDA_DEVICE_ORDER": None}
    assert "hunter2" not in repr(details)  # nothing else of the environment is read


def test_another_users_process_has_no_environment_read(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    someone_else = os.getuid() + 12345
    monkeypatch.setattr(process_details.os, "getuid", lambda: someone_else)
    details = read_process_details(child.pid)
    assert details.visible and not details.own
    assert details.cuda_environment is None


def test_gone_and_reused_pids_read_as_not_visible(child: subprocess.Popen[bytes]) -> None:
    details = read_process_details(child.pid)
    assert details.started_at_s is not None
    again = read_process_details(child.pid, expected_start_s=details.started_at_s)
    assert again.visible
    reused = read_process_details(child.pid, expected_start_s=details.started_at_s - 3600)
    assert not reused.visible  # the PID now belongs to a process that started later
    assert not read_process_details(2**22 + 1).visible
