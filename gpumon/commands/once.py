"""``gpumon once``: one snapshot of every GPU and its processes, then exit.

A compact table (a line per GPU, its processes below, then one row per user), ``--by-user``,
or ``--json`` (:mod:`gpumon.sampling.snapshot`). Colours are raw ANSI codes
(:mod:`gpumon.data.painting`), only on a terminal, as ``NO_COLOR``/``FORCE_COLOR``/``--color``
say; on a terminal lines fit its width, piped nothing is cut.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from gpumon.data import format as fmt
from gpumon.data.model import Sample
from gpumon.data.painting import (
    BOLD,
    COLOR_MODES,
    REVERSE,
    YELLOW,
    Painter,
    fit_line,
    use_color,
)
from gpumon.data.text_table import DEMO_MARKER, gpu_lines

if TYPE_CHECKING:
    from gpumon.config import Settings

#: The start-up filters choose among this machine's GPUs; the cluster view is another matter.
FILTERS_NOT_FOR_CLUSTER = (
    "--only, --only-visible and --user choose this machine's GPUs and processes, not a "
    "cluster's (--prometheus, or prometheus_url in the config)"
)


NODE_WITHOUT_CLUSTER = "--node names a cluster's node: with --prometheus URL or --cluster"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        dest="as_json",
        action="store_true",
        help="print JSON (schema: docs/json-schema.md) instead of the table",
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--no-processes",
        action="store_true",
        help="GPUs only: leave out the process lines and the per-user summary; reads no "
        "process, so no GPU is marked FREE (JSON: processes and users are null)",
    )
    shown.add_argument(
        "--by-user",
        action="store_true",
        help="the per-user table (USER, GPUS, GPU-MEM, PROCS) in place of the process lines "
        "(JSON: the users list is always there)",
    )
    parser.add_argument(
        "--color",
        choices=COLOR_MODES,
        default="auto",
        help="colour the table: auto (default) = on a terminal, or where FORCE_COLOR is "
        "set, unless NO_COLOR is set",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the whole cluster from the configured Prometheus server (prometheus_url), "
        "as --prometheus URL does: the fleet's totals, a line per node, and per node its "
        "GPUs where the fleet is small (docs/cluster.md)",
    )
    parser.add_argument(
        "--node",
        dest="nodes",
        action="append",
        metavar="NAME",
        help="with --cluster: this node's GPUs and processes (its name or instance; "
        "repeatable), whatever the fleet's size",
    )


def run(
    settings: Settings,
    *,
    as_json: bool,
    no_processes: bool,
    color: str,
    by_user: bool = False,
    cluster: bool = False,
    nodes: Sequence[str] | None = None,
) -> int:
    """``gpumon once``: print one sample (a table, or JSON with ``as_json``) and exit."""
    from gpumon.sources.cluster_base import cluster_requested

    if cluster_requested(settings, cluster):
        if settings.only_gpus or settings.only_visible or settings.user_filter:
            print(f"gpumon: error: {FILTERS_NOT_FOR_CLUSTER}", file=sys.stderr)
            return 2
        return run_cluster(
            settings,
            as_json=as_json,
            no_processes=no_processes,
            color=color,
            by_user=by_user,
            nodes=tuple(dict.fromkeys(nodes or ())),
        )
    if nodes:
        print(f"gpumon: error: {NODE_WITHOUT_CLUSTER}", file=sys.stderr)
        return 2
    from gpumon.data.free import free_gpu_indices
    from gpumon.data.views import ProcessFilter, filter_processes
    from gpumon.sampling.snapshot import (
        no_gpu_data,
        report_unavailable,
        sample_to_dict,
        take_sample,
    )

    # The table shows no PCIe throughput: skip NVML's slow call for it (JSON has it).
    sample = take_sample(settings, processes=not no_processes, pcie=as_json)
    failed = no_gpu_data(sample)
    if not failed:
        selected = select_gpus(settings, sample)
        if selected is None:
            return 2
        sample = selected
    # --user: only that user's process lines (and users row); FREE counts every process.
    process_filter = ProcessFilter(user=settings.user_filter)
    threshold = settings.free_threshold_mib
    if as_json:
        data = sample_to_dict(
            sample,
            include_processes=not no_processes,
            free_threshold_mib=threshold,
            process_filter=process_filter,
            idle_s=None if no_processes or failed else recorded_idle_s(settings, sample),
        )
        import json  # here: `once` without --json does not need it

        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif not failed:
        stdout = sys.stdout
        width = output_width(stdout, os.environ)
        painted = use_color(color, stdout, os.environ)
        # --no-processes reads none (the demo lists them anyway): then nothing is FREE.
        free = frozenset() if no_processes else free_gpu_indices(sample, threshold)
        table = render_table(
            sample,
            show_processes=not (no_processes or by_user),
            color=painted,
            width=width,
            free=free,
            process_filter=process_filter,
        )
        if not no_processes:
            shown = replace(sample, processes=filter_processes(sample.processes, process_filter))
            table += render_users(shown, color=painted, always=by_user, width=width)
            if settings.user_filter and not shown.processes:
                table += no_process_of(settings.user_filter, sample)
        stdout.write(table)
    if failed:
        assert sample.unavailable is not None
        report_unavailable(sample.unavailable)
        return 1
    return 0


def no_process_of(user: str, sample: Sample) -> str:
    """``--user`` matched no process: said, never left as an empty table; where some GPU's
    processes are unknown, only of those known (unknown is not none)."""
    from gpumon.data.free import processes_known

    unknown = [str(gpu.index) for gpu in sample.gpus if not processes_known(gpu, sample)]
    known = f" on the GPUs whose processes are known (not {','.join(unknown)})" if unknown else ""
    return f"\nNo process of {fmt.safe_text(user)}{known}.\n"


def recorded_idle_s(settings: Settings, sample: Sample) -> dict[tuple[int, int], float | None]:
    """Each process's ``idle_s`` from the history database (none: ``{}``, all null); one
    warning line on stderr when the database cannot be read."""
    from gpumon.sampling import usage_history as history

    try:
        reader = history.open_reader(history.history_path(settings))
        if reader is None:
            return {}
        with reader:
            return history.idle_seconds(reader, sample, settings.idle_below_pct)
    except history.HistoryError as error:
        print(f"gpumon: warning: idle_s is null: {error}", file=sys.stderr)
        return {}


def select_gpus(settings: Settings, sample: Sample) -> Sample | None:
    """``sample`` with only the GPUs ``--only`` and ``--only-visible`` name (as the dashboard
    shows them: :mod:`gpumon.data.selection`), what to know about them on stderr; ``None``
    after one line per ``--only`` GPU that is not here (exit 2)."""
    from gpumon.data import selection

    chosen = selection.selection_from(settings.only_gpus, settings.only_visible, os.environ)
    if not chosen.active:
        return sample
    selected = selection.select_gpus(sample, chosen)
    for line in (*selected.missing, *selected.notes):
        print(f"gpumon: {'error: ' if line in selected.missing else ''}{line}", file=sys.stderr)
    return None if selected.missing else selected.sample


def run_cluster(
    settings: Settings,
    *,
    as_json: bool,
    no_processes: bool,
    color: str,
    by_user: bool,
    nodes: Sequence[str] = (),
) -> int:
    """``gpumon once --prometheus URL``: the whole cluster; exit 1 when Prometheus cannot be
    read or knows no GPU node (the JSON is printed all the same), 2 for bad settings or a
    ``--node`` it does not know."""
    from gpumon.commands import cluster_fleet, cluster_output
    from gpumon.config import SettingsError
    from gpumon.data.cluster import rows_of
    from gpumon.sources.prometheus.client import PrometheusError

    try:
        source = cluster_fleet.open_fleet_source(settings)
    except SettingsError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    threshold = settings.free_threshold_mib
    try:
        cluster = source.sample()
        failure = cluster_output.read_failure(cluster)
        unknown = cluster_fleet.unknown_nodes(rows_of(cluster, threshold), nodes)
        if failure is None and unknown:
            print(
                f"gpumon: error: --node {fmt.safe_text(unknown[0])}: no such node at {cluster.url}",
                file=sys.stderr,
            )
            return 2
        if failure is None:
            cluster = cluster_fleet.with_detail(source, cluster, nodes)
    except PrometheusError as error:
        print(f"gpumon: {error}", file=sys.stderr)
        return 1
    finally:
        source.close()
    failure = cluster_output.read_failure(cluster)
    if as_json:
        import json

        document = cluster_output.cluster_to_dict(
            cluster, include_processes=not no_processes, free_threshold_mib=threshold
        )
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    elif failure is None:
        stdout = sys.stdout
        width = output_width(stdout, os.environ)
        text = cluster_output.render_cluster(
            cluster,
            show_processes=not no_processes,
            by_user=by_user,
            color=use_color(color, stdout, os.environ),
            width=width,
            free_threshold_mib=threshold,
        )
        stdout.write(fit_lines(text, width))
    if failure is not None:
        print(f"gpumon: {failure}", file=sys.stderr)
        return 1
    return 0


def output_width(stream: TextIO, environ: Mapping[str, str]) -> int | None:
    """The columns to fit on a terminal: ``COLUMNS`` where it is a positive whole number,
    else the terminal's width. ``None`` (nothing is cut) where ``stream`` is no terminal:
    ``gpumon once | grep`` sees whole lines."""
    try:
        if not stream.isatty():
            return None
        columns = environ.get("COLUMNS", "").strip()
        if columns.isascii() and columns.isdigit() and int(columns) > 0:
            return int(columns)
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # not a file, or no size to ask
        return None


def fit_lines(text: str, width: int | None) -> str:
    """Every line of ``text`` cut to ``width`` cells (:func:`gpumon.data.painting.fit_line`)."""
    if width is None:
        return text
    ellipsis = fmt.ELLIPSIS if fmt.locale_is_utf8() else fmt.ASCII_ELLIPSIS
    return "\n".join(fit_line(line, width, ellipsis) for line in text.split("\n"))


def header_line(sample: Sample, paint: Painter, width: int | None = None) -> str:
    """Host, local time, driver and CUDA versions; the DEMO marker on simulated data. Where
    that is wider than ``width``, the marker is shortened to DEMO, then the CUDA version,
    the driver version and the date are left out, in that order."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sample.timestamp_s))
    versions = []
    if sample.driver is not None:
        versions.append(f"driver {sample.driver.driver_version or fmt.NA}")
        versions.append(f"CUDA {sample.driver.cuda_driver_version or fmt.NA}")
    host, clock = sample.host.hostname, stamp.split(" ")[-1]
    marker, short = (DEMO_MARKER, "DEMO") if sample.simulated else ("", "")
    shorter = [
        [stamp, *versions, marker],
        [stamp, *versions, short],
        [stamp, *versions[:1], short],
        [stamp, short],
        [clock, short],
    ]
    middle = next(
        (parts for parts in shorter if width is None or _cells(host, *parts) <= width),
        shorter[-1],
    )
    *middle, shown_marker = middle
    parts = [paint(host, BOLD), *middle]
    if shown_marker:
        parts.append(paint(shown_marker, BOLD, YELLOW, REVERSE))
    return "  ".join(parts)


