"""The one place that opens a cluster source from :class:`~gpumon.config.Settings`.

A run reads a cluster (:func:`cluster_requested`) only with ``--prometheus URL`` or
``--cluster`` on its command line: ``prometheus_url`` in a shared config must not turn
``CUDA_VISIBLE_DEVICES=$(gpumon pick)`` into a cluster pick.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gpumon.config import SettingsError

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.sources.prometheus.source import PrometheusSource


#: ``prometheus_url`` from this origin is the command line's ``--prometheus``.
COMMAND_LINE = "--prometheus"


def cluster_requested(settings: Settings, cluster_flag: bool) -> bool:
    """True when this headless run reads the cluster: ``--prometheus URL`` on its command
    line, or ``--cluster``."""
    return cluster_flag or settings.origins.get("prometheus_url") == COMMAND_LINE


def request_headers(settings: Settings) -> dict[str, str]:
    """``prometheus_headers`` as a mapping (settings checked their form)."""
    headers: dict[str, str] = {}
    for header in settings.prometheus_headers:
        name, _, value = header.partition(":")
        headers[name.strip()] = value.strip()
    return headers


def open_cluster_source(settings: Settings) -> PrometheusSource:
    """A :class:`~gpumon.sources.prometheus.source.PrometheusSource` for ``prometheus_url``.

    Raises :class:`SettingsError` (one line naming the setting; exit 2) without a URL or with
    an unreadable CA file. The server is not contacted: unreachable is the samples' ``error``.
    """
    if settings.prometheus_url is None:
        raise SettingsError("no Prometheus server: set prometheus_url or --prometheus URL")
    ca_file = settings.prometheus_ca_file
    if ca_file is not None and not os.access(ca_file, os.R_OK):
        origin = settings.origins.get("prometheus_ca_file", "prometheus_ca_file")
        reason = "no such file" if not os.path.exists(ca_file) else "cannot read it"
        raise SettingsError(f"{origin}: {ca_file}: {reason}")
    from gpumon.sources.prometheus.source import PrometheusSource

    user, password = settings.prometheus_user, settings.prometheus_password
    try:
        return PrometheusSource(
            settings.prometheus_url,
            headers=request_headers(settings),
            basic_auth=(user, password) if user is not None and password is not None else None,
            ca_file=ca_file,
            timeout_s=settings.prometheus_timeout_s,
            free_threshold_mib=settings.free_threshold_mib,
        )
    except ValueError as error:  # its text never holds a password or a header's value
        raise SettingsError(str(error)) from None


def open_headless_source(settings: Settings) -> PrometheusSource:
    """:func:`open_cluster_source` for a headless run; also raises :class:`SettingsError` for
    ``--cluster`` without a ``prometheus_url`` or with ``--demo``.
    """
    if settings.prometheus_url is None:
        raise SettingsError(
            "--cluster needs a Prometheus server: --prometheus URL, GPUMON_PROMETHEUS_URL "
            "or prometheus_url in the config file"
        )
    if settings.demo:
        raise SettingsError("--demo and --cluster: choose one (the demo is one simulated machine)")
    return open_cluster_source(settings)
