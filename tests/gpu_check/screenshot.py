"""The real-GPU dashboard screenshot: ``python -m tests.gpu_check.screenshot --dir DIR...``.

The dashboard (the same app factory as ``gpumon`` and screenshots/generate.py) on gpumon's own
NVML source, a few samples a quarter of a second apart (so that the sparklines have a past),
saved as ``real-<GPU>-120x36.svg`` in every ``--dir``. With ``--fake`` the faked H100 of
:mod:`tests.gpu_check.fake` is shown instead and the file is ``fake-<GPU>-...``, so that it is
never taken for a real one. Prints one JSON line: the files, the GPU, the driver and the
processes shown (the README's caption says them).

Runs as a child of the check: only here is textual imported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

SAMPLES = 8
PAUSE_S = 0.25


def slug(name: str | None) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100``: the model, as the file name says it."""
    words = (name or "gpu").removeprefix("NVIDIA ").split()
    return re.sub(r"[^a-z0-9-]+", "-", (words[0] if words else "gpu").lower()).strip("-") or "gpu"


async def shoot(source: Any, size: tuple[int, int], name: str, directory: Path) -> Any:
    from gpumon.ui.dashboard.app import create_app

    app = create_app(source, autostart=False, ascii_only=False)
    sample = None
    async with app.run_test(size=size) as pilot:
        for _ in range(SAMPLES):
            sample = source.sample()
            app.receive_sample(sample)
            await pilot.pause(PAUSE_S)
        app.save_screenshot(filename=name, path=str(directory))
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", action="append", type=Path, required=True)
    parser.add_argument("--fake", action="store_true")
    parser.add_argument("--size", default="120x36")
    args = parser.parse_args()
    os.environ["TZ"] = "UTC"
    time.tzset()
    from gpumon.data import format as fmt
    from gpumon.sources.nvml.source import NvmlSource

    if args.fake:
        from tests.gpu_check.fake import fake_nvml

        source = NvmlSource(nvml=fake_nvml())  # type: ignore[arg-type]
    else:
        source = NvmlSource()
    width, height = (int(n) for n in args.size.split("x"))
    first = source.sample()
    gpu_name = first.gpus[0].name if first.gpus else None
    name = f"{'fake' if args.fake else 'real'}-{slug(gpu_name)}-{width}x{height}.svg"
    directories: list[Path] = args.dir
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
    sample = asyncio.run(shoot(source, (width, height), name, directories[0]))
    source.close()
    for directory in directories[1:]:
        shutil.copyfile(directories[0] / name, directory / name)
    processes = [
        {"pid": p.pid, "user": p.user, "memory": fmt.bytes_short(p.gpu_memory_bytes)}
        for p in (sample.processes if sample else ())
    ]
    driver = sample.driver.driver_version if sample and sample.driver else None
    files = [str(directory / name) for directory in directories]
    print(json.dumps({"files": files, "gpu": gpu_name, "driver": driver, "processes": processes}))


if __name__ == "__main__":
    main()
