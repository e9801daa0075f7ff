"""Wide characters (CJK, emoji) in user names and commands: widths are terminal cells.

A CJK character or an emoji takes two cells on a terminal. Counting characters instead
shifts every column after a wide user name and lets a wide command overflow its column.
"""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from gpumon.commands.once import render_table
from gpumon.data import format as fmt
from gpumon.ui.widgets.lines import Glyphs, Line
from gpumon.ui.widgets.process_table import ProcessTable
from tests.support.ui_helpers import app_for, make_gpu, make_process, make_sample, screen_text

CJK_USER = "用户名用户名用户"  # 8 characters, 16 cells: wider than the USER column (10)
CJK_COMMAND = "python 训练模型" + "训练模型" * 12 + ".py --epochs 3"


def cells_before(line: str, text: str) -> int:
    """The cell where ``text`` starts in ``line``."""
    return cell_len(line[: line.index(text)])


def cells_through(line: str, text: str) -> int:
    """The cell just after where ``text`` ends in ``line``."""
    return cell_len(line[: line.index(text) + len(text)])


# format.truncate and friends (the headless measure) --------------------------------------


@pytest.mark.parametrize(
    ("text", "cells"),
    [
        ("", 0),
        ("abc", 3),
        ("训练", 4),
        ("a训b", 4),
        ("\uff21\uff22", 4),  # fullwidth Latin AB
        ("😀", 2),
        ("e\u0301", 1),  # combining accent: no cell of its own
        ("❤\ufe0f", 2),  # emoji presentation selector widens a narrow symbol
        ("👨\u200d👩\u200d👧", 2),  # one family emoji, joined
    ],
)
def test_cell_len_counts_terminal_cells_like_rich(text: str, cells: int) -> None:
    assert fmt.cell_len(text) == cells
    assert fmt.cell_len(text) == cell_len(text)  # what the dashboard (Textual) measures


def test_truncate_keeps_wide_text_that_fits() -> None:
    assert fmt.truncate("训练模型", 8) == "训练模型"
    assert fmt.truncate("训练模型", 20) == "训练模型"


def test_truncate_counts_cells_not_characters() -> None:
    # 4 characters but 8 cells: does not fit in 6 cells although len() == 4 would.
    cut = fmt.truncate("训练模型", 6)
    assert cut.startswith("训练") and "…" in cut
    assert fmt.cell_len(cut) == 6


@pytest.mark.parametrize("width", range(1, 14))
@pytest.mark.parametrize("ellipsis", [fmt.ELLIPSIS, fmt.ASCII_ELLIPSIS])
def test_truncate_cut_wide_text_is_exactly_width_cells_and_never_halves_a_char(
    width: int, ellipsis: str
) -> None:
    text = "ab训练模型cd训练模型"  # 20 cells
    cut = fmt.truncate(text, width, ellipsis)
    assert fmt.cell_len(cut) == width
    head, mark, pad = cut.partition(ellipsis)
    assert mark == ellipsis
    assert text.startswith(head)  # whole characters only, no half of a wide one
    assert pad.strip() == ""  # at most the space left by a dropped wide character
    assert len(pad) <= 1


def test_truncate_drops_a_straddling_wide_char_and_pads_with_a_space() -> None:
    # 5 cells: "训练" (4) + "…" (1); 6 cells: the next wide char does not fit in the 5 before
    # the ellipsis, so it goes whole and a space fills its half.
    assert fmt.truncate("训练模型", 5) == "训练…"
    assert fmt.truncate("训练模型", 6) == "训练… "
    assert fmt.truncate("训练模型", 2) == "… "
    assert fmt.truncate("训练模型", 1) == "…"
    assert fmt.truncate("训练模型", 0) == ""


def test_truncate_keeps_combining_marks_with_their_letter() -> None:
    text = "cafe\u0301 crème brûlée"
    cut = fmt.truncate(text, 5)
    assert cut == "cafe\u0301…"
    assert fmt.cell_len(cut) == 5


def test_truncate_never_splits_an_emoji_sequence() -> None:
    family = "👨\u200d👩\u200d👧"
    cut = fmt.truncate(f"a{family}{family}b", 4)
    assert cut == f"a{family}…"


def test_cell_padding_helpers() -> None:
    assert fmt.ljust_cells("训练", 6) == "训练  "
    assert fmt.rjust_cells("训练", 6) == "  训练"
    assert fmt.ljust_cells("ab", 4) == "ab  "  # ASCII: as str.ljust
    assert fmt.rjust_cells("训练", 3) == "训练"  # never cut


# The dashboard's measure (rich, as Textual draws) ------------------------------------------


@pytest.mark.parametrize("ascii_only", [False, True])
@pytest.mark.parametrize("width", range(0, 12))
def test_glyphs_fit_gives_exactly_width_cells(ascii_only: bool, width: int) -> None:
    glyphs = Glyphs(ascii_only)
    for text in (CJK_USER, "ab训练模型", "x", "😀😀😀😀😀😀", "plain ascii text"):
        for right in (False, True):
            fitted = glyphs.fit(text, width, right)
            assert cell_len(fitted) == width, (text, width, fitted)
            if cell_len(text) > width > 0:
                head = fitted.strip().removesuffix(glyphs.ellipsis)
                assert fitted.strip().endswith(glyphs.ellipsis)
                assert text.startswith(head)


