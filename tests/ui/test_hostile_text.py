"""Other users' command lines and names reach no output unsafe.

One corpus (:mod:`tests.support.hostile`: ANSI and OSC 52 escapes, raw C1 bytes, ``\\r``, bytes that
are not UTF-8, bidi overrides, zero-width characters, emoji and CJK, a 100k-character
argument) goes through the real NVML source with faked NVML and psutil, then into every
output: the sample itself, ``gpumon once`` in four locales, ``once --json`` read strictly,
and the dashboard's bytes replayed in a terminal emulator. The exporter has its own check in
tests/commands/export/test_export_hostile.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyte
import pytest

from gpumon.data import format as fmt
from gpumon.ui import exact_updates
from gpumon.ui.dashboard.app import create_app
from tests.support.hostile import HOSTILE_ARGV, HOSTILE_USER, hostile_source, unsafe_characters
from tests.support.ui_helpers import record_terminal_writes

ROOT = Path(__file__).resolve().parents[2]


def test_safe_text_escapes_each_kind_of_hostile_character_visibly() -> None:
    assert fmt.safe_text("python train.py --lr 3e-4") == "python train.py --lr 3e-4"
    assert fmt.safe_text("a\x1b[2Jb\r\n\t") == "a?[2Jb???"
    assert fmt.safe_text("x\x9b31m\x9d52;c;AA\x9c") == "x?31m?52;c;AA?"
    assert fmt.safe_text(os.fsdecode(b"train\xff\x9b")) == "train\\xff\\x9b"
    assert fmt.safe_text("evil\u202etxt.py\u2066") == "evil\\u202etxt.py\\u2066"
    assert fmt.safe_text("py\u200bthon\ufeff") == "py\\u200bthon\\ufeff"
    assert fmt.safe_text("tag\U000e0041 a\u2028b") == "tag\\U000e0041 a\\u2028b"
    assert fmt.safe_text("tra\u034fin\ufe00.py\u3164\U000e0080") == (
        "tra\\u034fin\\ufe00.py\\u3164\\U000e0080"
    )
    assert fmt.safe_text("学習 🚀 café") == "学習 🚀 café"
    long = fmt.safe_text("x" * 100_000)
    assert len(long) == fmt.SAFE_TEXT_MAX_CHARS + 1 and long.endswith(fmt.ELLIPSIS)


def test_the_source_makes_every_text_safe_once() -> None:
    sample = hostile_source().sample()

    commands = {p.pid: p.command or "" for p in sample.processes}
    assert len(commands) == len(HOSTILE_ARGV)
    for pid, command in commands.items():
        assert unsafe_characters(command) == [], (pid, command)
        command.encode("utf-8")  # no lone surrogates
        assert len(command) <= fmt.SAFE_TEXT_MAX_CHARS + 1
    users = {p.user for p in sample.processes}
    assert all(user is not None and unsafe_characters(user) == [] for user in users)
    by_label = {label: commands[7000 + i] for i, label in enumerate(HOSTILE_ARGV)}
    # Shown, not hidden: what the bytes were stays readable.
    assert by_label["not_utf8"].startswith("train\\xff --data /data/\\xc3(set")
    assert by_label["c1_csi_raw_byte"] == "train\\x9b2J --lr"
    assert "evil\\u202etxt.py" in by_label["bidi_override"]
    assert by_label["zero_width"].startswith("py\\u200bthon")
    assert by_label["emoji_cjk"] == "python 学習.py --tag=🚀"
    assert "\\x1b" not in by_label["ansi_clear_screen"]  # ESC is a control: "?"
    assert by_label["ansi_clear_screen"] == "python ?[2J?[Hfake.py ?[31mred"


def _walk_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (key, *_walk_strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in _walk_strings(item)]
    return []


# Runs gpumon's own CLI with the hostile sample in place of a real one, so stdout is the
# interpreter's real stdout under the locale of the test.
_ONCE_WITH_HOSTILE_SAMPLE = """
import sys
sys.path.insert(0, {root!r})
import gpumon.sampling.snapshot
from tests.support.hostile import hostile_source
sample = hostile_source().sample()
gpumon.sampling.snapshot.take_sample = lambda args, **options: sample
from gpumon.cli import main
sys.exit(main(sys.argv[1:]))
"""

# (environment, encoding of stdout there)
LOCALES = {
    "C (UTF-8 mode)": ({"LC_ALL": "C"}, "utf-8"),
    "C.UTF-8": ({"LC_ALL": "C.UTF-8", "PYTHONUTF8": "0"}, "utf-8"),
    "C, no coercion": ({"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, "ascii"),
    "POSIX, no coercion": (
        {"LC_ALL": "POSIX", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
        "ascii",
    ),
}


def _run_once(locale_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    env.update(locale_env)
    script = _ONCE_WITH_HOSTILE_SAMPLE.format(root=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", script, "once", *args],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("locale_name", list(LOCALES))
def test_once_writes_no_control_character_in_any_locale(locale_name: str) -> None:
    locale_env, encoding = LOCALES[locale_name]

    result = _run_once(locale_env, "--color", "never")

    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stderr == b""
    out = result.stdout
    # Not one C0 control but the newlines, not one C1 byte where a terminal could read one.
    assert not [byte for byte in out if (byte < 0x20 and byte != 0x0A) or byte == 0x7F]
    if encoding == "ascii":
        assert out.isascii()
    text = out.decode(encoding)  # strict: valid in the locale's encoding
    assert unsafe_characters(text, allow="\n") == []
    assert "train\\xff" in text
    # psutil decodes /proc with the file system encoding: in an ASCII locale the bidi
    # override arrives as three undecodable bytes, and is shown as those.
    bidi = "evil\\u202etxt.py" if encoding == "utf-8" else "evil\\xe2\\x80\\xaetxt.py"
    assert bidi in text


@pytest.mark.parametrize("locale_name", list(LOCALES))
def test_once_json_is_strict_utf8_json_without_surrogates(locale_name: str) -> None:
    locale_env, _ = LOCALES[locale_name]

    result = _run_once(locale_env, "--json")

    assert result.returncode == 0, result.stderr.decode(errors="replace")
    document = json.loads(result.stdout.decode("utf-8"))  # strict decoding
    strings = _walk_strings(document)
    assert all(unsafe_characters(text) == [] for text in strings)
    commands = [p["command"] for gpu in document["gpus"] for p in gpu["processes"]]
    assert len(commands) == len(HOSTILE_ARGV)
    assert {p["user"] for gpu in document["gpus"] for p in gpu["processes"]} >= {"mallory"}


async def test_dashboard_writes_no_hostile_byte_and_shows_the_escapes() -> None:
    exact_updates.install()
    source = hostile_source()
    app = create_app(source, autostart=False, ascii_only=False)
    async with app.run_test(size=(200, 50)) as pilot:
        written = record_terminal_writes(app)
        app.refresh()
        for _ in range(3):
            app.receive_sample(source.sample())
            await pilot.pause()
    output = "".join(written)

    # The terminal gets Textual's own escape sequences, and none from another user. The one
    # other control gpumon sends is its own: a backspace right after a move up or down (one
    # column back on the next row, the cheapest move there).
    assert "\x1b]52" not in output and "\x1b[2J" not in output
    own_moves = re.sub("\x1b\\[[0-9]*[AB]\x08", "\x1b[B", output)
    assert unsafe_characters(own_moves, allow="\x1b\r\n") == []
    terminal = pyte.Screen(200, 50)
    pyte.Stream(terminal).feed(output)
    shown = "\n".join(terminal.display)
    assert "evil\\u202etxt.py" in shown
    assert "train\\xff" in shown
    assert "python ?[2J?[Hfake.py" in shown
    assert HOSTILE_USER not in shown


async def test_a_gpu_name_with_brackets_is_shown_as_text_not_read_as_markup() -> None:
    """The GPU detail's title: "[/]" in a name crashed it (MarkupError), "[b]" vanished."""
    from gpumon.ui.dashboard.app import create_app
    from tests.support.ui_helpers import make_gpu, make_sample, screen_text

    name = "Board [/]x [b]y[/b]"

    class Named:
        simulated = False

        def sample(self):  # type: ignore[no-untyped-def]
            return make_sample((make_gpu(0, name=name),))

        def close(self) -> None:
            pass

    app = create_app(Named(), interval_s=0.25, ascii_only=False)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        while app.samples_received < 1:
            await pilot.pause(0.05)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert name in screen_text(app)
