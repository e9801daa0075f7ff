"""``gpumon pick``: the freest GPUs, as a value for ``CUDA_VISIBLE_DEVICES``.

    CUDA_VISIBLE_DEVICES=$(gpumon pick -n 2) python train.py

One sample, no sleeping, no Textual. stdout carries the value and nothing else (``2,3`` and
a newline), so ``$(...)`` is either right or empty; why too few GPUs qualify, the label of
simulated data and notes go to stderr, and the exit status tells a script which happened:
0 picked, 1 too few qualify (or no driver), 2 bad arguments.

Which GPUs qualify: a GPU whose process list was read (not lost, not refused by NVML:
unknown is never free), with at least ``--min-free-memory`` free and at most
``--max-utilization`` busy when those are given (a reading that is N/A does not pass). A GPU
with processes still qualifies: the N *freest* are picked, by what each GPU reports (memory
in use, then utilisation), then its number of processes (:mod:`gpumon.data.ranking`).

MIG: a GPU in MIG mode offers its MIG instances instead of itself, each by its ``MIG-...``
UUID. A CUDA process uses one MIG instance at most (the first it is shown), so instances
are offered for ``-n 1`` only, and only as UUIDs: no index names one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gpumon.arguments import percentage, size_bytes, whole_number
from gpumon.data.model import Sample
from gpumon.data.ranking import Candidate, mig_on, rank

if TYPE_CHECKING:
    from gpumon.settings import Settings

FORMATS = ("auto", "index", "uuid")
DEMO_LABEL = "simulated GPUs (--demo)"
#: The failure line names at most this many reasons, then says how many more there are.
MAX_REASONS = 12


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Picks the emptiest GPUs by what each GPU reports (memory in use, in tenths of its "
        "total; then utilisation, in steps of 10%), then the fewest processes (ties: the "
        "lowest index), among those whose process list could be read: "
        "a lost GPU, or one whose processes NVML will not list, is never picked. Prints them "
        "comma-separated, freest first. When fewer than N qualify it prints nothing, says "
        "why on stderr and exits 1. A GPU in MIG mode offers its MIG instances instead, as "
        "MIG-... UUIDs and for -n 1 only: a CUDA process uses one MIG instance."
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
        default=None,
        metavar="SIZE",
        help="only GPUs with at least this much memory free: 20G, 20GiB, 512M "
        "(K, M, G, T are powers of 1024, as GPU memory is sold)",
    )
    parser.add_argument(
        "--max-utilization",
        type=percentage,
        default=None,
        metavar="PCT",
        help="only GPUs at most this busy (0 to 100); a MIG instance has no utilisation "
        "reading and passes only when it runs no process",
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
        "--cluster",
        action="store_true",
        help="pick from the whole cluster at the configured Prometheus server "
        "(prometheus_url), as --prometheus URL does: prints node:index,... from UP nodes "
        "whose process lists are known (never a dcgm-exporter node's)",
    )


def _count(text: str) -> int:
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def indices_match_cuda(sample: Sample, environ: Mapping[str, str]) -> bool:
    """True when CUDA numbers this machine's GPUs as NVML (and nvidia-smi) do.

    NVML counts in PCI bus order; CUDA counts fastest first unless CUDA_DEVICE_ORDER is
    PCI_BUS_ID, which comes to the same order when every GPU is the same model. A lost GPU
    (CUDA may not count it) or one in MIG mode (it is no single CUDA device) can shift the
    numbers of the GPUs after it, so then they do not match.
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


