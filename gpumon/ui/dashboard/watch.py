"""``w`` on the dashboard: watch the selected GPU until it is FREE, or the process under the
cursor until it ends (:class:`~gpumon.sampling.watches.WatchCheck` checks each sample).

A GPU that is FREE already, or a process that has ended, is said so at once and not watched:
there is nothing to wait for. A GPU whose process list is unknown (refused, LOST) is watched,
but ``w`` says that no FREE can come while it stays unknown.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from textual.app import App

from gpumon.data.free import processes_known
from gpumon.data.model import GpuProcess, GpuStats, Sample
from gpumon.sampling.watches import Watches, gpu_watch, process_watch


def toggle_watch(
    app: App[Any],
    watches: Watches,
    gpu: GpuStats | None,
    process: GpuProcess | None,
    free: Set[int],
    latest: Sample | None,
) -> None:
    """``w``: watch ``process`` (the process table's cursor) or else ``gpu`` (the GPU panel's
    selection), or stop watching it; ``free``: the GPUs shown FREE now."""
    notify = app.notify
    if process is not None:
        watch = process_watch(process)
        over = f"{watch.name} has ended already" if process.exited else None
    elif gpu is not None:
        watch = gpu_watch(gpu)
        over = f"GPU {gpu.index} is FREE now" if gpu.index in free else None
    else:
        notify("No GPU to watch yet.", severity="warning")
        return
    if over is not None and not watches.watching(watch):
        notify(f"{over}: nothing to wait for.", markup=False)
    elif watches.toggle(watch):
        unknown = None if watch.pid is not None or gpu is None else _unknown(gpu, latest)
        if unknown is not None:
            notify(f"Watching {watch.name}, but its processes are unknown ({unknown}): "
                   "it cannot be told FREE while they are (w again: stop).",
                   severity="warning", markup=False)  # fmt: skip
            return
        when = "is FREE" if watch.pid is None else "ends"
        notify(f"Watching {watch.name}: you will be told when it {when} (w again: stop).",
               markup=False)  # fmt: skip
    else:
        notify(f"Stopped watching {watch.name}.", markup=False)


def _unknown(gpu: GpuStats, sample: Sample | None) -> str | None:
    """Why ``gpu``'s process list is unknown in ``sample``, or ``None``."""
    if gpu.lost:
        return "LOST"
    if sample is None or processes_known(gpu, sample):
        return None
    return gpu.processes_error or "not read"
