#!/usr/bin/env python3
"""Benchmark how fast the cluster dashboard answers each key (a script, not a pytest test).

The real app, headless (``run_test(size=(120, 40))``), over the static fleet of N rows of
``tests/ui/cluster/test_cluster_large.py``; per ``--nodes`` size, interleaved over
``--rounds``, each key ``--repeat`` times, ``--gap-ms`` apart as a person types (a key that
moves is followed by its opposite; ``s`` cycles the sort column). Per key and size, median
and 95th percentile in ms, and the p95 in frames at Textual's ``MAX_FPS`` (``TEXTUAL_FPS``,
default 60: 16.7 ms), from the key posted as the driver posts it to:

* ``handled``: nothing left ready in the event loop (the key's messages, the ones they
  caused, and any frame drawn at once; a worker thread may still run: Enter shows the
  node's screen, its GPUs follow);
* ``answered``: then the screen's next compositor update (``Screen.wait_for_refresh()``);
  a second update within a frame of the first waits for Textual's frame timer.

Pilot's ``press()`` and ``pause()`` sleep 20 ms or more each (``wait_for_idle``): ``--pilot``
times them instead, to show that floor. Textual's floor for a key that opens a screen and
one that closes it, in the same run: a bare app whose ``?`` pushes a new modal screen of one
``Static`` and whose Escape pops it (the rows named ``floor``). Also the first frame with
every row, from ``run_test`` and from the rows handed in. Headless Textual renders the
changed lines but writes no terminal (``bench_dashboard.py --keys`` times that in a pty).

    python tests/benchmarks/bench_cluster_keys.py --nodes 100,5000 --rounds 3 --repeat 20 \\
        --json /tmp/cluster_keys.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import textual
from textual import constants, events
from textual.app import App, ComposeResult
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpumon.data.cluster import ClusterSample  # noqa: E402
from gpumon.ui.cluster.node_list import NodeList  # noqa: E402
from tests.support.ui_helpers import FIXED_TIME  # noqa: E402
from tests.ui.cluster.test_cluster_large import FleetSource, fleet_rows  # noqa: E402
from tests.ui.cluster.test_cluster_ui import URL, cluster_app  # noqa: E402

FRAME_MS = 1000 / constants.MAX_FPS
#: What a user presses, in groups run in turn: (what the table calls it, the key). A group
#: leaves the dashboard as it found it (cursor on node1, no filter, the node list on top).
STEPS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("down", "down"), ("up", "up")),
    (("pagedown", "pagedown"), ("pageup", "pageup")),
    (("end", "end"), ("home", "home")),
    (("s: sort", "s"),),
    (("r: reverse", "r"),),
    (("f: free only", "f"), ("f: all", "f")),
    (("/: filter", "slash"), *(("typing 'erin'", c) for c in "erin"),
     ("enter: keep filter", "enter"), ("escape: clear filter", "escape")),
    (("enter: open node", "enter"), ("escape: back", "escape")),
    (("space: pause", "space"), ("space: resume", "space")),
    (("?: help", "question_mark"), ("escape: close help", "escape")),
)  # fmt: skip
#: The character each key types, as Pilot gives it.
CHARACTERS = {"slash": "/", "question_mark": "?", "space": " ", "escape": "\x1b"}
Times = dict[str, list[float]]


async def loop_idle() -> None:
    """Return once nothing else in the event loop is ready to run (asyncio's ready queue is
    empty): the messages a key caused are handled, with no sleep of a fixed length."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(0)
        if not loop._ready:  # type: ignore[attr-defined]
            return


async def press(app: App[Any], key: str, gap_s: float) -> tuple[float, float]:
    """``gap_s`` after the last key, post ``key`` as the terminal driver does; ms until
    handled, and until on screen."""
    await asyncio.sleep(gap_s)
    event = events.Key(key, CHARACTERS.get(key, key if len(key) == 1 else None))
    event.set_sender(app)
    start = time.perf_counter()
    app.post_message(event)
    await loop_idle()
    handled = time.perf_counter()
    await app.screen.wait_for_refresh()
    return (handled - start) * 1000, (time.perf_counter() - start) * 1000


async def measure(nodes: int, repeat: int, gap_s: float | None) -> dict[str, Any]:
    """One run of the app over ``nodes`` rows: its first frame, then every key ``repeat``
    times."""
    cluster = ClusterSample(FIXED_TIME, URL, (), scrape_interval_s=15.0, rows=fleet_rows(nodes))
    app = cluster_app(source=FleetSource(cluster))  # type: ignore[arg-type]
    handled: Times = {}
    answered: Times = {}
    started = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        given = time.perf_counter()
        app.receive_cluster(cluster)
        await loop_idle()
        await app.screen.wait_for_refresh()
        first_frame_ms = (time.perf_counter() - started) * 1000
        rows_ms = (time.perf_counter() - given) * 1000
        assert app.screen.query_one(NodeList).total == nodes, "rows not drawn"
        for group in STEPS:
            for _ in range(repeat):
                for label, key in group:
                    if gap_s is None:
                        start = time.perf_counter()
                        await pilot.press(key)
                        await pilot.pause()
                        took = (time.perf_counter() - start) * 1000
                        times = (took, took)
                    else:
                        times = await press(app, key, gap_s)
                    handled.setdefault(label, []).append(times[0])
                    answered.setdefault(label, []).append(times[1])
        assert type(app.screen).__name__ == "ClusterScreen", "a step left another screen"
    return {"nodes": nodes, "first_frame_ms": first_frame_ms, "rows_ms": rows_ms,
            "handled_ms": handled, "answered_ms": answered}  # fmt: skip


