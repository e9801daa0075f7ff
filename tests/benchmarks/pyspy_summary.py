#!/usr/bin/env python3
"""Summarise a py-spy profile of gpumon by where the CPU goes (a script, not a test).

Reads ``py-spy record --format raw --threads`` output (collapsed stacks: one
``frame;frame;... count`` line per stack; each frame ``function (file:line)``, the first one
``thread (tid): name``) and prints:

* the share of samples per part of gpumon: NVML sampling, host process reads (psutil),
  model building, our widgets (gpumon/ui), Textual (compositor, render, event loop), ...
  Each sample goes to the part that owns its *innermost* gpumon frame (gpumon/cli.py and
  __main__.py, which are under every main-thread stack, do not count);
* the functions with the most samples of their own (the leaf frame, file:line);
* the gpumon lines with the most samples under them (inclusive).

With ``--rate`` and ``--seconds`` (what py-spy recorded with) samples become % of one core:
samples / (rate x seconds), once samples of threads blocked in select(), a condition or a
queue are left out (py-spy does not always tell them apart itself), is the CPU.

    python tests/benchmarks/pyspy_summary.py PROFILE.txt [--rate 200 --seconds 30]

``bench_dashboard.py --py-spy DIR`` records and summarises gpumon's runs with this.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

FRAME_RE = re.compile(r"^(?P<func>.*) \((?P<file>[^():]+):(?P<line>\d+)\)$")
# Frames that sit under every main-thread stack: they say nothing about where time goes.
ENTRY_FILES = ("gpumon/__main__.py", "gpumon/cli.py")
NATIVE_LIBS = ("libnvidia-ml", "fakenvml")

RENDER_FUNCS = {"Screen._compositor_refresh", "App._display", "Widget.render_lines"}
LAYOUT_FILES = (
    "textual/_arrange",
    "textual/_layout",
    "textual/layouts",
    "textual/css",
    "textual/dom",
    "textual/_styles_cache",
    "textual/_resolve",
)
LAYOUT_FUNCS = {"Screen._refresh_layout", "Widget._size_updated", "Screen._update_styles"}

PARTS = (
    "NVML sampling (gpumon/sources/nvml*.py, pynvml, the library)",
    "host process reads (gpumon/sources/host/inspector.py, psutil)",
    "host strip (sample_host: psutil CPU/RAM/swap)",
    "model building (Sample/GpuProcess, gpumon/data/model.py, snapshot.py)",
    "poller hand-off (gpumon/sampling/poller.py)",
    "our widgets (gpumon/ui/*, incl. Rich/Textual calls they make)",
    "Textual: compositor and rendering",
    "Textual: layout, styles, DOM",
    "Textual: event loop, messages, timers",
    "Textual: terminal output (driver, writer thread)",
    "Textual: input thread",
    "other",
)


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.func} ({self.file}:{self.line})"


def parse_frame(text: str) -> Frame:
    match = FRAME_RE.match(text.strip())
    if match is None:
        return Frame(text.strip(), "?", 0)
    return Frame(match["func"], match["file"], int(match["line"]))


def read_profile(lines: Iterable[str]) -> list[tuple[str, list[Frame], int]]:
    """(thread name, frames outermost first, samples) per collapsed stack."""
    stacks = []
    for raw in lines:
        raw = raw.rstrip("\n")
        if not raw.strip():
            continue
        body, _, count = raw.rpartition(" ")
        if not count.isdigit():
            continue
        parts = body.split(";")
        thread = ""
        if parts and parts[0].startswith(("thread (", "process (")):
            head = parts.pop(0)
            thread = head.split(": ", 1)[1] if ": " in head else head
            if parts and parts[0].startswith("thread ("):  # --subprocesses adds a level
                head = parts.pop(0)
                thread = head.split(": ", 1)[1] if ": " in head else head
        stacks.append((thread, [parse_frame(p) for p in parts], int(count)))
    return stacks


def is_idle(frames: Sequence[Frame]) -> bool:
    """A thread blocked waiting (select, a condition, a queue), not using CPU. py-spy drops
    idle threads itself only when it can tell; on a loaded machine (and in its default
    blocking mode) it records many of them, so they are recognised by their leaf frame."""
    if not frames:
        return False
    leaf = frames[-1]
    name = leaf.func.rsplit(".", 1)[-1]
    if leaf.file == "selectors.py" and name in ("select", "poll"):
        return True
    if leaf.file == "threading.py" and name in ("wait", "join", "_wait_for_tstate_lock"):
        return True
    if leaf.file == "queue.py" and name == "get":
        return True
    # Blocked in SimpleQueue.get() (C, so the leaf is the loop line itself; the loop's own
    # code is a few bytecodes per job): gpumon's poller thread between polls, and an
    # executor's worker thread (run_in_executor: the claims read) between jobs.
    if leaf.file == "concurrent/futures/thread.py" and leaf.func == "_worker":
        return True
    return leaf.file == "gpumon/sampling/poller.py" and leaf.func == "DaemonThread._work"


def is_gpumon(frame: Frame) -> bool:
    return frame.file.startswith("gpumon/") and frame.file not in ENTRY_FILES


def part_of(thread: str, frames: Sequence[Frame]) -> str:
    """The part of gpumon a stack belongs to (see PARTS)."""
    ours = [i for i, f in enumerate(frames) if is_gpumon(f)]
    if ours:
        inner = frames[ours[-1]]
        below = frames[ours[-1] + 1 :]
        path = inner.file
        if path == "gpumon/sources/host/inspector.py":
            if any(f.func == "sample_host" for f in frames):
                return PARTS[2]
            return PARTS[1]
        if path.startswith("gpumon/sources/nvml"):
            nvml_below = any(f.file.startswith(("pynvml", "ctypes")) for f in below)
            own = inner.func in ("NvmlSource._join_processes", "NvmlSource.sample")
            if path == "gpumon/sources/nvml/source.py" and own and not nvml_below:
                return PARTS[3]  # GpuProcess / Sample objects
            return PARTS[0]
        if path in ("gpumon/data/model.py", "gpumon/sampling/snapshot.py"):
            return PARTS[3]
        if path == "gpumon/sampling/poller.py":
            return PARTS[4]
        if path.startswith("gpumon/ui/") or path == "gpumon/data/format.py":
            return PARTS[5]
        return PARTS[-1]
    if thread == "textual-input":
        return PARTS[10]
    files = [f.file for f in frames]
    funcs = {f.func for f in frames}
    if thread == "gpumon-poller" and any(f.startswith("psutil/") for f in files):
        return PARTS[1]  # a stack cut short (--nonblocking): the poller reading /proc
    if any(lib in f for f in files for lib in NATIVE_LIBS) or any(
        f.startswith("pynvml") for f in files
    ):
        return PARTS[0]
    if any(f.startswith(("textual/drivers", "textual/_writer", "textual/_xterm")) for f in files):
        return PARTS[9]
    if (
        any(f.startswith(("textual/_compositor", "textual/strip", "rich/")) for f in files)
        or funcs & RENDER_FUNCS
    ):
        return PARTS[6]
    if any(f.startswith(LAYOUT_FILES) for f in files) or funcs & LAYOUT_FUNCS:
        return PARTS[7]
    if any(f.startswith(("textual/", "asyncio/")) for f in files):
        return PARTS[8]
    return PARTS[-1]


def summarise(
    stacks: Sequence[tuple[str, list[Frame], int]], rate: float | None, seconds: float | None
) -> str:
    idle = sum(count for _, frames, count in stacks if is_idle(frames))
    stacks = [stack for stack in stacks if not is_idle(stack[1])]
    total = sum(count for _, _, count in stacks)
    if not total:
        return "no samples"
    slots = rate * seconds if rate and seconds else None
    parts: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    leaf: Counter[tuple[str, str]] = Counter()
    inclusive: Counter[str] = Counter()
    sub_parts: dict[str, Counter[str]] = {PARTS[1]: Counter(), PARTS[5]: Counter()}
    for thread, frames, count in stacks:
        part = part_of(thread, frames)
        parts[part] += count
        threads[thread or "?"] += count
        if frames:
            leaf[(str(frames[-1]), part.split(" (")[0])] += count
        for frame in {str(f) for f in frames if is_gpumon(f)}:
            inclusive[frame] += count
        if part in sub_parts and any(is_gpumon(f) for f in frames):
            innermost = next(f for f in reversed(frames) if is_gpumon(f))
            below = next((f for f in frames[frames.index(innermost) + 1 :]), None)
            sub_parts[part][f"{innermost} -> {below.func if below else '(own code)'}"] += count

    def share(n: int) -> str:
        core = f"{n / slots * 100:6.2f} %core" if slots else ""
        return f"{n:6d} {n / total * 100:5.1f} % {core}"

    out = [f"{total} busy samples" + (f" over {seconds:g} s at {rate:g} Hz" if slots else "")]
    if slots:
        out[0] += f": {total / slots * 100:.2f} % of one core"
    out[0] += f" ({idle} samples of threads blocked in select/wait/queue.get left out)"
    out.append("\nby part (innermost gpumon frame decides; samples, share, % of one core):")
    for part in PARTS:
        if parts[part]:
            out.append(f"  {share(parts[part])}  {part}")
    out.append("\nby thread:")
    for thread, n in threads.most_common():
        out.append(f"  {share(n)}  {thread}")
    for part, counter in sub_parts.items():
        out.append(f"\n{part.split(' (')[0]}, by innermost gpumon line -> the call it makes:")
        for name, n in counter.most_common(12):
            out.append(f"  {share(n)}  {name}")
    out.append("\ntop functions by own samples (leaf frame, file:line, part):")
    for (name, part), n in leaf.most_common(25):
        out.append(f"  {share(n)}  {name}  [{part}]")
    out.append("\ntop gpumon lines by samples under them (inclusive):")
    for name, n in inclusive.most_common(25):
        out.append(f"  {share(n)}  {name}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("profile", type=Path, help="py-spy record --format raw --threads output")
    parser.add_argument("--rate", type=float, help="py-spy's --rate (samples per second)")
    parser.add_argument("--seconds", type=float, help="how long py-spy recorded")
    args = parser.parse_args(argv)
    try:
        lines = args.profile.read_text().splitlines()
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summarise(read_profile(lines), args.rate, args.seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
