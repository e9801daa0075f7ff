"""A cluster read from Prometheus' HTTP query API: one node per scrape target.

What lives here: :mod:`~gpumon.sources.prometheus.source` (``PrometheusSource``: the public
API, documented in its docstring; ``sample()`` and ``history()``),
:mod:`~gpumon.sources.prometheus.client` (the HTTP client: auth, TLS, size caps, redirects
refused, safe error lines; ``Backoff``, ``PrometheusError``),
:mod:`~gpumon.sources.prometheus.deadline` (every request within its timeout, however the
bytes arrive), :mod:`~gpumon.sources.prometheus.redaction` (credentials out of error lines),
:mod:`~gpumon.sources.prometheus.queries` (the PromQL and the series names),
:mod:`~gpumon.sources.prometheus.series` (answers into the model: Sample, GpuStats,
GpuProcess), :mod:`~gpumon.sources.prometheus.targets` (scrape targets: their facts, which
are nodes) and :mod:`~gpumon.sources.prometheus.nodes` (one node: its state, its GPUs, why it
is not current), :mod:`~gpumon.sources.prometheus.usage` (``gpumon report --prometheus``:
who held the GPUs over a period, from range queries). Imports run one way: usage -> source
-> client, nodes, queries, series, targets; client -> deadline, redaction; nodes -> targets
-> series -> queries.

May import: :mod:`gpumon.data`; the standard library's HTTP client. Never pynvml or psutil.
"""
