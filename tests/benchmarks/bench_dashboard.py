#!/usr/bin/env python3
"""Benchmark the gpumon dashboard in a real pseudo-terminal (a script, not a pytest test).

Two scenarios, each on the slave side of a 200x50 pty (``--size COLSxROWS`` for another;
TERM=xterm-256color, LANG=C.UTF-8, COLORTERM and NO_COLOR unset) while this process drains
the master side:

``--scenario demo`` (the default)
    ``python -m gpumon --demo --demo-gpus 8 --demo-processes 64 --interval 1``: a simulated
    server; absolute targets. First full frame: the process table's header words and at least
    one demo process command are in the output.

``--scenario real [--gpus 8] [--per-gpu 8]``
    ``python -m gpumon --interval 1`` reading NVML through ``--nvml-lib``: by default the fake
    library of ``../shared/fakenvml`` (built with ``make`` if needed, in a copy under $TMPDIR
    when that directory is read-only) with GPUS x PER_GPU *real* idle job processes started by
    its ``spawn_procs.py`` and always stopped at the end (also on Ctrl+C or an error), so the
    host side (psutil reads of real PIDs) costs what it costs on a server. ``--nvml-lib
    system`` uses the installed driver (no LD_LIBRARY_PATH override, no jobs); ``--nvml-lib
    DIR`` puts DIR (holding libnvidia-ml.so.1) first on LD_LIBRARY_PATH. First full frame:
    every ``--marker`` string (default ``fakejob.py``, the jobs' command) is visible at once
    on an emulated screen, on at least ``--marker-rows`` rows (default: min(processes, 10),
    so a process *list* is drawn, not its first row). Below 200x50 the monitors cut the
    command line before ``fakejob.py``: from 40 rows the default marker is ``-S /`` (the
    ``python -S /...`` before it) on as many rows; below 40 rows nvitop and nvtop show no
    process at all and it is every GPU's memory total (``79.6``) on one row per GPU.

``--jobs-age young|old|young,old`` (fake library)
    the jobs' age, which decides how much the TIME columns change: ``young`` stops the jobs
    and starts new ones before every run (so they are seconds old, under a minute, in the
    window); ``old`` runs on jobs kept between benchmarks in ``--old-jobs-dir`` (default
    ``$TMPDIR/gpumon-bench/old-jobs-GxP``): the first benchmark starts them (exiting by
    themselves after 4 h) and waits until the youngest is ``--old-age`` (600) s old, later
    ones reuse them at once (stop them with ``spawn_procs.py stop --dir DIR``);
    ``young,old`` alternates the two (young: every monitor, old: every monitor, ...) and
    reports each apart, never one median over both. Without it the jobs are started once
    and reused by every run, as before; their age is reported all the same. A run whose
    jobs were not of the promised age is warned about.

``--compare nvitop`` (real scenario) installs a pinned nvitop with pip into a throw-away venv
under $TMPDIR (reused later) and runs gpumon and nvitop alternately (ABAB...) on the same
pty, scenario, interval and first-frame marker, then prints each metric's median for both
and the ratio gpumon/nvitop against the targets: CPU <= 0.5x nvitop (<= 0.25x from 512
processes), first full frame <= 0.5x, bytes/s <= 1x, and gpumon's peak RSS <= 80 MiB.
``--compare nvitop,nvtop`` (or ``nvtop``) also runs nvtop (C; ``nvtop`` on PATH: Debian's
``contrib`` component, ``apt-get install nvtop``) as ``nvtop -d TENTHS -c FILE`` (its delay
in tenths of a second; a config file of its own, so none of the user's) in the same
rotation, and prints gpumon/nvtop ratios for the record, without targets.
``--compare ...,floor`` also runs Textual's floor (``textual_floor.py``: one ``Static`` with
the first-frame markers on as many rows, with ``--python``'s Textual), what any Textual app
costs to import, start and draw a frame: gpumon/floor ratios, for the record, say how much is
gpumon's own.

Which gpumon, and what it shows (both scenarios; by default gpumon is ``python -m gpumon``
as ``--python`` imports it, on the dashboard, as before):

``--gpumon-root PATH``
    run ``python -m gpumon`` with PATH as its working directory and first on PYTHONPATH, so
    the gpumon of that tree (a ``git worktree`` of an older commit, say) is measured; the
    benchmark checks before the first run that it is PATH's ``gpumon`` that is imported.
``--keys KEYS``
    once the first full frame is on the screen, type KEYS into the pty: space-separated key
    names (``enter``, ``escape``, ``tab``, ``up``, ``down``, ``left``, ``right``, ``space``,
    ``pageup``, ``pagedown``, ``home``, ``end``; ``ctrl+X``), or single characters sent as
    they are, 0.2 s apart. ``--keys enter`` opens the detail screen of the selected GPU (GPU
    0 at start-up). The warm-up, and so the steady-state window, then starts when the last
    key has been sent or, with ``--keys-marker TEXT``, when TEXT is first seen on the emulated
    screen after it (e.g. ``--keys enter --keys-marker 'Esc: back'``, the GPU detail screen's
    title; a run fails if it does not appear within the first-frame timeout). First full
    frame and peak RSS keep their meaning (the dashboard's start-up; the whole run).
    The key latency is measured too (see Metrics).
``--variant NAME[,root=PATH][,keys=KEYS][,keys-marker=TEXT]``
    (repeatable) one more gpumon to measure, run alternately with the first one (and nvitop
    with ``--compare``): ABCABC..., on the same jobs, pty, interval and first-frame marker.
    Its fields are the options above for it alone (nothing is inherited from ``--gpumon-root``
    or ``--keys``; without root= it is ``--python``'s gpumon). A table then gives each
    monitor's medians and each variant's ratio to the first (``gpumon``) and to the one
    before it; targets and exit status stay those of the first.

Metrics, per run and as the median over the runs:

* CPU % of one core in steady state: user+system of the monitor, its live descendants and
  reaped children, over a window that starts a warm-up after the first full frame (after
  the keys, with ``--keys``);
* time from just before the monitor is started to its first full frame;
* peak RSS (the tree's RSS sampled every 0.25 s over the whole run, and VmHWM at the end);
* bytes written to the terminal per second over the steady-state window;
* machine noise over the window: busy and steal % of the whole machine (100 = one core),
  and the 1-minute load average at the run's start and at the window's end (``--busy N``:
  N processes spin on the CPU during every run, a busy machine made on purpose);
* the jobs' age over the window (the youngest at its start, the oldest at its end);
* with ``--nvml-stats``, NVML calls per second over the whole run (the fake library's
  FAKENVML_STATS counts), per run and, under the summary, one line per monitor with the
  medians of the calls, the load averages and the jobs' age range;
* with ``--keys``, in ms: each key's write to the first pty output after it; with
  ``--keys-marker``, the key written last before the marker was first on the reader's
  emulated screen (the last key, or the one that really brought it, e.g. a search's last
  character before its ``enter``) to that moment (``keys -> marker``), and to the end of
  the output burst that drew it. The reader stamps each read with its arrival time and
  looks for the marker after every read, so this is not the main loop's 0.25 s sampling;
  a table gives median/min/max and how many are within one 60 frames/s frame (16.7 ms).

Usage (from the repository root)::

    python tests/benchmarks/bench_dashboard.py [--runs 3] [--seconds 30] [--warmup 5] [--json]
    python tests/benchmarks/bench_dashboard.py --scenario real --gpus 8 --per-gpu 8 \\
        --compare nvitop --runs 5
    python tests/benchmarks/bench_dashboard.py --scenario real --per-gpu 64 --compare nvitop
    python tests/benchmarks/bench_dashboard.py --scenario real --per-gpu 64 --py-spy /tmp/prof
    python tests/benchmarks/bench_dashboard.py --scenario real --nvml-lib system \\
        --marker python --compare nvitop          # on a GPU server
    python tests/benchmarks/bench_dashboard.py --runs 1 --seconds 10 \\
        --capture /tmp/gpumon_pty_capture.bin --breakdown
    python tests/benchmarks/bench_dashboard.py --scenario real --runs 5 \\
        --variant gpu-filter,keys=f,keys-marker='8 of 64' \\
        --variant search,keys='/ r a n k space 7 enter',keys-marker='8 of 64'
    git worktree add /tmp/gpumon-before OLD_COMMIT
    python tests/benchmarks/bench_dashboard.py --scenario real --per-gpu 64 \\
        --gpumon-root /tmp/gpumon-before --variant head,root=. \\
        --variant detail,root=.,keys=enter,keys-marker='Esc: back'

``--breakdown`` classifies the last run's steady-state bytes (cursor movement, SGR, text,
other escapes; screen area), lists the screen rows that are rewritten most, and which screen
cells really change (per process-table column). ``--py-spy DIR`` records gpumon's windows
with py-spy and prints where its CPU goes (``pyspy_summary.py``). Needs Linux and psutil.
Exit status: 0 when every target is met, 1 when one is not, 2 on error (including Ctrl+C).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import re
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyspy_summary
from bench_env import (
    FakeJobs,
    SetupError,
    build_fake_library,
    ensure_nvitop,
    is_fake_library,
    system_cpu,
    work_dir,
)
from pty_terminal import Responder, Screen, spawn_in_pty

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = 200
ROWS = 50
MIB = 1024 * 1024
NVITOP_VERSION = "1.7.2"
PEERS = ("nvitop", "nvtop", "floor")  # --compare: what gpumon is compared with
OLD_TTL_S = 4 * 3600.0  # --jobs-age old: the kept jobs exit by themselves after this
YOUNG_LIMIT_S = 60.0  # --jobs-age young: every job must be younger than this in the window

# metric key -> (label, unit)
LABELS: dict[str, tuple[str, str]] = {
    "cpu_percent": ("CPU, % of one core", "%"),
    "first_frame_s": ("first full frame", "s"),
    "peak_rss_mib": ("peak RSS", "MiB"),
    "bytes_per_s": ("bytes to terminal", "B/s"),
}
# Demo scenario: metric key -> (label, unit, target, nvitop on the same simulated server)
METRICS: dict[str, tuple[str, str, float, float]] = {
    "cpu_percent": ("CPU, % of one core", "%", 1.7, 3.4),
    "first_frame_s": ("first full frame", "s", 0.5, 1.0),
    "peak_rss_mib": ("peak RSS", "MiB", 80.0, 26.0),
    "bytes_per_s": ("bytes to terminal", "B/s", 1000.0, 900.0),
}
# Real-PID scenario targets: gpumon/nvitop ratios, and gpumon's RSS.
RSS_LIMIT_MIB = 80.0
FRAME_RATIO = 0.5
BYTES_RATIO = 1.0
NVML_CALLS_RATIO = 1.0  # NVML calls per second <= nvitop's (with --nvml-stats)
# nvitop's recorded medians, measured on another day (fake NVML, real PIDs, 200x50,
# --interval 1), keyed by (GPUs, processes per GPU): the reference for targets when nvitop is
# not run alongside.
RECORDED_NVITOP: dict[tuple[int, int], dict[str, float]] = {
    (8, 8): {"cpu_percent": 7.75, "first_frame_s": 1.41, "bytes_per_s": 977.0},
    (8, 64): {"cpu_percent": 37.6},
}


def cpu_ratio_target(processes: int) -> float:
    """gpumon's CPU as a fraction of nvitop's: 0.5 at 8x8, 0.25 from 512 processes."""
    return 0.25 if processes >= 512 else 0.5


# The demo's first full frame: the process table's header and at least one row of a demo
# process (every demo command starts with "python", "/opt/conda/bin/python" or "accelerate
# launch"; before the first sample the table reads "No processes on any GPU.").
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
# Real scenario's first full frame: the jobs' command on this many rows (both monitors show
# 20 or more process rows at 200x50).
MARKER_ROWS = 10
# A process-table row on the final screen: (border,) GPU index, then a PID.
PROCESS_ROW_RE = re.compile(r"^[\s│|]*\d+\s+\d+\s")
CURSOR_FINALS = frozenset(b"HfABCDEFGad`")
CURSOR_CONTROLS = frozenset(b"\r\n\b\t")
# Gap between two reads that starts a new frame (an update burst) in the byte stream.
FRAME_GAP_S = 0.03

# Replies a modern terminal would give to Textual's DECRQM queries (only with --answer-queries;
# by default they go unanswered, which Textual does not wait for). Other queries (cursor
# position, device attributes, ...) are always answered as xterm would (pty_terminal).
QUERY_REPLIES = {
    b"\x1b[?2026$p": b"\x1b[?2026;2$y",  # synchronized output: supported, reset
    b"\x1b[?2048$p": b"\x1b[?2048;0$y",  # in-band resize: not recognised
}

# --keys: what an xterm sends for each named key (normal cursor-key mode).
KEY_BYTES: dict[str, bytes] = {
    "enter": b"\r",
    "escape": b"\x1b",
    "esc": b"\x1b",
    "tab": b"\t",
    "backspace": b"\x7f",
    "space": b" ",
    "up": b"\x1b[A",
    "down": b"\x1b[B",
    "right": b"\x1b[C",
    "left": b"\x1b[D",
    "home": b"\x1b[H",
    "end": b"\x1b[F",
    "pageup": b"\x1b[5~",
    "pagedown": b"\x1b[6~",
}
KEY_GAP_S = 0.2  # between two keys (an ESC followed at once by more bytes reads as Alt+key)
# One frame at Textual's most frequent redraw (60 frames/s, TEXTUAL_FPS), for the key latency.
FRAME_MS = 1000.0 / 60
KEY_TRACE_MS = 150.0  # the reads kept after the key that brought the marker


def parse_keys(spec: str) -> tuple[bytes, ...]:
    """``--keys``: space-separated key names, ``ctrl+X``, or single characters as they are."""
    keys = []
    for word in spec.split():
        lowered = word.lower()
        if lowered in KEY_BYTES:
            keys.append(KEY_BYTES[lowered])
        elif lowered.startswith("ctrl+") and len(word) == 6 and word[5].isalpha():
            keys.append(bytes([ord(lowered[5]) - ord("a") + 1]))
        elif len(word) == 1:
            keys.append(word.encode())
        else:
            raise ValueError(
                f"unknown key {word!r} (names: {', '.join(KEY_BYTES)}, ctrl+X, or one character)"
            )
    if not keys:
        raise ValueError("no keys given")
    return tuple(keys)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def strip_ansi(data: bytes) -> str:
    return ANSI_RE.sub(b"", data).decode("utf-8", "replace")


def is_full_frame(text: str) -> bool:
    return all(word in text for word in HEADER_WORDS) and bool(PROCESS_MARKER.search(text))


@dataclass(frozen=True)
class FrameRule:
    """When a run's first full frame is there: ``markers`` all visible at once on the
    emulated screen, or (no markers) the demo rule on the ANSI-stripped output."""

    markers: tuple[str, ...] = ()
    rows: int = 1  # ... each on at least this many screen rows

    @property
    def description(self) -> str:
        if not self.markers:
            return MARKER_DESCRIPTION
        shown = " and ".join(repr(m) for m in self.markers)
        rows = f", each on at least {self.rows} rows," if self.rows > 1 else ""
        return f"{shown} visible{rows} on the emulated {COLUMNS}x{ROWS} screen"

    def reached(self, text: str) -> bool:
        if self.rows <= 1:
            return all(marker in text for marker in self.markers)
        lines = text.splitlines()
        return all(sum(marker in line for line in lines) >= self.rows for marker in self.markers)


class PtyReader(threading.Thread):
    """Drains the pty master continuously, keeping every chunk with its arrival time;
    answers terminal queries; spots the first full frame and, once armed with
    :meth:`watch`, the first time a text (``--keys-marker``) is on the emulated screen."""

    def __init__(self, fd: int, *, answer_queries: bool, rule: FrameRule) -> None:
        super().__init__(name="pty-reader", daemon=True)
        self.fd = fd
        self.answer_queries = answer_queries
        self.rule = rule
        self.chunks: list[tuple[float, bytes]] = []
        self.first_frame_at: float | None = None
        self.first_frame = threading.Event()
        self.first_screen = ""
        self.queries_seen: Counter[str] = Counter()
        self.screen = Screen(COLUMNS, ROWS)
        self.responder = Responder(COLUMNS, ROWS, self._cursor)
        self._fed = 0  # chunks fed to the screen emulator (lazily: only when it is needed)
        # --keys-marker: the text watched for and when (perf_counter) a chunk first put it on
        # the screen; stamped with that chunk's arrival time, as it arrives (not when the
        # main loop next looks).
        self.watched: str | None = None
        self.watched_at: float | None = None
        self._head = bytearray()
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop_event.set()

    def watch(self, text: str) -> bool:
        """From the next chunk on, look for ``text`` on the screen after every chunk and
        stamp ``watched_at`` with the arrival time of the first that shows it. Returns
        whether ``text`` is on the screen already (then it is only found again once a
        chunk arrives, which is no latency)."""
        with self._lock:
            already = text in self._catch_up().text()
            self.watched_at = None
            self.watched = text
        return already

    def snapshot(self) -> list[tuple[float, bytes]]:
        with self._lock:
            return list(self.chunks)

    def screen_text(self) -> str:
        with self._lock:
            return self._catch_up().text()

    def _catch_up(self) -> Screen:  # with self._lock held
        while self._fed < len(self.chunks):
            self.screen.feed(self.chunks[self._fed][1])
            self._fed += 1
        return self.screen

    def _cursor(self) -> tuple[int, int]:  # called from run(), with self._lock held
        screen = self._catch_up()
        return min(screen.x, screen.cols - 1), screen.y

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
                    if self.first_frame_at is None and self._is_full_frame(data):
                        self.first_frame_at = now
                        self.first_screen = self.screen.text() if self.rule.markers else ""
                        self.first_frame.set()
                        self._head.clear()
                    if (
                        self.watched is not None
                        and self.watched_at is None
                        and self.watched in self._catch_up().text()
                    ):
                        self.watched_at = now
        finally:
            selector.close()

    def _is_full_frame(self, data: bytes) -> bool:  # with self._lock held
        if self.rule.markers:
            return self.rule.reached(self._catch_up().text())
        self._head += data
        return is_full_frame(strip_ansi(bytes(self._head)))

    def _handle_queries(self, data: bytes) -> None:
        replies = []
        for query, reply in QUERY_REPLIES.items():
            if query in data:
                self.queries_seen[query.decode("ascii", "replace")[1:]] += 1
                if self.answer_queries:
                    replies.append(reply)
        before = self.responder.count
        replies.append(self.responder.feed(data))
        if self.responder.count > before:
            self.queries_seen["xterm queries answered"] += self.responder.count - before
        reply = b"".join(replies)
        if reply:
            with contextlib.suppress(OSError):
                os.write(self.fd, reply)


@dataclass
class Monitor:
    """One program to measure, and how."""

    name: str
    command: list[str]
    env: dict[str, str]
    rule: FrameRule
    quit_keys: bytes = b"q"
    cwd: str | None = None  # working directory (--gpumon-root)
    keys: tuple[bytes, ...] = ()  # typed after the first full frame (--keys)
    keys_marker: str | None = None  # the window waits for it after the keys (--keys-marker)
    keys_spec: str = ""  # --keys as given, for the report


@dataclass
class Config:
    warmup_s: float
    seconds: float
    answer_queries: bool
    first_frame_timeout_s: float = 30.0
    sample_every_s: float = 0.25
    nvml_stats: bool = False
    py_spy: str | None = None  # py-spy executable: record gpumon's steady-state window
    py_spy_rate: int = 200


@dataclass
class RunResult:
    monitor: str = "gpumon"
    first_frame_s: float | None = None
    frame_done_s: float | None = None  # end of the burst that drew the first frame
    keys_sent_s: float | None = None  # --keys: when the last key was sent (from the start)
    # --keys-marker: when the pty reader first had it on its screen (from the start; stamped
    # as the bytes arrived), and the latency from the key written last before that moment
    # (the last key, or an earlier one when the marker came before the rest, e.g. a search
    # text's last character before its Enter): to the marker, and to the end of the output
    # burst that drew it (the rest of the frame). keys_marker_key: that key (1-based).
    keys_shown_s: float | None = None
    keys_marker_key: int | None = None
    keys_marker_ms: float | None = None
    keys_frame_done_ms: float | None = None
    keys_at_s: list[float] = field(default_factory=list)  # each key's write (from the start)
    # Per key: its write to the first pty output after it, ms (None: none before the next).
    key_output_ms: list[float | None] = field(default_factory=list)
    # The reads in the KEY_TRACE_MS after the marker's key: (ms after the key, bytes).
    keys_marker_reads: list[tuple[float, int]] = field(default_factory=list)
    cpu_percent: float | None = None
    peak_rss_mib: float | None = None
    bytes_per_s: float | None = None
    window_s: float = 0.0
    window_bytes: int = 0
    frames_per_s: float = 0.0
    bytes_to_first_frame: int = 0
    startup_cpu_s: float | None = None
    sampled_rss_peak_mib: float = 0.0
    vm_hwm_mib: float | None = None
    descendants: int = 0
    load_average_1m: float = 0.0  # at the start of the run
    load_average_1m_end: float | None = None  # at the end of the window
    jobs: str = ""  # which job set (--jobs-age): "young", "old", or "" (started once)
    # The jobs' age over the window: the youngest job's at its start, the oldest's at its end.
    job_age_start_s: float | None = None
    job_age_end_s: float | None = None
    machine_busy_pct: float | None = None
    steal_pct: float | None = None
    nvml_calls_per_s: float | None = None
    nvml_top: str | None = None
    # --nvml-stats: NVML function (without "nvmlDevice"/"nvml") -> calls per second.
    nvml_calls: dict[str, float] = field(default_factory=dict)
    exit: str = ""
    left_behind: list[int] = field(default_factory=list)
    queries_seen: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    # Everything read from the pty, and the steady-state window's bounds (perf_counter).
    chunks: list[tuple[float, bytes]] = field(default_factory=list, repr=False)
    window: tuple[float, float] | None = field(default=None, repr=False)
    screen: str = field(default="", repr=False)
    first_screen: str = field(default="", repr=False)

    @property
    def key_output_max_ms(self) -> float | None:
        """The slowest key's first output (None without keys, or when one had none)."""
        values = [v for v in self.key_output_ms if v is not None]
        return max(values) if values and len(values) == len(self.key_output_ms) else None

    def window_chunks(self) -> list[tuple[float, bytes]]:
        if self.window is None:
            return []
        t0, t1 = self.window
        return [(at, data) for at, data in self.chunks if t0 <= at < t1]


