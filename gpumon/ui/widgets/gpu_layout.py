"""Which GPU layout fits the terminal: cards, two lines or one line per GPU (pure, no Textual).

A GPU in MIG mode takes one more line per MIG instance (or one line saying they cannot be
read), in every layout: a row of cards is as tall as its tallest card.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from gpumon.data.model import GpuStats

CARD_HEIGHT = 7  # border, five content lines, border
CARD_MIN_WIDTH = 58


class Layout(str, enum.Enum):
    CARDS = "cards"
    TWO_LINES = "two-lines"
    ONE_LINE = "one-line"


def mig_lines(gpu: GpuStats) -> int:
    """Lines a GPU's MIG instances take under it: one per instance, or one that says there
    is none or that they cannot be read; none for a GPU not in MIG mode (or lost)."""
    if gpu.lost or not gpu.mig_mode:
        return 0
    return len(gpu.mig_instances) if gpu.mig_instances else 1


def choose_layout(
    gpu_count: int, width: int, budget_lines: int, extra: Sequence[int] = ()
) -> tuple[Layout, int]:
    """Pick the richest layout whose height fits ``budget_lines``; return it and its columns.

    Cards need at least 120 columns; below that, two lines per GPU, then one. ``extra``:
    the lines each GPU needs besides (its MIG instances), by position.
    """
    if width >= 120:
        columns = max(1, min(gpu_count, width // CARD_MIN_WIDTH))
        if layout_height(Layout.CARDS, gpu_count, columns, extra) <= budget_lines:
            return Layout.CARDS, columns
    if width >= 70 and layout_height(Layout.TWO_LINES, gpu_count, 1, extra) <= budget_lines:
        return Layout.TWO_LINES, 1
    return Layout.ONE_LINE, 1


def row_lines(layout: Layout) -> int:
    """Lines per row: a row of cards, or one GPU in the line layouts (without MIG lines)."""
    if layout is Layout.CARDS:
        return CARD_HEIGHT
    return 2 if layout is Layout.TWO_LINES else 1


def row_heights(
    layout: Layout, gpu_count: int, columns: int, extra: Sequence[int] = ()
) -> list[int]:
    """The height of each row: a row of ``columns`` cards, or one GPU in the line layouts."""
    columns = max(1, columns)
    base = row_lines(layout)
    heights = []
    for start in range(0, gpu_count, columns):
        more = [
            extra[i] if i < len(extra) else 0 for i in range(start, min(gpu_count, start + columns))
        ]
        heights.append(base + max(more, default=0))
    return heights


def layout_height(layout: Layout, gpu_count: int, columns: int, extra: Sequence[int] = ()) -> int:
    return sum(row_heights(layout, gpu_count, columns, extra))
