#!/usr/bin/env python3
"""``python -m gpumon ARGS`` whose first ``--polls`` polls run back to back, for the soak.

The dashboard keeps ten minutes of history (2,400 samples at ``--interval 0.25``), so its
memory reaches its plateau only after ten minutes. ``bench_soak.py --seconds`` runs this
instead of ``python -m gpumon`` to get there in seconds: the first polls skip the poller's
wait (as the accelerated soak's clock-jumping poller does), so the history fills as fast as
the machine samples and draws; then the dashboard polls at its interval, as a user's does.

Run from the repository root::

    python tests/benchmarks/soak_prefill.py --polls 2400 [--done FILE] -- --demo --interval 0.25

``--done FILE``: written once the fast polls are over (``bench_soak`` waits for it). On
SIGUSR1 the process runs ``gc.collect()`` (the benchmark reads RSS after it). Nothing but
gpumon and the standard library is imported: the process is the one a user runs.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gpumon.ui.dashboard.app as app_module
from gpumon.cli import main
from gpumon.sampling.poller import Poller

FAST_POLLS = 0
DONE_FILE: str | None = None


class PrefillPoller(Poller):
    """The dashboard's poller, with no wait after each of its first :data:`FAST_POLLS`."""

    async def _sleep_until(self, started: float) -> None:
        if self.polls_finished < FAST_POLLS:
            await asyncio.sleep(0)  # the app's own work (frames, keys) still runs between
            return
        if DONE_FILE is not None and not Path(DONE_FILE).exists():
            Path(DONE_FILE).write_text(f"{self.polls_finished}\n")
        await super()._sleep_until(started)


def collect(*_: Any) -> None:
    gc.collect()


def launch(argv: list[str]) -> int:
    global FAST_POLLS, DONE_FILE
    words = list(argv)
    gpumon_args = words[words.index("--") + 1 :] if "--" in words else []
    own = words[: words.index("--")] if "--" in words else words
    while own:
        flag = own.pop(0)
        if flag == "--polls":
            FAST_POLLS = int(own.pop(0))
        elif flag == "--done":
            DONE_FILE = own.pop(0)
        else:
            raise SystemExit(f"soak_prefill: unknown option {flag!r}")
    signal.signal(signal.SIGUSR1, collect)
    app_module.Poller = PrefillPoller  # type: ignore[misc]
    return main(gpumon_args)


if __name__ == "__main__":
    raise SystemExit(launch(sys.argv[1:]))
