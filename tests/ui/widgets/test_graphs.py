"""Sparklines and charts: a fixed scale, gaps for N/A, spikes kept when squeezed."""

from __future__ import annotations

from gpumon.ui.widgets.graphs import chart, resample, sparkline


def test_a_sparkline_is_on_a_fixed_scale_not_its_own_min_and_max() -> None:
    # 50 % with a 2 % wobble stays mid-height; Textual's Sparkline would fill the height.
    line = sparkline([49, 51, 50, 49], width=4, low=0, high=100)
    assert set(line) <= {"▄", "▅"}
    assert sparkline([0, 100], width=2, low=0, high=100) == "▁█"


def test_gaps_and_short_histories() -> None:
    assert sparkline([None, 100], width=2, low=0, high=100) == " █"
    assert sparkline([100], width=4, low=0, high=100) == "   █"  # newest on the right
    assert sparkline([], width=3, low=0, high=100) == "   "
    assert sparkline([float("nan")], width=1, low=0, high=100) == " "


def test_squeezing_keeps_the_spike() -> None:
    values: list[float | None] = [0.0] * 100
    values[37] = 100.0
    assert max(v for v in resample(values, 10) if v is not None) == 100.0
    assert resample([None, None, 5.0, None], 2) == [None, 5.0]


def test_ascii_sparkline() -> None:
    line = sparkline([0, 50, 100], width=3, low=0, high=100, ascii_only=True)
    assert line.isascii() and line[-1] == "#"


def test_chart_fills_from_the_bottom_and_marks_the_threshold() -> None:
    rows = chart([0, 45, 90], width=3, height=4, low=0, high=100, threshold=87)
    assert len(rows) == 4 and all(len(row) == 3 for row in rows)
    assert rows[-1][0] == " "  # 0 is empty
    assert rows[-1][2] == "█" and rows[0][2] != " "  # 90 % reaches the top row
    assert "┄" in rows[0]  # 87 marks the top row where no column reaches it
    tiny = chart([0.5], width=1, height=2, low=0, high=100)
    assert tiny[-1] != " "  # a non-zero reading never reads as nothing


def test_ascii_chart() -> None:
    rows = chart([100, None], width=2, height=2, low=0, high=100, threshold=50, ascii_only=True)
    assert all(row.isascii() for row in rows)
    assert rows == ["#-", "# "] or rows == ["# ", "#-"]


def test_the_dashboard_keeps_a_history_of_exactly_the_fields_it_draws() -> None:
    """Its store has no buffer for a reading nobody graphs, and one for every graph: the
    GPU screen's (the cards' and rows' sparklines draw two of them) and the process screen's."""
    from gpumon.sources.demo import DemoSource
    from gpumon.ui.dashboard.app import create_app
    from gpumon.ui.widgets.gpu_fields import GRAPHS
    from gpumon.ui.widgets.graphs import GRAPHED_GPU_FIELDS, GRAPHED_PROCESS_FIELDS

    assert set(GRAPHED_GPU_FIELDS) == {graph.field for graph in GRAPHS}
    assert {"utilization_gpu_pct", "memory_used_bytes"} <= set(GRAPHED_GPU_FIELDS)
    app = create_app(DemoSource(2))
    assert set(app.store.gpu_fields) == set(GRAPHED_GPU_FIELDS)
    assert set(app.store.process_fields) == set(GRAPHED_PROCESS_FIELDS)
    assert "energy_j" not in app.store.gpu_fields and "rss_bytes" not in app.store.process_fields
