"""The probe child's plumbing: the protocol stream, the watch on the parent, step timing and
order, and the driver's CUDA version.

Loaded by the probe child inside the user's interpreter (see :mod:`gpumon.probe.child`): keep
it to Python 3.8 syntax and the standard library.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpumon.probe import steps as S
from gpumon.probe.protocol import StepEvent, encode, is_continue
from gpumon.probe.steps import Outcome

if TYPE_CHECKING:
    from gpumon.probe.child import Probe

# Exit status when stdin reaches end of file: the parent died, so nobody reads our results.
EXIT_PARENT_GONE = 3
EXIT_BAD_REQUEST = 2


class Channel:
    """Protocol lines go to a private copy of stdout; stdout itself is pointed at stderr, so a
    library's print cannot corrupt the protocol.
    """

    def __init__(self) -> None:
        sys.stdout.flush()
        protocol_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._out = os.fdopen(protocol_fd, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def send(self, event: Any) -> None:
        """Write one protocol line and flush it."""
        with self._lock:
            self._out.write(encode(event) + "\n")
            self._out.flush()


class ParentWatch:
    """Reads stdin on a daemon thread: ``continue`` wakes :meth:`wait_continue`; end of file
    means the parent is gone, and the child exits at once (no probe outlives gpumon)."""

    def __init__(self, exit_on_eof: bool = True) -> None:
        self._continue = threading.Event()
        self._exit_on_eof = exit_on_eof

    def start(self) -> None:
        threading.Thread(target=self._read, name="parent-watch", daemon=True).start()

    def _read(self) -> None:
        # os.read on the raw descriptor: a daemon thread blocked inside sys.stdin's buffered
        # reader makes interpreter shutdown abort ("could not acquire lock for <stdin>").
        pending = b""
        while True:
            try:
                chunk = os.read(0, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if any(is_continue(line) for line in lines):
                self._continue.set()
        if self._exit_on_eof:
            os._exit(EXIT_PARENT_GONE)

    def wait_continue(self, timeout_s: float) -> bool:
        """Wait for the parent's ``continue``; False when ``timeout_s`` passed without it."""
        return self._continue.wait(timeout_s)


class StepRunner:
    """Runs step functions, timing them and turning exceptions into failures."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self.results: dict[int, str] = {}

    def run(self, step: S.Step, function: Callable[[], Outcome]) -> bool:
        """Run one step; True when it passed."""
        self._channel.send(StepEvent(step.id, S.RUNNING))
        started = time.perf_counter()
        try:
            outcome = function()
        except Exception as error:
            outcome = Outcome(S.FAIL, error_text(error), traceback.format_exc(limit=4))
        duration_ms = (time.perf_counter() - started) * 1000
        self._send(step, outcome, duration_ms)
        return outcome.status == S.PASS

    def skip(self, step: S.Step, reason: str) -> None:
        """Report a step as skipped, without running it."""
        self._send(step, Outcome(S.SKIP, reason), 0.0)

    def _send(self, step: S.Step, outcome: Outcome, duration_ms: float) -> None:
        self.results[step.id] = outcome.status
        event = StepEvent(step.id, outcome.status, outcome.value, duration_ms, outcome.detail)
        self._channel.send(event)


def error_text(error: BaseException) -> str:
    first_line = (str(error).strip().splitlines() or [""])[0]
    if len(first_line) > 160:
        first_line = first_line[:157] + "..."
    if first_line.lower().startswith("cuda out of memory"):
        return first_line  # torch's OutOfMemoryError says it best
    name = type(error).__name__
    return f"{name}: {first_line}" if first_line else name


def mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB" if value >= 2**20 else f"{value:.0f} bytes"


def driver_cuda_version() -> tuple[str | None, str]:
    """The CUDA version the installed driver supports, read from libcuda (not NVML)."""
    import ctypes

    names = ["nvcuda.dll"] if os.name == "nt" else ["libcuda.so.1", "libcuda.so"]
    for name in names:
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        code = library.cuDriverGetVersion(ctypes.byref(version))
        if code != 0:
            return None, f"cuDriverGetVersion failed with CUDA error {code}"
        return f"{version.value // 1000}.{(version.value % 1000) // 10}", ""
    return None, f"no NVIDIA driver ({names[0]} not found)"


def major_version(version: str) -> int:
    """``12`` of ``"12.4"``; 0 where there is no number."""
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def run_steps(probe: Probe, runner: StepRunner, watch: ParentWatch) -> None:
    """Run the nine steps in order; a step whose prerequisite failed is skipped."""
    order = list(S.STEPS)

    def skip_rest(after: S.Step, reason: str, keep: tuple[S.Step, ...] = ()) -> None:
        for step in order[order.index(after) + 1 :]:
            if step not in keep:
                runner.skip(step, reason)

    if not runner.run(S.PYTHON, probe.step_python):
        return skip_rest(S.PYTHON, "skipped: torch could not be imported")
    runner.run(S.BUILD, probe.step_build)
    if not runner.run(S.CUDA, probe.step_cuda):
        return skip_rest(S.CUDA, "skipped: CUDA is not available")
    if not runner.run(S.MAPPING, probe.step_mapping):
        return skip_rest(S.MAPPING, "skipped: no cuda:N to probe")
    if not runner.run(S.TENSORS, probe.step_tensors):
        skip_rest(S.TENSORS, "skipped: step 5 did not pass", keep=(S.CLEANUP,))
        runner.run(S.CLEANUP, probe.step_cleanup)
        return None
    probe.hold(watch)
    runner.run(S.CROSS_DEVICE, probe.step_cross_device)
    runner.run(S.BANDWIDTH, probe.step_bandwidth)
    runner.run(S.CLEANUP, probe.step_cleanup)
    return None


def install_advice(python: str) -> str:
    """How to get torch for ``python``: pip where it may install, else (PEP 668) a venv."""
    import sysconfig

    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    marker = os.path.join(sysconfig.get_path("stdlib") or "", "EXTERNALLY-MANAGED")
    if in_venv or not os.path.exists(marker):
        return f"Install it with:\n{python} -m pip install torch"
    return (
        "This Python is managed by the system (pip refuses to install into it). Make a "
        "virtual environment, install torch there, and probe with its Python (key i):\n"
        f"{python} -m venv ~/.venvs/torch\n"
        "~/.venvs/torch/bin/pip install torch\n"
        "gpumon --probe-python ~/.venvs/torch/bin/python"
    )
