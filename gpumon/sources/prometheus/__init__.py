"""A cluster read from Prometheus' HTTP query API: one node per scrape target.

``source`` (``PrometheusSource``), ``client``, ``deadline`` and ``redaction`` (HTTP),
``queries``, ``series``, ``targets`` and ``nodes`` (answers into the model), ``usage``
(``gpumon report --prometheus``). May import :mod:`gpumon.data` and the standard library's
HTTP client; never pynvml or psutil. How it reads: docs/cluster.md.
"""
