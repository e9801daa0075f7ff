"""When too few GPUs are FREE, `gpumon pick` names the GPUs held idle (by whom, for how long,
from the history database) and what would pick something: `--busy-ok`, `--min-free-memory`,
`--wait`."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.data.model import Sample
from tests.support.history_fill import fill, sample_at
from tests.support.pick_helpers import serve


def now_sample(start_s: float) -> Sample:
    """The server as recorded in its last minute: GPU 0 busy (alice's training), GPU 1 held
    idle for an hour by alice's notebook, GPU 2 with memory held by no listed process."""
    return dataclasses.replace(sample_at(start_s, 60), timestamp_s=time.time())


def pick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], served: Sample, *argv: str
) -> tuple[int, str, list[str]]:
    serve(monkeypatch, served)
    code = main(["pick", "--no-claim", *argv])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if "not claimed (--no-claim)" not in line]


def test_a_gpu_held_idle_is_named_with_its_holder_and_how_long(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    start = time.time() - 3600
    monkeypatch.setenv("GPUMON_HISTORY_DB", str(fill(tmp_path / "history.db", start)))
    code, out, err = pick(monkeypatch, capsys, now_sample(start), "-n", "2")
    assert (code, out) == (1, "")
    failure, idle, helps = err
    assert failure.startswith("gpumon pick: none of 3 GPUs qualifies (need 2): GPU 0: 1 process")
    assert idle in (
        "gpumon pick: GPU 1 held idle by alice 1h00m",
        "gpumon pick: GPU 1 held idle by alice 59m",
    )
    assert helps == (
        "gpumon pick: would help: --busy-ok (shares the freest: GPU 2, GPU 0), "
        "--wait (until 2 are free)"  # no --min-free-memory: the free memory is N/A
    )


def test_without_a_history_nobody_is_called_idle_after_one_look(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUMON_HISTORY_DB", str(tmp_path / "none.db"))
    code, _, err = pick(monkeypatch, capsys, now_sample(time.time() - 3600), "-n", "2")
    assert code == 1 and len(err) == 2 and "held idle" not in "\n".join(err)
    assert err[1].startswith("gpumon pick: would help: --busy-ok")


def test_thresholds_that_nothing_passes_get_no_advice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked for more than any board has: only FREE picks get the advice."""
    code, _, err = pick(monkeypatch, capsys, now_sample(time.time()), "--min-free-memory", "1T")
    assert code == 1 and len(err) == 1