def _process_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    # children_*: reaped children (a monitor that runs helper commands pays for them too)
    return times.user + times.system + times.children_user + times.children_system


def cpu_seconds(process: psutil.Process) -> tuple[float, int]:
    """User+system seconds of the process (all threads, reaped children included) and of its
    live descendants."""
    total = _process_cpu(process)
    descendants = 0
    with contextlib.suppress(psutil.Error):
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += _process_cpu(child)
                descendants += 1
    return total, descendants


def tree_rss(process: psutil.Process) -> int:
    rss = process.memory_info().rss
    with contextlib.suppress(psutil.Error):
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                rss += child.memory_info().rss
    return rss


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
    for name in ("COLUMNS", "LINES", "LC_ALL", "LC_CTYPE", "TMUX", "TERMCAP"):
        env.pop(name, None)
    env.update(TERM="xterm-256color", LANG="C.UTF-8")
    return env


def session_members(sid: int) -> list[int]:
    members = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if pid != sid and os.getsid(pid) == sid:
                members.append(pid)
    return members


def stop_child(
    proc: subprocess.Popen[bytes], master: int, quit_keys: bytes = b"q"
) -> tuple[str, list[int]]:
    """Ask the app to quit with its key; after 3 s escalate. Returns (how, left behind)."""
    how = f"quit on {quit_keys.decode(errors='replace')!r}"
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.write(master, quit_keys)
        try:
            proc.wait(3.0)
        except subprocess.TimeoutExpired:
            how = "SIGTERM after the quit key timed out"
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


