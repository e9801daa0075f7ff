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
    from gpumon.commands.export.web_config import WebConfig
    from gpumon.config import Settings

#: With --record, samples are written to the history at most this often (a batch), so
#: that sampling every second costs the database one transaction per 10 s.
RECORD_BATCH_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        type=listen_address,
        default=listen_address(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default: {DEFAULT_LISTEN}, loopback only)",
    )
    parser.add_argument(
        "--dcgm-compat",
        action="store_true",
        help="also serve the DCGM_FI_DEV_* series of NVIDIA's dcgm-exporter (its names, units "
        "and labels), for dashboards made for it such as Grafana 12239",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="also record the history (as gpumon record does) from the exporter's own samples, "
        "into the history database (--db): one sampler per node",
    )
    parser.add_argument(
        "--web-config-file",
        metavar="FILE",
        help="TLS (also mutual) and basic auth, in the web config format of Prometheus' "
        "exporter-toolkit (node_exporter's --web.config.file); see docs/prometheus.md",
    )


def run(
    settings: Settings,
    *,
    listen: tuple[str, int],
    dcgm_compat: bool,
    record: bool = False,
    web_config_file: str | None = None,
) -> int:
    """``gpumon export``: serve /metrics until a signal, sampling every ``interval_s``; with
    ``record``, the samples also go into the history database."""
    if record:
        from gpumon.commands.record import demo_needs_own_file

        refused = demo_needs_own_file(settings)
        if refused is not None:
            print(f"gpumon export: error: --record: {refused}", file=sys.stderr)
            return 2
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        print(
            "gpumon export: error: prometheus_client is not installed: "
            "pip install 'gpumon-tui[export]' (pipx: pipx install --force 'gpumon-tui[export]')",
            file=sys.stderr,
        )
        return 1
    web = None if web_config_file is None else _web_config(web_config_file)
    if isinstance(web, int):
        return web
    from gpumon.commands.export.collector import SampleCollector
    from gpumon.commands.export.http import RECORD_STOP_S, Exporter, serve_until_signalled
    from gpumon.sampling.idle import IdleTracker, idle_rule
    from gpumon.sources.base import source_for

    host, port = listen
    recorder = None
    if record:  # one line when the database cannot be used; gpumon_history_recording is 0
        from gpumon.commands.record import recorder_for
        from gpumon.sampling.history.recorder import RecorderThread

        batch_s = max(RECORD_BATCH_S, settings.interval_s)
        history = recorder_for(settings, settings.interval_s, "gpumon export", batch_s=batch_s)
        if not history.open():
            print("gpumon export: serving without recording", file=sys.stderr)
        recorder = RecorderThread(history)
    # Cheap: NVML is initialised by the first sample, on the sampling thread.
    source = source_for(settings)
    try:  # listens at once; /metrics answers 503 until the first sample
        collector = SampleCollector(
            dcgm_compat=dcgm_compat,
            free_threshold_mib=settings.free_threshold_mib,
            # --idle-after, --idle-below, ...; a stuck sampler is a gap nobody saw
            idle=IdleTracker(idle_rule(settings), interval_s=settings.interval_s),
        )
        exporter = Exporter(
            source, collector, host, port, settings.interval_s, recorder=recorder, web=web
        )
    except (OSError, UnicodeError) as error:  # in use, no permission, a name that won't resolve
        source.close()
        if recorder is not None:
            recorder.stop(RECORD_STOP_S)
        reason = getattr(error, "strerror", None) or error
        shown = f"[{host}]" if ":" in host else host
        print(f"gpumon export: error: cannot listen on {shown}:{port}: {reason}", file=sys.stderr)
        return 1
    return serve_until_signalled(exporter, host)


def _web_config(path: str) -> WebConfig | int:
    """``--web-config-file`` read and checked, or the exit code after one line saying why:
    2 for a file that cannot be used (the line names its key, never a secret), 1 when the
    export extra's PyYAML or bcrypt is missing."""
    try:
        import bcrypt  # noqa: F401
        import yaml  # noqa: F401
    except ImportError as error:
        print(
            f"gpumon export: error: --web-config-file needs {error.name}: "
            "pip install 'gpumon-tui[export]'",
            file=sys.stderr,
        )
        return 1
    from gpumon.commands.export.web_config import WebConfigError, load_web_config

    try:
        return load_web_config(path)
    except WebConfigError as error:
        print(f"gpumon export: error: --web-config-file {path}: {error}", file=sys.stderr)
        return 2
