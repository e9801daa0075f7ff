"""The dashboard's sample pipeline: headless steps, run in order, and the state they make."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import cast

from gpumon.config import Settings
from gpumon.sampling.pipeline import (
    STALL_READS_FAILING,
    DashboardPipeline,
    Stall,
    stall_of,
)
from gpumon.sampling.poller import Poller
from gpumon.sampling.store import Store
from gpumon.sampling.watches import gpu_watch
from tests.support.samples import FIXED_TIME, make_gpu, make_process, make_sample

ROOT = Path(__file__).resolve().parents[2]
GPUS = (make_gpu(0), make_gpu(1, memory_used_bytes=0), make_gpu(2))


def pipeline_for(tmp_path: Path, **settings: object) -> DashboardPipeline:
    chosen = Settings(claims_dir=str(tmp_path / "no-claims"), **settings)  # type: ignore[arg-type]
    return DashboardPipeline(chosen, Store(), interval_s=lambda: 1.0, environ={})


def test_the_steps_cut_the_sample_first_and_every_later_step_sees_the_cut(
    tmp_path: Path,
) -> None:
    """--only 1: the store keeps only GPU 1, and the watch on it fires (it is FREE there);
    the state says what the screens draw, with no app anywhere."""
    pipeline = pipeline_for(tmp_path, only_gpus=("1",))
    pipeline.watches.toggle(gpu_watch(GPUS[1]))
    busy = make_process(GPUS[0], 4242)
    shown = pipeline.run(make_sample(GPUS, (busy,)))
    assert [gpu.index for gpu in shown.gpus] == [1] and shown.processes == ()
    assert pipeline.store.latest is shown and pipeline.store.gpu_indices() == [1]
    assert [watch.gpu_index for watch in pipeline.watches.done] == [1]
    state = pipeline.state(stall=None, stale=False, paused=True, interval_s=2.0, polling=True)
    assert state.sample is shown and state.free == frozenset({1})
    assert state.free_text == ("FREE 1",)
    assert state.paused and state.interval_s == 2.0
    assert "1" in state.selection and state.nothing_shown is None
    assert pipeline.selection.notices() == pipeline.selection.notices() == []


def test_a_stale_sample_has_no_free_gpu_and_says_since_when(tmp_path: Path) -> None:
    pipeline = pipeline_for(tmp_path)
    pipeline.run(make_sample(GPUS))
    stall = Stall(12)
    state = pipeline.state(stall=stall, stale=True, paused=False, interval_s=1.0, polling=True)
    assert state.free == frozenset() and state.free_text == ()  # nor "0 free": not known
    assert pipeline.state(
        stall=None, stale=False, paused=False, interval_s=1.0, polling=True
    ).free_text == ("FREE 1",)
    assert state.stale_text.startswith("NVML not answering for 12 s: readings of ")
    assert stall.text(FIXED_TIME) == state.stale_text


class StuckPoller:
    def __init__(self, stalled_s: float | None, failing_s: float | None) -> None:
        self._stalled, self._failing = stalled_s, failing_s

    def stalled_s(self) -> float | None:
        return self._stalled

    def failing_s(self) -> float | None:
        return self._failing


def test_a_stall_is_a_poll_stuck_or_reads_failing_and_the_cluster_counts_only_the_first() -> None:
    assert stall_of(cast(Poller, StuckPoller(None, None))) is None
    assert stall_of(cast(Poller, StuckPoller(4.7, 9.0))) == Stall(4)
    failing = cast(Poller, StuckPoller(None, 9.5))
    assert stall_of(failing) == Stall(9, STALL_READS_FAILING)
    assert stall_of(failing, reads_failing=False) is None


def test_the_pipeline_runs_without_textual(tmp_path: Path) -> None:
    """Headless: the steps and the state need no app, and never import textual."""
    code = f"""
import sys
from gpumon.sampling.pipeline import DashboardPipeline
from gpumon.sampling.store import Store
from gpumon.config import Settings
from tests.support.samples import make_gpu, make_sample
settings = Settings(claims_dir={str(tmp_path)!r})
pipeline = DashboardPipeline(settings, Store(), interval_s=lambda: 1.0)
pipeline.run(make_sample((make_gpu(0),)))
state = pipeline.state(stall=None, stale=False, paused=False, interval_s=1.0, polling=True)
assert state.sample is not None
assert not [name for name in ("textual", "rich") if name in sys.modules]
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
