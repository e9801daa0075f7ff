"""A driver call that never returns: the one-shot commands end with a clear line instead of
hanging, and nothing stale is ever called FREE or picked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gpumon.config import Settings
from gpumon.data.model import UnavailableReason
from gpumon.sampling import snapshot

ROOT = Path(__file__).resolve().parents[2]


class StuckDriver:
    simulated = False

    def __init__(self) -> None:
        self.closed = False

    def sample(self):  # type: ignore[no-untyped-def]
        threading.Event().wait()

    def close(self) -> None:
        self.closed = True


def test_a_stuck_read_ends_as_not_answering_and_is_never_closed_under_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = StuckDriver()
    monkeypatch.setattr("gpumon.sources.base.source_for", lambda settings, **kwargs: driver)
    started = time.monotonic()
    sample = snapshot.take_sample(Settings(), timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert sample.unavailable is not None
    assert sample.unavailable.reason is UnavailableReason.NOT_ANSWERING
    assert sample.gpus == () and sample.processes == ()
    assert not driver.closed


STUCK = textwrap.dedent(
    """
    import sys, threading
    import gpumon.sources.base, gpumon.sampling.snapshot

    class StuckDriver:
        simulated = False
        def sample(self):
            threading.Event().wait()
        def close(self):
            print("closed under a running call", file=sys.stderr)

    gpumon.sources.base.source_for = lambda settings, **kwargs: StuckDriver()
    gpumon.sampling.snapshot.SAMPLE_TIMEOUT_S = 1.0
    from gpumon.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize(
    "argv", [["pick"], ["once"], ["once", "--json"], ["status"], ["pick", "-n", "2"]]
)
def test_one_shot_commands_end_with_one_line_when_the_driver_is_stuck(argv: list[str]) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", STUCK, *argv],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert time.monotonic() - started < 20
    assert "NVML did not answer within 1 s" in result.stderr or (
        "NVML did not answer within 1 s" in result.stdout
    )
    assert "closed under a running call" not in result.stderr
    assert "Traceback" not in result.stderr
    if argv[0] == "pick":
        assert result.returncode != 0 and result.stdout == ""
