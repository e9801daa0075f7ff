"""One corpus of hostile text from other users, and a sample that carries it everywhere.

Any local user can start a GPU process whose command line (or program name, ``exec -a``)
holds escape sequences for whoever displays it, bytes that are not UTF-8, or characters that
reorder or hide text. Every output mode is checked against this one corpus: the dashboard
(through a terminal emulator), ``gpumon once`` (in several locales), ``once --json`` (parsed
strictly) and the Prometheus exporter (parsed and linted).

The argv strings are what psutil returns on Linux: the raw bytes of ``/proc/PID/cmdline``
decoded as the file system encoding does (UTF-8 with ``surrogateescape``).
"""

from __future__ import annotations

import os
import unicodedata

import psutil

from gpumon.sources.host.inspector import ProcessInspector
from gpumon.sources.nvml.source import NvmlSource
from tests.support.fake_nvml import (
    GIB,
    FakeNvml,
    FakeProcess,
    FakeProcessTable,
    ProcessInfo,
    make_gpu,
)


def _argv(*parts: bytes) -> list[str]:
    return [os.fsdecode(part) for part in parts]


#: label -> argv, each a way another user's command line attacks whoever shows it.
HOSTILE_ARGV: dict[str, list[str]] = {
    "ansi_clear_screen": _argv(b"python", b"\x1b[2J\x1b[Hfake.py", b"\x1b[31mred"),
    "osc52_clipboard": _argv(b"python", b"\x1b]52;c;cm0gLXJmIH4K\x07", b"x.py"),
    "c1_csi_raw_byte": _argv(b"train\x9b2J", b"--lr"),  # 0x9b: CSI in an 8-bit terminal
    "c1_osc_raw_bytes": _argv(b"sleep", b"\x9d52;c;cm0gLXJmIH4K\x9c", b"1000"),
    "c1_as_utf8": _argv(b"python", "\u009b2J\u009d0;title\u009c".encode()),
    "carriage_return": _argv(b"python", b"innocent.py\rrm -rf ~"),
    "not_utf8": _argv(b"train\xff", b"--data", b"/data/\xc3\x28set"),
    "bidi_override": _argv(b"python", "evil\u202etxt.py".encode(), "\u2066a\u2069".encode()),
    "zero_width": _argv(b"py\xe2\x80\x8bthon", "x\u200c\u200d\u200e\u200f\ufeff.py".encode()),
    "line_separator": _argv(b"python", "a\u2028b\u2029c".encode()),
    # Invisible but not format characters: "train.py" twice, looking the same.
    "invisible_letters": _argv(b"python", "tra\u034fin\ufe00.py".encode(), "\u3164".encode()),
    "emoji_cjk": _argv(b"python", "学習.py".encode(), "--tag=🚀".encode()),
    "very_long": _argv(b"python", b"x" * 100_000),
}

#: The same texts as user names: a passwd entry or a psutil username is another user's text too.
HOSTILE_USER = os.fsdecode(b"mal\x1b[2J\x9b\xffory\xe2\x80\xae")

# What may never reach an output: controls (C0 but tab/newline where a format puts them, DEL,
# C1), lone surrogates (bytes that were not UTF-8), and invisible format characters.
_FORBIDDEN_CATEGORIES = ("Cc", "Cs", "Cf", "Zl", "Zp")


#: Invisible characters in other categories (Unicode's default-ignorable code points).
_INVISIBLE = frozenset("\u034f\u115f\u1160\u3164\uffa0") | {chr(c) for c in range(0xFE00, 0xFE10)}


def unsafe_characters(text: str, *, allow: str = "") -> list[str]:
    """The characters in ``text`` that must never reach a terminal, JSON or Prometheus."""
    return [
        char
        for char in text
        if char not in allow
        and (
            unicodedata.category(char) in _FORBIDDEN_CATEGORIES
            or char in _INVISIBLE
            or 0xE0000 <= ord(char) <= 0xE0FFF
        )
    ]


def hostile_source(clock: float = 5_000.0) -> NvmlSource:
    """An NVML source with one GPU per hostile command line, each a real-looking process.

    GPU 0's process has the hostile user name too. PIDs are 7000, 7001, ...
    """
    labels = list(HOSTILE_ARGV)
    fake = FakeNvml(
        [
            make_gpu(index, compute_processes=[ProcessInfo(7000 + index, GIB)])
            for index in range(len(labels))
        ]
    )
    table = FakeProcessTable(
        *(
            FakeProcess(
                7000 + index,
                user=HOSTILE_USER if index == 0 else "mallory",
                # The uid is refused, so the user name is psutil's: the other user's text.
                errors={"uids": psutil.AccessDenied(7000 + index)},
                cmdline_parts=HOSTILE_ARGV[label],
                process_name=HOSTILE_ARGV[label][0][:15],
            )
            for index, label in enumerate(labels)
        )
    )
    inspector = ProcessInspector(
        process_factory=table,  # type: ignore[arg-type]
        current_uid=1000,
        clock=lambda: clock,
    )
    return NvmlSource(nvml=fake, inspector=inspector, clock=lambda: clock)
