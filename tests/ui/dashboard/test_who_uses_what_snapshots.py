"""SVG snapshots of "who uses what" (pytest-textual-snapshot): a filtered process table, the
per-user summary, and MIG instance lines.

Built from hand-made samples (no demo source, a fixed clock) so that they change only when
the views do. Regenerate after an intended change with:
pytest tests/ui/dashboard/test_who_uses_what_snapshots.py --snapshot-update
Each docstring below appears in the snapshot report next to the diff.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot

from gpumon.data.model import GpuStats, MigInstance, Sample
from gpumon.ui.dashboard.app import GpumonApp
from tests.support.ui_helpers import GIB, MIB, app_for, make_gpu, make_process, make_sample


def shared_server() -> Sample:
    """Four GPUs, GPU 3 idle (FREE); alice (the current user), bob and chen train, evaluate
    and serve, some in Slurm jobs; program paths to be shortened."""
    gpus = (
        make_gpu(0),
        make_gpu(1, utilization_gpu_pct=98, memory_used_bytes=21 * GIB),
        make_gpu(2, utilization_gpu_pct=12),
        make_gpu(3, utilization_gpu_pct=0, memory_used_bytes=3 * MIB, power_draw_w=31.0),
    )
    work = (
        (0, 4100, "alice", "/opt/conda/bin/python3 train.py --config llama-7b.yaml", "812001"),
        (0, 4177, "bob", "python eval.py --checkpoint runs/0412/ckpt-1800.pt", None),
        (1, 5120, "alice", "/opt/conda/bin/python3 train.py --config llama-13b.yaml", "812002"),
        (1, 5188, "chen", "/usr/local/bin/torchrun --nproc 2 train_gan.py", "812017"),
        (1, 5190, "chen", "/usr/local/bin/torchrun --nproc 2 train_gan.py", "812017"),
        (2, 6230, "bob", "python infer_server.py --port 8080", None),
        (2, 6302, "alice", "/home/alice/.venv/bin/python -m ipykernel_launcher", None),
    )
    processes = tuple(
        make_process(
            gpus[gpu],
            pid,
            user=user,
            command=command,
            job_id=job,
            is_current_user=user == "alice",
            gpu_memory_bytes=(pid % 7 + 2) * GIB,
            cpu_pct=float(pid % 97),
            elapsed_s=float(pid * 11),
        )
        for gpu, pid, user, command, job in work
    )
    return make_sample(gpus, processes)


def users_server() -> Sample:
    """alice (me) on GPUs 0 and 1, bob with one process whose memory is N/A, an owner that
    cannot be read, another namespace's process; GPU 2's process list refused."""
    gpus = (make_gpu(0), make_gpu(1), make_gpu(2, processes_error="NVML: Insufficient Permissions"))
    processes = (
        make_process(gpus[0], 100, user="alice", gpu_memory_bytes=2 * GIB, is_current_user=True),
        make_process(gpus[1], 101, user="alice", gpu_memory_bytes=4 * GIB, is_current_user=True),
        make_process(gpus[1], 200, user="bob", gpu_memory_bytes=10 * GIB),
        make_process(gpus[1], 201, user="bob", gpu_memory_bytes=None),
        make_process(gpus[0], 300, user=None, gpu_memory_bytes=GIB),
        make_process(gpus[1], 400, user=None, command=None, visible=False,
                     gpu_memory_bytes=3 * GIB),
        make_process(gpus[0], 500, user="chen", gpu_memory_bytes=512 * MIB),
    )  # fmt: skip
    # Read as NVML reads them without MIG, with an SM utilisation: whether each is idle
    # is known (the users screen's IDLE-MEM reads "-", not N/A).
    processes = tuple(dataclasses.replace(p, sm_utilization_pct=0) for p in processes)
    return make_sample(gpus, processes)


def mig_server() -> Sample:
    """An A100 in MIG mode with three instances (processes in two of them) and one in MIG
    mode whose instances and processes this user may not read."""
    instances = (
        MigInstance(0, 0, 1, 0, "3g.40gb", "MIG-4f5e6d7c-1111-2222-3333-444455556666",
                    30 * GIB, 40 * GIB),
        MigInstance(0, 1, 5, 0, "2g.20gb", "MIG-9a8b7c6d-1111-2222-3333-444455556666",
                    5 * GIB, 20 * GIB),
        MigInstance(0, 2, 13, 0, "1g.10gb", "MIG-0e1f2a3b-1111-2222-3333-444455556666",
                    0, 10 * GIB),
    )  # fmt: skip
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "mig_mode": True, "utilization_gpu_pct": None,
            "memory_total_bytes": 80 * GIB}  # fmt: skip
    gpus: tuple[GpuStats, ...] = (
        make_gpu(0, mig_instances=instances, memory_used_bytes=35 * GIB, **a100),
        make_gpu(
            1,
            mig_instances=None,
            memory_used_bytes=20 * GIB,
            processes_error="NVML: Insufficient Permissions",
            **a100,
        ),
    )
    processes = (
        make_process(gpus[0], 7100, user="alice", command="python train.py",
                     gpu_instance_id=1, compute_instance_id=0, is_current_user=True,
                     gpu_memory_bytes=20 * GIB),
        make_process(gpus[0], 7101, user="alice", command="python train.py --resume",
                     gpu_instance_id=1, compute_instance_id=0, is_current_user=True,
                     gpu_memory_bytes=9 * GIB),
        make_process(gpus[0], 7200, user="bob", command="python eval.py",
                     gpu_instance_id=5, compute_instance_id=0, gpu_memory_bytes=4 * GIB),
    )  # fmt: skip
    return make_sample(gpus, processes)


def showing(sample: Sample, *keys: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Hand the app ``sample``, then press ``keys``."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, GpumonApp)
        app.receive_sample(sample)
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()

    return run_before


def test_filtered_process_table(snap_compare: Callable[..., bool]) -> None:
    """120x40, GPU 1 selected, the text filter "train" kept with Enter: the title line says
    4 of 7 and the filter, alice's rows stand out, GPU 1's rows are highlighted, program
    paths read as their names, a JOB column, and GPU 3 is FREE."""
    sample = shared_server()
    keys = ("right", "slash", *"train", "enter")
    assert snap_compare(app_for(sample), terminal_size=(120, 40), run_before=showing(sample, *keys))


def test_user_summary(snap_compare: Callable[..., bool]) -> None:
    """u at 100x30: users by GPU memory, a lower bound (>=) for bob, "?" and the other
    namespace kept, and GPU 2 named as not counted."""
    sample = users_server()
    assert snap_compare(app_for(sample), terminal_size=(100, 30), run_before=showing(sample, "u"))


def test_mig_instances(snap_compare: Callable[..., bool]) -> None:
    """160x40: an A100 card with a line per MIG instance (profile, GI/CI, memory, processes,
    short MIG UUID), and one whose instances cannot be read says so in one line; the
    processes read GPU/GPU instance."""
    sample = mig_server()
    assert snap_compare(app_for(sample), terminal_size=(160, 40), run_before=showing(sample))
