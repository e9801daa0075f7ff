"""``w`` on the dashboard: tell me when the selected GPU is FREE, or when the process under
the cursor ends.

:class:`DashboardWatches` holds the watches (:class:`~gpumon.ui.widgets.watches.Watches`),
gives each watched GPU its ``watching`` note (a note source of the app), and checks every new
sample from the store: a GPU is done when it is FREE by the dashboard's own rule
(:func:`~gpumon.data.free.free_gpu_indices`: never while its processes are unknown), a
process when no GPU lists it any more (or NVML lists it as exited) and its GPU's process
list was read. Then the app alerts (a notification, the bell, a desktop notification) and
the watch ends; the notification of a GPU that "was FREE at 14:02" goes once it is not. A
GPU that is FREE already, or a process that has ended, is said so at once and not watched:
there is nothing to wait for. A GPU whose process list is unknown (refused, LOST) is
watched, but ``w`` says that no FREE can come while it stays unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING

from gpumon.data import format as fmt
from gpumon.data.free import free_gpu_indices, processes_known
from gpumon.data.model import GpuProcess, GpuStats, Sample
from gpumon.data.views import shorten_command
from gpumon.ui.widgets.gpu_notes import GpuNote
from gpumon.ui.widgets.watches import Watch, Watches

if TYPE_CHECKING:
    from gpumon.ui.dashboard.app import GpumonApp

#: A command is cut to this many characters in a watch's name.
COMMAND_CHARS = 40


def process_watch(process: GpuProcess) -> Watch:
    """A watch for ``process`` to end, named by its PID and (short) command."""
    command = fmt.truncate(shorten_command(process.command or "?"), COMMAND_CHARS)
    return Watch(
        process.gpu_index,
        f"PID {process.pid} ({command})",
        pid=process.pid,
        created_s=process.create_time_s,
    )


def gpu_watch(gpu: GpuStats) -> Watch:
    """A watch for ``gpu`` to become FREE, named by its index and model."""
    return Watch(gpu.index, f"GPU {gpu.index} ({gpu.name or fmt.NA})")


def is_done(watch: Watch, sample: Sample, free: Set[int]) -> bool:
    """Has what ``watch`` waits for happened in ``sample`` (``free``: its FREE GPUs)?"""
    if watch.pid is None:
        return watch.gpu_index in free
    listed = [
        process
        for process in sample.processes
        if process.pid == watch.pid
        and (watch.created_s is None or process.create_time_s in (None, watch.created_s))
    ]  # a new process on the PID at once (a reused number) is not the one watched
    if listed:
        return all(process.exited for process in listed)
    gpu = next((gpu for gpu in sample.gpus if gpu.index == watch.gpu_index), None)
    # Not listed where the list is unknown (a lost GPU, a refused list) is no end.
    return gpu is not None and processes_known(gpu, sample)


class DashboardWatches:
    """What ``w`` watches on this machine, checked on every sample."""

    def __init__(self, app: GpumonApp) -> None:
        self._app = app
        self.watches = Watches()
        app.store.subscribe(self._on_sample)

    def notes(self, sample: Sample | None) -> Mapping[int, Sequence[GpuNote]]:
        """The app's note source: ``watching`` on each watched GPU."""
        return self.watches.notes()

    def toggle(self, gpu: GpuStats | None, process: GpuProcess | None, free: Set[int]) -> None:
        """``w``: watch ``process`` (the process table's cursor) or else ``gpu`` (the GPU
        panel's selection), or stop watching it; ``free``: the GPUs shown FREE now."""
        notify = self._app.notify
        if process is not None:
            watch = process_watch(process)
            over = f"{watch.name} has ended already" if process.exited else None
        elif gpu is not None:
            watch = gpu_watch(gpu)
            over = f"GPU {gpu.index} is FREE now" if gpu.index in free else None
        else:
            notify("No GPU to watch yet.", severity="warning")
            return
        if over is not None and not self.watches.watching(watch):
            notify(f"{over}: nothing to wait for.", markup=False)
        elif self.watches.toggle(watch):
            unknown = None if watch.pid is not None or gpu is None else self._unknown(gpu)
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

    def _unknown(self, gpu: GpuStats) -> str | None:
        """Why ``gpu``'s process list is unknown in the latest sample, or ``None``."""
        sample = self._app.store.latest
        if gpu.lost:
            return "LOST"
        if sample is None or processes_known(gpu, sample):
            return None
        return gpu.processes_error or "not read"

    def _on_sample(self, sample: Sample) -> None:
        app = self._app
        if not app.is_running:
            return
        free = free_gpu_indices(sample, app.settings.free_threshold_mib)
        app.withdraw_alerts(lambda about: isinstance(about, Watch) and about.gpu_index not in free)
        for watch in self.watches.finish(lambda watch: is_done(watch, sample, free)):
            about = watch if watch.pid is None else None  # an ended process stays ended
            app.alert(watch.done_text(sample.host.hostname, sample.timestamp_s), about)
