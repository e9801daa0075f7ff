"""Sparklines on the GPU cards and two-line rows: where the width allows them and nowhere
else, none for a lost GPU, and bucketed so that only the newest column changes between two
shifts (fewer cells to repaint)."""

from __future__ import annotations

import dataclasses

import pytest

from gpumon.data.model import GpuStats, Sample
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.widgets.gpu_layout import CARD_HEIGHT, Layout
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.graphs import BLOCKS, bucketed, history_sparkline
from tests.support.ui_helpers import demo_app, push, screen_text

#: A sparkline's glyphs that a bar never uses (bars: full and left-eighth blocks).
SPARK_ONLY = set(BLOCKS) - {"█"}


def panel_lines(app: GpumonApp) -> list[str]:
    """The GPU panel's lines as drawn on the screen."""
    region = app.query_one(GpuPanel).region
    lines = screen_text(app).splitlines()[region.y : region.bottom]
    return [line[region.x : region.right] for line in lines]


def card(app: GpumonApp, position: int) -> list[str]:
    """The lines of the ``position``-th card (all cards shown, row by row)."""
    panel = app.query_one(GpuPanel)
    assert panel.layout_mode is Layout.CARDS and panel.top_row == 0
    width = panel.size.width // panel.columns
    row, column = divmod(position, panel.columns)
    lines = panel_lines(app)[row * CARD_HEIGHT : (row + 1) * CARD_HEIGHT]
    return [line[column * width : (column + 1) * width] for line in lines]


def line_of(lines: list[str], label: str) -> str:
    return next(line for line in lines if line.startswith(f"│ {label} ["))


def sparks(app: GpumonApp, index: int, width: int) -> tuple[str, str]:
    """GPU ``index``'s utilisation and memory sparklines, ``width`` cells, as a card draws
    them (from the app's store)."""
    gpu = next(gpu for gpu in app.query_one(GpuPanel).gpus if gpu.index == index)
    total = gpu.memory_total_bytes
    assert total is not None
    return (
        history_sparkline(app.store, index, "utilization_gpu_pct", width, 100.0, 1.0),
        history_sparkline(app.store, index, "memory_used_bytes", width, float(total), 1.0),
    )


def lose(sample: Sample, index: int) -> Sample:
    gpus = tuple(
        GpuStats(gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id, lost=True, lost_reason="gone")
        if gpu.index == index
        else gpu
        for gpu in sample.gpus
    )
    return dataclasses.replace(sample, gpus=gpus)


# -- where sparklines are drawn -------------------------------------------------------------


async def test_cards_at_200x50_show_utilisation_and_memory_sparklines() -> None:
    """Three cards abreast, 66 cells each (62 inside): sparklines of min(24, (62 - 28) // 3)
    = 11 cells, right of the GPU and MEM bars, lined up."""
    app, source = demo_app(8)
    async with app.run_test(size=(200, 50)) as pilot:
        await push(pilot, source, 1)
        panel = app.query_one(GpuPanel)
        assert panel.layout_mode is Layout.CARDS and panel.columns == 3
        first = {i: sparks(app, i, 11) for i in range(8)}
        # One sample: one cell, on the left (a new graph grows to the right).
        assert all(util.strip() == util[:1] for util, _ in first.values())
        await push(pilot, source, 119)
        for index in range(8):
            lines = card(app, index)
            util, memory = sparks(app, index, 11)
            assert len(util) == 11 and util.strip() and set(util.strip()) <= set(BLOCKS)
            gpu_line, mem_line = line_of(lines, "GPU"), line_of(lines, "MEM")
            assert f"] {util} " in gpu_line, index
            assert f"] {memory} " in mem_line, index
            # The two sparklines start in the same column.
            assert gpu_line.index(f"] {util}") == mem_line.index(f"] {memory}")
            assert len(util.strip()) > len(first[index][0].strip())  # it grew


async def test_cards_at_120x40_two_columns_still_have_room_for_nine_cell_sparklines() -> None:
    """Observed: two columns of 60-cell cards (56 inside) keep (56 - 28) // 3 = 9 cells, above
    the minimum of 6, so sparklines are drawn. The card layout never goes below 58 cells a
    card (CARD_MIN_WIDTH), i.e. 54 inside and 8-cell sparklines: the width rule never hides
    them on cards; it hides them only in the line layouts."""
    app, source = demo_app(4)
    async with app.run_test(size=(120, 40)) as pilot:
        await push(pilot, source, 120)
        panel = app.query_one(GpuPanel)
        assert panel.layout_mode is Layout.CARDS and panel.columns == 2
        assert panel.size.width // panel.columns - 4 == 56
        for index in range(4):
            lines = card(app, index)
            util, memory = sparks(app, index, 9)
            assert util.strip() and memory.strip()
            assert f"] {util} " in line_of(lines, "GPU"), index
            assert f"] {memory} " in line_of(lines, "MEM"), index
        # The bars gave up the room: 56 - 28 - 10 = 18 cells each, frame included.
        gpu_line = line_of(card(app, 0), "GPU")
        assert gpu_line.index("]") - gpu_line.index("[") + 1 == 18