def failure_line(
    picked: Sequence[Candidate],
    reasons: Sequence[str],
    n: int,
    *,
    gpu_count: int,
    simulated: bool = False,
) -> str:
    """The one stderr line for "fewer than ``n`` qualify", naming why the others do not.

    ``gpu_count`` is the number of GPUs in the sample: when MIG instances were candidates
    too, the count is of "devices", not of GPUs.
    """
    total = len(picked) + len(reasons)
    prefix = f"gpumon pick: {DEMO_LABEL}: " if simulated else "gpumon pick: "
    if total == 0:
        return f"{prefix}no GPU found (need {n})"
    kind = "GPU" if total == gpu_count else "device"
    noun = kind if total == 1 else f"{kind}s"
    if not reasons:
        return f"{prefix}only {total} {noun} here (need {n})"
    if picked:
        verb = "qualifies" if len(picked) == 1 else "qualify"
        head = f"only {len(picked)} of {total} {noun} {verb}"
    elif total == 1:
        head = f"the only {kind} does not qualify"
    else:
        head = f"none of {total} {noun} qualifies"
    shown = list(reasons[:MAX_REASONS])
    if len(reasons) > MAX_REASONS:
        shown.append(f"{len(reasons) - MAX_REASONS} more")
    return f"{prefix}{head} (need {n}): {', '.join(shown)}"


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
        listed = ", ".join(
            f"{c.label} runs {c.process_count} "
            + ("process" if c.process_count == 1 else "processes")
            for c in busy
        )
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
) -> int:
    """``gpumon pick``: print the picked GPUs (exit 0), or why too few qualify (exit 1)."""
    from gpumon.sources.cluster_base import cluster_requested

    if cluster_requested(settings, cluster):
        return run_cluster(
            settings,
            n=n,
            min_free_bytes=min_free_memory,
            max_utilization_pct=max_utilization,
            output_format="uuid" if format == "uuid" else "index",
        )
    from gpumon.sampling.snapshot import no_gpu_data, report_unavailable, take_sample

    # Process counts and MIG placement come from NVML: no psutil reads of users or commands.
    sample = take_sample(settings, processes=True, pcie=False, host_details=False)
    if no_gpu_data(sample):
        assert sample.unavailable is not None
        report_unavailable(sample.unavailable)
        return 1
    output_format = resolve_format(format, sample, os.environ)
    picked, reasons = rank(
        sample,
        n=n,
        min_free_bytes=min_free_memory,
        max_utilization_pct=max_utilization,
        output_format=output_format,
    )
    if len(picked) < n:
        line = failure_line(
            picked, reasons, n, gpu_count=len(sample.gpus), simulated=sample.simulated
        )
        print(line, file=sys.stderr)
        return 1
    if sample.simulated:
        print(f"gpumon pick: {DEMO_LABEL}", file=sys.stderr)
    for line in notes(picked, n, sample, output_format, os.environ):
        print(line, file=sys.stderr)
    print(",".join(candidate.value(output_format) for candidate in picked))
    return 0


def run_cluster(
    settings: Settings,
    *,
    n: int,
    min_free_bytes: int | None,
    max_utilization_pct: float | None,
    output_format: str,
) -> int:
    """``gpumon pick --prometheus URL``: ``node:index,...`` of the cluster's freest GPUs."""
    from gpumon.commands import cluster_output as co
    from gpumon.commands import cluster_pick
    from gpumon.settings import SettingsError
    from gpumon.sources.cluster_base import take_cluster_sample

    try:
        cluster = take_cluster_sample(settings)
    except SettingsError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    failure = co.read_failure(cluster)
    if failure is not None:
        print(f"gpumon pick: {failure}", file=sys.stderr)
        return 1
    picked, reasons = cluster_pick.rank_cluster(
        cluster,
        n=n,
        min_free_bytes=min_free_bytes,
        max_utilization_pct=max_utilization_pct,
        output_format=output_format,
    )
    if len(picked) < n:
        print(cluster_pick.cluster_failure_line(cluster, picked, reasons, n), file=sys.stderr)
        return 1
    if cluster.simulated:
        print("gpumon pick: simulated GPUs (a node serves gpumon export --demo)", file=sys.stderr)
    busy = [c for c in picked if c.candidate.process_count]
    if busy:
        listed = ", ".join(
            f"{c.label} runs {c.candidate.process_count} "
            + ("process" if c.candidate.process_count == 1 else "processes")
            for c in busy
        )
        print(f"gpumon pick: note: {listed} (too few GPUs without processes)", file=sys.stderr)
    print(",".join(candidate.value(output_format) for candidate in picked))
    return 0
