"""A `gpumon pick` process for the claim race: ``python -m tests.pick_race_child BASE ROUNDS
GO_FD READY_FD DONE_FD``.

Each round it runs the real ``gpumon pick -n 1`` (its ``main``) over one FREE GPU, with the
claims directory ``BASE/round-N/claims``. Once pick has begun it writes ``r`` to ``READY_FD``
and reads its sample only when the parent writes ``g`` to ``GO_FD``: two such processes,
released together once both are ready, race for the GPU with nothing in between. It writes
its exit status and stdout to ``BASE/round-N/PID`` (stderr to ``PID.err``) and ``d`` to
``DONE_FD``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

from gpumon.cli import main
from gpumon.sources import base
from tests.pick_helpers import SampleSource, gpu, sample


class GatedSource(SampleSource):
    """Answers one FREE GPU once the parent says go."""

    def __init__(self, go_fd: int, ready_fd: int) -> None:
        super().__init__(sample((gpu(0),)))
        self.go_fd = go_fd
        self.ready_fd = ready_fd

    def sample(self):  # type: ignore[no-untyped-def]
        os.write(self.ready_fd, b"r")  # this pick has begun
        if os.read(self.go_fd, 1) != b"g":
            raise SystemExit("the parent went away")
        return super().sample()


def run(base_dir: str, rounds: int, go_fd: int, ready_fd: int, done_fd: int) -> None:
    base.source_for = lambda settings, **options: GatedSource(go_fd, ready_fd)  # type: ignore[assignment]
    for round_number in range(rounds):
        directory = os.path.join(base_dir, f"round-{round_number}")
        out = io.StringIO()
        err = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["pick", "-n", "1", "--claims-dir", os.path.join(directory, "claims")])
        with open(os.path.join(directory, str(os.getpid())), "w") as result:
            result.write(f"{code} {out.getvalue()}")
        with open(os.path.join(directory, f"{os.getpid()}.err"), "w") as said:
            said.write(err.getvalue())
        os.write(done_fd, b"d")


if __name__ == "__main__":
    run(sys.argv[1], *(int(argument) for argument in sys.argv[2:6]))
