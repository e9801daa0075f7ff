"""``gpumon export``'s command line: its options and :func:`run` (metrics: docs/prometheus.md).

:func:`run` serves until a signal: the metric families are built by
:mod:`gpumon.commands.export.collector`, served by :mod:`gpumon.commands.export.http`; both
are imported only when the exporter runs, as prometheus_client (an optional extra) is, so
``gpumon export --help`` stays light. ``--listen`` is parsed by
:mod:`gpumon.commands.export.listen`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gpumon.commands.export.listen import DEFAULT_LISTEN, listen_address

if TYPE_CHECKING:
    from gpumon.settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpumon.arguments import interval_seconds

    parser.add_argument(
        "--listen",
        type=listen_address,
        default=listen_address(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default: {DEFAULT_LISTEN}, loopback only)",
    )
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=argparse.SUPPRESS,  # keeps `gpumon --interval N export` working
        metavar="SECONDS",
        help="seconds between samples (default: 1); scrapes read the latest sample",
    )
    parser.add_argument(
        "--dcgm-compat",
        action="store_true",
        help="also serve the DCGM_FI_DEV_* series of NVIDIA's dcgm-exporter (its names, units "
        "and labels), for dashboards made for it such as Grafana 12239",
    )


def run(settings: Settings, *, listen: tuple[str, int], dcgm_compat: bool) -> int:
    """``gpumon export``: serve /metrics until a signal, sampling every ``interval_s``."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        print(
            "gpumon export: error: prometheus_client is not installed: "
            "pip install 'gpumon-tui[export]' (pipx: pipx install --force 'gpumon-tui[export]')",
            file=sys.stderr,
        )
        return 1
    from gpumon.commands.export.collector import SampleCollector
    from gpumon.commands.export.http import Exporter, serve_until_signalled
    from gpumon.sampling.idle import IdleTracker, idle_rule
    from gpumon.sources.base import source_for

    host, port = listen
    # Cheap: NVML is initialised by the first sample, on the sampling thread.
    source = source_for(settings)
    try:  # listens at once; /metrics answers 503 until the first sample
        collector = SampleCollector(
            dcgm_compat=dcgm_compat,
            free_threshold_mib=settings.free_threshold_mib,
            idle=IdleTracker(idle_rule(settings)),  # --idle-after, --idle-below, ...
        )
        exporter = Exporter(source, collector, host, port, settings.interval_s)
    except (OSError, UnicodeError) as error:  # in use, no permission, a name that won't resolve
        source.close()
        reason = getattr(error, "strerror", None) or error
        shown = f"[{host}]" if ":" in host else host
        print(f"gpumon export: error: cannot listen on {shown}:{port}: {reason}", file=sys.stderr)
        return 1
    return serve_until_signalled(exporter, host)
