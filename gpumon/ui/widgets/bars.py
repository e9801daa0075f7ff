"""The header (host, the FREE GPUs, the GPUs shown, driver versions, interval, clock, DEMO)
and the host strip.

The FREE GPUs are said at every width (``FREE 3,6,7``, narrower ``3 free of 8``), so a pane
too short for the GPU panel still answers "is any GPU free"; driver versions give way first.
"""

from __future__ import annotations

import time
from typing import Any

from rich.style import Style

from gpumon.data import format as fmt
from gpumon.data.model import HostStats, Sample
from gpumon.sampling.pipeline import STALL_NOT_ANSWERING, STALL_READS_FAILING, Stall
from gpumon.ui.widgets.lines import ComponentStyles, Glyphs, Line, LinesWidget, add_bar

_STALL_SHORT = {STALL_NOT_ANSWERING: "NVML stalled", STALL_READS_FAILING: "reads failing"}


class Bar(ComponentStyles, LinesWidget):
    """A one-line bar: drawn again, from what it last showed, when its width changes."""

    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self._shown: tuple[Any, ...] | None = None

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(self, *args: Any) -> None:
        raise NotImplementedError


class HeaderBar(Bar):
    """One line: what machine this is, which driver, how fresh the data is."""

    STYLE_PREFIX = "header-bar"
    COMPONENT_CLASSES = {
        "header-bar--title",
        "header-bar--label",
        "header-bar--demo",
        "header-bar--paused",
        "header-bar--stale",
        "header-bar--stalled",
        "header-bar--filter",
        "header-bar--free",
    }
    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $panel; color: $text; }
    HeaderBar > .header-bar--title { color: $accent; text-style: bold; }
    HeaderBar > .header-bar--label { color: $text-muted; }
    HeaderBar > .header-bar--demo { background: $warning; color: $text-warning; text-style: bold; }
    HeaderBar > .header-bar--paused { background: $error; color: $text-error; text-style: bold; }
    HeaderBar > .header-bar--stale { color: $warning; }
    HeaderBar > .header-bar--stalled { background: $error; color: $text-error; text-style: bold; }
    HeaderBar > .header-bar--filter { color: $warning; text-style: bold; }
    HeaderBar > .header-bar--free { color: $success; text-style: bold; }
    """

    def show(
        self,
        sample: Sample | None,
        interval_s: float,
        paused: bool,
        polling: bool,
        stalled_s: int | None = None,
        selection: str = "",
        stall_reason: str = STALL_NOT_ANSWERING,
        free_text: tuple[str, ...] = (),
    ) -> None:
        """``stalled_s``: seconds the sample in flight has taken, when that is far too long
        (``stall_reason``: NVML not answering), or the last sample's age when every read
        since has failed (reads failing); the banner goes when samples resume.
        ``selection``: which GPUs a start-up filter shows (``GPUs 0,3 of 8``), kept however
        narrow the terminal. ``free_text``: what to say of the FREE GPUs, longest form first
        (:attr:`~gpumon.sampling.pipeline.DashboardState.free_text`); the shortest is kept."""
        self._shown = (
            sample,
            interval_s,
            paused,
            polling,
            stalled_s,
            selection,
            stall_reason,
            free_text,
        )
        width = self.size.width or 80
        right = Line()
        if stalled_s is not None:
            text = (
                f" {Stall(stalled_s, stall_reason)} "
                if width >= 70
                else f" {_STALL_SHORT.get(stall_reason, stall_reason)} "
            )
            right.add(text, self.style("stalled")).add(" ")
        if paused:
            right.add(" PAUSED ", self.style("paused")).add(" ")
        elif polling and sample is None and stalled_s is None:
            right.add("waiting for the first sample  ", self.style("stale"))
        right.add("every ", self.style("label")).add(f"{interval_s:g}s  ")
        if sample is not None:
            right.add(time.strftime("%H:%M:%S", time.localtime(sample.timestamp_s)) + " ")
        # Optional parts go first when the terminal is narrow; the clock and DEMO never do.
        driver = sample.driver if sample is not None else None
        optional: list[tuple[str, str]] = []
        if driver is not None:
            optional = [
                ("Driver ", driver.driver_version or fmt.NA),
                ("CUDA ", driver.cuda_driver_version or fmt.NA),
                ("NVML ", driver.nvml_version or fmt.NA),
            ]
        host = sample.host.hostname if sample is not None else "..."

        def left(keep: int, host: str, free: str) -> Line:
            line = Line().add(" gpumon ", self.style("title"))
            if sample is not None and sample.simulated:
                line.add(" DEMO: simulated data " if width >= 70 else " DEMO ", self.style("demo"))
                line.add(" ")
            if free:
                line.add(free, self.style("free")).add("  ")
            line.add(host + "  ")
            if selection:
                line.add(selection, self.style("filter")).add("  ")
            for label, value in optional[:keep]:
                line.add(label, self.style("label")).add(value + "  ")
            return line

        frees = free_text or ("",)
        tries = [(keep, frees[0]) for keep in range(len(optional), -1, -1)]
        tries += [(0, free) for free in frees[1:]]
        for keep, free in tries:
            line = left(keep, host, free)
            if line.width + right.width < width:
                break
        else:
            # Even alone, a long host name (an FQDN) must not push PAUSED and the clock off.
            room = width - right.width - (line.width - len(host)) - 1
            line = left(0, self.glyphs.truncate(host, max(4, room)), frees[-1])
        gap = max(1, width - line.width - right.width)
        line.add(" " * gap)
        for segment in right.strip(right.width):
            line.add(segment.text, segment.style or Style())
        self.set_lines([line.strip(width)])


class HostStrip(Bar):
    """One line about the host: CPU, load, RAM, swap."""

    STYLE_PREFIX = "host-strip"
    COMPONENT_CLASSES = {"host-strip--label", "host-strip--bar", "host-strip--empty"}
    DEFAULT_CSS = """
    HostStrip { height: 1; background: $panel; }
    HostStrip > .host-strip--label { color: $text-muted; }
    HostStrip > .host-strip--bar { color: $primary; }
    HostStrip > .host-strip--empty { color: $text-muted; }
    """

    def _bar(self, line: Line, fraction: float | None, width: int) -> None:
        add_bar(line, self.glyphs, fraction, width, self.style("bar"), self.style("empty"))

    def show(self, host: HostStats | None, simulated: bool) -> None:
        self._shown = (host, simulated)
        width = self.size.width or 80
        line = Line()
        if host is None:
            waiting = f" host: waiting{self.glyphs.ellipsis}"
            self.set_lines([line.add(waiting, self.style("label")).strip(width)])
            return
        # On a narrow terminal whole fields give way, in this order: the load, the bars,
        # Swap. A number is never cut at the edge (Swap 12.3/64.0G read Swap 12.3/64).
        bars = 10 if width >= 100 else 5 if width >= 70 else 0
        wanted = host.load_average is not None and width >= 70
        for load, bar_width, swap in (
            (wanted, bars, True),
            (False, bars, True),
            (False, 0, True),
            (False, 0, False),
        ):
            line = self._fields(host, load, bar_width, swap)
            if line.width <= width:
                break
        if simulated:
            note = "  (simulated host)"
            if line.width + len(note) <= width:
                line.add(note, self.style("label"))
        self.set_lines([line.strip(width)])

    def _fields(self, host: HostStats, load: bool, bar_width: int, swap: bool) -> Line:
        """The strip's fields: CPU and RAM always, the load, the bars and Swap if asked."""
        line = Line().add(" CPU ", self.style("label"))
        if bar_width:
            self._bar(line, None if host.cpu_pct is None else host.cpu_pct / 100, bar_width)
        line.add(fmt.percent(host.cpu_pct).rjust(5))
        if load and host.load_average is not None:
            line.add("  load ", self.style("label"))
            line.add(" ".join(f"{value:.2f}" for value in host.load_average))
        line.add("  RAM ", self.style("label"))
        if bar_width and host.memory_total_bytes:
            self._bar(line, (host.memory_used_bytes or 0) / host.memory_total_bytes, bar_width)
            line.add(" ")
        line.add(fmt.memory_pair(host.memory_used_bytes, host.memory_total_bytes))
        if swap:
            line.add("  Swap ", self.style("label"))
            line.add(fmt.memory_pair(host.swap_used_bytes, host.swap_total_bytes))
        return line
