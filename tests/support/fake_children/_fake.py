"""Helpers for the fake probe children: they speak the protocol by hand, so a bug in
``gpumon.probe.protocol`` cannot make a fake child agree with it by accident."""

from __future__ import annotations

import json
import os
import sys
import time

TITLES = {
    1: "Interpreter and torch",
    2: "CUDA build and driver",
    3: "torch.cuda.is_available()",
    4: "cuda:N of the selected GPU",
    5: "Tensors on cuda:N",
    6: "NVML sees the probe",
    7: "Cross-device error",
    8: "Copy bandwidth and matmul",
    9: "Cleanup",
}


def send(**payload: object) -> None:
    sys.stdout.write(json.dumps({"v": 1, **payload}) + "\n")
    sys.stdout.flush()


def hello(pid: int = 0) -> None:
    python = "/opt/envs/train/bin/python"
    send(event="hello", pid=pid or os.getpid(), python=python, python_version="3.11.0", protocol=1)


def step(number: int, status: str, value: str = "", duration_ms: float = 1.0, detail: str = ""):
    send(
        event="step",
        step=number,
        title=TITLES[number],
        status=status,
        value=value,
        duration_ms=duration_ms,
        detail=detail,
    )


def wait_for_continue(timeout_s: float = 10.0) -> bool:
    """Read stdin until the parent's continue line (or end of file, or the timeout)."""
    import select

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sys.stdin], [], [], 0.1)
        if ready:
            line = sys.stdin.readline()
            if not line:
                return False
            if json.loads(line).get("command") == "continue":
                return True
    return False


def sleep_forever() -> None:
    while True:
        time.sleep(3600)
