"""The fleet summary under the cluster header: the totals line and the top-k lists.

:class:`FleetTotals` says the fleet's GPUs (of UP nodes), FREE, busy, idle-held memory, how
the rows were read (recording rules or raw queries) and the GPUs per site label
(``partition=a100``); the labels are cut first on a narrow terminal. :class:`TopLists` shows
the hottest nodes, the most idle-held and the users holding most, side by side; the
stylesheet folds it away on a short terminal. Both read a :class:`~gpumon.data.cluster.Fleet`,
counted over every node (a filter never changes it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpumon.data import format as fmt
from gpumon.data.cluster import Fleet, Ranked
from gpumon.ui.widgets.bars import Bar
from gpumon.ui.widgets.lines import Line

#: What a list with no entry shows (a stale answer has no current reading to rank).
NOTHING = "-"


def totals_parts(fleet: Fleet, path: str | None) -> list[list[tuple[str, str]]]:
    """The totals line as groups of (text, style name) pieces, what matters first: a
    narrow terminal drops whole groups from the end."""
    parts = [
        [
            (f" {fleet.gpus} GPU{'s' if fleet.gpus != 1 else ''} up: ", "label"),
            (f"{fleet.free_gpus} FREE", "free"),
            (f", {fleet.busy_gpus} busy", "text"),
        ],
        [("  idle-held ", "label"), (fmt.bytes_short(fleet.idle_held_bytes), "text")],
    ]
    if path:
        parts.append([(f"  ({path})", "label")])
    for group in fleet.by_label:
        parts.append(
            [
                (f"  {group.label}={group.value}: ", "label"),
                (f"{group.gpus} GPUs, {group.free_gpus} FREE", "text"),
            ]
        )
    return parts


class FleetTotals(Bar):
    """One line: the fleet's GPUs, FREE, busy, idle-held, the query path, per label."""

    STYLE_PREFIX = "fleet-totals"
    COMPONENT_CLASSES = {"fleet-totals--label", "fleet-totals--free", "fleet-totals--text"}
    DEFAULT_CSS = """
    FleetTotals { height: 1; background: $panel; color: $text; }
    FleetTotals > .fleet-totals--label { color: $text-muted; }
    FleetTotals > .fleet-totals--free { color: $success; text-style: bold; }
    """

    def show(self, fleet: Fleet, path: str | None) -> None:
        self._shown = (fleet, path)
        width = self.size.width or 80
        line = Line()
        for index, group in enumerate(totals_parts(fleet, path)):
            if index and line.width + sum(len(text) for text, _ in group) > width:
                break
            for text, style in group:
                line.add(text, self.style(style))
        self.set_lines([line.strip(width)])


def _celsius(value: float, ascii_only: bool) -> str:
    return fmt.celsius(int(value), ascii_only)


def _bytes(value: float, ascii_only: bool) -> str:
    return fmt.bytes_short(int(value))


class TopLists(Bar):
    """The top-k lists side by side: a title line, then one entry a line."""

    STYLE_PREFIX = "top-lists"
    COMPONENT_CLASSES = {"top-lists--title", "top-lists--value"}
    DEFAULT_CSS = """
    TopLists > .top-lists--title { color: $text; text-style: bold; }
    TopLists > .top-lists--value { color: $text-muted; }
    """

    def show(self, fleet: Fleet) -> None:
        """As many entries of each list as the stylesheet's height has room for."""
        self._shown = (fleet,)
        width = self.size.width or 80
        rows = max(0, self.size.height - 1)
        lists: list[tuple[str, Sequence[Ranked], Callable[[float, bool], str]]] = [
            ("Hottest", fleet.hottest, _celsius),
            ("Most idle-held", fleet.most_idle_held, _bytes),
            ("Users holding most", fleet.top_users, _bytes),
        ]
        column = max(1, width // len(lists))
        ascii_only = self.glyphs.ascii_only
        lines = [Line() for _ in range(rows + 1)]
        for title, ranked, text in lists:
            lines[0].extend(Line().add(" " + title, self.style("title")), column)
            for index, line in enumerate(lines[1:]):
                cell = Line()
                if index < len(ranked):
                    value = text(ranked[index].value, ascii_only)
                    room = column - len(value) - 3
                    cell.add(" " + self.glyphs.fit(ranked[index].name, room) + " ")
                    cell.add(value, self.style("value"))
                elif index == 0:
                    cell.add(" " + NOTHING, self.style("value"))
                line.extend(cell, column)
        self.set_lines([line.strip(width) for line in lines])