class _FloorHelp(ModalScreen[None]):
    BINDINGS = [("escape", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        yield Static("\n".join(f"line {n} of a help text, a few words" for n in range(40)))


class _Floor(App[None]):
    """Textual's least for the help's keys: a new screen of one widget pushed (as gpumon
    opens each of its screens), then popped."""

    BINDINGS = [("question_mark", "help", "Help")]

    def compose(self) -> ComposeResult:
        yield Static("\n".join(f"node{n}" for n in range(40)))
        yield Footer()

    def action_help(self) -> None:
        self.push_screen(_FloorHelp())


async def measure_floor(repeat: int, gap_s: float) -> dict[str, Any]:
    """:class:`_Floor`'s ``?`` and Escape, ``repeat`` times each, as :func:`measure`'s."""
    app = _Floor()
    handled: Times = {}
    answered: Times = {}
    async with app.run_test(size=(120, 40)):
        await loop_idle()
        for _ in range(repeat):
            for label, key in (("?: help", "question_mark"), ("escape: close help", "escape")):
                times = await press(app, key, gap_s)
                handled.setdefault(label, []).append(times[0])
                answered.setdefault(label, []).append(times[1])
    return {"nodes": "floor", "handled_ms": handled, "answered_ms": answered}


def percentile_95(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def report(runs: list[dict[str, Any]], sizes: list[int]) -> None:
    """Per key and size, over all rounds: handled and answered, median and p95."""

    def pooled(size: int | str, field: str) -> Times:
        pool: Times = {}
        for run in runs:
            if run["nodes"] == size:
                for label, values in run[field].items():
                    pool.setdefault(label, []).extend(values)
        return pool

    print(f"\nTextual {textual.__version__}, {constants.MAX_FPS} frames/s: "
          f"one frame = {FRAME_MS:.1f} ms; times in ms (median / p95)")  # fmt: skip
    for size in sizes:
        frames = [run["first_frame_ms"] for run in runs if run["nodes"] == size]
        rows = [run["rows_ms"] for run in runs if run["nodes"] == size]
        print(f"{size:>6} nodes: first frame with every row {statistics.median(frames):.0f} "
              f"ms after run_test, {statistics.median(rows):.0f} ms after the rows")  # fmt: skip
    header = f"{'key':<22}{'nodes':>6}{'handled':>16}{'answered':>16}{'p95/frame':>10}"
    print("\n" + header + "\n" + "-" * len(header))
    labels = list(pooled(sizes[0], "answered_ms"))
    for label in labels:
        for size in [*sizes, "floor"]:
            if label not in (handled_all := pooled(size, "handled_ms")):
                continue
            handled = handled_all[label]
            answered = pooled(size, "answered_ms")[label]
            p95 = percentile_95(answered)
            print(f"{label:<22}{size:>6}"
                  f"{statistics.median(handled):>8.1f} /{percentile_95(handled):>6.1f}"
                  f"{statistics.median(answered):>8.1f} /{p95:>6.1f}"
                  f"{p95 / FRAME_MS:>9.1f}x")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,5000", help="sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every size, in turn")
    parser.add_argument("--repeat", type=int, default=20, help="presses of each key per run")
    parser.add_argument("--gap-ms", type=float, default=50.0, help="between keys, untimed")
    parser.add_argument("--pilot", action="store_true", help="time pilot.press + pause")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.nodes.split(",")]
    runs = []
    for round_number in range(args.rounds):
        for size in sizes:
            run = asyncio.run(
                measure(size, args.repeat, None if args.pilot else args.gap_ms / 1000)
            )
            print(f"round {round_number + 1}: {size} nodes, first frame "
                  f"{run['first_frame_ms']:.0f} ms", file=sys.stderr)  # fmt: skip
            runs.append({"round": round_number + 1, **run})
        if not args.pilot:
            runs.append(asyncio.run(measure_floor(args.repeat, args.gap_ms / 1000)))
    report(runs, sizes)
    if args.json:
        meta = {"textual": textual.__version__, "max_fps": constants.MAX_FPS,
                "pilot": args.pilot, "repeat": args.repeat, "gap_ms": args.gap_ms}  # fmt: skip
        args.json.write_text(json.dumps({**meta, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