async def test_a_lost_gpu_has_no_sparkline_and_the_others_keep_theirs() -> None:
    app, source = demo_app(8)
    async with app.run_test(size=(200, 50)) as pilot:
        await push(pilot, source, 60)
        app.receive_sample(lose(source.sample(), 5))
        await pilot.pause()
        lost = "\n".join(card(app, 5))
        assert "LOST" in lost
        assert not set(BLOCKS) & set(lost)
        for index in (0, 1, 4, 6):
            util, _ = sparks(app, index, 11)
            assert f"] {util} " in line_of(card(app, index), "GPU"), index
        # Back again: its sparkline returns, the lost sample a gap in its newest column.
        await push(pilot, source, 1)
        util, _ = sparks(app, 5, 11)
        assert f"] {util} " in line_of(card(app, 5), "GPU")


async def test_two_line_rows_at_130x30_show_one_utilisation_sparkline() -> None:
    """Eight GPUs at 130x30: two lines each; the second line has a 16-cell utilisation
    sparkline after the GPU bar, and none after the MEM or PWR bars."""
    app, source = demo_app(8)
    async with app.run_test(size=(130, 30)) as pilot:
        await push(pilot, source, 120)
        panel = app.query_one(GpuPanel)
        assert panel.layout_mode is Layout.TWO_LINES
        lines = panel_lines(app)
        assert len(lines) >= 16
        for index in range(8):
            bottom = lines[2 * index + 1]
            util = history_sparkline(app.store, index, "utilization_gpu_pct", 16, 100.0, 1.0)
            assert util.strip() and len(util) == 16
            assert bottom.startswith("   GPU[")
            assert f"] {util} " in bottom, index
            after_gpu = bottom[bottom.index(" MEM[") :]
            assert not SPARK_ONLY & set(after_gpu), index  # only one sparkline a GPU
            assert not SPARK_ONLY & set(lines[2 * index])  # none on the first line


async def test_one_line_rows_at_60x15_have_no_sparkline() -> None:
    app, source = demo_app(8)
    async with app.run_test(size=(60, 15)) as pilot:
        await push(pilot, source, 120)
        panel = app.query_one(GpuPanel)
        assert panel.layout_mode is Layout.ONE_LINE
        lines = panel_lines(app)
        assert any("[" in line and "%" in line for line in lines)  # GPUs are drawn
        assert not SPARK_ONLY & set("\n".join(lines))


async def test_two_line_rows_too_narrow_for_a_sparkline_have_none() -> None:
    """80 columns: (80 - 3 - 44 - 36) // 2 < 6, so no sparkline; the bars keep the room."""
    app, source = demo_app(8)
    async with app.run_test(size=(80, 30)) as pilot:
        await push(pilot, source, 120)
        assert app.query_one(GpuPanel).layout_mode is Layout.TWO_LINES
        assert not SPARK_ONLY & set("\n".join(panel_lines(app)))


# -- bucketing -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_only_the_newest_column_changes_until_the_sparkline_shifts() -> None:
    """11 cells at 1 s, once five minutes fill them: 27 samples a column (300 s / 11).
    Within a column's samples, every column left of the newest stays as drawn; the next
    sample shifts them all left by one."""
    app, source = demo_app(8)
    async with app.run_test(size=(200, 50)) as pilot:
        per_column = round(300 / 11)
        await push(pilot, source, 12 * per_column + 1)  # full, and a new column just started
        assert app.store.sequence % per_column == 1
        drawn = [line_of(card(app, 0), "GPU")]
        values: set[float | None] = set()
        for _ in range(per_column - 1):
            sample = await push(pilot, source, 1)
            values.add(sample.gpus[0].utilization_gpu_pct)
            drawn.append(line_of(card(app, 0), "GPU"))
        assert len(values) > 3  # the readings moved: an unbucketed sparkline would have
        util = sparks(app, 0, 11)[0]
        start = drawn[-1].index(f"] {util}") + 2
        columns = [line[start : start + 11] for line in drawn]
        assert all(c[:-1] == columns[0][:-1] for c in columns), columns
        assert columns[0][:-1].strip()  # four full columns are shown
        await push(pilot, source, 1)  # the first sample of the next column
        shifted = line_of(card(app, 0), "GPU")[start : start + 11]
        assert shifted[:-1] == columns[-1][1:]


