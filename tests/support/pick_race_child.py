"""A `gpumon pick` process for the claim races:
``python -m tests.support.pick_race_child BASE ROUNDS GO_FD READY_FD DONE_FD [GPUS [ARGS...]]``,
ARGS being pick's arguments.

Each round it runs the real ``gpumon pick`` (its ``main``; ``-n 1`` unless other arguments
are given) over ``GPUS`` FREE GPUs (1 unless given), with the claims directory
``BASE/round-N/claims``. Once pick has begun it writes ``r`` to ``READY_FD`` and reads its
sample only when the parent writes ``g`` to ``GO_FD``: such processes, released together
once all are ready, race for the GPUs with nothing in between. It writes its exit status
and stdout to ``BASE/round-N/PID`` (stderr to ``PID.err``) and ``d`` to ``DONE_FD``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

from gpumon.cli import main
from gpumon.sources import base
from tests.support.pick_helpers import SampleSource, gpu, sample


class GatedSource(SampleSource):
    """Answers ``gpus`` FREE GPUs; the first time once the parent says go."""

    def __init__(self, go_fd: int, ready_fd: int, gpus: int) -> None:
        super().__init__(sample(tuple(gpu(index) for index in range(gpus))))
        self.go_fd = go_fd
        self.ready_fd = ready_fd

    def sample(self):  # type: ignore[no-untyped-def]
        if self.reads == 0:
            os.write(self.ready_fd, b"r")  # this pick has begun
            if os.read(self.go_fd, 1) != b"g":
                raise SystemExit("the parent went away")
        return super().sample()


def run(
    base_dir: str, rounds: int, go_fd: int, ready_fd: int, done_fd: int, gpus: int, argv: list[str]
) -> None:
    base.source_for = lambda settings, **options: GatedSource(go_fd, ready_fd, gpus)  # type: ignore[assignment]
    for round_number in range(rounds):
        directory = os.path.join(base_dir, f"round-{round_number}")
        out = io.StringIO()
        err = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            claims = os.path.join(directory, "claims")
            code = main(["pick", *(argv or ["-n", "1"]), "--claims-dir", claims])
        with open(os.path.join(directory, str(os.getpid())), "w") as result:
            result.write(f"{code} {out.getvalue()}")
        with open(os.path.join(directory, f"{os.getpid()}.err"), "w") as said:
            said.write(err.getvalue())
        os.write(done_fd, b"d")


if __name__ == "__main__":
    rounds, go_fd, ready_fd, done_fd = (int(argument) for argument in sys.argv[2:6])
    gpus = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    run(sys.argv[1], rounds, go_fd, ready_fd, done_fd, gpus, sys.argv[7:])
