"""Data older than three intervals is never current: the recorder's latest sample counts as
"now" (idle holders, idle-since) only within three of its periods (its interval, or its batch
period for ``export --record``), never a fixed minute."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.data.idle import IdleRule
from gpumon.sampling.history.reader import open_history
from gpumon.sampling.history.writer import HistoryWriter
from tests.support.ui_helpers import GIB, make_gpu, make_process, make_sample

END = 1_793_577_600.0  # the last sample: 2026-11-02 00:00 UTC


def idle_hour(path: Path, interval_s: float, batch_s: float = 0.0) -> Path:
    """An hour in which alice held 20 GiB idle on GPU 0, sampled every ``interval_s``."""
    ticks = iter(range(10**6))
    writer = HistoryWriter(
        str(path),
        rule=IdleRule(),
        interval_s=interval_s,
        history_days=90,
        batch_s=batch_s,
        clock=lambda: float(next(ticks)) * interval_s,
    )
    try:
        steps = int(3600 / interval_s)
        for step in range(steps + 1):
            gpu = make_gpu(0)
            process = make_process(
                gpu,
                100,
                user="alice",
                gpu_memory_bytes=20 * GIB,
                sm_utilization_pct=0,
                create_time_s=END - 3700,
            )
            timestamp = END - (steps - step) * interval_s
            writer.record(make_sample((gpu,), (process,), timestamp_s=timestamp))
    finally:
        writer.close()
    return path


@pytest.mark.parametrize(("age_s", "current"), [(25.0, True), (30.0, True), (55.0, False)])
def test_a_10_s_recorders_sample_is_current_for_30_s(
    tmp_path: Path, age_s: float, current: bool
) -> None:
    with open_history(str(idle_hour(tmp_path / "h.db", 10.0))) as reader:  # type: ignore[union-attr]
        assert reader.current_for_s == 30.0
        assert reader.is_current(END + age_s) is current
        holders = reader.idle_holders(END + age_s)
        assert [holder.user for holder in holders] == (["alice"] if current else [])


def test_a_batched_recorder_is_current_for_three_batches(tmp_path: Path) -> None:
    """export --record samples every 2 s and writes every 10 s: 30 s, not 6 s."""
    path = idle_hour(tmp_path / "h.db", 2.0, batch_s=10.0)
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        assert reader.current_for_s == 30.0
        assert reader.is_current(END + 25) and not reader.is_current(END + 35)


def test_a_report_55_s_after_a_10_s_recorder_stopped_shows_no_one_idle_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = idle_hour(tmp_path / "h.db", 10.0)
    monkeypatch.setattr("time.time", lambda: END + 55)
    status = main(["report", "--db", str(path), "--since", "2h"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "alice" in out  # the hour's use is reported ...
    assert "Holding GPU memory idle now" not in out  # ... but not as happening now


def test_while_the_recorder_runs_its_snapshot_is_current_for_one_publication_more(
    tmp_path: Path,
) -> None:
    """Readers read a snapshot published every minute: a 10 s recorder's latest sample in it
    may be 60 s older than the recorder's own, and is still current for 30 + 60 s."""
    path = tmp_path / "h.db"
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=10.0, history_days=90)
    gpu = make_gpu(0)
    process = make_process(gpu, 100, user="alice", gpu_memory_bytes=20 * GIB)
    writer.record(make_sample((gpu,), (process,), timestamp_s=END))
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        assert reader.current_for_s == 90.0
        assert reader.is_current(END + 85) and not reader.is_current(END + 95)
    writer.close()
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        assert reader.current_for_s == 30.0  # stopped: nothing newer is coming