def test_bucketed_columns_are_aligned_to_sample_numbers() -> None:
    values: list[float | None] = [float(n) for n in range(10)]  # sample n reads n
    assert bucketed(values, 10, 3, 4) == [2.0, 5.0, 8.0, 9.0]
    values.append(10.0)
    assert bucketed(values, 11, 3, 4) == [2.0, 5.0, 8.0, 10.0]  # only the newest changed
    values += [11.0, 12.0]
    assert bucketed(values, 13, 3, 4) == [5.0, 8.0, 11.0, 12.0]  # shifted by one column
    # A column whose samples were all N/A is a gap; one N/A among readings is not.
    assert bucketed([1.0, None, None, None, 7.0, None], 6, 3, 2) == [1.0, 7.0]
    assert bucketed([None, None, None, 4.0, None, 2.0], 6, 3, 2) == [None, 4.0]
    # Fewer samples than columns: gaps on the left.
    assert bucketed([3.0], 1, 3, 3) == [None, None, 3.0]
    assert bucketed([], 0, 3, 2) == [None, None]


class FakeHistory:
    """What history_sparkline reads: one GPU's utilisation, every sample since 0."""

    def __init__(self, values: list[float | None]) -> None:
        self.values = values
        self.sequence = len(values)
        self.asked: list[int | None] = []

    def gpu_history(self, index: int, field: str, last: int | None = None) -> list[float | None]:
        self.asked.append(last)
        return self.values if last is None else self.values[-last:]


def test_history_sparkline_spans_five_minutes_whatever_the_interval() -> None:
    history = FakeHistory([50.0] * 3000)
    assert history_sparkline(history, 0, "utilization_gpu_pct", 10, 100.0, 1.0) == "▅" * 10
    assert history.asked[-1] == 30 * 11  # 30 samples a column, one column to spare
    history_sparkline(history, 0, "utilization_gpu_pct", 10, 100.0, 0.25)
    assert history.asked[-1] == 120 * 11
    history_sparkline(history, 0, "utilization_gpu_pct", 10, 100.0, 60.0)
    assert history.asked[-1] == 1 * 11
    # No scale (memory total N/A) or no room: nothing, never a made-up scale.
    assert history_sparkline(history, 0, "memory_used_bytes", 10, None, 1.0) == ""
    assert history_sparkline(history, 0, "utilization_gpu_pct", 0, 100.0, 1.0) == ""
    ascii_line = history_sparkline(history, 0, "utilization_gpu_pct", 10, 100.0, 1.0, True)
    assert ascii_line.isascii() and len(ascii_line) == 10


def test_a_lost_stretch_reads_as_a_gap_not_as_zero() -> None:
    values: list[float | None] = [80.0] * 40 + [None] * 40 + [80.0] * 40
    # 2.5 s: 20 samples a column: two columns of readings, two of gaps, two of readings.
    line = history_sparkline(FakeHistory(values), 0, "utilization_gpu_pct", 6, 100.0, 2.5)
    assert line == "▇▇  ▇▇"
    # 10 s: 5 samples a column: the last 30 samples, all readings.
    line = history_sparkline(FakeHistory(values), 0, "utilization_gpu_pct", 6, 100.0, 10.0)
    assert line == "▇" * 6


def test_ascii_sparkline_from_history() -> None:
    history = FakeHistory([100.0, 0.0, None])
    line = history_sparkline(history, 0, "utilization_gpu_pct", 6, 100.0, 50.0, True)
    assert line == "#_    "  # full, zero (a reading), N/A (a gap); growing from the left


async def test_the_first_seconds_show_at_once_in_finer_columns() -> None:
    """A new user sees the samples there are: one a cell until 11 cells are filled, then
    twice as many a cell at each fill, up to 27 once five minutes have been read (a whole
    27-sample bucket per cell left them with one cell for the first 27 s)."""
    app, source = demo_app(8)
    async with app.run_test(size=(200, 50)) as pilot:
        await push(pilot, source, 5)
        util = sparks(app, 0, 11)[0]
        assert util[:5].strip() == util.strip() and len(util.strip()) == 5
        await push(pilot, source, 20)
        assert len(sparks(app, 0, 11)[0].strip()) == 7  # 4 a cell: 25 samples fill 7


def test_a_new_graph_grows_without_moving_until_it_fills() -> None:
    """The first five minutes at 1 s, 11 cells: each second changes at most the cell of the
    newest sample (a terminal over SSH repaints one cell, not eleven), except at the few
    samples where the graph fills its width and each cell takes twice as many."""
    values: list[float | None] = []
    history = FakeHistory(values)
    redrawn: list[int] = []
    before = ""
    for number in range(320):
        values.append(float((number * 37) % 100))  # a reading that moves every second
        history.sequence = len(values)
        line = history_sparkline(history, 0, "utilization_gpu_pct", 11, 100.0, 1.0)
        changed = [x for x in range(11) if line[x] != (before[x] if before else " ")]
        if len(changed) > 1:
            redrawn.append(number + 1)
        before = line
    # Whole redraws: at 12, 23, 45, 89 and 177 samples (the doublings to 2, 4, 8, 16 and
    # the five-minute 27), then a slide every 27 samples once 297 fill the width.
    assert redrawn[:5] == [12, 23, 45, 89, 177]
    assert all(number >= 297 for number in redrawn[5:])
    assert len(redrawn) <= 7
