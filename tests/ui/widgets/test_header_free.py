"""The header says which GPUs are FREE at every size, so a pane too short for the GPU panel
still answers "is any GPU free"; unknown or stale data never reads as free."""

from __future__ import annotations

import dataclasses

import pytest

from gpumon.ui.widgets.bars import HeaderBar
from tests.support.ui_helpers import MIB, app_for, make_gpu, make_process, make_sample

FREE_GPUS = (3, 6, 7)


def eight_gpus(**sample_fields: object):  # type: ignore[no-untyped-def]
    gpus = tuple(
        make_gpu(i, memory_used_bytes=5 * MIB if i in FREE_GPUS else 12 * 1024 * MIB)
        for i in range(8)
    )
    processes = tuple(
        make_process(gpu, 4000 + gpu.index) for gpu in gpus if gpu.index not in FREE_GPUS
    )
    return make_sample(gpus, processes, **sample_fields)


async def header_after(sample, size: tuple[int, int]) -> str:  # type: ignore[no-untyped-def]
    app = app_for(sample)
    async with app.run_test(size=size) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        header = app.dashboard.query_one(HeaderBar)
        return "".join(segment.text for segment in header.render_line(0))


@pytest.mark.parametrize("size", [(200, 50), (120, 40), (80, 24)])
async def test_header_lists_the_free_gpus(size: tuple[int, int]) -> None:
    """Wide enough: the FREE GPUs by index, the clock still there."""
    text = await header_after(eight_gpus(), size)
    assert "FREE 3,6,7" in text
    assert ":13:20" in text


async def test_a_60x15_pane_still_says_how_many_are_free() -> None:
    """At 60x15 (GPUs 6 and 7 off the screen) the header still answers, as a count if the
    list does not fit."""
    host = "gpu-server-with-a-long-name.example.org"
    sample = eight_gpus(host=dataclasses.replace(eight_gpus().host, hostname=host))
    text = await header_after(sample, (60, 15))
    assert "FREE 3,6,7" in text
    assert ":13:20" in text


async def test_a_long_list_becomes_a_count_where_it_does_not_fit() -> None:
    gpus = tuple(make_gpu(i, memory_used_bytes=5 * MIB) for i in range(8))
    host = "gpu-server-with-a-long-name.example.org"
    sample = make_sample(gpus, host=dataclasses.replace(make_sample(gpus).host, hostname=host))
    assert "FREE 0,1,2,3,4,5,6,7" in await header_after(sample, (120, 40))
    text = await header_after(sample, (60, 15))
    assert "8 free of 8" in text and ":13:20" in text


async def test_none_free_says_zero() -> None:
    gpus = tuple(make_gpu(i) for i in range(4))
    sample = make_sample(gpus, tuple(make_process(gpu, 100 + gpu.index) for gpu in gpus))
    assert "0 free" in await header_after(sample, (80, 24))


async def test_unknown_processes_never_say_free_or_zero() -> None:
    """Process lists not read: neither FREE nor "0 free" (unknown is not none)."""
    gpus = tuple(make_gpu(i, memory_used_bytes=5 * MIB) for i in range(4))
    text = await header_after(make_sample(gpus, processes_read=False), (80, 24))
    assert "FREE" not in text and "free" not in text