def burst_end(chunks: Sequence[tuple[float, bytes]], at: float) -> float:
    """When the output burst that was going on at ``at`` ended: the last read before the
    first gap of FRAME_GAP_S (the rest of a frame whose first part showed the marker)."""
    end = at
    for when, _ in chunks:
        if when <= at:
            continue
        if when - end > FRAME_GAP_S:
            break
        end = when
    return end


def read_nvml_stats(path: Path) -> tuple[float | None, str | None, dict[str, float]]:
    """NVML calls per second, the commonest functions, and every function's calls per
    second, from the fake library's FAKENVML_STATS file (appended at the program's exit;
    the seconds are those since nvmlInit, so start-up calls are spread over the run);
    (None, None, {}) without one."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, None, {}
    with contextlib.suppress(OSError):
        path.unlink()
    calls: Counter[str] = Counter()
    seconds = 0.0
    for line in lines:
        parts = line.split()
        if line.startswith("#") and parts:
            with contextlib.suppress(ValueError):
                seconds = max(seconds, float(parts[-1]))
        elif len(parts) == 3 and parts[2].isdigit():
            calls[parts[1]] += int(parts[2])
    total = sum(calls.values())
    top = " ".join(f"{short_name(name)}={n}" for name, n in calls.most_common(6))
    per_second = {short_name(name): n / seconds for name, n in calls.items()} if seconds else {}
    return (total / seconds if seconds else None), top, per_second


def short_name(function: str) -> str:
    """``nvmlDeviceGetPowerUsage`` -> ``GetPowerUsage``, ``nvmlSystemGetDriverVersion`` ->
    ``SystemGetDriverVersion``."""
    return function.removeprefix("nvmlDevice").removeprefix("nvml")


def start_py_spy(config: Config, pid: int, output: Path) -> subprocess.Popen[bytes] | None:
    """py-spy recording ``pid`` for the window (raw collapsed stacks with thread names; in
    its default blocking mode, which pauses the process for each sample but keeps stacks
    whole). Its own CPU is not in the monitor's tree."""
    assert config.py_spy is not None
    command = [config.py_spy, "record", "--pid", str(pid), "--rate", str(config.py_spy_rate)]
    command += ["--duration", str(max(1, round(config.seconds))), "--format", "raw"]
    command += ["--threads", "--output", str(output)]
    try:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    except OSError as error:
        log(f"py-spy did not start: {error}")
        return None


def run_once(
    monitor: Monitor,
    config: Config,
    profile: Path | None = None,
    jobs: FakeJobs | None = None,
    group: str = "",
) -> RunResult:
    result = RunResult(monitor=monitor.name, load_average_1m=os.getloadavg()[0], jobs=group)
    env = dict(monitor.env)
    if jobs is not None:
        env["FAKENVML_CONFIG"] = str(jobs.config)
    stats_file = None
    if config.nvml_stats:
        stats_file = Path(tempfile.gettempdir()) / f"gpumon-bench-nvml-{os.getpid()}.txt"
        with contextlib.suppress(OSError):
            stats_file.unlink()
        env["FAKENVML_STATS"] = str(stats_file)
    spy: subprocess.Popen[bytes] | None = None
    started = time.perf_counter()
    proc, master = spawn_in_pty(
        monitor.command, columns=COLUMNS, rows=ROWS, env=env, cwd=monitor.cwd
    )
    reader = PtyReader(master, answer_queries=config.answer_queries, rule=monitor.rule)
    reader.start()
    try:
        process = psutil.Process(proc.pid)
        rss_peak = 0
        window_start: tuple[float, float, tuple[int, int, int]] | None = None
        window_end: tuple[float, float, tuple[int, int, int]] | None = None
        next_sample = started
        # When the warm-up starts: at the first full frame, or (--keys) once the keys are
        # sent, or (--keys-marker) once the marker is on the screen after them.
        settled: float | None = None
        keys_sent: float | None = None
        key_times: list[float] = []  # perf_counter just before each key's write
        marker_early = False  # --keys-marker was on the screen before the keys
        while True:
            now = time.perf_counter()
            if proc.poll() is not None:
                result.error = f"{monitor.name} exited early with status {proc.returncode}"
                break
            with contextlib.suppress(psutil.Error):
                rss_peak = max(rss_peak, tree_rss(process))
            first = reader.first_frame_at
            if first is None:
                if now - started > config.first_frame_timeout_s:
                    result.error = f"no full frame within {config.first_frame_timeout_s:.0f} s"
                    break
            elif result.startup_cpu_s is None:
                with contextlib.suppress(psutil.Error):
                    result.startup_cpu_s = cpu_seconds(process)[0]  # <= 0.25 s after it
                if not monitor.keys:
                    settled = first
            elif settled is None and keys_sent is None:
                if monitor.keys_marker is not None and reader.watch(monitor.keys_marker):
                    marker_early = True
                    log(
                        f"warning: {monitor.keys_marker!r} is on the screen before the keys "
                        "(its latency means nothing)"
                    )
                for index, key in enumerate(monitor.keys):
                    if index:
                        time.sleep(KEY_GAP_S)
                    key_times.append(time.perf_counter())
                    with contextlib.suppress(OSError):
                        os.write(master, key)
                keys_sent = time.perf_counter()
                result.keys_sent_s = keys_sent - started
                if monitor.keys_marker is None:
                    settled = keys_sent
            elif settled is None and keys_sent is not None:
                if monitor.keys_marker is not None and reader.watched_at is not None:
                    # the window's warm-up starts after the keys, however early the marker
                    settled = max(reader.watched_at, keys_sent)
                elif now - keys_sent > config.first_frame_timeout_s:
                    result.error = (
                        f"{monitor.keys_marker!r} not on the screen within "
                        f"{config.first_frame_timeout_s:.0f} s of the keys"
                    )
                    break
            elif settled is not None and window_start is None and now >= settled + config.warmup_s:
                if profile is not None:
                    spy = start_py_spy(config, proc.pid, profile)
                cpu, _ = cpu_seconds(process)
                window_start = (time.perf_counter(), cpu, system_cpu())
                ages = jobs.ages() if jobs is not None else None
                result.job_age_start_s = ages[0] if ages else None
            elif window_start is not None and now >= window_start[0] + config.seconds:
                cpu, result.descendants = cpu_seconds(process)
                window_end = (time.perf_counter(), cpu, system_cpu())
                result.load_average_1m_end = os.getloadavg()[0]
                ages = jobs.ages() if jobs is not None else None
                result.job_age_end_s = ages[1] if ages else None
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
            t0, cpu0, sys0 = window_start
            t1, cpu1, sys1 = window_end
            result.window_s = t1 - t0
            result.cpu_percent = (cpu1 - cpu0) / result.window_s * 100.0
            busy, steal, total = (b - a for a, b in zip(sys0, sys1, strict=True))
            cores = os.cpu_count() or 1
            result.machine_busy_pct = busy / max(total, 1) * 100.0 * cores
            result.steal_pct = steal / max(total, 1) * 100.0 * cores
            result.window = (t0, t1)
            result.chunks = reader.snapshot()
            chunks = result.window_chunks()
            result.window_bytes = sum(len(data) for _, data in chunks)
            result.bytes_per_s = result.window_bytes / result.window_s
            result.frames_per_s = count_frames(chunks) / result.window_s
        result.screen = reader.screen_text()  # before quitting restores the main screen
        if spy is not None:
            try:
                _, err = spy.communicate(timeout=config.seconds + 30)
            except subprocess.TimeoutExpired:
                spy.kill()
                _, err = spy.communicate()
            if spy.returncode != 0:
                log(f"py-spy exited with {spy.returncode}: {err.decode(errors='replace')[-500:]}")
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait()
        result.exit, result.left_behind = stop_child(proc, master, monitor.quit_keys)
        reader.join(2.0)
        reader.stop()
        reader.join(1.0)
        os.close(master)
    if reader.first_frame_at is not None:
        result.bytes_to_first_frame = sum(
            len(data) for at, data in reader.chunks if at <= reader.first_frame_at
        )
        result.frame_done_s = burst_end(reader.chunks, reader.first_frame_at) - started
    result.queries_seen = dict(reader.queries_seen)
    result.first_screen = reader.first_screen
    marker_at = None if marker_early else reader.watched_at
    key_latencies(result, key_times, marker_at, reader.chunks, started)
    if result.error and "exited early" in result.error:
        # what it said before leaving (the pty holds its stderr too)
        said = [line.strip() for line in reader.screen_text().splitlines() if line.strip()]
        if said:
            result.error += ": " + " | ".join(said[-3:])[-300:]
    if stats_file is not None:
        result.nvml_calls_per_s, result.nvml_top, result.nvml_calls = read_nvml_stats(stats_file)
    return result


