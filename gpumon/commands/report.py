"""``gpumon report``: who used the GPUs over a period, and who holds GPU memory idle now.

From the history database (this machine) or Prometheus (``--prometheus``/``--cluster``), per
user, job, container or GPU (:mod:`gpumon.data.usage`); text, ``--json`` or ``--csv``. Exit 0
printed; 1 no database, an unreadable one, a period it has no recording of, or no answer
from Prometheus; 2 a bad command line or setting.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from gpumon.data.painting import COLOR_MODES
from gpumon.data.usage import GROUPINGS

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.data.periods import Period
    from gpumon.data.report import UsageReport

#: What a row of each ``--by`` grouping (:data:`GROUPINGS`, in its order) is.
_ROW_PER = ("one row per user", "one row per Slurm job", "one row per container", "one row per GPU")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    when = parser.add_argument_group("period (default: the last 7 days)")
    when.add_argument(
        "--since",
        metavar="SPAN",
        help="the last SPAN: 90s, 30m, 12h, 7d or 2w",
    )
    when.add_argument(
        "--from",
        dest="start",
        metavar="TIME",
        help="from this date or time: 2026-11-01 or 2026-11-01T08:00, local time unless it "
        "ends in Z or an offset (+02:00)",
    )
    when.add_argument(
        "--to",
        dest="end",
        metavar="TIME",
        help="to this date or time (default: now)",
    )
    parser.add_argument(
        "--by",
        choices=dict(zip(GROUPINGS, _ROW_PER, strict=True)),
        default="user",
        help="one row per user (default), Slurm job, container or GPU",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        dest="as_json",
        action="store_true",
        help="print JSON (schema: docs/json-schema.md) instead of the table",
    )
    output.add_argument(
        "--csv",
        dest="as_csv",
        action="store_true",
        help="print CSV for a spreadsheet: a header row, plain numbers",
    )
    parser.add_argument(
        "--color",
        choices=COLOR_MODES,
        default="auto",
        help="colour the table: auto (default) = on a terminal unless NO_COLOR is set",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the whole cluster from the configured Prometheus server (prometheus_url), as "
        "--prometheus URL does: one row per user and node (docs/cluster.md)",
    )


def run(
    settings: Settings,
    *,
    since: str | None = None,
    start: str | None = None,
    end: str | None = None,
    by: str = "user",
    as_json: bool = False,
    as_csv: bool = False,
    color: str = "auto",
    cluster: bool = False,
) -> int:
    """``gpumon report``: print the report of the period, or exit 1 or 2 after one line."""
    from gpumon.data.periods import PeriodError, period
    from gpumon.sources.cluster_base import cluster_requested

    now_s = time.time()
    try:
        chosen = period(now_s, since, start, end)
    except PeriodError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    if cluster_requested(settings, cluster):
        report = cluster_report(settings, chosen, by, now_s)
    else:
        report = history_report(settings, chosen, by, now_s)
    if isinstance(report, int):
        return report
    write(report, as_json=as_json, as_csv=as_csv, color=color)
    return 0


def history_report(settings: Settings, chosen: Period, by: str, now_s: float) -> UsageReport | int:
    """The report from this machine's database, or the exit code after one line."""
    from gpumon.sampling.usage_history import (
        HistoryError,
        history_path,
        no_database,
        open_reader,
        report_from_history,
    )

    path = history_path(settings)
    try:
        reader = open_reader(path)
        if reader is None:
            print(f"gpumon: {no_database(path)}", file=sys.stderr)
            return 1
        with reader:
            report = report_from_history(reader, path, chosen, by, now_s)
    except HistoryError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 1
    if not report.recorded:
        from gpumon.commands.report_output import not_recorded_line

        print(f"gpumon: {not_recorded_line(report)}", file=sys.stderr)
        return 1
    return report


def cluster_report(settings: Settings, chosen: Period, by: str, now_s: float) -> UsageReport | int:
    """The report from Prometheus, or the exit code after one line."""
    from gpumon.config import SettingsError
    from gpumon.sampling.idle import idle_rule
    from gpumon.sources.cluster_base import open_headless_source
    from gpumon.sources.prometheus.client import PrometheusError
    from gpumon.sources.prometheus.usage import cluster_usage

    try:
        source = open_headless_source(settings)
    except SettingsError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    try:
        minimum = idle_rule(settings).min_memory_bytes  # as the exporters judge IDLE
        return cluster_usage(source, chosen, by, now_s, min_memory_bytes=minimum)
    except PrometheusError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 1
    finally:
        source.close()


def write(report: UsageReport, *, as_json: bool, as_csv: bool, color: str) -> None:
    """Print ``report`` in the format asked for."""
    from gpumon.commands import report_output

    stdout = sys.stdout
    if as_json:
        import json

        stdout.write(json.dumps(report_output.report_to_dict(report), indent=2) + "\n")
    elif as_csv:
        stdout.write(report_output.render_csv(report))
    else:
        import getpass

        from gpumon.commands.once import output_width
        from gpumon.data.painting import use_color

        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = None
        stdout.write(
            report_output.render_text(
                report,
                color=use_color(color, stdout, os.environ),
                width=output_width(stdout, os.environ),
                current_user=user,
            )
        )
