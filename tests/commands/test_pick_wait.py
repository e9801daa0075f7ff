"""`gpumon pick --wait`: looks again every interval until enough GPUs qualify, then prints
them; gives up after its limit (exit 1, one line); Ctrl+C is exit 130 with nothing on
stdout; on a terminal one stderr line says, in place, who holds the GPUs meanwhile."""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.commands.pick_wait import CLEAR_LINE, waiting_text
from gpumon.config.text import duration_seconds
from gpumon.data.model import GpuUnavailable, UnavailableReason
from gpumon.data.ranking import qualify
from tests.support.pick_helpers import gpu, job, sample, serve

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3


def busy_then_free(busy_looks: int) -> list[object]:
    """GPUs 0 and 1: alice's job holds GPU 0 for ``busy_looks`` looks, then ends."""
    gpus = (gpu(0), gpu(1))
    busy = sample(gpus, (job(gpus[0], 100, user="alice"),))
    return [busy] * busy_looks + [sample(gpus)]


def test_a_gpu_that_frees_after_a_few_looks_is_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = serve(monkeypatch, *busy_then_free(2))  # type: ignore[arg-type]
    code = main(["pick", "-n", "2", "--wait", "--interval", "0.25"])
    out, err = capsys.readouterr()
    assert (code, out) == (0, "0,1\n")
    # Not a terminal: nothing while waiting, one line at the end.
    assert err.startswith("gpumon pick: waited ") and err.count("\n") == 1
    (source,) = opened  # NVML opened once for every look, and closed
    assert (source.reads, source.closed) == (3, True)


