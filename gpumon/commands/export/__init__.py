"""``gpumon export``: a read-only Prometheus exporter (metrics: docs/prometheus.md).

What lives here: :mod:`~gpumon.commands.export.command` (the command line: options and
``run``), :mod:`~gpumon.commands.export.listen` (``--listen`` and loopback checks),
:mod:`~gpumon.commands.export.collector` (a sample as metric families),
:mod:`~gpumon.commands.export.dcgm` (dcgm-exporter's series), :mod:`~gpumon.commands.export.http`
(the HTTP server and its sampling thread).

Imports nothing on purpose: ``gpumon export --help`` must not pull prometheus_client.
"""
