"""A history database written by the recorder's own writer, from a day whose numbers a person
can check by hand (the reports' and the dashboard's tests read it).

One sample a minute for an hour, from ``start_s`` (minute 0) to minute 60, each crediting the
minute before it:

- GPU 0: alice's training (PID 100, Slurm job 81234), 20 GiB at 50 % SM, all hour:
  1 GPU-hour held, 0.5 used.
- GPU 1: alice's notebook (PID 101, 10 GiB at 0 % SM: quiet from minute 0, IDLE from minute
  15 under the default 15-minute rule) beside her small helper (PID 102, 512 MiB at 0 %:
  too small to be idle, and quiet): one GPU held for an hour (two processes, one GPU), idle held
  46 minutes (minutes 15 to 60).
- GPU 2: bob's job (PID 200, container ``c0ffee``), 8 GiB at 100 %, minutes 0 to 30: 0.5 held,
  0.5 used.

alice: 2.0 held, 0.5 used, 46/60 idle, peak 20 GiB, 3 processes; bob: 0.5, 0.5, 0, 8 GiB, 1.
"""

from __future__ import annotations

from pathlib import Path

from gpumon.data.idle import IdleRule
from gpumon.data.model import Sample
from gpumon.sampling.history.writer import HistoryWriter
from tests.support.ui_helpers import GIB, MIB, make_gpu, make_process, make_sample

MINUTE = 60.0
GPUS = tuple(make_gpu(index, energy_j=1000.0 * index) for index in range(3))
#: When alice's notebook went quiet: minute 0.
ALICE_IDLE_MINUTES = 46
EXPECTED = {
    # user: (held, used, idle held, peak memory, processes)
    "alice": (2.0, 0.5, ALICE_IDLE_MINUTES / 60, 20 * GIB, 3),
    "bob": (0.5, 0.5, 0.0, 8 * GIB, 1),
}


def sample_at(start_s: float, minute: int, *, utilization: int = 60) -> Sample:
    """The server at ``minute``; ``utilization``: every GPU's (the graphs' readings)."""
    gpu0, gpu1, gpu2 = (
        make_gpu(index, utilization_gpu_pct=utilization, energy_j=1000.0 + minute * 60.0)
        for index in range(3)
    )
    processes = [
        make_process(gpu0, 100, user="alice", gpu_memory_bytes=20 * GIB, sm_utilization_pct=50,
                     job_id="81234", create_time_s=start_s - 600, command="python train.py"),
        make_process(gpu1, 101, user="alice", gpu_memory_bytes=10 * GIB, sm_utilization_pct=0,
                     create_time_s=start_s - 900, command="python -m ipykernel_launcher"),
        make_process(gpu1, 102, user="alice", gpu_memory_bytes=512 * MIB, sm_utilization_pct=0,
                     create_time_s=start_s - 900, command="python helper.py"),
    ]  # fmt: skip
    if minute <= 30:
        processes.append(
            make_process(
                gpu2,
                200,
                user="bob",
                gpu_memory_bytes=8 * GIB,
                sm_utilization_pct=100,
                container_id="c0ffee",
                create_time_s=start_s - 60,
            )
        )
    return make_sample((gpu0, gpu1, gpu2), tuple(processes), timestamp_s=start_s + minute * MINUTE)


def fill(path: Path, start_s: float, minutes: int = 60) -> Path:
    """Record minutes 0 to ``minutes`` of the day into the database at ``path``."""
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=MINUTE, history_days=90)
    try:
        for minute in range(minutes + 1):
            writer.record(sample_at(start_s, minute))
    finally:
        writer.close()
    return path
