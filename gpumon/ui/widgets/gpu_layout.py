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


def layout_height(layout: Layout, gpu_count: int, columns: int, extra: Sequence[int] = ()) -> int:
    """Lines the GPUs take: a row of ``columns`` cards is as tall as its tallest card, a GPU in
    the line layouts takes one or two lines; each with its ``extra`` lines."""
    columns = max(1, columns)
    base = {Layout.CARDS: CARD_HEIGHT, Layout.TWO_LINES: 2, Layout.ONE_LINE: 1}[layout]
    rows = range(0, gpu_count, columns)
    return sum(base + max(extra[start : start + columns], default=0) for start in rows)
