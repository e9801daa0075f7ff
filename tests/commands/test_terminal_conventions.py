"""Terminal conventions: TERM=dumb, the width `gpumon once` fits (COLUMNS or the terminal's),
and FORCE_COLOR beside NO_COLOR and --color."""

from __future__ import annotations

import fcntl
import io
import os
import re
import selectors
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from gpumon.commands.once import output_width, render_table, render_users
from gpumon.data import format as fmt
from gpumon.data.free import free_gpu_indices
from gpumon.data.painting import Painter, fit_line, use_color
from gpumon.sources.demo import DemoSource

ROOT = Path(__file__).resolve().parents[2]
SGR = re.compile(r"\x1b\[[0-9;]*m")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def cells(line: str) -> int:
    return fmt.cell_len(SGR.sub("", line))


def on_a_terminal(argv: list[str], columns: int, env: dict[str, str]) -> tuple[int, str]:
    """gpumon with a ``columns``-wide pseudo-terminal as stdin, stdout and stderr."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "gpumon", *argv],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    os.close(slave)
    output = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(master, selectors.EVENT_READ)
        while selector.select(30):
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: gpumon exited and closed the terminal
                break
            if not data:
                break
            output += data
    os.close(master)
    return process.wait(30), output.decode("utf-8", "replace").replace("\r\n", "\n")


def terminal_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update({"TERM": "xterm-256color", "LANG": "C.UTF-8"}, **extra)
    return env


def test_term_dumb_refuses_the_dashboard_in_one_line_pointing_at_once_and_status() -> None:
    """An editor's shell or a serial console (TERM=dumb) would show escape codes: gpumon says
    what to use instead and exits 2, having written no escape sequence."""
    status, output = on_a_terminal(["--demo"], 80, terminal_env(TERM="dumb"))
    assert status == 2
    assert output == (
        "gpumon: error: the dashboard needs a terminal that can move the cursor (TERM=dumb "
        "here); use `gpumon once` for a snapshot or `gpumon status` for one line\n"
    )


def test_once_fits_a_60_column_terminal() -> None:
    """On a 60-column terminal (COLUMNS unset) no line of `gpumon once` is wider than 60."""
    status, output = on_a_terminal(["once", "--demo", "--demo-gpus", "8"], 60, terminal_env())
    assert status == 0
    lines = output.splitlines()
    assert len(lines) > 10 and "DEMO" in lines[0]
    assert max(cells(line) for line in lines) <= 60
    assert SGR.search(output)  # a terminal: coloured


@pytest.mark.parametrize("columns", [100, 80, 45, 30])
def test_columns_overrides_the_terminals_width(columns: int) -> None:
    status, output = on_a_terminal(
        ["once", "--demo", "--demo-gpus", "8"], 200, terminal_env(COLUMNS=str(columns))
    )
    assert status == 0
    assert max(cells(line) for line in output.splitlines()) <= columns


def test_piped_nothing_is_cut() -> None:
    """`gpumon once | grep` sees whole lines, whatever COLUMNS says."""
    assert output_width(io.StringIO(), {"COLUMNS": "72"}) is None
    assert output_width(Tty(), {"COLUMNS": "72"}) == 72
    for junk in ("", "0", "-3", "abc", "\uff17\uff12"):  # the last: fullwidth digits
        # A StringIO has no terminal to ask: no width either.
        assert output_width(Tty(), {"COLUMNS": junk}) is None


def table(width: int | None) -> list[str]:
    sample = DemoSource(4, seed=1).sample()
    text = render_table(
        sample, width=width, ascii_only=False, free=free_gpu_indices(sample, 1024), color=True
    )
    return [SGR.sub("", line) for line in text.splitlines()]


def test_commands_are_cut_first() -> None:
    """At 80 columns the commands are cut, and nothing else is: every GPU line is whole."""
    whole, narrow = table(None), table(80)
    gpu_lines = [line for line in whole if line.startswith("[")]
    assert [line for line in narrow if line.startswith("[")] == gpu_lines
    commands = [line for line in narrow if line.startswith("    ") and line.endswith("…")]
    assert commands, "some command was long enough to cut"
    assert narrow[0] == whole[0] or cells(whole[0]) > 80


def test_then_names_and_power_go_and_free_stays() -> None:
    """Narrower still: the GPU names are cut, then the power column goes; FREE and the
    readings stay, and the header keeps the host and DEMO."""
    for width in (60, 45):
        lines = table(width)
        assert max(cells(line) for line in lines) <= width
        assert lines[0].startswith("demo-gpu-server") and lines[0].endswith("DEMO")
        gpus = [line for line in lines if line.startswith("[")]
        assert any(line.endswith("| FREE") for line in gpus)
        assert all("°C" in line and "/ " in line for line in gpus)
    assert all(line.endswith(("W", "FREE")) and "W" in line for line in table(60) if "[" in line)
    assert not [line for line in table(45) if line.startswith("[") and "W" in line]
    # Then the names: the index still tells the GPUs apart.
    shown = [line[:6] for line in table(40) if line.startswith("[")]
    assert shown == [f"[{index}] | " for index in range(4)]


def test_the_users_table_fits_too() -> None:
    sample = DemoSource(4, seed=1).sample()
    lines = render_users(sample, width=20).splitlines()
    assert lines and max(cells(line) for line in lines) <= 20


def test_fit_line_keeps_colours_whole_and_resets() -> None:
    paint = Painter(True)
    line = paint("hello", "31") + " world " + paint("漢字漢字", "1")
    for width in range(1, 22):
        cut = fit_line(line, width)
        assert cells(cut) == min(width, 20)
        if cells(line) > width:
            assert SGR.sub("", cut).rstrip().endswith("…")
            assert cut.endswith("\x1b[0m") or not SGR.search(cut)
    assert fit_line(line, 0) == ""
    assert fit_line("plain text", 6, "~") == "plain~"


@pytest.mark.parametrize(
    ("mode", "environ", "expected"),
    [
        ("auto", {"FORCE_COLOR": "1"}, True),  # force-color.org: also into a pipe
        ("auto", {"FORCE_COLOR": "0"}, True),  # "regardless of its value"
        ("auto", {"FORCE_COLOR": ""}, False),  # empty: not set
        ("auto", {"FORCE_COLOR": "1", "TERM": "dumb"}, True),
        ("auto", {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),  # NO_COLOR wins
        ("never", {"FORCE_COLOR": "1"}, False),  # the command line wins over both
        ("always", {"NO_COLOR": "1"}, True),
        ("auto", {}, False),
    ],
)
def test_force_color_beside_no_color_and_the_flag(
    mode: str, environ: dict[str, str], expected: bool
) -> None:
    assert use_color(mode, io.StringIO(), environ) is expected


def test_no_color_still_wins_on_a_terminal() -> None:
    assert use_color("auto", Tty(), {}) is True
    assert use_color("auto", Tty(), {"NO_COLOR": "1", "FORCE_COLOR": "1"}) is False
    assert use_color("auto", Tty(), {"TERM": "dumb"}) is False


def test_force_color_colours_once_into_a_pipe() -> None:
    def once(**extra: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", "once", "--demo"],
            capture_output=True,
            text=True,
            env=terminal_env(**extra),
            cwd=ROOT,
            check=True,
            timeout=60,
        ).stdout

    assert SGR.search(once(FORCE_COLOR="1"))
    assert not SGR.search(once(FORCE_COLOR="1", NO_COLOR="1"))
