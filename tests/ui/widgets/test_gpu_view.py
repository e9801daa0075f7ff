"""The GPU view shares its room as the stylesheet says: the GPU panel's ``max-height``, the
process table's ``min-height``; a stylesheet that says otherwise lays it out otherwise."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from gpumon.ui.widgets.gpu_layout import Layout
from gpumon.ui.widgets.gpu_view import GpuView
from gpumon.ui.widgets.lines import Glyphs
from tests.support.ui_helpers import make_gpu, make_process, make_sample

GPUS = tuple(make_gpu(index) for index in range(8))
SAMPLE = make_sample(GPUS, tuple(make_process(gpu, 1000 + gpu.index) for gpu in GPUS))


class ViewApp(App[None]):
    def __init__(self, css: str = "") -> None:
        self.CSS = css
        super().__init__()

    def compose(self) -> ComposeResult:
        yield GpuView(Glyphs(ascii_only=False))

    def on_mount(self) -> None:
        self.query_one(GpuView).show(SAMPLE)


@pytest.mark.parametrize("size", [(120, 40), (200, 60), (80, 24), (60, 12)])
async def test_the_panel_keeps_to_its_share_and_the_table_to_its_minimum(
    size: tuple[int, int],
) -> None:
    app = ViewApp()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        view = app.query_one(GpuView)
        panel, table = view.panel, view.table
        assert 1 <= panel.region.height <= int(view.size.height * 0.66)
        assert table.region.height >= 4
        assert panel.region.height + table.region.height == view.size.height


async def test_a_stylesheet_with_another_share_gets_another_layout() -> None:
    """At 200x60 eight GPUs fit as cards; a panel allowed a quarter of the view falls back
    to lines: the share is read off the styles, not copied into the Python."""
    async with ViewApp().run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        assert pilot.app.query_one(GpuView).panel.layout_mode is Layout.CARDS
    css = "GpuView > GpuPanel { max-height: 25%; }"
    async with ViewApp(css).run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        view = pilot.app.query_one(GpuView)
        assert view.panel.layout_mode is not Layout.CARDS
        assert view.panel.region.height <= 60 // 4


async def test_a_new_sample_with_the_same_gpus_lays_nothing_out_again() -> None:
    """Only the panel's lines change: no style is set, so the screen is not laid out again."""
    app = ViewApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        view = app.query_one(GpuView)
        panel_height = view.panel.region.height
        layouts = 0
        original = app.screen._refresh_layout

        def counting(*args: object, **kwargs: object) -> None:
            nonlocal layouts
            layouts += 1
            original(*args, **kwargs)  # type: ignore[arg-type]

        app.screen._refresh_layout = counting  # type: ignore[method-assign]
        for _ in range(3):
            view.show(SAMPLE)
            await pilot.pause()
        assert layouts == 0 and view.panel.region.height == panel_height
