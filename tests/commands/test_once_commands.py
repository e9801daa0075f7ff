"""`gpumon once` names a process as the dashboard's table does: the program's path shortened
to its name (``python3 train.py …``), so ``ssh host gpumon once`` at 80 columns shows the
script; ``--json`` keeps the whole command line and the seconds a process has run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpumon.commands import once
from gpumon.sampling.snapshot import sample_to_dict
from tests.support.samples import make_gpu, make_process, make_sample

ROOT = Path(__file__).resolve().parents[2]
CONDA = "/opt/conda/envs/train/bin/python3 -u /home/alice/proj/train.py --lr 3e-4"
GPU = make_gpu(0)
SAMPLE = make_sample(
    (GPU,), (make_process(GPU, 4242, user="alice", command=CONDA, elapsed_s=19_024.5),)
)


def run_gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        cwd=ROOT,
        timeout=60,
    )


def test_at_80_columns_the_line_shows_the_script_not_the_interpreters_path() -> None:
    table = once.render_table(SAMPLE, width=80, ascii_only=False)
    line = next(line for line in table.splitlines() if "4242" in line)
    assert line.endswith("python3 -u /home/alice/proj/train.py --lr 3e-4")
    assert "/opt/conda" not in table and len(line) <= 80


def test_the_demos_notebook_reads_python_in_the_table_and_its_path_in_json() -> None:
    table = run_gpumon("once", "--demo", "--demo-gpus", "8")
    assert table.returncode == 0, table.stderr
    assert "python -m ipykernel_launcher -f kernel-3f2a.json" in table.stdout
    assert "/opt/conda/bin/python" not in table.stdout
    document = run_gpumon("once", "--demo", "--demo-gpus", "8", "--json")
    assert document.returncode == 0, document.stderr
    commands = {
        process["command"]
        for gpu in json.loads(document.stdout)["gpus"]
        for process in gpu["processes"]
    }
    assert "/opt/conda/bin/python -m ipykernel_launcher -f kernel-3f2a.json" in commands


def test_json_keeps_the_whole_command_line_and_the_seconds_run() -> None:
    (process,) = sample_to_dict(SAMPLE)["gpus"][0]["processes"]
    assert process["command"] == CONDA
    assert process["elapsed_s"] == 19_024.5