def _cells(*parts: str) -> int:
    return fmt.cell_len("  ".join(part for part in parts if part))


def render_table(
    sample: Sample, *, color: bool = False, width: int | None = None, **options: Any
) -> str:
    """The ``gpumon once`` table: its header, then
    :func:`gpumon.data.text_table.gpu_lines` (``options``: its keywords)."""
    lines = [header_line(sample, Painter(color), width)]
    lines += gpu_lines(sample, color=color, width=width, **options)
    return fit_lines("\n".join(lines), width) + "\n"


def render_users(
    sample: Sample,
    *,
    color: bool = False,
    always: bool = False,
    ascii_only: bool | None = None,
    width: int | None = None,
) -> str:
    """Who uses what: one row per user (GPUs, GPU memory, processes), most memory first.

    Only GPUs whose process lists are known count (a note names those left out); unreadable
    owners and other namespaces' processes get rows of their own. ``always``: the table even
    when no process runs (``--by-user``). Returns a blank line, then the table and its note,
    each line ending with a newline; or ``""``.
    """
    from gpumon.commands.cluster_output import ClusterUser, users_text
    from gpumon.sampling.snapshot import user_summary_of

    if ascii_only is None:
        ascii_only = not fmt.locale_is_utf8()
    usages, left_out = user_summary_of(sample)
    users = [
        ClusterUser(
            usage.user,
            ",".join(str(index) for index in usage.gpu_indices),
            usage.gpu_memory_bytes,
            usage.memory_partial,
            usage.process_count,
            usage.is_current_user,
        )
        for usage in usages
    ]
    noun = "GPU" if len(left_out) == 1 else "GPUs"
    gpus = ", ".join(str(index) for index in left_out)
    unknown = f"{noun} {gpus} (processes unknown)" if left_out else ""
    at_least = ">=" if ascii_only else "≥"
    text = users_text(users, unknown, color=color, always=always, at_least=at_least)
    return fit_lines(text.removesuffix("\n"), width) + "\n" if text else ""
