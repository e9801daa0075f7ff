"""``gpumon record``: a light recorder of the GPUs' history into SQLite.

Samples through the dashboard's Poller and Store every ``--interval`` and writes on its own
thread (:class:`~gpumon.sampling.history.recorder.RecorderThread`), so a locked database
delays neither sampling nor a stop. Exit 0 after SIGINT or SIGTERM; 1 when the database
cannot be used or there is no driver; a problem that may pass is one line, then a retry.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.data.model import Sample
    from gpumon.sampling.history.recorder import Recorder, RecorderThread

#: How long stopping waits for a sample in progress (a stuck driver call is not waited for).
STOP_WAIT_S = 1.0
#: How long stopping waits for the writer's thread to write what is pending and close: a
#: database another program holds locked is left to the process's exit.
WRITER_STOP_S = 1.0
PREFIX = "gpumon record"


def demo_needs_own_file(settings: Settings) -> str | None:
    """Why this recording is refused: simulated samples never go into the real history,
    neither by default nor through a --db naming a default path (this user's, or the
    system's that readers fall back to)."""
    if not settings.demo:
        return None
    import os

    from gpumon.config.files import default_history_path
    from gpumon.sampling.history.files import history_path

    defaults = {default_history_path(os.environ, os.geteuid()), default_history_path({}, 0)}
    real = {os.path.realpath(path) for path in defaults}
    path = history_path(settings)
    if not settings.history_db or path in defaults or os.path.realpath(path) in real:
        return "--demo records simulated samples: give them their own file with --db PATH"
    return None


def recorder_for(settings: Settings, interval_s: float, prefix: str, batch_s: float) -> Recorder:
    """A :class:`Recorder` of ``settings``' database, reporting on stderr after ``prefix``."""
    from gpumon.sampling.history.files import history_path
    from gpumon.sampling.history.recorder import Recorder
    from gpumon.sampling.history.writer import HistoryWriter
    from gpumon.sampling.idle import idle_rule

    writer = HistoryWriter(
        history_path(settings),
        rule=idle_rule(settings),
        interval_s=interval_s,
        history_days=settings.history_days,
        batch_s=batch_s,
    )
    return Recorder(writer, lambda line: print(f"{prefix}: {line}", file=sys.stderr, flush=True))


def run(settings: Settings) -> int:
    """``gpumon record``: sample and record until SIGINT or SIGTERM."""
    refused = demo_needs_own_file(settings)
    if refused is not None:
        print(f"{PREFIX}: error: {refused}", file=sys.stderr)
        return 2
    from gpumon.config.settings import RECORD_INTERVAL_S

    # --interval given on the command line; else not the config file's (the dashboard's).
    from_flag = settings.origins.get("interval_s") == "--interval"
    interval_s = settings.interval_s if from_flag else RECORD_INTERVAL_S
    recorder = recorder_for(settings, interval_s, PREFIX, batch_s=0.0)
    if not recorder.open():
        return 1
    import asyncio

    from gpumon.sampling.history.recorder import RecorderThread

    thread = RecorderThread(recorder)
    try:
        return asyncio.run(_record(settings, thread, interval_s))
    finally:
        if not thread.stop(WRITER_STOP_S):
            print(
                f"{PREFIX}: warning: stopped before the last sample was written: "
                f"{recorder.writer.path} is busy (another program holds it locked?)",
                file=sys.stderr,
            )


async def _record(settings: Settings, thread: RecorderThread, interval_s: float) -> int:
    import asyncio
    import signal

    from gpumon.sampling.poller import Poller
    from gpumon.sampling.snapshot import no_gpu_data, report_unavailable
    from gpumon.sampling.store import Store
    from gpumon.sources.base import source_for

    recorder = thread.recorder
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    store = Store(history=False)
    no_driver: list[Sample] = []

    def sampled(sample: Sample) -> None:
        if no_gpu_data(sample):
            no_driver.append(sample)
            stop.set()
            return
        if store.sequence == 1:  # the banner waits for the first sample: is there a driver?
            demo = " (DEMO: simulated data)" if sample.simulated else ""
            print(
                f"{PREFIX}: recording to {recorder.writer.path} every {interval_s:g} s{demo}, "
                f"minute rows kept {settings.history_days} days; Ctrl-C to stop",
                file=sys.stderr,
                flush=True,
            )
        if recorder.failed is not None:  # the writer's thread met a problem that will not pass
            stop.set()
            return
        thread.submit(sample)

    store.subscribe(sampled)
    errors: list[str] = []

    def failed(error: BaseException) -> None:
        if str(error) not in errors[-1:]:  # once per distinct error, not every interval
            print(f"{PREFIX}: warning: sampling failed: {error}", file=sys.stderr)
        errors.append(str(error))
        del errors[:-1]

    # Cheap: NVML is initialised by the first sample, on the poller's thread.
    poller = Poller(source_for(settings), interval_s, store.push, on_error=failed)
    polling = asyncio.create_task(poller.run())
    await stop.wait()
    polling.cancel()
    await asyncio.wait([polling])
    # Closes the source after a sample in flight; a stuck driver call is not waited for.
    await asyncio.wait([asyncio.wrap_future(poller.close())], timeout=STOP_WAIT_S)
    if no_driver and no_driver[0].unavailable is not None:
        report_unavailable(no_driver[0].unavailable)
        return 1
    return 0 if recorder.failed is None else 1
