"""Which GPU layout fits the terminal: cards, two lines or one line per GPU (pure, no Textual)."""

from __future__ import annotations

import enum

CARD_HEIGHT = 7  # border, five content lines, border
CARD_MIN_WIDTH = 58


class Layout(str, enum.Enum):
    CARDS = "cards"
    TWO_LINES = "two-lines"
    ONE_LINE = "one-line"


def choose_layout(gpu_count: int, width: int, budget_lines: int) -> tuple[Layout, int]:
    """Pick the richest layout whose height fits ``budget_lines``; return it and its columns.

    Cards need at least 120 columns; below that, two lines per GPU, then one.
    """
    if width >= 120:
        columns = max(1, min(gpu_count, width // CARD_MIN_WIDTH))
        rows = -(-gpu_count // columns)
        if rows * CARD_HEIGHT <= budget_lines:
            return Layout.CARDS, columns
    if width >= 70 and gpu_count * 2 <= budget_lines:
        return Layout.TWO_LINES, 1
    return Layout.ONE_LINE, 1


def row_lines(layout: Layout) -> int:
    """Lines per row: a row of cards, or one GPU in the line layouts."""
    if layout is Layout.CARDS:
        return CARD_HEIGHT
    return 2 if layout is Layout.TWO_LINES else 1


def layout_height(layout: Layout, gpu_count: int, columns: int) -> int:
    return -(-gpu_count // columns) * row_lines(layout)
