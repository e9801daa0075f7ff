"""``gpumon probe``: the torch probe without the dashboard.

Prints each step as it finishes (``--json``: every protocol event as a JSON line). Exit status:
0 when no step failed (steps skipped because they do not apply, such as the cross-device step
with one visible GPU, are fine), 1 when a step failed, 2 for bad arguments.

The top level imports neither torch nor textual: ``gpumon --help`` loads this module.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING

from gpumon.config.text import decimal_number, whole_number
from gpumon.probe import steps as S

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.probe.protocol import Event, Request, StepEvent
    from gpumon.probe.runner import ProbeOutcome
    from gpumon.sources.base import GpuSource


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
MAX_SIZE_MIB = 64 * 1024
MAX_TIMEOUT_S = 3600.0


def _cuda_device(text: str) -> int:
    match = re.fullmatch(r"(?:cuda:)?([0-9]+)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected cuda:N, e.g. cuda:0 (got {text!r})")
    return int(match.group(1))


def _size_mib(text: str) -> int:
    value = whole_number(text, "a whole number of MiB")
    if not 1 <= value <= MAX_SIZE_MIB:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_SIZE_MIB} MiB (got {value})")
    return value


def _timeout_s(text: str) -> float:
    value = decimal_number(text, "a number of seconds")
    if not 1 <= value <= MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_TIMEOUT_S:g} seconds (got {text})")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``gpumon probe`` options."""
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--gpu",
        metavar="INDEX|UUID",
        help="the GPU to probe, by nvidia-smi index or UUID (a unique prefix will do)",
    )
    target.add_argument(
        "--device",
        metavar="cuda:N",
        type=_cuda_device,
        help="the GPU to probe, by torch's cuda:N in this environment (default: cuda:0)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the probe's events as JSON lines"
    )
    parser.add_argument(
        "--python",
        metavar="PATH",
        default=None,
        help="the interpreter to probe, e.g. your training environment's python "
        "(default: --probe-python, else the one running gpumon)",
    )
    parser.add_argument(
        "--size",
        metavar="MiB",
        type=_size_mib,
        default=S.DEFAULT_SIZE_MIB,
        help=f"GPU memory to allocate (default: {S.DEFAULT_SIZE_MIB}; never more than "
        f"{S.MAX_FREE_FRACTION * 100:.0f}%% of the free memory)",
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=_timeout_s,
        default=S.DEFAULT_TIMEOUT_S,
        help=f"kill the probe after this many seconds (default: {S.DEFAULT_TIMEOUT_S:g})",
    )


