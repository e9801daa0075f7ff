"""``gpumon pick``: the freest GPUs, as a value for ``CUDA_VISIBLE_DEVICES``.

    CUDA_VISIBLE_DEVICES=$(gpumon pick -n 2) python train.py

One sample, no sleeping, no Textual. stdout carries the value and nothing else (``2,3`` and
a newline), so ``$(...)`` is either right or empty; why too few GPUs qualify, the label of
simulated data and notes go to stderr, and the exit status tells a script which happened:
0 picked, 1 too few qualify (or no driver), 2 bad arguments.

Which GPUs qualify: a GPU whose process list was read (not lost, not refused by NVML:
unknown is never free), with at least ``--min-free-memory`` free and at most
``--max-utilization`` busy when those are given (a reading that is N/A does not pass). A GPU
with processes still qualifies: the N *freest* are picked, by number of processes, then
memory used, then utilisation, ties by NVML index.

MIG: a GPU in MIG mode offers its MIG instances instead of itself, each by its ``MIG-...``
UUID. A CUDA process uses one MIG instance at most (the first it is shown), so instances
are offered for ``-n 1`` only, and only as UUIDs: no index names one.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpumon.data import format as fmt
from gpumon.arguments import percentage, size_bytes, whole_number
from gpumon.data.model import GpuStats, Sample
from gpumon.data.views import instance_processes, processes_known

if TYPE_CHECKING:
    from gpumon.settings import Settings

FORMATS = ("auto", "index", "uuid")
DEMO_LABEL = "simulated GPUs (--demo)"
#: The failure line names at most this many reasons, then says how many more there are.
MAX_REASONS = 12


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Picks the GPUs with the fewest processes, then the least memory used, then the "
        "least busy (ties: the lowest index), among those whose process list could be read: "
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


@dataclass(frozen=True, slots=True)
class Candidate:
    """A whole GPU, or one MIG instance of a GPU in MIG mode, that a process could be given.

    ``utilization_pct`` is ``None`` for a MIG instance (NVML has no reading for one) and
    for a GPU whose reading is N/A.
    """

    gpu_index: int
    mig_index: int | None
    uuid: str | None
    process_count: int
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    utilization_pct: int | None

    @property
    def label(self) -> str:
        """``GPU 2``, or ``GPU 3 MIG 1`` for a MIG instance."""
        mig = "" if self.mig_index is None else f" MIG {self.mig_index}"
        return f"GPU {self.gpu_index}{mig}"

    def sort_key(self) -> tuple[float, float, float, int, int]:
        """Freest first: fewer processes, less memory used, less busy (N/A after any
        reading), then the lower NVML index."""
        return (
            self.process_count,
            math.inf if self.memory_used_bytes is None else self.memory_used_bytes,
            math.inf if self.utilization_pct is None else self.utilization_pct,
            self.gpu_index,
            -1 if self.mig_index is None else self.mig_index,
        )

    def value(self, output_format: str) -> str:
        """What goes into ``CUDA_VISIBLE_DEVICES`` for this candidate."""
        if output_format == "index" and self.mig_index is None:
            return str(self.gpu_index)
        if self.uuid is None:  # rank() never picks one for a format that needs its UUID
            raise ValueError(f"{self.label} has no known UUID")
        return self.uuid


def mig_on(gpu: GpuStats) -> bool:
    """True for a GPU in MIG mode (instances read or not)."""
    return gpu.mig_mode is True or gpu.mig_instances is None or bool(gpu.mig_instances)


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


def rank(
    sample: Sample,
    *,
    n: int = 1,
    min_free_bytes: int | None = None,
    max_utilization_pct: float | None = None,
    output_format: str = "index",
) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """The ``n`` freest candidates of ``sample`` that qualify, and why the others do not.

    Args:
        sample: one sample, read with processes.
        n: how many are wanted; MIG instances are candidates only for 1.
        min_free_bytes: a candidate needs at least this much memory free (N/A fails).
        max_utilization_pct: a candidate may be at most this busy (N/A fails, but a MIG
            instance that runs no process passes: it has no reading by design and nothing
            that could keep it busy).
        output_format: ``index`` or ``uuid``: a MIG instance needs ``uuid``, and with
            ``uuid`` a candidate whose UUID is not known does not qualify.

    Returns:
        ``(picked, reasons)``: at most ``n`` candidates, freest first, and one short phrase
        (``GPU 1 LOST``) per GPU or MIG instance that does not qualify, in NVML order.
    """
    qualifying: list[Candidate] = []
    reasons: list[str] = []
    for gpu in sample.gpus:
        candidates, reason = _candidates(gpu, sample, n=n, output_format=output_format)
        if reason is not None:
            reasons.append(reason)
        for candidate in candidates:
            problem = _threshold_problem(candidate, min_free_bytes, max_utilization_pct)
            if problem is not None:
                reasons.append(problem)
            elif output_format == "uuid" and candidate.uuid is None:
                reasons.append(f"{candidate.label} UUID unknown")
            else:
                qualifying.append(candidate)
    qualifying.sort(key=Candidate.sort_key)
    return tuple(qualifying[:n]), tuple(reasons)


def _candidates(
    gpu: GpuStats, sample: Sample, *, n: int, output_format: str
) -> tuple[list[Candidate], str | None]:
    """What ``gpu`` offers: itself, its MIG instances, or nothing and why."""
    label = f"GPU {gpu.index}"
    if gpu.lost:
        return [], f"{label} LOST"
    if not processes_known(gpu, sample):
        return [], f"{label} process list unknown"
    processes = sample.processes_on(gpu.index)
    if not mig_on(gpu):
        whole = Candidate(
            gpu_index=gpu.index,
            mig_index=None,
            uuid=gpu.uuid,
            process_count=len(processes),
            memory_used_bytes=gpu.memory_used_bytes,
            memory_free_bytes=gpu.memory_free_bytes,
            utilization_pct=gpu.utilization_gpu_pct,
        )
        return [whole], None
    if gpu.mig_instances is None:
        return [], f"{label} MIG instances unreadable"
    if not gpu.mig_instances:
        return [], f"{label} in MIG mode without instances"
    if output_format == "index":
        return [], f"{label} in MIG mode (its instances need --format uuid)"
    if n > 1:
        return [], f"{label} in MIG mode (a CUDA process uses one MIG instance: -n 1)"
    if any(process.gpu_instance_id is None for process in processes):
        # A process not placed in an instance could be in any: none of them is known idle.
        return [], f"{label} processes not matched to MIG instances"
    instances = []
    for instance in gpu.mig_instances:
        used, total = instance.memory_used_bytes, instance.memory_total_bytes
        instances.append(
            Candidate(
                gpu_index=gpu.index,
                mig_index=instance.index,
                uuid=instance.uuid,
                process_count=len(instance_processes(instance, processes)),
                memory_used_bytes=used,
                memory_free_bytes=None if used is None or total is None else total - used,
                utilization_pct=None,
            )
        )
    return instances, None


def _threshold_problem(
    candidate: Candidate, min_free_bytes: int | None, max_utilization_pct: float | None
) -> str | None:
    """Why ``candidate`` misses a threshold (``GPU 0 has 2.0G free (need 20.0G)``), or None."""
    problems = []
    if min_free_bytes is not None:
        free = candidate.memory_free_bytes
        if free is None:
            problems.append("memory free N/A")
        elif free < min_free_bytes:
            shown = fmt.bytes_short(min_free_bytes)
            problems.append(f"has {fmt.bytes_short(free)} free (need {shown})")
    if max_utilization_pct is not None:
        busy = candidate.utilization_pct
        limit = f"max {max_utilization_pct:g}%"
        if candidate.mig_index is not None:
            if candidate.process_count:
                problems.append(f"runs processes, utilisation N/A under MIG ({limit})")
        elif busy is None:
            problems.append("utilisation N/A")
        elif busy > max_utilization_pct:
            problems.append(f"is {busy}% busy ({limit})")
    if not problems:
        return None
    return f"{candidate.label} {' and '.join(problems)}"


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
    picked, reasons = co.rank_cluster(
        cluster,
        n=n,
        min_free_bytes=min_free_bytes,
        max_utilization_pct=max_utilization_pct,
        output_format=output_format,
    )
    if len(picked) < n:
        print(co.cluster_failure_line(cluster, picked, reasons, n), file=sys.stderr)
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