def test_glyphs_truncate_wide_text() -> None:
    assert Glyphs(ascii_only=False).truncate("训练模型", 5) == "训练…"
    assert Glyphs(ascii_only=False).truncate("训练模型", 6) == "训练… "
    assert Glyphs(ascii_only=True).truncate("训练模型", 6) == "训练~ "
    assert Glyphs(ascii_only=True).truncate("训练模型", 8) == "训练模型"


def test_line_width_is_in_cells() -> None:
    line = Line().add("ab").add("训练")
    assert line.width == 6
    strip = line.strip(10)
    assert strip.cell_length == 10
    assert sum(cell_len(segment.text) for segment in strip) == 10


# What a user sees in the dashboard ---------------------------------------------------------


def _rows_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


async def test_cjk_user_and_command_keep_the_process_columns_aligned() -> None:
    gpu = make_gpu(0)
    sample = make_sample(
        (gpu,),
        (
            make_process(gpu, 1, user=CJK_USER, command=CJK_COMMAND),
            make_process(gpu, 2, user="训练", command="训练 --short"),
            make_process(gpu, 3),
        ),
    )
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        text = screen_text(app)
        header = next(line for line in text.splitlines() if "COMMAND" in line)
        rows = _rows_with(text, "1h02m")  # every row's TIME value
        assert len(rows) == 3
        for row in rows:
            # TIME is right-aligned: each value ends where the header's TIME title ends.
            assert cells_through(row, "1h02m") == cells_through(header, "TIME")
            # COMMAND is left-aligned: each command starts under the COMMAND title.
            command = row[row.index("1h02m") + len("1h02m") :].strip()
            assert cells_before(row, command) == cells_before(header, "COMMAND")
            # Columns before USER and after it line up too.
            assert cells_through(row, "2.0G") == cells_through(header, "GPU-MEM")
        for line in text.splitlines():
            assert cell_len(line) == 100  # nothing pushed past the screen's edge


async def test_a_cut_wide_command_ends_with_an_ellipsis_and_no_half_character() -> None:
    gpu = make_gpu(0)
    sample = make_sample((gpu,), (make_process(gpu, 1, user=CJK_USER, command=CJK_COMMAND),))
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        table = app.query_one(ProcessTable)
        (row,) = _rows_with(screen_text(app), "1h02m")
        assert "…" in row
        shown = row[row.index("python") :].rstrip()
        head = shown.removesuffix("…")
        assert shown.endswith("…")
        assert CJK_COMMAND.startswith(head)  # whole characters, none replaced by a space
        # The row ends at the table's edge, its user name cut with an ellipsis as well.
        assert cells_through(row, "…") <= table.scrollable_content_region.right
        assert "用户名用…" in row
        # The strip Textual gets claims the width it really takes.
        strip = table.render_line(1)
        assert strip.cell_length == sum(cell_len(segment.text) for segment in strip)
        assert strip.cell_length == table.scrollable_content_region.width


async def test_wide_command_in_ascii_mode_is_cut_with_a_tilde() -> None:
    gpu = make_gpu(0)
    sample = make_sample((gpu,), (make_process(gpu, 1, command=CJK_COMMAND),))
    app = app_for(sample, ascii_only=True)
    async with app.run_test(size=(100, 30)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        (row,) = _rows_with(screen_text(app), "1h02m")
        shown = row[row.index("python") :].rstrip()
        assert shown.endswith("~")
        assert CJK_COMMAND.startswith(shown.removesuffix("~"))


# gpumon once ----------------------------------------------------------------------------


def test_once_columns_align_with_wide_user_names_and_commands() -> None:
    gpu = make_gpu(0)
    sample = make_sample(
        (gpu,),
        (
            make_process(gpu, 1, user=CJK_USER, command=CJK_COMMAND),
            make_process(gpu, 22, user="bob", command="python job.py"),
            make_process(gpu, 333, user="训练", command="训练 --x"),
        ),
    )
    text = render_table(sample, color=False, width=80, ascii_only=False)
    lines = text.splitlines()[2:]
    assert len(lines) == 3
    # PID and memory are right-aligned: they end at the same cell on every line.
    ends = {cells_through(line, "2.0G") for line in lines}
    assert len(ends) == 1
    pids = (1, 22, 333)
    pid_ends = {cells_through(line, f"{pid}  ") for line, pid in zip(lines, pids, strict=True)}
    assert len(pid_ends) == 1
    # Commands start in the same cell, and a cut one fills the terminal's 80 cells.
    starts = {cells_through(line, "2.0G  ") for line in lines}
    assert len(starts) == 1
    assert cell_len(lines[0]) == 80
    assert "…" in lines[0]
    assert CJK_COMMAND.startswith(lines[0].split("2.0G  ")[1].rstrip().removesuffix("…"))


def test_once_gpu_names_with_wide_characters_keep_the_columns_aligned() -> None:
    sample = make_sample((make_gpu(0, name="测试显卡"), make_gpu(1, name="NVIDIA Test Board")))
    lines = render_table(sample, show_processes=False, ascii_only=False).splitlines()[1:]
    assert len({cells_before(line, "|") for line in lines}) == 1
