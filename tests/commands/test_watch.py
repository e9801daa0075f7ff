"""`gpumon watch`: waits headless until GPUs are FREE (held idle, below some memory) or a GPU
process ends, one timestamped line per change; exit 0 when done (or --exec's status), 1 on
timeout, 2 on bad input. Unknown (a lost GPU, an unread process list, a driver gone) is never
done; on a terminal the end rings as the dashboard's ``w`` does."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.data.model import GpuUnavailable, Sample, UnavailableReason
from gpumon.sources import base
from tests.support.pick_helpers import GIB, SampleSource, gpu, job, sample, serve

ROOT = Path(__file__).resolve().parents[2]
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
FAST = ["--interval", "0.25"]


def watch(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    """Run ``gpumon watch ARGS``: (exit status, stdout's lines without their stamps, stderr)."""
    code = main(["watch", *FAST, *args])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert all(re.match(STAMP, line) for line in lines), out
    return code, [re.sub(STAMP, "", line) for line in lines], err


def busy_then_free(busy_looks: int) -> list[object]:
    gpus = (gpu(0), gpu(1))
    busy = sample(gpus, (job(gpus[0], 100, user="alice"),))
    return [busy] * busy_looks + [sample(gpus)]


def test_a_gpu_that_frees_is_one_line_per_change_then_exit_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(monkeypatch, *busy_then_free(3))  # type: ignore[arg-type]
    code, lines, _ = watch(capsys, "0")
    assert code == 0
    # Three busy looks, one line: only changes are printed.
    assert lines == ["GPU 0: in use by alice", "GPU 0: FREE", "done: GPU 0 is FREE (GPUMON_GPUS=0)"]


def test_without_gpus_any_gpu_that_frees_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (gpu(0), gpu(1))
    serve(monkeypatch, sample(gpus, (job(gpus[0], 100), job(gpus[1], 101, user="bob"))),
          sample(gpus, (job(gpus[0], 100),)))  # fmt: skip
    code, lines, _ = watch(capsys)
    assert code == 0 and lines[-1] == "done: GPU 1 is FREE (GPUMON_GPUS=1)"


def test_several_gpus_wait_for_every_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (gpu(0), gpu(1))
    serve(monkeypatch, sample(gpus, (job(gpus[0], 100),)), sample(gpus))
    code, lines, _ = watch(capsys, "0", "1")
    assert code == 0 and lines[-1] == "done: GPUs 0,1 are FREE (GPUMON_GPUS=0,1)"
    assert "GPU 1: FREE" in lines  # GPU 1 alone was not enough


@pytest.mark.parametrize(
    ("board", "said"),
    [
        (gpu(0, lost=True, lost_reason="fell off the bus"), "GPU 0: LOST (fell off the bus)"),
        (gpu(0, processes_error="no permission"), "GPU 0: processes unknown (no permission)"),
    ],
)
def test_a_gpu_lost_or_with_unknown_processes_is_never_free(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], board: object, said: str
) -> None:
    serve(monkeypatch, sample((board,)))  # type: ignore[arg-type]
    code, lines, err = watch(capsys, "0", "--timeout", "0.6")
    assert (code, lines) == (1, [said])
    assert err == "gpumon watch: gave up after 0.6s\n"


def test_a_driver_that_stops_answering_is_not_free_and_is_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = GpuUnavailable(UnavailableReason.NOT_ANSWERING, "NVML did not answer", "stuck")
    gpus = (gpu(0),)
    serve(monkeypatch, sample(gpus, (job(gpus[0], 100),)), sample((), unavailable=gone))
    code, lines, _ = watch(capsys, "0", "--timeout", "0.6")
    assert code == 1
    assert lines == ["GPU 0: in use by alice", "GPUs: no data: NVML did not answer"]


def test_below_mem_and_idle(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (gpu(0, memory_used_bytes=6 * GIB), gpu(1, memory_used_bytes=2 * GIB))
    serve(monkeypatch, sample(gpus, (job(gpus[0], 100), job(gpus[1], 101))))
    code, lines, _ = watch(capsys, "--until", "below-mem", "4096", "0", "1", "--timeout", "0.6")
    assert code == 1  # GPU 0 holds 6 GiB
    code, lines, _ = watch(capsys, "1", "--until", "below-mem=4096")
    assert code == 0 and lines[-1] == "done: GPU 1 is below 4096 MiB (GPUMON_GPUS=1)"


def test_idle_is_the_dashboards_idle_rule(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (gpu(0), gpu(1))
    quiet = job(gpus[0], 100, sm_utilization_pct=0)
    busy = job(gpus[1], 101, user="bob", sm_utilization_pct=80)
    serve(monkeypatch, sample(gpus, (quiet, busy)))
    # Quiet for 0.6 s: held idle; the busy GPU never is.
    code, lines, _ = watch(capsys, "--idle-after", "0.01", "--until", "idle", "--timeout", "5")
    assert code == 0
    assert "GPU 0: held idle by alice" in lines and lines[-1].startswith("done: GPU 0 is held")
    code, _, _ = watch(capsys, "1", "--idle-after", "0.01", "--until", "idle", "--timeout", "1")
    assert code == 1


def test_a_process_watched_until_it_ends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(monkeypatch, *busy_then_free(2))  # type: ignore[arg-type]
    code, lines, _ = watch(capsys, "--pid", "100")
    assert code == 0
    assert lines == [
        "GPU 0: PID 100 (python train.py) runs",
        "GPU 0: PID 100 (python train.py) ended",
        "done: PID 100 has ended (GPUMON_GPUS=0)",
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["7"], "no GPU '7' here (GPUs: 0, 1)"),
        (["--until", "bogus"], "--until: not one of free, idle, below-mem: 'bogus'"),
        (["--until", "below-mem"], "--until below-mem needs a number of MiB"),
        (["--pid", "4242"], "no GPU process with PID 4242 is listed here"),
        (["--pid", "100", "1"], "--pid and GPUs: choose one"),
    ],
)
def test_bad_input_is_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    says: str,
) -> None:
    serve(monkeypatch, *busy_then_free(1))  # type: ignore[arg-type]
    code, lines, err = watch(capsys, *args)
    assert (code, lines) == (2, [])
    assert err.startswith(f"gpumon watch: error: {says}")