def test_a_wait_that_runs_out_is_exit_1_with_one_line_and_what_would_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = serve(monkeypatch, *busy_then_free(1000))  # type: ignore[arg-type]
    code = main(["--interval", "0.25", "pick", "-n", "2", "--wait", "0.6"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert re.fullmatch(
        r"gpumon pick: gave up after waiting [0-9.]+s: only 1 of 2 GPUs qualifies \(need 2\): "
        r"GPU 0: 1 process \(alice\)\n"
        r"gpumon pick: would help: --busy-ok \(shares the freest: GPU 1, GPU 0\), "
        r"--min-free-memory 23G \(GPU 0 has 24.0G free\)\n",  # waiting: no --wait
        err,
    )
    assert opened[0].reads >= 2 and opened[0].closed


def test_without_wait_too_few_is_exit_1_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = serve(monkeypatch, *busy_then_free(1))  # type: ignore[arg-type]
    assert main(["pick", "-n", "2"]) == 1
    assert opened[0].reads == 1
    assert capsys.readouterr().out == ""


def test_no_driver_is_exit_1_at_once_even_when_waiting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = GpuUnavailable(UnavailableReason.DRIVER_NOT_LOADED, "The driver is not loaded.", "")
    serve(monkeypatch, sample((), driver=None, unavailable=missing))
    assert main(["pick", "--wait"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "gpumon: no NVIDIA GPU data: The driver is not loaded.\n"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["-n", "3"], "only 2 GPUs here (need 3)"),
        (["--min-free-memory", "200G"], "(need 200G)"),
    ],
)
def test_a_wait_for_what_can_never_qualify_ends_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    """More GPUs than the machine has, more memory than any board: a bare --wait would
    wait for ever (in a batch script's $(...)); it says so at the first look instead."""
    opened = serve(monkeypatch, sample((gpu(0), gpu(1))))
    code = main(["pick", *argv, "--no-claim", "--wait"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert says in err and err.endswith("; waiting would not change that\n")
    assert opened[0].reads == 1


def test_the_waiting_line_says_how_many_and_who_holds_the_rest() -> None:
    gpus = tuple(gpu(index) for index in range(5))
    processes = (
        job(gpus[0], 1, user="alice", elapsed_s=2 * 3600 + 13 * 60),
        job(gpus[0], 2, user="alice", elapsed_s=60),
        job(gpus[3], 3, user="bob", elapsed_s=5 * 60 + 7),
    )
    busy = sample(
        (*gpus[:2], gpu(2, lost=True, uuid=None), gpus[3], gpu(4, memory_used_bytes=3 * GIB)),
        processes,
    )
    available, _ = qualify(busy, n=2, free_below_bytes=1024**3)
    text = waiting_text(busy, available, 2, {})
    assert text == (
        "waiting: 1 of 2 free; GPU 0 alice 2h13m, GPU 2 LOST, GPU 3 bob 5m, GPU 4 3.0G in use"
    )
    claimed = waiting_text(busy, (), 2, {1: "carol"})
    assert claimed.startswith("waiting: 0 of 2 free; GPU 0 alice 2h13m, GPU 1 claimed by carol")


CHILD = """
import sys
from gpumon.cli import main
from gpumon.sources import base
from tests.support.pick_helpers import SampleSource, gpu, job, sample

gpus = tuple(gpu(index) for index in range(6))
busy = sample(gpus, tuple(job(g, 100 + g.index, user=f"user{g.index}") for g in gpus))
base.source_for = lambda settings, **options: SampleSource(busy)
sys.exit(main(["pick", "-n", "2", "--wait", "--interval", "0.25"]))
"""


def read_until(fd: int, seen: bytearray, done: Callable[[bytes], bool]) -> None:
    """Read the pty into ``seen`` until ``done(seen)`` (with a guard against a hang, not a
    timing check)."""
    end = time.monotonic() + 60
    while not done(bytes(seen)):
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        assert ready, f"not on the terminal yet: {bytes(seen)!r}"
        seen += os.read(fd, 4096)


def test_ctrl_c_is_exit_130_with_nothing_on_stdout_and_the_line_cleared() -> None:
    """On a 50-column terminal: the waiting line is rewritten in place, never wraps, never
    scrolls, and is erased when Ctrl+C ends the wait."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 50, 0, 0))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        # A suite started in the background ignores SIGINT, and a child inherits that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(slave)
    seen = bytearray()
    try:
        # The line is shown, then rewritten at the next look.
        read_until(master, seen, lambda text: text.count(b"waiting: 0 of 2 free; GPU 0") >= 2)
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
        while True:  # the rest of the terminal's output, until the child's end closes it
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: no writer left
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if child.poll() is None:
            child.kill()
    assert (child.returncode, out) == (130, b"")
    text = seen.decode()
    assert "\n" not in text  # one line, rewritten: no scroll
    assert text.startswith(CLEAR_LINE) and text.endswith(CLEAR_LINE)  # erased at the end
    shown = [part for part in text.split(CLEAR_LINE) if part]
    assert shown and all(part.startswith("waiting: 0 of 2 free; GPU 0 user0") for part in shown)
    assert all(len(part) <= 49 for part in shown)  # cut to the width: it never wraps


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("45", 45), ("0.5", 0.5),
     ("1d", 86400)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "abc", "1e3", "-5", "5x", "s", "\u0663m", "400d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        duration_seconds(text)


def test_wait_takes_no_value_before_another_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(monkeypatch, sample((gpu(0), gpu(1))))
    assert main(["pick", "--wait", "-n", "2"]) == 0
    assert capsys.readouterr().out == "0,1\n"


STUCK_LATER = """
import sys, threading
import gpumon.sources.base
from tests.support.pick_helpers import SampleSource, gpu, job, sample

class StuckLater(SampleSource):
    def sample(self):
        if self.reads:  # the first look answers (GPU 0 busy); then the driver is stuck
            threading.Event().wait()
        return super().sample()

gpus = (gpu(0),)
busy = sample(gpus, (job(gpus[0], 100, user="alice"),))
gpumon.sources.base.source_for = lambda settings, **options: StuckLater(busy)
from gpumon.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_driver_stuck_while_waiting_ends_the_pick_when_the_wait_does() -> None:
    """`pick --wait 3s`: the driver answers once, then a call never returns; the pick ends
    about when its wait does (not SAMPLE_TIMEOUT_S, 30 s, later), saying the driver did not
    answer."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", STUCK_LATER, "pick", "--wait", "3s", "--interval", "0.25"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert time.monotonic() - started < 20  # 3 s and a start-up on a loaded machine
    assert (result.returncode, result.stdout) == (1, "")
    said = "gpumon: no NVIDIA GPU data: NVML did not answer within [0-9.]+ s "
    assert re.match(said, result.stderr), result.stderr
    assert "Traceback" not in result.stderr
