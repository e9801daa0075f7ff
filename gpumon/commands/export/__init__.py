"""``gpumon export``: a read-only Prometheus exporter (metrics: docs/prometheus.md).

What lives here: :mod:`~gpumon.commands.export.command` (the command line: options and
``run``), :mod:`~gpumon.commands.export.listen` (``--listen`` and loopback checks),
:mod:`~gpumon.commands.export.collector` (a sample as metric families, and the exporter's
health), :mod:`~gpumon.commands.export.series` (per-GPU, per-process and MIG series),
:mod:`~gpumon.commands.export.dcgm` (dcgm-exporter's series),
:mod:`~gpumon.commands.export.exposition` (each sample rendered once; stale data never served
as current), :mod:`~gpumon.commands.export.http` (the exporter: what it answers, its sampling
thread, signals), :mod:`~gpumon.commands.export.server` and
:mod:`~gpumon.commands.export.messages` (an asyncio HTTP/1.1 server no client can starve),
:mod:`~gpumon.commands.export.tls` (its connections in TLS, within their deadline),
:mod:`~gpumon.commands.export.web_config` (``--web-config-file``: the exporter-toolkit's
TLS and basic-auth file) and :mod:`~gpumon.commands.export.auth` (bcrypt off the event loop,
bounded).

Imports nothing on purpose: ``gpumon export --help`` must not pull prometheus_client.
"""
