"""``gpumon export``: a read-only Prometheus exporter (metrics: docs/prometheus.md).

``command`` (options, ``run``), ``collector``, ``series`` and ``dcgm`` (metric families),
``exposition`` (rendered once per sample), ``http``, ``server``, ``messages`` and ``tls``
(the HTTP side), ``web_config`` and ``auth`` (``--web-config-file``). Imports nothing on
purpose: ``gpumon export --help`` must not pull prometheus_client.
"""
