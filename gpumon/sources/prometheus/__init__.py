"""A cluster read from Prometheus' HTTP query API: one node per scrape target.

What lives here: :mod:`~gpumon.sources.prometheus.source` (``PrometheusSource``: the public
API, documented in its docstring; ``sample()`` and ``history()``),
:mod:`~gpumon.sources.prometheus.client` (the HTTP client: auth, TLS, timeouts, size caps,
safe error lines; ``Backoff``, ``PrometheusError``), :mod:`~gpumon.sources.prometheus.queries`
(the PromQL and the series names), :mod:`~gpumon.sources.prometheus.series` (answers into
the model: Sample, GpuStats, GpuProcess) and :mod:`~gpumon.sources.prometheus.targets` (scrape
targets: their facts, which are nodes). Imports run one way: source -> client, queries,
series, targets; targets -> series -> queries.

May import: :mod:`gpumon.data`; the standard library's HTTP client. Never pynvml or psutil.
"""