def key_latencies(
    result: RunResult,
    key_times: Sequence[float],
    marker_at: float | None,
    chunks: Sequence[tuple[float, bytes]],
    started: float,
) -> None:
    """Fill ``result``'s key timings from the keys' write times, the reader's first sight of
    the marker and the read times of the pty output (all perf_counter)."""
    result.keys_at_s = [at - started for at in key_times]
    for index, at in enumerate(key_times):
        until = key_times[index + 1] if index + 1 < len(key_times) else float("inf")
        first = next((when for when, _ in chunks if when > at), None)
        result.key_output_ms.append(
            (first - at) * 1000.0 if first is not None and first < until else None
        )
    if marker_at is None:
        return
    result.keys_shown_s = marker_at - started
    before = [index for index, at in enumerate(key_times) if at <= marker_at]
    if not before:
        return
    key = before[-1]
    result.keys_marker_key = key + 1
    result.keys_marker_ms = (marker_at - key_times[key]) * 1000.0
    result.keys_frame_done_ms = (burst_end(chunks, marker_at) - key_times[key]) * 1000.0
    result.keys_marker_reads = [
        ((when - key_times[key]) * 1000.0, len(data))
        for when, data in chunks
        if 0 < (when - key_times[key]) * 1000.0 <= KEY_TRACE_MS
    ]


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


def _header_columns(lines: Sequence[str]) -> tuple[int, list[tuple[int, int, str]]] | None:
    """The process table's header row (0-based) and its words as (start, end, word)."""
    for index, line in enumerate(lines):
        if "PID" in line and "COMMAND" in line:
            words = [(m.start(), m.end(), m.group()) for m in re.finditer(r"[^\s│|]+", line)]
            return index, words
    return None


def _column_of(span: tuple[int, int], words: Sequence[tuple[int, int, str]]) -> str:
    """The header word over a changed span of cells: one that overlaps it, else the nearest
    (right-aligned values end under their title, left-aligned ones start under it)."""
    start, end = span
    best, distance = "?", COLUMNS
    for w_start, w_end, word in words:
        if w_start <= end and start < w_end:
            return word
        gap = min(abs(start - w_start), abs(end - w_end))
        if gap < distance:
            best, distance = word, gap
    return best


def _spans(columns: Sequence[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for col in sorted(columns):
        if spans and col <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], col)
        else:
            spans.append((col, col))
    return spans


def changed_cells(result: RunResult) -> dict[str, Any]:
    """Which cells of the emulated screen really change from one update burst to the next:
    per row, and per process-table column (cells changed per second)."""
    assert result.window is not None
    screen = Screen(COLUMNS, ROWS)
    for at, data in result.chunks:
        if at >= result.window[0]:
            break
        screen.feed(data)
    previous = [list(row) for row in screen.buf]
    per_row: Counter[int] = Counter()
    spans_seen: Counter[tuple[int, int, int]] = Counter()
    bursts = 0
    window = result.window_chunks()
    for index, (at, data) in enumerate(window):
        screen.feed(data)
        last_of_burst = index + 1 == len(window) or window[index + 1][0] - at > FRAME_GAP_S
        if not last_of_burst:
            continue
        bursts += 1
        for row in range(ROWS):
            now = screen.buf[row]
            if now == previous[row]:
                continue
            cols = [c for c in range(COLUMNS) if now[c] != previous[row][c]]
            per_row[row] += len(cols)
            for start, end in _spans(cols):
                spans_seen[(row, start, end)] += 1
        previous = [list(row) for row in screen.buf]
    lines = ["".join(row).rstrip() for row in screen.buf]
    header = _header_columns(lines)
    by_column: Counter[str] = Counter()
    if header is not None:
        header_row, words = header
        for (row, start, end), count in spans_seen.items():
            if row > header_row and lines[row].strip():
                by_column[_column_of((start, end), words)] += (end - start + 1) * count
    duration = result.window_s
    return {
        "screen": lines,
        "bursts_per_s": bursts / duration,
        "cells_changed_per_s": sum(per_row.values()) / duration,
        "process_table_header_row": header[0] + 1 if header else None,
        "process_cells_changed_per_s_by_column": {
            word: cells / duration for word, cells in by_column.most_common()
        },
        "rows": [
            {
                "row": row + 1,
                "cells_changed_per_s": cells / duration,
                "spans": [
                    f"{start + 1}-{end + 1}x{count}"
                    for (r, start, end), count in sorted(
                        spans_seen.items(), key=lambda item: (-item[1], item[0])
                    )
                    if r == row
                ][:6],
                "screen": lines[row],
            }
            for row, cells in per_row.most_common(12)
        ],
    }


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
    changes = changed_cells(result)
    areas: Counter[str] = Counter()
    header_row = changes["process_table_header_row"]
    for row, size in row_bytes.items():
        if header_row is None or row + 1 < header_row:
            area = "above the process table (GPU panel, header)"
        elif row + 1 == header_row:
            area = "process table header"
        elif PROCESS_ROW_RE.match(changes["screen"][row]):
            area = "process rows"
        else:
            area = "other rows below (host strip, footer, panel borders)"
        areas[area] += size
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
        "monitor": result.monitor,
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
        "bytes_per_s_by_area": {area: size / duration_s for area, size in areas.most_common()},
        "rows": rows,
        "changes": changes,
    }


