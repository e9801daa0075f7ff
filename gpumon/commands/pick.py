"""``gpumon pick``: free GPUs, as a value for ``CUDA_VISIBLE_DEVICES``; waits, and claims.

    CUDA_VISIBLE_DEVICES=$(gpumon pick -n 2 --wait) python train.py

stdout carries the value and nothing else, so ``$(...)`` is right or empty; notes go to
stderr; exit 0 picked, 1 too few qualify, 2 bad arguments, 130 interrupted. Which GPUs
qualify: :mod:`gpumon.data.ranking`; never a lost GPU or one whose processes are unknown.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpumon.commands.pick_wait import (
    DEMO_LABEL,
    Attempt,
    attempts,
    exit_on_signals,
    failure_line,
    hand_over,
    processes_text,
    read_timeout,
    waiting_text,
)
from gpumon.config.text import (
    duration_seconds,
    percentage,
    size_bytes,
    whole_number,
)
from gpumon.data import format as fmt
from gpumon.data.free import MIB
from gpumon.data.model import Sample
from gpumon.data.ranking import Candidate, could_ever_qualify, mig_on, qualify

if TYPE_CHECKING:
    from gpumon.commands.pick_claims import PickClaims
    from gpumon.commands.pick_hints import IdleWatch
    from gpumon.commands.pick_queue import PickQueue
    from gpumon.config import Settings
    from gpumon.data.selection import GpuSelection
    from gpumon.sampling.snapshot import SampleReader

#: ``--format``'s choices and what each prints (the completions show them).
FORMATS = {
    "auto": "index where CUDA counts as nvidia-smi does, else uuid",
    "index": "nvidia-smi's numbers",
    "uuid": "GPU-... / MIG-... UUIDs, always right",
}
UNCLAIMED_NOTE = "gpumon pick: note: not claimed (--no-claim): another pick may get them too"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Picks FREE GPUs (no process, less memory in use than --free-threshold), or, with "
        "--min-free-memory or --max-utilization, those the thresholds let through; "
        "--busy-ok ranks every GPU. Among them the emptiest by what each GPU reports (memory "
        "in use, in tenths of its total; then utilisation, in steps of 10%), then the fewest "
        "processes (ties: the lowest index). A lost GPU, or one whose processes NVML will "
        "not list, is never picked. Prints them comma-separated, freest first, and claims "
        "each for --claim-seconds: another pick skips a GPU claimed by someone else; where "
        "claims cannot be made it prints nothing and exits 1 (--wait: waits). When "
        "fewer than N qualify it prints nothing, says why on stderr (and, when only FREE GPUs "
        "were wanted, which are held idle and what would help) and exits 1 (--wait: looks "
        "again every --interval). A GPU in MIG mode offers its MIG instances instead, "
        "as MIG-... UUIDs and for -n 1 only: a CUDA process uses one MIG instance."
    )
    parser.add_argument(
        "-n",
        "--count",
        dest="n",
        type=_count,
        default=1,
        metavar="N",
        help="how many GPUs to pick (default: 1); fewer qualify: exit 1, nothing on stdout",
    )
    parser.add_argument(
        "--min-free-memory",
        type=size_bytes,
        metavar="SIZE",
        help="GPUs with at least this much memory free qualify, processes or not (instead "
        "of only FREE ones): 20G, 20GiB, 512M (K, M, G, T are powers of 1024, as GPU memory "
        "is sold)",
    )
    parser.add_argument(
        "--max-utilization",
        type=percentage,
        metavar="PCT",
        help="GPUs at most this busy (0 to 100) qualify, processes or not (instead of only "
        "FREE ones); a MIG instance has no utilisation reading and passes only when it runs "
        "no process",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="index: nvidia-smi's numbers, right for CUDA only with "
        "CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA counts fastest first); uuid: GPU-... / MIG-... "
        "UUIDs, always right; auto (default): index where CUDA counts as nvidia-smi does "
        "(CUDA_DEVICE_ORDER=PCI_BUS_ID is set, or all GPUs are one model), else uuid "
        "(a cluster: index)",
    )
    parser.add_argument(
        "--busy-ok",
        action="store_true",
        help="rank every GPU whose processes are known, busy ones too (the freest first), "
        "instead of only FREE ones",
    )
    parser.add_argument(
        "--wait",
        nargs="?",
        const=math.inf,
        type=duration_seconds,
        metavar="DURATION",
        help="wait until N GPUs qualify, looking every --interval: for at most DURATION "
        "(90s, 30m, 2h; a bare number is seconds), without a limit when none is given; "
        "then exit 1. Waiting picks queue: a GPU that frees goes to the oldest waiter it "
        "suits (--queue shows them)",
    )
    parser.add_argument(
        "--no-claim",
        action="store_true",
        help="print the GPUs without claiming them (and say so on stderr), also where claims "
        "cannot be made; other picks' claims are still skipped where they can be read "
        "(claims: see --claims-dir)",
    )
    parser.add_argument(
        "--queue",
        action="store_true",
        help="print who waits for GPUs (pick --wait) in the queue, oldest first, and since "
        "when; a free GPU goes to the oldest waiter it suits (docs/claims.md)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --queue: print the queue as JSON",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="pick from the whole cluster at the configured Prometheus server "
        "(prometheus_url), as --prometheus URL does: prints HOST GPUS, N GPUs of one UP node "
        "whose process lists are known (never a dcgm-exporter node's)",
    )
    parser.add_argument(
        "--across-nodes",
        action="store_true",
        help="in a cluster, pick from several nodes: prints node:index,...",
    )


def _count(text: str) -> int:
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def indices_match_cuda(sample: Sample, environ: Mapping[str, str]) -> bool:
    """True when CUDA numbers this machine's GPUs as NVML does: PCI order (``CUDA_DEVICE_ORDER``)
    or one model throughout, and no lost or MIG GPU to shift the numbers after it.
    """
    if any(gpu.lost or mig_on(gpu) for gpu in sample.gpus):
        return False
    if environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return True
    models = {gpu.name for gpu in sample.gpus}
    return None not in models and len(models) <= 1


def resolve_format(requested: str, sample: Sample, environ: Mapping[str, str]) -> str:
    """``index`` or ``uuid``: ``auto`` becomes index only where indices are right."""
    if requested != "auto":
        return requested
    return "index" if indices_match_cuda(sample, environ) else "uuid"


def notes(
    picked: Sequence[Candidate],
    n: int,
    sample: Sample,
    output_format: str,
    environ: Mapping[str, str],
) -> list[str]:
    """The stderr lines worth a word after a successful pick: a picked GPU that runs
    processes, and indices that CUDA may read as other GPUs."""
    lines = []
    busy = [candidate for candidate in picked if candidate.process_count]
    if busy:
        listed = ", ".join(f"{c.label} runs {processes_text(c.process_count)}" for c in busy)
        idle = (
            "no GPU without processes qualifies"
            if n == 1
            else f"fewer than {n} GPUs without processes qualify"
        )
        lines.append(f"gpumon pick: note: {listed} ({idle})")
    if output_format == "index" and not indices_match_cuda(sample, environ):
        lines.append(
            "gpumon pick: note: these are nvidia-smi's indices; CUDA counts GPUs the same "
            "way only with CUDA_DEVICE_ORDER=PCI_BUS_ID (or use --format uuid)"
        )
    return lines


def run(
    settings: Settings,
    *,
    n: int,
    min_free_memory: int | None,
    max_utilization: float | None,
    format: str,
    cluster: bool = False,
    busy_ok: bool = False,
    wait: float | None = None,
    no_claim: bool = False,
    across_nodes: bool = False,
    queue: bool = False,
    json: bool = False,
) -> int:
    """``gpumon pick``: print the picked GPUs (exit 0), or why too few qualify (exit 1)."""
    from gpumon.sources.cluster_base import cluster_requested

    if queue or json:
        if not queue:
            print("gpumon: error: --json goes with --queue", file=sys.stderr)
            return 2
        from gpumon.commands.pick_queue import show_queue

        return show_queue(settings.claims_dir, as_json=json, stdout=sys.stdout, stderr=sys.stderr)

    free_below_bytes = None
    if not busy_ok and min_free_memory is None and max_utilization is None:
        free_below_bytes = settings.free_threshold_mib * MIB
    if cluster_requested(settings, cluster):
        from gpumon.commands.pick_cluster import run_cluster

        return run_cluster(
            settings,
            n=n,
            min_free_bytes=min_free_memory,
            max_utilization_pct=max_utilization,
            free_below_bytes=free_below_bytes,
            output_format="uuid" if format == "uuid" else "index",
            across_nodes=across_nodes,
            wait_s=wait,
        )
    from gpumon.sampling.snapshot import SampleReader
    from gpumon.sources.base import source_for

    started_s = time.time()
    # Users and process ages name who holds a GPU; PCIe throughput is not needed.
    reader = SampleReader(source_for(settings, processes=True, pcie=False, host_details=True))
    claims = None
    queue_part: PickQueue | None = None
    restore_signals = exit_on_signals()
    try:
        if not reader.simulated:  # nobody shares a simulated GPU
            from gpumon.commands.pick_claims import PickClaims

            claims = PickClaims(
                settings.claims_dir,
                claim_seconds=settings.claim_seconds,
                started_s=started_s,
                stderr=sys.stderr,
                claim=not no_claim,
                waiting=wait is not None,
            )
            from gpumon.commands.pick_queue import PickQueue

            queue_part = PickQueue(since_s=started_s)
        from gpumon.data.selection import selection_from

        look = Look(
            reader,
            claims,
            selection=selection_from(settings.only_gpus, settings.only_visible, os.environ),
            n=n,
            min_free_bytes=min_free_memory,
            max_utilization_pct=max_utilization,
            free_below_bytes=free_below_bytes,
            requested_format=format,
            wait_s=wait,
            queue=queue_part,
            interval_s=settings.interval_s,
        )
        if free_below_bytes is not None:
            from gpumon.commands.pick_hints import IdleWatch

            look.idle = IdleWatch(settings)
        result = attempts(look, wait_s=wait, interval_s=settings.interval_s, stderr=sys.stderr)
        if isinstance(result, int):
            if claims is not None:
                claims.release()  # interrupted right after claiming: nobody got them
            return result
        return hand_over(result, None if claims is None else claims.release)
    finally:
        if queue_part is not None and claims is not None:
            queue_part.leave(claims)
        if claims is not None:
            claims.close()
        reader.close()
        restore_signals()


@dataclass
class Look:
    """One look at this machine's GPUs, for :func:`~gpumon.commands.pick_wait.attempts`."""

    reader: SampleReader
    claims: PickClaims | None
    n: int
    min_free_bytes: int | None
    max_utilization_pct: float | None
    free_below_bytes: int | None
    requested_format: str
    selection: GpuSelection | None = None
    wait_s: float | None = None
    #: Only FREE GPUs are wanted: a failure names the GPUs held idle and what would help.
    idle: IdleWatch | None = None
    #: The fair queue: the GPUs kept for older waiters are skipped; ``--wait`` enters it.
    queue: PickQueue | None = None
    interval_s: float = 1.0
    _began: float | None = field(default=None, init=False)  # the first look (monotonic)
    _said: set[str] = field(default_factory=set, init=False)

    def __call__(self) -> Attempt:
        from gpumon.sampling.snapshot import no_gpu_data, report_unavailable

        now = time.monotonic()
        self._began = now if self._began is None else self._began
        sample = self.reader.read(read_timeout(self.wait_s, now - self._began))
        if no_gpu_data(sample):
            assert sample.unavailable is not None
            said = io.StringIO()
            report_unavailable(sample.unavailable, said)
            return Attempt(fatal=tuple(said.getvalue().splitlines()))
        sample, missing = self._select(sample)
        if missing:  # --only naming no GPU here: a usage error, as in once
            return Attempt(fatal=missing, fatal_status=2)
        n = self.n
        output_format = resolve_format(self.requested_format, sample, os.environ)
        qualifying, reasons = qualify(
            sample,
            n=n,
            min_free_bytes=self.min_free_bytes,
            max_utilization_pct=self.max_utilization_pct,
            output_format=output_format,
            free_below_bytes=self.free_below_bytes,
        )
        claimed: dict[int, str] = {}
        kept: dict[int, str] = {}
        if self.claims is None:
            picked = list(qualifying[:n])
        else:
            from gpumon.commands.pick_claims import CannotClaim

            try:
                qualifying, queued, kept = self._queue(qualifying, sample, output_format)
                reasons += tuple(queued)
                picked, skipped, claimed = self.claims.take(qualifying, n, sample)
            except CannotClaim as cannot:
                return Attempt(
                    failure=f"gpumon pick: {cannot}; nothing picked (--no-claim: pick unclaimed)",
                    status=f"waiting: {cannot}",
                )
            reasons += tuple(skipped)
        if len(picked) >= n:
            lines = [f"gpumon pick: {DEMO_LABEL}"] if sample.simulated else []
            lines += notes(picked, n, sample, output_format, os.environ)
            if self.claims is not None and not self.claims.claim:
                lines.append(UNCLAIMED_NOTE)
            value = ",".join(candidate.value(output_format) for candidate in picked)
            return Attempt(output=value, notes=tuple(lines))
        failure = failure_line(
            picked, reasons, n, gpu_count=len(sample.gpus), simulated=sample.simulated
        )
        possible = could_ever_qualify(
            sample, n=n, min_free_bytes=self.min_free_bytes, output_format=output_format
        )
        hopeless = possible < n  # --wait would wait for ever (or to its limit) for nothing
        word = "qualify" if self.free_below_bytes is None else "free"
        status = waiting_text(sample, picked, n, claimed, word=word, kept=kept)
        hints: list[str] = []
        if self.idle is not None:
            from gpumon.commands.pick_hints import help_line

            hints = self.idle.lines(sample, picked)
            waiting = self.wait_s is not None
            taken = {*claimed, *kept}  # neither option would get these
            hints.append(
                help_line(
                    sample, n, output_format, claimed=taken, waiting=waiting, hopeless=hopeless
                )
            )
        return Attempt(
            failure=failure,
            hints=tuple(line for line in hints if line),
            status=status,
            hopeless=hopeless,
        )

    def _queue(
        self, qualifying: Sequence[Candidate], sample: Sample, output_format: str
    ) -> tuple[tuple[Candidate, ...], list[str], dict[int, str]]:
        """``qualifying`` less the GPUs kept for older waiters, why, and for whom; a waiting
        pick that claims enters the queue at its first look."""
        if self.queue is None or self.claims is None:
            return tuple(qualifying), [], {}
        if self.wait_s is not None and self.claims.claim and self.queue.request is None:
            from gpumon.commands.pick_queue import request_for

            self.queue.request = request_for(self, sample, output_format)
        return self.queue.look(self.claims, qualifying, sample)

    def _select(self, sample: Sample) -> tuple[Sample, tuple[str, ...]]:
        """The GPUs ``--only`` / ``--only-visible`` leave (what to know said once on stderr),
        and the lines for ``--only`` GPUs not here. Without them, a ``CUDA_VISIBLE_DEVICES``
        the caller has is named: pick chose among every GPU, which its output replaces."""
        selection = self.selection
        if selection is None or not selection.active:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if selection is not None and visible is not None:
                self._say_once(
                    f"gpumon pick: CUDA_VISIBLE_DEVICES is set ({fmt.safe_text(visible, 80)}): "
                    "picked among every GPU here; --only-visible picks among those it names"
                )
            return sample, ()
        from gpumon.data.selection import select_gpus

        selected = select_gpus(sample, selection)
        for line in selected.notes:
            self._say_once(f"gpumon pick: {line}")
        return selected.sample, tuple(f"gpumon pick: {line}" for line in selected.missing)

    def _say_once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            print(line, file=sys.stderr)