def test_exec_runs_with_the_gpus_and_gives_its_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    serve(monkeypatch, *busy_then_free(1))  # type: ignore[arg-type]
    told = tmp_path / "gpus"
    code, _, _ = watch(capsys, "0", "1", "--exec", f"echo $GPUMON_GPUS > {told}; exit 3")
    assert (code, told.read_text()) == (3, "0,1\n")


def test_a_timeout_never_runs_exec(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    serve(monkeypatch, *busy_then_free(1000))  # type: ignore[arg-type]
    ran = tmp_path / "ran"
    code, _, _ = watch(capsys, "0", "--timeout", "0.5", "--exec", f"touch {ran}")
    assert code == 1 and not ran.exists()


def test_other_users_text_is_made_safe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = (gpu(0),)
    serve(monkeypatch, sample(gpus, (job(gpus[0], 100, user="ev\x1b]0;il\a"),)), sample(gpus))
    code, lines, _ = watch(capsys, "0")
    assert code == 0 and not any(char in "".join(lines) for char in "\x1b\a")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_end_rings_and_notifies(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(monkeypatch, *busy_then_free(1))  # type: ignore[arg-type]
    assert main(["watch", *FAST, "0"]) == 0
    assert "\a" not in "".join(capsys.readouterr())  # not a terminal: no escapes
    serve(monkeypatch, *busy_then_free(1))  # type: ignore[arg-type]
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("TMUX", "/tmp/tmux-1/default,1,0")
    assert main(["watch", *FAST, "0"]) == 0
    written = terminal.getvalue()
    assert written.startswith("\a") and "\x1bPtmux;\x1b\x1b]9;GPU 0 is FREE" in written


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", "watch", "--demo", *FAST, *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=env,
    )  # fmt: skip


def test_demo_lines_are_labelled_simulated() -> None:
    """The demo's GPU 2 is FREE and GPU 0 busy: any GPU frees at once, GPU 0 times out."""
    done = run_demo("--timeout", "10")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(re.match(STAMP + r"\[simulated\] ", line) for line in lines)
    assert lines[-1].endswith("done: GPU 2 is FREE (GPUMON_GPUS=2)")
    waited = run_demo("0", "--timeout", "1")
    assert waited.returncode == 1
    assert waited.stderr == "gpumon watch: [simulated] gave up after 1.0s\n"


def test_a_process_whose_gpu_list_goes_unknown_has_not_ended(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    board = gpu(0)
    refused = sample((gpu(0, processes_error="no permission"),))
    serve(monkeypatch, sample((board,), (job(board, 100),)), refused)
    code, lines, _ = watch(capsys, "--pid", "100", "--timeout", "0.6")
    assert code == 1
    assert lines[-1] == "GPU 0: PID 100 (python train.py) unknown (processes not read)"


def test_in_a_terminal_the_demo_rings_when_a_gpu_frees() -> None:
    """stdout and stderr a terminal (an SSH session): the bell and OSC 9/777 at the end."""
    import pty

    parent, child = pty.openpty()
    env = {**os.environ, "TMUX": ""}
    process = subprocess.Popen(
        [sys.executable, "-m", "gpumon", "watch", "--demo", *FAST, "--timeout", "10"],
        stdout=child, stderr=child, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
    )  # fmt: skip
    os.close(child)
    written = b""
    while True:
        try:
            chunk = os.read(parent, 4096)
        except OSError:  # the child ended and its side of the terminal closed
            break
        if not chunk:
            break
        written += chunk
    os.close(parent)
    assert process.wait(timeout=30) == 0
    assert b"done: GPU 2 is FREE" in written
    assert b"\a\x1b]9;[simulated] GPU 2 is FREE\a" in written
    assert b"\x1b]777;notify;gpumon;[simulated] GPU 2 is FREE\a" in written


class StuckAfterFirst(SampleSource):
    """A driver that answers once, then never again."""

    def sample(self) -> Sample:
        self.reads += 1
        if self.reads > 1:
            time.sleep(60)
        return self.samples[0]


def test_a_stuck_driver_cannot_hold_the_watch_past_its_timeout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    board = gpu(0)
    stuck = StuckAfterFirst(sample((board,), (job(board, 100),)))
    monkeypatch.setattr(base, "source_for", lambda settings, **options: stuck)
    began = time.monotonic()
    code, lines, err = watch(capsys, "0", "--timeout", "1.5")
    assert code == 1 and time.monotonic() - began < 10
    assert lines[-1].startswith("GPUs: no data: NVML did not answer")
    assert err == "gpumon watch: gave up after 1.5s\n"


def test_no_driver_at_the_start_is_exit_1_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = UnavailableReason.DRIVER_NOT_LOADED
    gone = GpuUnavailable(reason, "no NVIDIA driver", "libnvidia-ml.so")
    serve(monkeypatch, sample((), unavailable=gone))
    code, lines, err = watch(capsys, "0", "--timeout", "5")
    assert (code, lines, err) == (1, [], "gpumon watch: no NVIDIA driver\n")
