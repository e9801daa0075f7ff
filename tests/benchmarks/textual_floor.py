"""Textual's floor: the least any Textual dashboard costs, for ``bench_dashboard --compare floor``.

One ``Static`` with ROWS lines of the first-frame markers, no data source, no CSS of its own:
what Python and Textual take to import, start and draw one frame, and the memory they hold
after it. A gpumon figure measured beside it says how much of gpumon's cost is its own and how
much any Textual app would pay; a target below this floor (the first frame's target on a
busy machine, for one) cannot be met by a Textual app.

    python tests/benchmarks/textual_floor.py ROWS MARKER [MARKER ...]

``q`` quits, as it does gpumon, nvitop and nvtop.
"""

from __future__ import annotations

import sys

from textual.app import App, ComposeResult
from textual.widgets import Static


class Floor(App[None]):
    BINDINGS = [("q", "quit", "Quit")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(self.text, markup=False)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: textual_floor.py ROWS MARKER [MARKER ...]", file=sys.stderr)
        return 2
    line = "  ".join(argv[1:])
    Floor("\n".join(f"{row:3d}  {line}" for row in range(int(argv[0])))).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
