#!/usr/bin/env python3
"""Benchmark the gpumon dashboard in a real pseudo-terminal (a script, not a pytest test).

Runs ``python -m gpumon --demo --demo-gpus 8 --demo-processes 64 --interval 1`` on the slave
side of a 200x50 pty (TERM=xterm-256color, LANG=C.UTF-8, COLORTERM and NO_COLOR unset) while
this process drains the master side, and reports per run and as the median over the runs:

* CPU % of one core in steady state (user+system of the app and any descendants, over a
  window that starts a warm-up after the first full frame),
* time from just before the child is started to the first full frame (the process table's
  header words and at least one demo process command are on the screen),
* peak RSS (sampled every 0.25 s over the whole run, and VmHWM at the end; the larger),
* bytes written to the terminal per second over the steady-state window.

Usage::

    python tests/benchmarks/bench_dashboard.py [--runs 3] [--seconds 30] [--warmup 5] [--json]
    python tests/benchmarks/bench_dashboard.py --runs 1 --seconds 10 \\
        --capture /tmp/gpumon_pty_capture.bin --breakdown

``--breakdown`` classifies the last run's steady-state bytes (cursor movement, SGR, text,
other escapes) and lists the screen rows that are rewritten most often. Needs Linux and
psutil. Exit status: 0 when every median meets its target, 1 when one does not, 2 on error.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import platform
import re
import selectors
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

COLUMNS = 200
ROWS = 50
MIB = 1024 * 1024

# metric key -> (label, unit, target, nvitop on the same simulated server)
METRICS: dict[str, tuple[str, str, float, float]] = {
    "cpu_percent": ("CPU, % of one core", "%", 1.7, 3.4),
    "first_frame_s": ("first full frame", "s", 0.5, 1.0),
    "peak_rss_mib": ("peak RSS", "MiB", 80.0, 26.0),
    "bytes_per_s": ("bytes to terminal", "B/s", 1000.0, 900.0),
}

# The first full frame: the process table's header and at least one row of a demo process
# (every demo command starts with "python", "/opt/conda/bin/python" or "accelerate launch";
# before the first sample the table reads "No processes on any GPU.").
HEADER_WORDS = ("PID", "COMMAND")
PROCESS_MARKER = re.compile(r"\bpython\b|accelerate launch")
MARKER_DESCRIPTION = (
    "ANSI-stripped output contains 'PID' and 'COMMAND' and a demo command "
    "(regex r'\\bpython\\b|accelerate launch')"
)

ANSI_RE = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    rb"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    rb"|\x1b[ -/]*[0-~]"  # other ESC sequences
)
TOKEN_RE = re.compile(
    rb"(?P<csi>\x1b\[(?P<params>[0-?]*)[ -/]*(?P<final>[@-~]))"
    rb"|(?P<osc>\x1b\][^\x07\x1b]*(?:\x07|\x1b\\))"
    rb"|(?P<esc>\x1b[ -/]*[0-~])"
    rb"|(?P<ctl>[\x00-\x1f\x7f])"
    rb"|(?P<text>[^\x00-\x1f\x7f]+)",
    re.DOTALL,
)
CURSOR_FINALS = frozenset(b"HfABCDEFGad`")
CURSOR_CONTROLS = frozenset(b"\r\n\b\t")
# Gap between two reads that starts a new frame (an update burst) in the byte stream.
FRAME_GAP_S = 0.03

# Replies a modern terminal would give to Textual's DECRQM queries (only with --answer-queries;
# by default they go unanswered, which Textual does not wait for).
QUERY_REPLIES = {
    b"\x1b[?2026$p": b"\x1b[?2026;2$y",  # synchronized output: supported, reset
    b"\x1b[?2048$p": b"\x1b[?2048;0$y",  # in-band resize: not recognised
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def strip_ansi(data: bytes) -> str:
    return ANSI_RE.sub(b"", data).decode("utf-8", "replace")


def is_full_frame(text: str) -> bool:
    return all(word in text for word in HEADER_WORDS) and bool(PROCESS_MARKER.search(text))


class PtyReader(threading.Thread):
    """Drains the pty master continuously, keeping every chunk with its arrival time."""

    def __init__(self, fd: int, *, answer_queries: bool) -> None:
        super().__init__(name="pty-reader", daemon=True)
        self.fd = fd
        self.answer_queries = answer_queries
        self.chunks: list[tuple[float, bytes]] = []
        self.first_frame_at: float | None = None
        self.first_frame = threading.Event()
        self.queries_seen: Counter[str] = Counter()
        self._head = bytearray()
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop_event.set()

    def snapshot(self) -> list[tuple[float, bytes]]:
        with self._lock:
            return list(self.chunks)

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.fd, selectors.EVENT_READ)
        try:
            while not self._stop_event.is_set():
                if not selector.select(0.1):
                    continue
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # EIO: every slave fd is closed (the child has exited)
                    break
                if not data:
                    break
                now = time.perf_counter()
                with self._lock:
                    self.chunks.append((now, data))
                self._handle_queries(data)
                if self.first_frame_at is None:
                    self._head += data
                    if is_full_frame(strip_ansi(bytes(self._head))):
                        self.first_frame_at = now
                        self.first_frame.set()
                        self._head.clear()
        finally:
            selector.close()

    def _handle_queries(self, data: bytes) -> None:
        for query, reply in QUERY_REPLIES.items():
            if query in data:
                self.queries_seen[query.decode("ascii", "replace")[1:]] += 1
                if self.answer_queries:
                    with contextlib.suppress(OSError):
                        os.write(self.fd, reply)


@dataclass
class Config:
    command: list[str]
    warmup_s: float
    seconds: float
    answer_queries: bool
    first_frame_timeout_s: float = 30.0
    sample_every_s: float = 0.25


@dataclass
class RunResult:
    first_frame_s: float | None = None
    cpu_percent: float | None = None
    peak_rss_mib: float | None = None
    bytes_per_s: float | None = None
    window_s: float = 0.0
    window_bytes: int = 0
    frames_per_s: float = 0.0
    bytes_to_first_frame: int = 0
    sampled_rss_peak_mib: float = 0.0
    vm_hwm_mib: float | None = None
    descendants: int = 0
    load_average_1m: float = 0.0
    exit: str = ""
    left_behind: list[int] = field(default_factory=list)
    queries_seen: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    # Everything read from the pty, and the steady-state window's bounds (perf_counter).
    chunks: list[tuple[float, bytes]] = field(default_factory=list, repr=False)
    window: tuple[float, float] | None = field(default=None, repr=False)

    def window_chunks(self) -> list[tuple[float, bytes]]:
        if self.window is None:
            return []
        t0, t1 = self.window
        return [(at, data) for at, data in self.chunks if t0 <= at < t1]


def cpu_seconds(process: psutil.Process) -> tuple[float, int]:
    """User+system seconds of the process (all threads) and its live descendants."""
    times = process.cpu_times()
    total = times.user + times.system
    descendants = 0
    with contextlib.suppress(psutil.Error):
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
                descendants += 1
    return total, descendants


def vm_hwm_bytes(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+)\s+kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def child_environment() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("COLORTERM", "NO_COLOR", "FORCE_COLOR", "TEXTUAL", "TERM_PROGRAM"):
        env.pop(name, None)
    # COLUMNS/LINES would override the pty's window size.
    for name in ("COLUMNS", "LINES", "LC_ALL", "LC_CTYPE"):
        env.pop(name, None)
    env.update(TERM="xterm-256color", LANG="C.UTF-8")
    return env


def make_controlling_tty() -> None:  # runs in the child, after setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def session_members(sid: int) -> list[int]:
    members = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if pid != sid and os.getsid(pid) == sid:
                members.append(pid)
    return members


def stop_child(proc: subprocess.Popen[bytes], master: int) -> tuple[str, list[int]]:
    """Ask the app to quit with "q"; after 3 s escalate. Returns (how it ended, left behind)."""
    how = "quit on 'q'"
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.write(master, b"q")
        try:
            proc.wait(3.0)
        except subprocess.TimeoutExpired:
            how = "SIGTERM after 'q' timed out"
            proc.terminate()
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                how = "SIGKILL"
                proc.kill()
                proc.wait()
    else:
        how = "exited by itself"
    how += f" (exit status {proc.returncode})"
    # The child led its own session: anything still in it was left behind by the app.
    left = session_members(proc.pid)
    if left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in left:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).wait(2.0)
    return how, left


def count_frames(chunks: Sequence[tuple[float, bytes]]) -> int:
    frames = 0
    last = float("-inf")
    for at, _ in chunks:
        if at - last > FRAME_GAP_S:
            frames += 1
        last = at
    return frames


def run_once(config: Config) -> RunResult:
    result = RunResult(load_average_1m=os.getloadavg()[0])
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    reader = PtyReader(master, answer_queries=config.answer_queries)
    started = time.perf_counter()
    proc = subprocess.Popen(
        config.command,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=child_environment(),
        close_fds=True,
        start_new_session=True,
        preexec_fn=make_controlling_tty,
    )
    os.close(slave)
    reader.start()
    try:
        process = psutil.Process(proc.pid)
        rss_peak = 0
        window_start: tuple[float, float] | None = None
        window_end: tuple[float, float] | None = None
        next_sample = started
        while True:
            now = time.perf_counter()
            if proc.poll() is not None:
                result.error = f"gpumon exited early with status {proc.returncode}"
                break
            with contextlib.suppress(psutil.Error):
                rss_peak = max(rss_peak, process.memory_info().rss)
            first = reader.first_frame_at
            if first is None:
                if now - started > config.first_frame_timeout_s:
                    result.error = f"no full frame within {config.first_frame_timeout_s:.0f} s"
                    break
            elif window_start is None and now >= first + config.warmup_s:
                cpu, _ = cpu_seconds(process)
                window_start = (time.perf_counter(), cpu)
            elif window_start is not None and now >= window_start[0] + config.seconds:
                cpu, result.descendants = cpu_seconds(process)
                window_end = (time.perf_counter(), cpu)
                break
            next_sample += config.sample_every_s
            time.sleep(max(0.0, next_sample - time.perf_counter()))
        hwm = vm_hwm_bytes(proc.pid)
        result.sampled_rss_peak_mib = rss_peak / MIB
        result.vm_hwm_mib = hwm / MIB if hwm is not None else None
        result.peak_rss_mib = max(rss_peak, hwm or 0) / MIB
        if reader.first_frame_at is not None:
            result.first_frame_s = reader.first_frame_at - started
        if window_start is not None and window_end is not None:
            t0, cpu0 = window_start
            t1, cpu1 = window_end
            result.window_s = t1 - t0
            result.cpu_percent = (cpu1 - cpu0) / result.window_s * 100.0
            result.window = (t0, t1)
            result.chunks = reader.snapshot()
            chunks = result.window_chunks()
            result.window_bytes = sum(len(data) for _, data in chunks)
            result.bytes_per_s = result.window_bytes / result.window_s
            result.frames_per_s = count_frames(chunks) / result.window_s
    finally:
        result.exit, result.left_behind = stop_child(proc, master)
        reader.join(2.0)
        reader.stop()
        reader.join(1.0)
        os.close(master)
    if reader.first_frame_at is not None:
        result.bytes_to_first_frame = sum(
            len(data) for at, data in reader.chunks if at <= reader.first_frame_at
        )
    result.queries_seen = dict(reader.queries_seen)
    return result


# --- byte breakdown ------------------------------------------------------------------------


class VirtualScreen:
    """Just enough of a terminal to know which text lands on which row."""

    def __init__(self, columns: int, rows: int) -> None:
        self.columns = columns
        self.rows = rows
        self.cells = [[" "] * columns for _ in range(rows)]
        self.row = 0
        self.col = 0

    def move(self, row: int, col: int) -> None:
        self.row = min(max(row, 0), self.rows - 1)
        self.col = min(max(col, 0), self.columns - 1)

    def write(self, text: str) -> None:
        line = self.cells[self.row]
        for char in text:
            if self.col < self.columns:
                line[self.col] = char
            self.col += 1

    def erase_line(self, mode: int) -> None:
        line = self.cells[self.row]
        span = {0: range(self.col, self.columns), 1: range(0, self.col + 1)}.get(
            mode, range(self.columns)
        )
        for index in span:
            if index < self.columns:
                line[index] = " "

    def text(self, row: int) -> str:
        return "".join(self.cells[row]).rstrip()


def _csi_numbers(params: str, count: int, default: int) -> list[int]:
    values = [int(part) if part.isdigit() else default for part in params.split(";")]
    return (values + [default] * count)[:count]


def breakdown(result: RunResult) -> dict[str, Any]:
    """Bytes per second per kind, the commonest escapes, and the rows rewritten most."""
    assert result.window is not None
    chunks = result.window_chunks()
    duration_s = result.window_s
    warm_stream = b"".join(data for at, data in result.chunks if at < result.window[0])
    screen = VirtualScreen(COLUMNS, ROWS)
    kinds: Counter[str] = Counter()
    sequences: dict[str, Counter[str]] = {"sgr": Counter(), "other": Counter()}
    row_bytes: Counter[int] = Counter()  # every byte, charged to the row the cursor is on
    row_text: Counter[int] = Counter()
    row_frames: Counter[int] = Counter()
    row_moves: Counter[int] = Counter()
    rows_per_frame: list[int] = []

    def move_cursor(final: int, params: str) -> None:
        n = _csi_numbers(params, 1, 1)[0]
        if final in (ord("H"), ord("f")):
            r, c = _csi_numbers(params, 2, 1)
            screen.move(r - 1, c - 1)
        elif final == ord("A"):
            screen.move(screen.row - n, screen.col)
        elif final == ord("B"):
            screen.move(screen.row + n, screen.col)
        elif final in (ord("C"), ord("a")):
            screen.move(screen.row, screen.col + n)
        elif final == ord("D"):
            screen.move(screen.row, screen.col - n)
        elif final in (ord("G"), ord("`")):
            screen.move(screen.row, n - 1)
        elif final == ord("d"):
            screen.move(n - 1, screen.col)

    def feed(data: bytes, *, count: bool, frame_rows: set[int]) -> None:
        for match in TOKEN_RE.finditer(data):
            size = match.end() - match.start()
            token = match.group(0)
            if match.group("text") is not None:
                kind = "text"
                if count:
                    row_text[screen.row] += size
                    frame_rows.add(screen.row)
                screen.write(match.group("text").decode("utf-8", "replace"))
            elif match.group("csi") is not None:
                params = match.group("params").decode("ascii", "replace")
                final = match.group("final")[0]
                private = params[:1] in ("?", ">", "<", "=")
                if final == ord("m") and not private:
                    kind = "sgr"
                elif final in CURSOR_FINALS and not private:
                    kind = "cursor"
                    move_cursor(final, params)
                    if count and final in (ord("H"), ord("f")):
                        row_moves[screen.row] += 1
                else:
                    kind = "other"
                    if final == ord("K") and not private:
                        screen.erase_line(_csi_numbers(params, 1, 0)[0])
            elif match.group("ctl") is not None and token[0] in CURSOR_CONTROLS:
                kind = "cursor"
                if token == b"\r":
                    screen.col = 0
                elif token == b"\n":
                    screen.move(screen.row + 1, screen.col)
                elif token == b"\b":
                    screen.move(screen.row, screen.col - 1)
            else:
                kind = "other"
            if count:
                kinds[kind] += size
                row_bytes[screen.row] += size
                if kind in sequences:
                    sequences[kind][token[:24].decode("ascii", "replace")] += size

    feed(warm_stream, count=False, frame_rows=set())
    # Parse the window as one stream (escapes can straddle reads) but keep read times to
    # split it into frames: a read that comes FRAME_GAP_S after the previous starts a frame.
    stream = b"".join(data for _, data in chunks)
    boundaries = []
    offset = 0
    last = float("-inf")
    for at, data in chunks:
        if at - last > FRAME_GAP_S:
            boundaries.append(offset)
        last = at
        offset += len(data)
    boundaries.append(len(stream))
    for start, end in itertools.pairwise(boundaries):
        frame_rows: set[int] = set()
        feed(stream[start:end], count=True, frame_rows=frame_rows)
        rows_per_frame.append(len(frame_rows))
        for row in frame_rows:
            row_frames[row] += 1
    total = sum(kinds.values())
    rows = [
        {
            "row": row + 1,
            "bytes_per_s": row_bytes[row] / duration_s,
            "text_bytes_per_s": row_text[row] / duration_s,
            "frames_per_s": row_frames[row] / duration_s,
            "cursor_moves_per_s": row_moves[row] / duration_s,
            "screen": screen.text(row),
        }
        for row, _ in row_bytes.most_common()
    ]
    return {
        "duration_s": duration_s,
        "bytes_per_s": total / duration_s,
        "frames_per_s": len(rows_per_frame) / duration_s,
        "rows_changed_per_frame": statistics.mean(rows_per_frame) if rows_per_frame else 0.0,
        "bytes_per_s_by_kind": {
            kind: kinds[kind] / duration_s for kind in ("cursor", "sgr", "text", "other")
        },
        "top_sequences_bytes_per_s": {
            kind: {seq: size / duration_s for seq, size in counter.most_common(8)}
            for kind, counter in sequences.items()
        },
        "rows": rows,
    }


def print_breakdown(report: dict[str, Any]) -> None:
    print(
        f"\nByte breakdown of the last run's steady state ({report['duration_s']:.1f} s, "
        f"{report['bytes_per_s']:.0f} B/s, {report['frames_per_s']:.2f} update bursts/s, "
        f"{report['rows_changed_per_frame']:.1f} rows with new text per burst):"
    )
    labels = {
        "cursor": "cursor movement (CSI H/A-G/d, CR, LF)",
        "sgr": "SGR colour/style (CSI ... m)",
        "text": "printable text (UTF-8)",
        "other": "other escapes (modes, sync output, erase, OSC)",
    }
    total = max(report["bytes_per_s"], 1e-9)
    for kind, label in labels.items():
        value = report["bytes_per_s_by_kind"][kind]
        print(f"  {label:<48} {value:9.1f} B/s  {value / total * 100:5.1f} %")
    for kind, top in report["top_sequences_bytes_per_s"].items():
        if top:
            print(f"  top {kind} sequences:")
            for seq, value in top.items():
                shown = seq.encode("unicode_escape").decode("ascii")
                print(f"    {shown:<40} {value:8.1f} B/s")
    print("  rows by bytes (row: B/s, text B/s, bursts/s, CSI H/s | screen at the end):")
    for row in report["rows"][:20]:
        print(
            f"    {row['row']:>3}: {row['bytes_per_s']:7.1f} {row['text_bytes_per_s']:7.1f} "
            f"{row['frames_per_s']:5.2f} {row['cursor_moves_per_s']:6.2f} | {row['screen'][:80]}"
        )


# --- reporting -------------------------------------------------------------------------------


def machine_context(python: str) -> dict[str, Any]:
    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    probe = (
        "import sys, importlib.metadata as m; print(sys.version.split()[0]); "
        "print(m.version('textual')); print(m.version('gpumon'))"
    )
    versions = ["?", "?", "?"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, timeout=30, check=True
        )
        versions = (out.stdout.split() + versions)[:3]
    return {
        "cpu_model": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "python": versions[0],
        "textual": versions[1],
        "gpumon": versions[2],
        "platform": platform.platform(),
    }


def fmt(value: float | None, key: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if key in ("cpu_percent", "first_frame_s") else f"{value:.1f}"


def summarise(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for key, (label, unit, target, peer) in METRICS.items():
        values = [getattr(r, key) for r in results if getattr(r, key) is not None]
        median = statistics.median(values) if len(values) == len(results) else None
        summary[key] = {
            "label": label,
            "unit": unit,
            "runs": [getattr(r, key) for r in results],
            "median": median,
            "target": target,
            "nvitop": peer,
            "pass": median is not None and median <= target,
        }
    return summary


def print_report(
    context: dict[str, Any],
    config: Config,
    results: Sequence[RunResult],
    summary: dict[str, dict[str, Any]],
) -> None:
    print(
        f"Machine: {context['cpu_model']}, {context['logical_cores']} logical / "
        f"{context['physical_cores']} physical cores; Python {context['python']}, "
        f"textual {context['textual']}, gpumon {context['gpumon']}; {context['platform']}"
    )
    print(f"Command: {' '.join(config.command)}")
    print(
        f"Terminal: pty {COLUMNS}x{ROWS}, TERM=xterm-256color LANG=C.UTF-8, COLORTERM/NO_COLOR "
        f"unset; terminal queries {'answered' if config.answer_queries else 'not answered'}"
    )
    print(f"First frame marker: {MARKER_DESCRIPTION}")
    print(
        f"Steady state: {config.warmup_s:g} s warm-up after the first frame, then a "
        f"{config.seconds:g} s window; RSS sampled every {config.sample_every_s:g} s + VmHWM\n"
    )
    for index, r in enumerate(results, 1):
        hwm = f"{r.vm_hwm_mib:.1f}" if r.vm_hwm_mib is not None else "n/a"
        print(
            f"run {index}: window {r.window_s:.1f} s, {r.window_bytes} B, "
            f"{r.frames_per_s:.2f} bursts/s; RSS sampled {r.sampled_rss_peak_mib:.1f} MiB, "
            f"VmHWM {hwm} MiB; {r.bytes_to_first_frame} B before first frame; "
            f"load {r.load_average_1m:.2f}; descendants {r.descendants}; {r.exit}; "
            f"left behind: {r.left_behind or 'none'}" + (f"; ERROR: {r.error}" if r.error else "")
        )
    header = "".join(f"{'run ' + str(i):>9}" for i in range(1, len(results) + 1))
    print(f"\n{'metric':<24}{header}{'median':>9}{'target':>11}{'nvitop':>9}  verdict")
    for key, row in summary.items():
        runs = "".join(f"{fmt(v, key):>9}" for v in row["runs"])
        label = f"{row['label']} ({row['unit']})"
        print(
            f"{label:<24}{runs}{fmt(row['median'], key):>9}{'<= ' + fmt(row['target'], key):>11}"
            f"{fmt(row['nvitop'], key):>9}  {'PASS' if row['pass'] else 'FAIL'}"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="repetitions (default: 3)")
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="steady-state window (default: 30)"
    )
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds after the first frame (default: 5)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary only")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter that runs gpumon (default: this)"
    )
    parser.add_argument(
        "--answer-queries",
        action="store_true",
        help="answer Textual's DECRQM queries like a modern terminal (sync output supported)",
    )
    parser.add_argument(
        "--capture", type=Path, help="write the last run's steady-state pty bytes to this file"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="classify the last run's steady-state bytes and list the busiest screen rows",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--runs must be >= 1, --seconds > 0, --warmup >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = [
        args.python,
        "-m",
        "gpumon",
        "--demo",
        "--demo-gpus",
        "8",
        "--demo-processes",
        "64",
        "--interval",
        "1",
    ]
    config = Config(
        command=command,
        warmup_s=args.warmup,
        seconds=args.seconds,
        answer_queries=args.answer_queries,
    )
    context = machine_context(args.python)
    results: list[RunResult] = []
    for index in range(1, args.runs + 1):
        log(f"run {index}/{args.runs}: about {args.warmup + args.seconds + 2:.0f} s ...")
        result = run_once(config)
        results.append(result)
        if result.error:
            log(f"run {index}: {result.error}")
    last = results[-1]
    if args.capture is not None:
        args.capture.write_bytes(b"".join(data for _, data in last.window_chunks()))
        log(f"wrote {last.window_bytes} bytes of steady-state output to {args.capture}")
    report = None
    if args.breakdown and last.window is not None:
        report = breakdown(last)
    summary = summarise(results)
    if args.json:
        runs = [
            {k: v for k, v in asdict(r).items() if k not in ("chunks", "window")} for r in results
        ]
        payload = {
            "machine": context,
            "command": command,
            "terminal": {"columns": COLUMNS, "rows": ROWS, "answer_queries": args.answer_queries},
            "first_frame_marker": MARKER_DESCRIPTION,
            "warmup_s": args.warmup,
            "window_s": args.seconds,
            "runs": runs,
            "metrics": summary,
            "breakdown": report,
            "pass": all(row["pass"] for row in summary.values()),
        }
        print(json.dumps(payload, indent=2))
    else:
        print_report(context, config, results, summary)
        if report is not None:
            print_breakdown(report)
    if any(r.error for r in results):
        return 2
    return 0 if all(row["pass"] for row in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
