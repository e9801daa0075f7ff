"""gpumon's entry point: the ``gpumon`` console script and ``python -m gpumon``.

:func:`gpumon.cli.main` does the work; here is only how the process starts (the garbage
collector off, :mod:`gpumon.startup`) and ends: a one-shot command with ``os._exit`` once its
output is flushed, skipping the interpreter's teardown. docs/process-and-terminal.md says why.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def run() -> NoReturn:
    from gpumon import startup

    startup.begin()
    from gpumon.cli import main, ran_one_shot

    status = main(sys.argv[1:])
    if not ran_one_shot():
        sys.exit(status)
    _exit_now(status)


def _exit_now(status: int) -> NoReturn:
    """Flush what the interpreter's exit would flush, then end the process at once."""
    if "logging" in sys.modules:  # only imported to log a debug line; handlers may buffer
        import logging

        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            status = status or 120  # as the interpreter exits when its final flush fails
    os._exit(status)


def _forget_working_directory() -> None:
    """Drop the working directory from the module path (``python -m gpumon`` puts it first):
    run from /tmp, another user's json.py there would run as this user."""
    try:
        here = os.getcwd()
    except OSError:  # removed since: nothing there to import
        here = ""
    sys.path[:] = [entry for entry in sys.path if entry not in ("", ".", here)]


if __name__ == "__main__":
    _forget_working_directory()
    run()