def _usage_error(message: str) -> int:
    print(f"gpumon probe: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _resolve_python(wanted: str) -> str | None:
    found = shutil.which(wanted) if os.sep not in wanted else wanted
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        return None
    return found


def run(
    settings: Settings,
    *,
    gpu: str | None,
    device: int | None,
    python: str | None,
    size: int,
    json: bool,
    timeout: float,
) -> int:
    """Run the probe once, print the steps, return the exit status (``python``: ``--python``,
    else ``probe_python``, else gpumon's interpreter).
    """
    import asyncio

    from gpumon.probe.protocol import Request

    if settings.demo:
        return _usage_error(
            "--demo simulates GPUs, and the probe needs a real one: run it without --demo"
        )
    wanted = python or settings.probe_python or sys.executable
    resolved = _resolve_python(wanted)
    if resolved is None:
        return _usage_error(f"--python {wanted}: not an executable file")

    from gpumon.sources.base import open_source

    source = open_source()
    try:
        sample = source.sample()
        # A GPU whose UUID NVML has not told (lost at start) cannot be matched to a cuda:N.
        gpus = tuple((gpu.index, gpu.uuid) for gpu in sample.gpus if gpu.uuid is not None)
        nvml_ok = sample.unavailable is None
        if gpu is not None:
            chosen = _choose_gpu(gpu, gpus, nvml_ok)
            if isinstance(chosen, str):
                return _usage_error(chosen)
            gpu_index, gpu_uuid = chosen
            request = Request(gpu_uuid, gpu_index, gpus=gpus, size_mib=size)
            label = f"GPU {gpu_index if gpu_index is not None else gpu_uuid}"
        else:
            cuda_index = 0 if device is None else device
            request = Request(cuda_index=cuda_index, gpus=gpus, size_mib=size)
            label = f"cuda:{cuda_index}"
        printer = _Printer(json)
        if not json:
            print(f"Probing {label} with {resolved} (timeout {timeout:g} s)", flush=True)
        try:
            outcome = asyncio.run(_probe(request, resolved, timeout, source, printer))
        except KeyboardInterrupt:
            print("gpumon probe: interrupted; the probe child was killed", file=sys.stderr)
            return EXIT_INTERRUPTED
    finally:
        source.close()
    return EXIT_OK if outcome.ok else EXIT_FAILED


def _choose_gpu(
    text: str, gpus: tuple[tuple[int, str], ...], nvml_ok: bool
) -> tuple[int | None, str | None] | str:
    """``(NVML index, UUID)`` for ``--gpu`` (either may be unknown), or a one-line error."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        index = int(text)
        if not nvml_ok:  # the child reports that it cannot map the index
            return (index, None)
        found = [uuid for i, uuid in gpus if i == index]
        if not found:
            known = ", ".join(str(i) for i, _ in gpus) or "none"
            return f"--gpu {index}: no such GPU (NVML lists: {known})"
        return (index, found[0])
    if not nvml_ok:
        return (None, text)
    key = S.uuid_key(text)
    matches = [uuid for _, uuid in gpus if key and S.uuid_key(uuid).startswith(key)]
    if len(matches) != 1:
        problem = "no GPU has this UUID" if not matches else "matches more than one GPU"
        return f"--gpu {text}: {problem} (see `gpumon once` for the UUIDs)"
    index = next(i for i, uuid in gpus if uuid == matches[0])
    return (index, matches[0])


#: How often ``gpumon probe`` samples NVML while the probe runs (for steps 6 and 9).
SAMPLE_INTERVAL_S = 0.5


async def _probe(
    request: Request, python: str, timeout_s: float, source: GpuSource, printer: _Printer
) -> ProbeOutcome:
    import asyncio

    from gpumon.probe.runner import run_probe
    from gpumon.sampling.poller import Poller
    from gpumon.sampling.store import Store

    # The dashboard's poller and store: steps 6 and 9 await the store's next sample.
    store = Store(SAMPLE_INTERVAL_S, history=False)
    poller = Poller(source, SAMPLE_INTERVAL_S, store.push)
    polling = asyncio.create_task(poller.run())
    try:
        return await run_probe(
            request,
            python=python,
            timeout_s=timeout_s,
            next_sample=store.next_sample,
            on_event=printer,
        )
    finally:
        polling.cancel()
        # The caller closes the source: not before a sample in flight has ended.
        await asyncio.wrap_future(poller.stop())


class _Printer:
    """Prints events as they come: final steps as text, or all as JSON lines. In text, step 9
    waits for the verdict, which the runner may amend after the child exits.
    """

    def __init__(self, json_lines: bool) -> None:
        self.json_lines = json_lines
        self.cleanup: StepEvent | None = None

    def __call__(self, event: Event) -> None:
        from gpumon.probe.protocol import Done, StepEvent, encode

        if self.json_lines:
            print(encode(event), flush=True)
        elif isinstance(event, StepEvent) and event.final:
            if event.step == S.CLEANUP.id:
                self.cleanup = event
            else:
                self._print_step(event)
        elif isinstance(event, Done):
            if self.cleanup is not None:
                self._print_step(self.cleanup)
            print(f"{'PASS' if event.ok else 'FAIL'}: {event.summary}", flush=True)

    @staticmethod
    def _print_step(event: StepEvent) -> None:
        label = S.STATUS_LABELS[event.status]
        timing = f"  ({S.duration_text(event.duration_ms)})" if event.status != S.SKIP else ""
        print(f"[{label}] {event.step}. {event.title:<28} {event.value}{timing}")
        if event.detail and event.status != S.SKIP:
            for line in event.detail.splitlines():
                print(f"{'':10}{line}")
        sys.stdout.flush()