def print_breakdown(report: dict[str, Any]) -> None:
    print(
        f"\nByte breakdown of {report['monitor']}'s last run, steady state "
        f"({report['duration_s']:.1f} s, "
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
    for area, value in report["bytes_per_s_by_area"].items():
        print(f"  {area:<48} {value:9.1f} B/s  {value / total * 100:5.1f} %")
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
    changes = report["changes"]
    print(
        f"  cells that really change (emulated screen, burst to burst): "
        f"{changes['cells_changed_per_s']:.1f} cells/s over {changes['bursts_per_s']:.2f} "
        f"bursts/s; {report['bytes_per_s'] / max(changes['cells_changed_per_s'], 1e-9):.1f} "
        "bytes written per changed cell"
    )
    if changes["process_cells_changed_per_s_by_column"]:
        shown = ", ".join(
            f"{word} {cells:.1f}"
            for word, cells in changes["process_cells_changed_per_s_by_column"].items()
        )
        print(f"  process-table cells changed per second, by column: {shown}")
    print("  rows by changed cells (row: cells/s | commonest spans first-last x bursts | screen):")
    for row in changes["rows"]:
        spans = " ".join(row["spans"])
        print(
            f"    {row['row']:>3}: {row['cells_changed_per_s']:6.1f} | {spans:<34} "
            f"| {row['screen'][:70]}"
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


def median_of(results: Sequence[RunResult], key: str) -> float | None:
    values = [getattr(r, key) for r in results if getattr(r, key) is not None]
    return statistics.median(values) if values and len(values) == len(results) else None


def summarise(
    results: Sequence[RunResult], targets: dict[str, tuple[float | None, float | None]]
) -> dict[str, dict[str, Any]]:
    """Per metric: runs, median, the target (None: no verdict) and nvitop's reference."""
    summary: dict[str, dict[str, Any]] = {}
    for key, (label, unit) in LABELS.items():
        target, peer = targets.get(key, (None, None))
        median = median_of(results, key)
        summary[key] = {
            "label": label,
            "unit": unit,
            "runs": [getattr(r, key) for r in results],
            "median": median,
            "target": target,
            "nvitop": peer,
            "pass": None if target is None else median is not None and median <= target,
        }
    return summary


def compare(
    ours: Sequence[RunResult],
    theirs: Sequence[RunResult],
    cpu_ratio: float,
    peer: str = "nvitop",
) -> dict[str, dict[str, Any]]:
    """Per metric: both medians, the ratio gpumon/PEER and its verdict (the targets
    against nvitop; none against another peer: ``pass`` is None)."""
    limits: dict[str, tuple[str, float]] = {
        "cpu_percent": ("ratio", cpu_ratio),
        "first_frame_s": ("ratio", FRAME_RATIO),
        "bytes_per_s": ("ratio", BYTES_RATIO),
        "peak_rss_mib": ("gpumon", RSS_LIMIT_MIB),
    }
    rows: dict[str, dict[str, Any]] = {}
    for key, (label, unit) in LABELS.items():
        a, b = median_of(ours, key), median_of(theirs, key)
        ratio = a / b if a is not None and b else None
        kind, limit = limits[key]
        value = ratio if kind == "ratio" else a
        rows[key] = {
            "label": label,
            "unit": unit,
            "gpumon_runs": [getattr(r, key) for r in ours],
            f"{peer}_runs": [getattr(r, key) for r in theirs],
            "gpumon": a,
            peer: b,
            "ratio": ratio,
            "target": f"{kind} <= {limit:g}" if peer == "nvitop" else "none",
            "pass": (value is not None and value <= limit) if peer == "nvitop" else None,
        }
    a, b = median_of(ours, "nvml_calls_per_s"), median_of(theirs, "nvml_calls_per_s")
    if a is not None and b:  # --nvml-stats (the target: no more calls than nvitop)
        rows["nvml_calls_per_s"] = {
            "label": "NVML calls",
            "unit": "/s",
            "gpumon_runs": [r.nvml_calls_per_s for r in ours],
            f"{peer}_runs": [r.nvml_calls_per_s for r in theirs],
            "gpumon": a,
            peer: b,
            "ratio": a / b,
            "target": f"ratio <= {NVML_CALLS_RATIO:g}" if peer == "nvitop" else "none",
            "pass": a / b <= NVML_CALLS_RATIO if peer == "nvitop" else None,
        }
    return rows


def nvml_functions(results: dict[str, list[RunResult]]) -> dict[str, dict[str, float]]:
    """--nvml-stats: NVML function -> monitor -> median calls/s over its runs (a run that
    did not call it counts 0), the busiest functions first."""
    names = {name for runs in results.values() for r in runs for name in r.nvml_calls}
    table = {
        function: {
            monitor: statistics.median(r.nvml_calls.get(function, 0.0) for r in runs)
            for monitor, runs in results.items()
            if runs and all(r.nvml_calls for r in runs)
        }
        for function in names
    }
    return dict(sorted(table.items(), key=lambda item: -max(item[1].values(), default=0.0)))


def print_nvml_functions(table: dict[str, dict[str, float]]) -> None:
    if not table:
        return
    monitors = list(next(iter(table.values())))
    width = max(10, *(len(name) + 1 for name in monitors))
    print(
        f"\nNVML calls/s by function (median over runs; start-up calls spread over the run)\n"
        f"{'function':<44}" + "".join(f"{name:>{width}}" for name in monitors)
    )
    for function, row in table.items():
        print(f"{function:<44}" + "".join(f"{row[name]:>{width}.2f}" for name in monitors))
    totals = {name: sum(row[name] for row in table.values()) for name in monitors}
    print(f"{'(total)':<44}" + "".join(f"{totals[name]:>{width}.1f}" for name in monitors))


def print_runs(results: Sequence[RunResult]) -> None:
    for index, r in enumerate(results, 1):
        hwm = f"{r.vm_hwm_mib:.1f}" if r.vm_hwm_mib is not None else "n/a"
        noise = (
            f"machine busy {r.machine_busy_pct:.0f} %, steal {r.steal_pct:.1f} %"
            if r.machine_busy_pct is not None and r.steal_pct is not None
            else "machine busy n/a"
        )
        nvml = f"; NVML {r.nvml_calls_per_s:.0f} calls/s ({r.nvml_top})" if r.nvml_top else ""
        startup = f"{r.startup_cpu_s:.2f}" if r.startup_cpu_s is not None else "n/a"
        load = f"load 1-min {r.load_average_1m:.2f} at start"
        if r.load_average_1m_end is not None:
            load += f", {r.load_average_1m_end:.2f} at window end"
        load += f"; {job_age_text(r)}"
        done = f"{r.frame_done_s:.2f}" if r.frame_done_s is not None else "n/a"
        keys = ""
        if r.keys_sent_s is not None:
            keys = f"; keys sent at {r.keys_sent_s:.2f} s"
            if r.keys_shown_s is not None:
                keys += f", their marker seen at {r.keys_shown_s:.3f} s"
            if r.keys_marker_ms is not None and r.keys_frame_done_ms is not None:
                keys += (
                    f" ({r.keys_marker_ms:.1f} ms after key {r.keys_marker_key} of "
                    f"{len(r.keys_at_s)}, its burst done {r.keys_frame_done_ms:.1f} ms after it)"
                )
            outputs = " ".join("-" if v is None else f"{v:.1f}" for v in r.key_output_ms)
            keys += f"; each key to its first output: {outputs} ms"
            if r.keys_marker_reads:
                reads = " ".join(f"{ms:.1f}:{n}" for ms, n in r.keys_marker_reads)
                keys += f"; reads after the marker's key (ms:bytes): {reads}"
        print(
            f"{r.monitor} run {index}: window {r.window_s:.1f} s, {r.window_bytes} B, "
            f"{r.frames_per_s:.2f} bursts/s; RSS sampled {r.sampled_rss_peak_mib:.1f} MiB, "
            f"VmHWM {hwm} MiB; {r.bytes_to_first_frame} B and {startup} CPU s before the first "
            f"frame, its burst ended at {done} s{keys}; {load}; {noise}; "
            f"descendants {r.descendants}"
            f"{nvml}; {r.exit}; left behind: {r.left_behind or 'none'}"
            + (f"; ERROR: {r.error}" if r.error else "")
        )


def job_age_text(r: RunResult) -> str:
    """The jobs' age over the window: 'jobs young, 14-47 s old' (youngest at its start to
    oldest at its end)."""
    which = f"jobs {r.jobs}" if r.jobs else "jobs"
    if r.job_age_start_s is None or r.job_age_end_s is None:
        return f"{which}, age n/a"
    return f"{which}, {r.job_age_start_s:.0f}-{r.job_age_end_s:.0f} s old"


def run_facts(runs: Sequence[RunResult]) -> str:
    """One line per monitor under the summary: NVML calls/s, load average and job age over
    its runs (runs and median)."""

    def cells(key: str, digits: int) -> str:
        values = [getattr(r, key) for r in runs]
        shown = " ".join("n/a" if v is None else f"{v:.{digits}f}" for v in values)
        median = median_of(runs, key)
        return f"{'n/a' if median is None else f'{median:.{digits}f}'} ({shown})"

    name = runs[0].monitor if runs else "?"
    ages = [a for r in runs for a in (r.job_age_start_s, r.job_age_end_s) if a is not None]
    age = f"{min(ages):.0f}-{max(ages):.0f} s" if ages else "n/a"
    nvml = cells("nvml_calls_per_s", 0) if any(r.nvml_calls_per_s for r in runs) else "n/a"
    return (
        f"{name:<8} NVML calls/s {nvml}; load 1-min at start {cells('load_average_1m', 2)}, "
        f"at window end {cells('load_average_1m_end', 2)}; jobs' age over the windows {age}"
    )


def print_header(context: dict[str, Any], plan: Plan, config: Config) -> None:
    print(
        f"Machine: {context['cpu_model']}, {context['logical_cores']} logical / "
        f"{context['physical_cores']} physical cores; Python {context['python']}, "
        f"textual {context['textual']}, gpumon {context['gpumon']}; {context['platform']}"
    )
    print(f"Scenario: {plan.description}")
    named = len(plan.monitors) > 2 or any(m.cwd or m.keys for m in plan.monitors)
    for monitor in plan.monitors:
        extra = f" ({plan.versions[monitor.name]})" if monitor.name in plan.versions else ""
        if monitor.cwd:
            extra += f" in {monitor.cwd} (PYTHONPATH={monitor.env.get('PYTHONPATH')})"
        if monitor.keys:
            extra += f"; keys after the first frame: {monitor.keys_spec}"
            if monitor.keys_marker is not None:
                extra += f", then waits for {monitor.keys_marker!r}"
        name = f" [{monitor.name}]" if named else ""
        print(f"Command{name}: {' '.join(monitor.command)}{extra}")
    if plan.nvml_env:
        print("NVML: " + " ".join(f"{k}={v}" for k, v in plan.nvml_env.items()))
    print(
        f"Terminal: pty {COLUMNS}x{ROWS}, TERM=xterm-256color LANG=C.UTF-8, COLORTERM/NO_COLOR "
        f"unset; Textual's DECRQM queries {'answered' if config.answer_queries else 'not answered'}"
        ", other terminal queries answered as xterm"
    )
    print(f"First frame marker: {plan.monitors[0].rule.description}")
    order = "alternately (ABAB...), " if len(plan.monitors) > 1 else ""
    keys = " (after the keys, where keys are typed)" if any(m.keys for m in plan.monitors) else ""
    print(
        f"Steady state: {order}{config.warmup_s:g} s warm-up after the first frame{keys}, then a "
        f"{config.seconds:g} s window; RSS sampled every {config.sample_every_s:g} s + VmHWM\n"
    )


def print_summary(summary: dict[str, dict[str, Any]], runs: int, reference: str) -> None:
    header = "".join(f"{'run ' + str(i):>9}" for i in range(1, runs + 1))
    print(f"\n{'metric':<24}{header}{'median':>9}{'target':>11}{reference:>9}  verdict")
    for key, row in summary.items():
        values = "".join(f"{fmt(v, key):>9}" for v in row["runs"])
        label = f"{row['label']} ({row['unit']})"
        target = "n/a" if row["target"] is None else "<= " + fmt(row["target"], key)
        verdict = {True: "PASS", False: "FAIL", None: "-"}[row["pass"]]
        print(
            f"{label:<24}{values}{fmt(row['median'], key):>9}{target:>11}"
            f"{fmt(row['nvitop'], key):>9}  {verdict}"
        )


def print_comparison(rows: dict[str, dict[str, Any]], runs: int, peer: str = "nvitop") -> None:
    print(
        f"\n{'metric':<26}{'monitor':>8}"
        + "".join(f"{'run ' + str(i):>9}" for i in range(1, runs + 1))
        + f"{'median':>9}"
    )
    for key, row in rows.items():
        label = f"{row['label']} ({row['unit']})"
        for name in ("gpumon", peer):
            values = "".join(f"{fmt(v, key):>9}" for v in row[f"{name}_runs"])
            print(f"{label:<26}{name:>8}{values}{fmt(row[name], key):>9}")
            label = ""
    print(f"\n{'metric':<26}{'gpumon':>9}{peer:>9}{'gpumon/' + peer:>15}  {'target':<21}verdict")
    for key, row in rows.items():
        label = f"{row['label']} ({row['unit']})"
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "n/a"
        verdict = {True: "PASS", False: "FAIL", None: "-"}[row["pass"]]
        print(
            f"{label:<26}{fmt(row['gpumon'], key):>9}{fmt(row[peer], key):>9}{ratio:>15}  "
            f"{row['target']:<21}{verdict}"
        )


# --variant table: the metrics, then the machine noise over each window.
VARIANT_LABELS: dict[str, tuple[str, str]] = {
    **LABELS,
    "keys_marker_ms": ("key->marker", "ms"),
    "keys_frame_done_ms": ("key->marker burst end", "ms"),
    "key_output_max_ms": ("slowest key->output", "ms"),
    "nvml_calls_per_s": ("NVML calls (--nvml-stats)", "/s"),
    "machine_busy_pct": ("machine busy (noise)", "%"),
    "steal_pct": ("steal (noise)", "%"),
}


def variants_table(
    results: dict[str, list[RunResult]], names: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per metric: each gpumon's runs and median, and each variant's ratio to the first and
    to the one before it (``"head/gpumon"``...)."""
    rows: dict[str, dict[str, Any]] = {}
    for key, (label, unit) in VARIANT_LABELS.items():
        medians = {name: median_of(results[name], key) for name in names}
        ratios: dict[str, float | None] = {}
        for index, name in enumerate(names[1:], 1):
            for other in dict.fromkeys((names[0], names[index - 1])):
                a, b = medians[name], medians[other]
                ratios[f"{name}/{other}"] = a / b if a is not None and b else None
        rows[key] = {
            "label": label,
            "unit": unit,
            "runs": {name: [getattr(r, key) for r in results[name]] for name in names},
            "median": medians,
            "ratios": ratios,
        }
    return rows


def print_variants(rows: dict[str, dict[str, Any]], names: Sequence[str], runs: int) -> None:
    width = max(9, *(len(name) + 1 for name in names))
    print(
        f"\n{'metric':<28}{'monitor':>{width}}"
        + "".join(f"{'run ' + str(i):>9}" for i in range(1, runs + 1))
        + f"{'median':>9}"
    )
    for key, row in rows.items():
        label = f"{row['label']} ({row['unit']})"
        for name in names:
            values = "".join(f"{fmt(v, key):>9}" for v in row["runs"][name])
            print(f"{label:<28}{name:>{width}}{values}{fmt(row['median'][name], key):>9}")
            label = ""
    ratio_names = list(next(iter(rows.values()))["ratios"])
    widths = [max(9, len(name) + 1) for name in [*names, *ratio_names]]
    print(
        f"\n{'median':<28}"
        + "".join(f"{name:>{w}}" for name, w in zip([*names, *ratio_names], widths, strict=True))
    )
    for key, row in rows.items():
        label = f"{row['label']} ({row['unit']})"
        cells = [fmt(row["median"][name], key) for name in names]
        cells += [f"{r:.2f}x" if r is not None else "n/a" for r in row["ratios"].values()]
        print(f"{label:<28}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))


def _spread(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None, "within_frame": 0}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "within_frame": sum(v <= FRAME_MS for v in values),
    }


def key_latency_table(results: dict[str, list[RunResult]]) -> dict[str, dict[str, Any]]:
    """Per monitor that types keys: the spread over its runs of keys -> marker, of keys ->
    the end of the marker's burst, and of every key's first output (all keys, all runs)."""
    table: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        if not any(r.keys_at_s for r in runs):
            continue
        marker = [r.keys_marker_ms for r in runs if r.keys_marker_ms is not None]
        done = [r.keys_frame_done_ms for r in runs if r.keys_frame_done_ms is not None]
        outputs = [v for r in runs for v in r.key_output_ms if v is not None]
        silent = sum(v is None for r in runs for v in r.key_output_ms)
        table[name] = {
            "keys_marker_ms": _spread(marker),
            "keys_frame_done_ms": _spread(done),
            "key_output_ms": {**_spread(outputs), "keys_without_output": silent},
            "marker_after_key": [r.keys_marker_key for r in runs],
            "keys": len(runs[0].keys_at_s),
        }
    return table


def print_key_latency(table: dict[str, dict[str, Any]]) -> None:
    print(
        f"\nKey latency (ms; pty reader's arrival time of the bytes; a frame at 60 frames/s "
        f"is {FRAME_MS:.1f} ms):"
    )
    print(f"{'monitor':<14}{'measure':<34}{'n':>4}{'median':>9}{'min':>9}{'max':>9}  in 1 frame")
    labels = {
        "keys_marker_ms": "key -> marker on the screen",
        "keys_frame_done_ms": "key -> that burst done",
        "key_output_ms": "each key -> its first output",
    }
    for name, row in table.items():
        shown = name
        for key, label in labels.items():
            spread = row[key]
            cells = "".join(
                f"{spread[k]:9.1f}" if spread[k] is not None else f"{'n/a':>9}"
                for k in ("median", "min", "max")
            )
            print(
                f"{shown:<14}{label:<34}{spread['n']:>4}{cells}  "
                f"{spread['within_frame']}/{spread['n']}"
            )
            shown = ""
        after = sorted({k for k in row["marker_after_key"] if k is not None})
        note = f"marker seen after key {', '.join(map(str, after)) or '-'} of {row['keys']}"
        silent = row["key_output_ms"]["keys_without_output"]
        if silent:
            note += f"; {silent} key(s) had no output before the next key"
        print(f"{'':<14}({note})")


def print_profile(args: argparse.Namespace, runs: int, group: str = "") -> None:
    """The py-spy summary of every gpumon run's window (of one job group), together."""
    stem = f"gpumon-{group}" if group else "gpumon"
    files = [args.py_spy / f"{stem}-run{i}.txt" for i in range(1, runs + 1)]
    lines = []
    for path in files:
        with contextlib.suppress(OSError):
            lines += path.read_text().splitlines()
    print(f"\npy-spy profile of gpumon's steady-state windows ({runs} runs, {args.py_spy}):")
    seconds = max(1, round(args.seconds)) * runs
    print(pyspy_summary.summarise(pyspy_summary.read_profile(lines), args.py_spy_rate, seconds))


# --- the plan: scenario, NVML library, jobs, monitors ----------------------------------------


@dataclass
class Plan:
    description: str
    monitors: list[Monitor]
    nvml_env: dict[str, str] = field(default_factory=dict)
    processes: int = 0
    # The job sets (fake library): "" (started once, reused by every run), or with
    # --jobs-age "young" (new jobs before every run) and/or "old" (kept between benchmarks).
    job_sets: dict[str, FakeJobs] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    targets: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    reference: str = "nvitop"


def nvml_environment(args: argparse.Namespace) -> tuple[dict[str, str], bool, str]:
    """(environment for the monitors, whether the library is the fake one, description)."""
    env = child_environment()
    if args.nvml_lib == "system":
        env.pop("FAKENVML_CONFIG", None)
        return env, False, "the system's NVML library (no LD_LIBRARY_PATH override)"
    if args.nvml_lib == "fake":
        libdir = build_fake_library(args.fakenvml)
    else:
        libdir = Path(args.nvml_lib).resolve()
        if not (libdir / "libnvidia-ml.so.1").is_file():
            raise SetupError(f"{libdir} holds no libnvidia-ml.so.1 (see --nvml-lib)")
    fake = is_fake_library(libdir)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(libdir) + (f":{old}" if old else "")
    if not fake:
        env.pop("FAKENVML_CONFIG", None)
    kind = "fake" if fake else "NVML"
    return env, fake, f"{kind} libnvidia-ml.so.1 in {libdir}"


@dataclass(frozen=True)
class GpumonSpec:
    """Which gpumon to run and what to type into it (--gpumon-root/--keys, or a --variant)."""

    name: str
    root: Path | None = None
    keys: str = ""
    keys_marker: str | None = None


def parse_variant(text: str) -> GpumonSpec:
    """``NAME[,root=PATH][,keys=KEYS][,keys-marker=TEXT]`` (see --variant)."""
    name, *fields = text.split(",")
    name = name.strip()
    if not name or "=" in name or name in ("gpumon", *PEERS):
        raise ValueError(
            f"--variant {text!r}: it needs a NAME first, other than gpumon, {', '.join(PEERS)}"
        )
    values: dict[str, str] = {}
    for item in fields:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in ("root", "keys", "keys-marker") or key in values:
            raise ValueError(
                f"--variant {text!r}: {item!r} is not one of root=, keys=, keys-marker= "
                "(each at most once)"
            )
        values[key] = value
    if "keys-marker" in values and not values.get("keys"):
        raise ValueError(f"--variant {text!r}: keys-marker= needs keys=")
    if values.get("keys"):
        parse_keys(values["keys"])  # raises on an unknown key
    root = Path(values["root"]).expanduser().resolve() if values.get("root") else None
    return GpumonSpec(name, root, values.get("keys", ""), values.get("keys-marker"))


def check_gpumon_root(python: str, root: Path, env: dict[str, str]) -> None:
    """``python`` imports ``root``'s gpumon with cwd and PYTHONPATH at ``root`` (not an
    installed or editable one from elsewhere), else SetupError."""
    if not (root / "gpumon" / "__init__.py").is_file():
        raise SetupError(f"{root} holds no gpumon/__init__.py (see --gpumon-root)")
    try:
        done = subprocess.run(
            [python, "-c", "import gpumon; print(gpumon.__file__)"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SetupError(f"importing gpumon from {root}: {error}") from error
    found = Path(done.stdout.strip()).resolve() if done.returncode == 0 else None
    if found is None or not found.is_relative_to(root.resolve()):
        said = (done.stdout + done.stderr).strip()[-300:]
        raise SetupError(f"{python} in {root} does not import {root}'s gpumon: {said}")


def gpumon_monitor(
    spec: GpumonSpec, python: str, arguments: list[str], env: dict[str, str], rule: FrameRule
) -> Monitor:
    """``python -m gpumon ARGUMENTS`` as ``spec`` says (its tree, its keys)."""
    env = dict(env)
    cwd = None
    if spec.root is not None:
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(spec.root) + (os.pathsep + old if old else "")
        cwd = str(spec.root)
        check_gpumon_root(python, spec.root, env)
    return Monitor(
        spec.name,
        [python, "-m", "gpumon", *arguments],
        env,
        rule,
        cwd=cwd,
        keys=parse_keys(spec.keys) if spec.keys else (),
        keys_marker=spec.keys_marker,
        keys_spec=spec.keys,
    )


def gpumon_specs(args: argparse.Namespace) -> list[GpumonSpec]:
    """The first gpumon (--gpumon-root, --keys) and the --variant ones, in run order."""
    first = GpumonSpec("gpumon", args.gpumon_root, args.keys or "", args.keys_marker)
    return [first, *args.variant]


def job_set(args: argparse.Namespace, group: str) -> FakeJobs:
    """The jobs of one --jobs-age group ("" without the option)."""
    extra = [] if args.call_cost_us is None else [f"call_cost_us {args.call_cost_us:g}"]
    if group != "old":
        return FakeJobs(args.fakenvml, sys.executable, args.gpus, args.per_gpu, extra=extra)
    keep = args.old_jobs_dir or work_dir() / f"old-jobs-{args.gpus}x{args.per_gpu}"
    return FakeJobs(
        args.fakenvml,
        sys.executable,
        args.gpus,
        args.per_gpu,
        keep_dir=keep,
        ttl_s=OLD_TTL_S,
        extra=extra,
    )


def find_nvtop() -> tuple[str, str]:
    """nvtop on PATH and its version line, else SetupError with how to install it."""
    found = shutil.which("nvtop")
    if found is None:
        raise SetupError(
            "--compare nvtop needs nvtop on PATH (Debian bookworm: the 'contrib' component in "
            "the apt sources, then apt-get install nvtop)"
        )
    try:
        done = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SetupError(f"nvtop --version: {error}") from error
    return found, (done.stdout + done.stderr).strip() or "unknown version"


def fake_frame_rule(processes: int, gpus: int) -> FrameRule:
    """The first full frame on the fake server, for every monitor, by the pty's size (all
    three monitors cut a process's command line at the screen's edge, nvitop and nvtop show
    no process row at all below about 30 rows):

    * from 200x50: the jobs' script name, ``fakejob.py``, on min(processes, 10) rows;
    * from 40 rows: the jobs' command line before the script, ``-S /`` (``python -S
      /.../fakejob.py``, cut further right), on as many rows;
    * below: every GPU's memory total (``79.6``: 81,559 MiB, spawn_procs.py's default, shown
      as 79.6G, 79.65GiB or 79.647Gi), one row per GPU: the GPUs, not a process list.
    """
    rows = min(processes, MARKER_ROWS)
    if COLUMNS >= 200 and ROWS >= 50:
        return FrameRule(("fakejob.py",), rows)
    if ROWS >= 40:
        return FrameRule(("-S /",), rows)
    return FrameRule(("79.6",), gpus)


def make_plan(args: argparse.Namespace) -> Plan:
    interval = f"{args.interval:g}"
    if args.scenario == "demo":
        arguments = ["--demo", "--demo-gpus", "8"]
        arguments += ["--demo-processes", "64", "--interval", interval]
        env = child_environment()
        targets: dict[str, tuple[float | None, float | None]] = {
            key: (target, peer) for key, (_, _, target, peer) in METRICS.items()
        }
        return Plan(
            description="demo: 8 simulated GPUs x 64 simulated processes (--demo)",
            monitors=[
                gpumon_monitor(spec, args.python, arguments, env, FrameRule())
                for spec in gpumon_specs(args)
            ],
            targets=targets,
        )
    env, fake, lib_description = nvml_environment(args)
    plan = Plan(description="", monitors=[])
    if fake:
        plan.processes = args.gpus * args.per_gpu
        for group in args.jobs_age or [""]:
            plan.job_sets[group] = job_set(args, group)
        configs = [f"{jobs.config}" for jobs in plan.job_sets.values()]
        env["FAKENVML_CONFIG"] = configs[0]
        plan.nvml_env = {k: env[k] for k in ("LD_LIBRARY_PATH", "FAKENVML_CONFIG")}
        plan.nvml_env["FAKENVML_CONFIG"] = " / ".join(configs)
        ages = {
            "": "started once and reused by every run",
            "young": "new ones started before every run (< 1 min old in the window)",
            "old": f"kept running between benchmarks, > {args.old_age:g} s old",
        }
        plan.description = (
            f"real PIDs: {args.gpus} fake GPUs x {args.per_gpu} idle job processes "
            f"({plan.processes}; {'; '.join(ages[g] for g in plan.job_sets)}), {lib_description}"
            + ("" if args.call_cost_us is None else f", call_cost_us {args.call_cost_us:g}")
        )
        markers = tuple(args.marker or ["fakejob.py"])
    else:
        if "LD_LIBRARY_PATH" in env and args.nvml_lib != "system":
            plan.nvml_env = {"LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"]}
        plan.description = f"real GPUs and their processes, {lib_description}"
        markers = tuple(args.marker or HEADER_WORDS)
        if not args.marker:
            log(
                "note: on a real driver the first frame is only the process table's header "
                "('PID', 'COMMAND'); pass --marker with a running job's command for a fairer one"
            )
    rows = args.marker_rows
    if fake and not args.marker:
        # A process list, not its first row: nvitop draws its rows one by one and shows
        # "Gathering process status..." below the first ones for a while.
        default = fake_frame_rule(plan.processes, args.gpus)
        rule = FrameRule(default.markers, default.rows if rows is None else rows)
    else:
        rule = FrameRule(markers, 1 if rows is None else rows)
    plan.monitors += [
        gpumon_monitor(spec, args.python, ["--interval", interval], env, rule)
        for spec in gpumon_specs(args)
    ]
    if "nvitop" in args.compare:
        exe, versions = ensure_nvitop(args.nvitop_version, args.python)
        plan.versions["nvitop"] = ", ".join(f"{k} {v}" for k, v in versions.items())
        plan.monitors.append(Monitor("nvitop", [str(exe), "--interval", interval], env, rule))
    if "nvtop" in args.compare:
        nvtop, version = find_nvtop()
        plan.versions["nvtop"] = version
        # -d: the delay in tenths of a second; -c: a config file of its own (none: defaults)
        tenths = str(max(1, round(args.interval * 10)))
        config = str(work_dir() / "nvtop-bench.ini")
        command = [nvtop, "-d", tenths, "-c", config]
        plan.monitors.append(Monitor("nvtop", command, env, rule))
    if "floor" in args.compare:
        floor = Path(__file__).with_name("textual_floor.py")
        plan.versions["floor"] = f"{floor.name}: one Static, {rule.rows} rows of the markers"
        command = [args.python, str(floor), str(rule.rows), *rule.markers]
        plan.monitors.append(Monitor("floor", command, env, rule))
    reference = RECORDED_NVITOP.get((args.gpus, args.per_gpu), {}) if fake else {}
    cpu_ratio = args.cpu_ratio_target or cpu_ratio_target(plan.processes)
    ratios = {"cpu_percent": cpu_ratio, "first_frame_s": FRAME_RATIO, "bytes_per_s": BYTES_RATIO}
    plan.targets = {
        key: (ratios[key] * reference[key], reference[key]) for key in ratios if key in reference
    }
    plan.targets["peak_rss_mib"] = (RSS_LIMIT_MIB, None)
    plan.reference = "recorded" if reference else "nvitop"
    return plan


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="See the module docstring (head of this file) for scenarios and definitions.",
    )
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
        "--capture",
        type=Path,
        help="write the last run's steady-state pty bytes to this file (with --compare, "
        "nvitop's to the same name with '-nvitop' before the suffix)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="classify the last run's steady-state bytes and list the busiest screen rows",
    )
    which = parser.add_argument_group("which gpumon, showing what (see the docstring)")
    which.add_argument(
        "--gpumon-root",
        type=Path,
        metavar="PATH",
        help="run python -m gpumon with cwd and PYTHONPATH at PATH (that tree's gpumon; "
        "default: the one --python imports from the current directory)",
    )
    which.add_argument(
        "--keys",
        metavar="KEYS",
        help="type KEYS (space-separated names: enter, escape, tab, up, down, ...; ctrl+X; or "
        "single characters) once the first full frame is drawn; the warm-up and the window "
        "start after them (e.g. --keys enter: GPU 0's detail screen)",
    )
    which.add_argument(
        "--keys-marker",
        metavar="TEXT",
        help="with --keys: start the warm-up only once TEXT is on the screen after the keys "
        "(e.g. 'Esc: back' for the GPU detail screen); fail the run if it never is",
    )
    which.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME[,root=PATH][,keys=KEYS][,keys-marker=TEXT]",
        help="one more gpumon, run alternately with the first; repeatable (a table gives "
        "the medians and ratios to the first and to the previous one)",
    )
    scenario = parser.add_argument_group("scenario")
    scenario.add_argument(
        "--scenario",
        choices=("demo", "real"),
        default="demo",
        help="demo: gpumon --demo (default); real: NVML with real job processes",
    )
    scenario.add_argument(
        "--gpus", type=int, default=8, help="real scenario, fake NVML: GPUs (default: 8)"
    )
    scenario.add_argument(
        "--per-gpu",
        type=int,
        default=8,
        help="real scenario, fake NVML: job processes per GPU (default: 8; 64 for 512)",
    )
    scenario.add_argument(
        "--nvml-lib",
        default="fake",
        metavar="fake|system|DIR",
        help="real scenario: 'fake' builds and uses --fakenvml's library and starts the jobs "
        "(default); 'system' the installed driver; DIR a directory with libnvidia-ml.so.1",
    )
    scenario.add_argument(
        "--fakenvml",
        type=Path,
        default=ROOT.parent / "shared" / "fakenvml",
        help="the fakenvml directory (default: ../shared/fakenvml from the repository root)",
    )
    scenario.add_argument(
        "--marker",
        action="append",
        default=[],
        help="real scenario: a string that marks the first full frame when visible, "
        "repeatable (default: fakejob.py with the fake library, else 'PID' and 'COMMAND')",
    )
    scenario.add_argument(
        "--marker-rows",
        type=int,
        metavar="N",
        help="the markers must each be on N screen rows (default with the fake library and "
        f"the default marker: the number of processes, at most {MARKER_ROWS}; else 1)",
    )
    scenario.add_argument(
        "--interval", type=float, default=1.0, help="refresh interval, both monitors (1)"
    )
    scenario.add_argument(
        "--size",
        default=f"{COLUMNS}x{ROWS}",
        metavar="COLSxROWS",
        help=f"the pty's size (default: {COLUMNS}x{ROWS})",
    )
    scenario.add_argument(
        "--jobs-age",
        metavar="young[,old]",
        help="fake library: 'young' starts new jobs before every run (< 1 min old in the "
        "window); 'old' uses jobs kept running between benchmarks in --old-jobs-dir (started "
        "there and waited for once, until older than --old-age); 'young,old' runs both, "
        "interleaved, reported apart (default: jobs started once and reused, age reported)",
    )
    scenario.add_argument(
        "--old-jobs-dir",
        type=Path,
        metavar="DIR",
        help="--jobs-age old: where the kept jobs live (default: "
        "$TMPDIR/gpumon-bench/old-jobs-GPUSxPER_GPU)",
    )
    scenario.add_argument(
        "--old-age",
        type=float,
        default=600.0,
        metavar="S",
        help="--jobs-age old: the youngest job's age before the first run (default: 600)",
    )
    scenario.add_argument(
        "--nvml-stats",
        action="store_true",
        help="fake NVML: count the NVML calls each run makes (FAKENVML_STATS), with a "
        "table of calls/s per function and, with --compare, a target of <= nvitop's",
    )
    scenario.add_argument(
        "--call-cost-us",
        type=float,
        metavar="US",
        help="fake NVML: every device call burns US microseconds of CPU, as a driver ioctl "
        "does (the config's call_cost_us; default: the library's, 0)",
    )
    side = parser.add_argument_group("side by side")
    side.add_argument(
        "--compare",
        metavar="nvitop[,nvtop][,floor]",
        help="real scenario: run nvitop, nvtop and/or Textual's floor (comma-separated) "
        "alternately with gpumon and print the ratios (targets against nvitop; the others' "
        "for the record)",
    )
    side.add_argument(
        "--nvitop-version",
        default=NVITOP_VERSION,
        help=f"nvitop version pip installs ('latest' for unpinned; default: {NVITOP_VERSION})",
    )
    side.add_argument(
        "--cpu-ratio-target",
        type=float,
        help="CPU target as gpumon/nvitop (default: 0.5, 0.25 from 512 processes)",
    )
    side.add_argument(
        "--gap", type=float, default=1.0, help="pause between two runs, seconds (default: 1)"
    )
    side.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="N",
        help="keep N processes spinning on the CPU during every run: a busy machine, the "
        "same for every monitor (default: 0)",
    )
    side.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="record gpumon's steady-state windows with py-spy (raw stacks in DIR, "
        "gpumon-runN.txt) and print a summary by part (pyspy_summary.py)",
    )
    side.add_argument(
        "--py-spy-rate", type=int, default=200, help="py-spy samples per second (200)"
    )
    side.add_argument(
        "--screens",
        type=Path,
        metavar="DIR",
        help="write every run's screen at its first full frame and at the end into DIR",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--runs must be >= 1, --seconds > 0, --warmup >= 0")
    if args.gpus < 1 or args.per_gpu < 1:
        parser.error("--gpus and --per-gpu must be >= 1")
    if args.scenario == "demo" and (
        args.compare
        or args.nvml_lib != "fake"
        or args.marker
        or args.jobs_age
        or args.call_cost_us is not None
    ):
        parser.error(
            "--compare, --nvml-lib, --marker, --jobs-age and --call-cost-us need --scenario real"
        )
    if args.call_cost_us is not None and args.call_cost_us < 0:
        parser.error("--call-cost-us must be >= 0")
    if args.jobs_age and args.nvml_lib != "fake":
        parser.error("--jobs-age needs the fake library (--nvml-lib fake)")
    args.compare = [p.strip() for p in (args.compare or "").split(",") if p.strip()]
    args.jobs_age = [a.strip() for a in (args.jobs_age or "").split(",") if a.strip()]
    if not set(args.compare) <= set(PEERS) or len(set(args.compare)) != len(args.compare):
        parser.error(f"--compare: a comma-separated list of {', '.join(PEERS)}")
    if not set(args.jobs_age) <= {"young", "old"} or len(set(args.jobs_age)) != len(args.jobs_age):
        parser.error("--jobs-age: young, old or young,old")
    size = re.fullmatch(r"(\d+)x(\d+)", args.size)
    if size is None or int(size.group(1)) < 40 or int(size.group(2)) < 10:
        parser.error("--size: COLSxROWS, at least 40x10 (e.g. 80x24)")
    args.fakenvml = args.fakenvml.resolve()
    if args.keys_marker is not None and not args.keys:
        parser.error("--keys-marker needs --keys")
    try:
        if args.keys:
            parse_keys(args.keys)
        args.variant = [parse_variant(text) for text in args.variant]
    except ValueError as error:
        parser.error(str(error))
    names = [spec.name for spec in args.variant]
    if len(set(names)) != len(names):
        parser.error("--variant names must differ")
    if args.gpumon_root is not None:
        args.gpumon_root = args.gpumon_root.expanduser().resolve()
    return args


def find_py_spy() -> str:
    """py-spy next to this interpreter (a venv's bin/) or on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.is_file() else shutil.which("py-spy")
    if found is None:
        raise SetupError("--py-spy needs py-spy: pip install py-spy")
    return found


def raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


Results = dict[str, dict[str, list[RunResult]]]  # job group -> monitor -> runs


def run_plan(plan: Plan, config: Config, args: argparse.Namespace) -> Results:
    """Every monitor ``--runs`` times, alternately; with ``--jobs-age young,old`` the groups
    alternate too (young: gpumon, nvitop, ...; old: gpumon, nvitop, ...; young: ...)."""
    groups = list(plan.job_sets) or [""]
    results: Results = {g: {m.name: [] for m in plan.monitors} for g in groups}
    total = args.runs * len(plan.monitors) * len(groups)
    step = 0
    for index in range(1, args.runs + 1):
        for group in groups:
            jobs = plan.job_sets.get(group)
            for monitor in plan.monitors:
                step += 1
                if step > 1 and args.gap > 0:
                    time.sleep(args.gap)
                if group == "young" and jobs is not None:
                    jobs.restart()
                label = f"{monitor.name}{', jobs ' + group if group else ''} {index}/{args.runs}"
                log(
                    f"run {step}/{total} ({label}): "
                    f"about {args.warmup + args.seconds + 2:.0f} s ..."
                )
                stem = f"{monitor.name}{'-' + group if group else ''}-run{index}"
                profile = None
                if args.py_spy is not None and monitor.name == "gpumon":
                    args.py_spy.mkdir(parents=True, exist_ok=True)
                    profile = args.py_spy / f"{stem}.txt"
                result = run_once(monitor, config, profile, jobs, group)
                results[group][monitor.name].append(result)
                if result.error:
                    log(f"{monitor.name} run {index}: {result.error}")
                check_age(result, args.old_age)
                if args.screens is not None:
                    args.screens.mkdir(parents=True, exist_ok=True)
                    (args.screens / f"{stem}.txt").write_text(result.screen)
                    if result.first_screen:
                        path = args.screens / f"{stem}-first-frame.txt"
                        path.write_text(result.first_screen)
    return results


def check_age(result: RunResult, old_age: float) -> None:
    """Warn when a run's jobs were not of the age its group promises."""
    start, end = result.job_age_start_s, result.job_age_end_s
    if result.jobs == "young" and (end is None or end >= YOUNG_LIMIT_S):
        log(f"warning: {result.monitor}'s young jobs were up to {end} s old in the window")
    if result.jobs == "old" and (start is None or start < old_age):
        log(f"warning: {result.monitor}'s old jobs were only {start} s old in the window")


def start_jobs(plan: Plan, args: argparse.Namespace) -> None:
    """Start (or reuse) the job sets; young ones are started before each run instead. Old
    ones are waited for until the youngest is ``--old-age`` seconds old (once: later
    benchmarks reuse them)."""
    for group, jobs in plan.job_sets.items():
        if group != "young":
            jobs.start()
        if group != "old":
            continue
        ages = jobs.ages()
        if ages is None:
            raise SetupError(f"the old jobs in {jobs.dir} are gone")
        wait = args.old_age + 1 - ages[0]
        if wait > 0:
            log(f"waiting {wait:.0f} s until the old jobs in {jobs.dir} are {args.old_age:g} s old")
            time.sleep(wait)


@contextlib.contextmanager
def busy_load(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU for the whole plan (--busy): a busy machine
    on purpose, the same for every monitor and run (the load average is printed per run)."""
    hogs = [
        subprocess.Popen(
            [sys.executable, "-S", "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    if hogs:
        log(f"{count} busy processes spinning (--busy); waiting 20 s for the load to rise")
        time.sleep(20)
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def main(argv: Sequence[str] | None = None) -> int:
    global COLUMNS, ROWS  # --size; read by the screens, the reader and the report
    args = parse_args(argv)
    COLUMNS, ROWS = (int(n) for n in args.size.split("x"))
    # Also SIGINT: a shell starts background jobs with it ignored; the jobs must still stop.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, raise_interrupt)
    plan: Plan | None = None
    try:
        plan = make_plan(args)
        config = Config(
            warmup_s=args.warmup,
            seconds=args.seconds,
            answer_queries=args.answer_queries,
            nvml_stats=args.nvml_stats,
            py_spy=find_py_spy() if args.py_spy is not None else None,
            py_spy_rate=args.py_spy_rate,
        )
        context = machine_context(args.python)
        context["busy_processes"] = args.busy
        start_jobs(plan, args)
        with busy_load(args.busy):
            results = run_plan(plan, config, args)
    except SetupError as error:
        log(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        log("interrupted")
        return 2
    finally:
        if plan is not None:
            for jobs in plan.job_sets.values():
                jobs.stop()
    payloads: dict[str, Any] = {}
    status = 0
    for group, by_monitor in results.items():
        if len(results) > 1 and not args.json:
            print(f"\n===== jobs: {group} {'=' * 60}\n")
        code, payload = report(args, plan, config, context, by_monitor, group)
        payloads[group] = payload
        status = max(status, code)
    if args.json:
        shown = payloads[""] if list(payloads) == [""] else {"jobs_age": payloads}
        print(json.dumps(shown, indent=2))
    return status


def report(
    args: argparse.Namespace,
    plan: Plan,
    config: Config,
    context: dict[str, Any],
    results: dict[str, list[RunResult]],
    group: str = "",
) -> tuple[int, dict[str, Any] | None]:
    """Print one job group's report (or, with --json, return it): exit status, payload."""
    ours = results["gpumon"]
    theirs = results.get("nvitop")
    if args.capture is not None:
        for name, runs in results.items():
            path = args.capture
            suffix = ("" if name == "gpumon" else f"-{name}") + (f"-{group}" if group else "")
            if suffix:
                path = path.with_name(f"{path.stem}{suffix}{path.suffix}")
            last = runs[-1]
            path.write_bytes(b"".join(data for _, data in last.window_chunks()))
            log(f"wrote {last.window_bytes} bytes of {name}'s steady-state output to {path}")
    reports = []
    if args.breakdown:
        reports = [breakdown(runs[-1]) for runs in results.values() if runs[-1].window]
    summary = summarise(ours, plan.targets)
    gpumons = [m.name for m in plan.monitors if m.name not in PEERS]
    variants = variants_table(results, gpumons) if len(gpumons) > 1 else None
    latency = key_latency_table(results)
    functions = nvml_functions(results) if args.nvml_stats else {}
    comparison = None
    cpu_ratio = args.cpu_ratio_target or cpu_ratio_target(plan.processes)
    if theirs is not None:
        comparison = compare(ours, theirs, cpu_ratio)
        passed = all(row["pass"] for row in comparison.values())
    else:
        passed = all(row["pass"] is not False for row in summary.values())
    others = {
        peer: compare(ours, results[peer], cpu_ratio, peer)
        for peer in PEERS
        if peer != "nvitop" and peer in results
    }
    payload = None
    if args.json:
        payload = {
            "jobs_age": group or "started once, reused",
            "machine": context,
            "scenario": plan.description,
            "commands": {m.name: m.command for m in plan.monitors},
            "gpumon_roots": {m.name: m.cwd for m in plan.monitors if m.cwd},
            "keys": {
                m.name: {"keys": m.keys_spec, "marker": m.keys_marker}
                for m in plan.monitors
                if m.keys
            },
            "versions": plan.versions,
            "nvml_env": plan.nvml_env,
            "terminal": {"columns": COLUMNS, "rows": ROWS, "answer_queries": args.answer_queries},
            "first_frame_marker": plan.monitors[0].rule.description,
            "warmup_s": args.warmup,
            "window_s": args.seconds,
            "runs": {
                name: [
                    {
                        k: v
                        for k, v in asdict(r).items()
                        if k not in ("chunks", "window", "screen", "first_screen")
                    }
                    for r in runs
                ]
                for name, runs in results.items()
            },
            "metrics": summary,
            "comparison": comparison,
            **{f"comparison_{peer}": rows for peer, rows in others.items()},
            "facts": {name: run_facts(runs) for name, runs in results.items()},
            "breakdown": reports,
            **({"variants": variants} if variants is not None else {}),
            **({"key_latency": latency} if latency else {}),
            **({"nvml_functions": functions} if functions else {}),
            "pass": passed,
        }
    else:
        print_header(context, plan, config)
        for runs in results.values():
            print_runs(runs)
        if comparison is not None:
            print_comparison(comparison, args.runs)
        for peer, rows in others.items():
            print_comparison(rows, args.runs, peer)
        if comparison is None:
            print_summary(summary, args.runs, plan.reference)
            if plan.reference == "recorded":
                print(
                    "(recorded: nvitop's medians measured on another day, the base of the targets; "
                    "--compare nvitop measures it alongside)"
                )
        print()
        for runs in results.values():
            print(run_facts(runs))
        if variants is not None:
            print_variants(variants, gpumons, args.runs)
        if latency:
            print_key_latency(latency)
        print_nvml_functions(functions)
        for breakdown_report in reports:
            print_breakdown(breakdown_report)
        if args.py_spy is not None:
            print_profile(args, len(ours), group)
    if any(r.error for runs in results.values() for r in runs):
        return 2, payload
    return (0 if passed else 1), payload


if __name__ == "__main__":
    raise SystemExit(main())
