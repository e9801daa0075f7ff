"""A cluster read from Prometheus' HTTP query API: one :class:`~gpumon.data.cluster.Node` per
target.

Works with anything that answers Prometheus' ``/api/v1/query`` and ``/api/v1/query_range``
(Prometheus, Thanos, VictoriaMetrics, Mimir), with gpumon's exporter and NVIDIA's dcgm-exporter
on the nodes, detected per target. Standard library HTTP only; no Textual.

Public API
==========

``PrometheusSource(url, *, headers={}, basic_auth=None, ca_file=None, timeout_s=5.0,
clock=time.time, opener=None)``
    ``url`` is the server's base address, e.g. ``https://prom.example:9090`` or
    ``https://example/prometheus/`` behind a proxy (``/api/v1/...`` is appended; a query
    string is dropped). Credentials in the URL (``https://user:pass@host``) become basic auth
    and are removed from it. ``headers`` are sent with every request (``{"Authorization":
    "Bearer …"}``, ``{"X-Scope-OrgID": "team"}`` for Mimir); ``basic_auth`` is ``(user,
    password)``. Both are sent pre-emptively. No redirect is followed: a 3xx answer is a
    failure whose line says where it pointed (``scheme://host[:port]/path``). HTTPS verifies
    the certificate and the host name; ``ca_file`` names a PEM bundle of a private CA.
    ``timeout_s`` bounds each request as a whole, however slowly the bytes arrive: name
    lookup, connecting, the TLS handshake, the status line, headers and body (an error's
    too); then it fails with ``no answer within N s``. A refresh is three requests. Proxies
    from the environment (``http_proxy``, ``https_proxy``, ``no_proxy``) are used as by
    urllib. An answer larger than :data:`~gpumon.sources.prometheus.client.MAX_ANSWER_BYTES`
    (64 MiB) is refused, by its ``Content-Length`` before it is read. ``clock`` is only used
    where the server gives no time that is a real moment. ``opener`` replaces urllib's
    (anything with ``open(request, timeout=...)``, as :class:`urllib.request.OpenerDirector`;
    then only the reads of the body are bounded): for tests. Raises :class:`ValueError` for a
    URL that is not ``http(s)://host...`` and for a CA file that cannot be read. ``repr()``
    shows header names only, never values or passwords. No error text holds a credential in
    any form the server may echo it (:mod:`~gpumon.sources.prometheus.redaction`), and none
    holds the text of a 401 or 403 answer.

``PrometheusSource.sample() -> ClusterSample``
    Blocks (HTTP; call it off the event loop), never raises. Runs the same three instant
    queries whatever the number of nodes (:data:`TARGETS_QUERY`, :data:`DATA_QUERY`,
    :data:`IDENTITY_QUERY`; see "Queries"). On failure (unreachable, HTTP 401/403/5xx, a
    timeout, an answer that is not the API's JSON) it returns the previous sample's nodes, each
    UP one turned STALE so that no view counts its GPUs as free, with ``stale=True`` and
    ``error`` set to one line (the URL without credentials, never a header value). The caller
    then waits :attr:`PrometheusSource.next_retry_s` before the next try.

``PrometheusSource.next_retry_s -> float | None``
    ``None`` after a success; after failures 1, 2, 4 … 60 s (:class:`Backoff`).

``PrometheusSource.history(node, gpu_index, field_key, seconds=3600, step=None)``
    ``-> list[tuple[float, float | None]]``: one GPU field over the last ``seconds`` from
    ``/api/v1/query_range``, in the model's units (percent, MHz, bytes…), one point per ``step``
    (default: ``seconds / 360``, at least 1 s), ``None`` where Prometheus has no value (the
    node was down) or a NaN. ``node`` is a node's name or its ``instance``; ``field_key`` a
    :data:`gpumon.data.fields.BY_KEY` key. ``[]`` when the node's exporter does not serve that
    field (dcgm-exporter has no fan speed, for one). Raises :class:`ValueError` for an unknown
    key or a field whose values are names (``clock_events``, ``compute_mode``), and
    :class:`PrometheusError` (one safe line) when the query fails. Blocks; may run on
    another thread while :meth:`sample` runs (it only reads the latest sample).

``PrometheusSource.query(expression, at_s)``, ``.query_range(expression, start_s, end_s,
step_s)``
    The answer's ``data`` of one instant or range query, for ``gpumon report``
    (:mod:`~gpumon.sources.prometheus.usage`); raise :class:`PrometheusError` as ``history``.

``PrometheusSource.url`` (the address shown: no credentials), ``.last`` (the latest
ClusterSample or ``None``), ``.close()`` (nothing to release; for symmetry with GpuSource).

``Backoff``: ``failed() -> float`` (the next delay: 1, 2, 4 … 60 s), ``succeeded()``,
``delay_s`` (``None`` after a success).

What a node holds
=================

- Nodes are scrape targets, keyed by their ``(instance, job)`` labels, named by
  :func:`gpumon.data.cluster.node_names` from their host label (gpumon's ``gpumon_host_info
  {hostname}``, dcgm-exporter's ``Hostname``). A target is a node when it serves GPU series
  now or within the last hour, or is in a job where another target does (so a gpumon target
  down for a day is listed, and Prometheus' own target is not).
- gpumon's exporter (kind GPUMON, wins when a target serves both kinds: ``--dcgm-compat``):
  every field of :data:`gpumon.data.fields.FIELDS`, converted back with its ``scale`` (ratio to
  percent, hertz to MHz) and to the model's type (ints rounded); ``gpumon_gpu_up 0`` is a lost
  GPU; MIG instances from ``gpumon_mig_memory_*`` (indices in instance-id order, the exporter
  does not serve NVML's); processes from ``gpumon_process_gpu_memory_bytes``: ``command`` is
  the ``process`` label, the executable's base name only; ``kind`` from the ``type`` label
  (``C``, ``G``, ``C+G``), UNKNOWN where the exporter does not say; ``visible`` True,
  ``is_current_user`` False; host details (CPU, RSS, elapsed) ``None``. A GPU without
  ``gpumon_gpu_processes`` (the exporter leaves it out when the list is unknown) gets
  ``processes_error``, as does one whose count exceeds the listed processes (a process whose
  memory is N/A has no series): unknown, never free. ``processes_read`` is True
  when some GPU's count is served. Absent ``gpumon_gpu_clock_event_reason`` series read
  ``None`` (the exporter serves none both when nothing holds the clocks and when it cannot
  tell).
- dcgm-exporter (kind DCGM): the readings of :data:`DCGM_READINGS` (MiB to bytes, mJ to J);
  total memory from ``DCGM_FI_DEV_FB_TOTAL`` where served, else used + free (+ reserved);
  everything else ``None``; ``processes_read`` False (dcgm-exporter lists no process).
- Every label value is other machines' text and passes :func:`gpumon.data.format.safe_text`.
  NaN and infinite values are ``None``; so is a reading no GPU gives (negative, past 2**64,
  a utilisation past 100 %); every time from an answer that is not a real moment
  (:func:`gpumon.data.format.known_time`) is not known. One bad series spoils only itself
  (a series whose labels are not all text is dropped); a process count that is not a count
  leaves that GPU's processes unknown, never free.
- A node whose series name more than :data:`~gpumon.sources.prometheus.nodes.MAX_GPUS_PER_NODE`
  (64) GPUs, or a GPU index of 64 or more, is refused: STALE with its last known GPUs and
  ``problem`` saying why.

Staleness
=========

State per node by :func:`gpumon.data.cluster.classify`, against the server's evaluation time
(not this machine's clock, which may be skewed): DOWN when ``up == 0``; STALE when its
latest scrape is older than three scrape intervals, or when it has no ``up`` series any
more (removed from the scrape config or service discovery: listed for an hour after). STALE
too when gpumon's exporter answers but its data are not current (a driver call stuck behind
a live exporter): it serves no GPU series (it drops them when a sample fails), or
``gpumon_sampler_stalled 1``, or a ``gpumon_sample_age_seconds`` or a
``gpumon_sample_timestamp_seconds`` older than three scrape intervals (the timestamp by the
server's clock: the nodes' clocks must be synchronised); ``Node.problem`` says which. A DOWN
or STALE node keeps the last GPUs this source read for it (or, on a first sample, the GPUs
its identity series named in the last hour, without readings), and no view counts them free.

``last_seen_s`` is its latest successful scrape (for an exporter serving an old sample, that
sample's time). ``down_since_s`` is the scrape after the last
successful one within the hour (found with 15 s resolution, so it is within one scrape
interval or 15 s of the real moment); ``None`` when it has not been up for an hour.

The scrape interval is measured per target from the data: the time its last five minutes'
``up`` samples span over their number (``count_over_time(up[5m])`` and
``min_over_time(timestamp(up)[5m:1s])``), rather than read from ``/api/v1/status/config``:
Thanos, VictoriaMetrics and Mimir do not serve Prometheus' configuration, relabelling can give
a target an interval its job's ``scrape_interval`` does not show, and a target only seconds old
is measured right too. Fewer than two scrapes in five minutes: 15 s
(:data:`DEFAULT_SCRAPE_INTERVAL_S`). ``ClusterSample.scrape_interval_s`` is the median over
targets.

Queries
=======

Each refresh is three POSTs to ``/api/v1/query``, however many nodes:

1. :data:`TARGETS_QUERY`: per target, ``up``, ``timestamp(up)`` (its latest scrape), the
   time of its latest successful scrape within the hour (a subquery at 15 s steps), and its
   scrape count and first scrape over 5 min: five expressions joined with ``or`` and told
   apart by a ``gpumon_fact`` label.
2. :data:`DATA_QUERY`: every series the model is made of, as one selector
   ``{__name__=~"gpumon_gpu_info|…|DCGM_FI_DEV_GPU_UTIL|…"}``; gpumon's names come from the
   field table.
3. :data:`IDENTITY_QUERY`: ``last_over_time`` over an hour of the series that name a node and
   its GPUs, for nodes that are down now.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpumon.data.cluster import ClusterSample, ExporterKind, no_longer_current, node_names
from gpumon.data.fields import BY_KEY
from gpumon.data.format import known_time
from gpumon.sources.prometheus.client import Backoff, Opener, PrometheusError, _Client, _describe
from gpumon.sources.prometheus.nodes import DEFAULT_SCRAPE_INTERVAL_S, _build_node, _Known
from gpumon.sources.prometheus.queries import DCGM_READINGS, QUERIES, _promql_string, _series_name
from gpumon.sources.prometheus.series import _number, _Series, _vector
from gpumon.sources.prometheus.targets import (
    Target,
    _by_target,
    _facts,
    _node_targets,
    _unique,
)

__all__ = ["DEFAULT_SCRAPE_INTERVAL_S", "PrometheusError", "PrometheusSource"]


class PrometheusSource:
    """A cluster's GPUs from a Prometheus server (see the module's docstring)."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] = {},  # read, never changed
        basic_auth: tuple[str, str] | None = None,
        ca_file: str | None = None,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        opener: Opener | None = None,
    ) -> None:
        self._client = _Client(url, headers, basic_auth, ca_file, timeout_s, opener)
        self._header_names = sorted(headers)
        self._basic = basic_auth is not None or "Basic" in self._client.headers.get(
            "Authorization", ""
        )
        self._ca_file = ca_file
        self._clock = clock
        self._clock_offset_s = 0.0  # server time - clock(), from the latest answer
        self._known: dict[Target, _Known] = {}
        self._backoff = Backoff()
        self.last: ClusterSample | None = None

    @property
    def url(self) -> str:
        """The server's address as shown to users: no credentials."""
        return self._client.shown

    @property
    def next_retry_s(self) -> float | None:
        """Seconds to wait before retrying after a failed sample; ``None`` after a success."""
        return self._backoff.delay_s

    def __repr__(self) -> str:
        return (
            f"PrometheusSource(url={self.url!r}, headers={self._header_names!r}, "
            f"basic_auth={'***' if self._basic else None}, ca_file={self._ca_file!r}, "
            f"timeout_s={self._client.timeout_s!r})"
        )

    def close(self) -> None:
        """Nothing to release (each request has its own connection)."""

    def sample(self) -> ClusterSample:
        """Every node now; never raises (see the module's docstring)."""
        try:
            answers = [_vector(self._client.post("/api/v1/query", {"query": q})) for q in QUERIES]
            sample = self._build(*answers)
        except PrometheusError as error:
            return self._failed(str(error))
        except Exception as error:  # a bug must not take the dashboard down: say it
            said = self._client.server_text(_describe(error))  # it may quote the answer
            return self._failed(str(self._client.error(f"unexpected answer: {said}")))
        self._backoff.succeeded()
        self.last = sample
        return sample

    def _failed(self, reason: str) -> ClusterSample:
        self._backoff.failed()
        previous = self.last
        nodes = () if previous is None else tuple(no_longer_current(n) for n in previous.nodes)
        return ClusterSample(
            timestamp_s=self._clock(),
            url=self.url,
            nodes=nodes,
            scrape_interval_s=None if previous is None else previous.scrape_interval_s,
            error=reason,
            stale=True,
        )

    def _build(
        self, facts_series: list[_Series], data: list[_Series], identity: list[_Series]
    ) -> ClusterSample:
        times = [t for item in (*facts_series, *data, *identity) if (t := item.time_s) is not None]
        now = max(times) if times else self._clock() + self._clock_offset_s
        if times:
            self._clock_offset_s = now - self._clock()
        facts, by_target, identities = _facts(facts_series), _by_target(data), _by_target(identity)
        targets = _node_targets(facts, by_target, identities)
        intervals = [f.interval_s for t in targets if (f := facts.get(t)) and f.interval_s]
        built, known = [], {}
        for target in targets:
            host, node, remembered = _build_node(
                target,
                facts.get(target),
                by_target.get(target, []),
                identities.get(target, []),
                now,
                self._known.get(target),
            )
            built.append((host, node))
            if (kept := remembered or self._known.get(target)) is not None:
                known[target] = kept
        self._known = known
        names = _unique(node_names([(host, node.instance) for host, node in built]), built)
        nodes = tuple(
            dataclasses.replace(node, name=name)
            for name, (_, node) in zip(names, built, strict=True)
        )
        return ClusterSample(
            timestamp_s=now,
            url=self.url,
            nodes=tuple(sorted(nodes, key=lambda node: (node.name, node.instance))),
            scrape_interval_s=statistics.median(intervals) if intervals else None,
        )

    # --- history ----------------------------------------------------------------------------

    def history(
        self,
        node: str,
        gpu_index: int,
        field_key: str,
        seconds: float = 3600.0,
        step: float | None = None,
    ) -> list[tuple[float, float | None]]:
        """One GPU field of one node over time (see the module's docstring)."""
        descriptor = BY_KEY.get(field_key)
        if descriptor is None:
            raise ValueError(f"no GPU field {field_key!r}")
        spec = descriptor.prometheus
        if spec is not None and spec.kind == "state":
            raise ValueError(f"{field_key!r} is a name, not a number: it has no graph")
        instance, job, kind = self._resolve(node)
        if kind is ExporterKind.DCGM:
            names = [(n, f) for n, (a, f) in DCGM_READINGS.items() if a == descriptor.attribute]
            if not names:
                return []
            metric, factor = names[0]
        elif spec is None:
            return []
        else:
            metric, factor = _series_name(spec.name, spec.kind), 1.0 / spec.scale
        matchers = [("instance", instance), ("gpu", str(gpu_index))]
        if job is not None:
            matchers.append(("job", job))
        selector = ",".join(f'{label}="{_promql_string(value)}"' for label, value in matchers)
        step_s = max(1.0, float(step) if step else seconds / 360)
        end = math.floor((self._clock() + self._clock_offset_s) / step_s) * step_s
        start = end - math.floor(seconds / step_s) * step_s
        form = {
            "query": f"max({metric}{{{selector}}})",
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step_s:g}",
        }
        data = self._client.post("/api/v1/query_range", form)
        values: dict[float, float | None] = {}
        for item in data.get("result", ())[:1]:
            for pair in item.get("values", ()) if isinstance(item, dict) else ():
                pair_ok = isinstance(pair, list) and len(pair) == 2
                with_time = known_time(_number(pair[0])) if pair_ok else None
                if with_time is not None:
                    value = _number(pair[1])
                    values[round(with_time, 3)] = None if value is None else value * factor
        count = round((end - start) / step_s)
        moments = [round(start + number * step_s, 3) for number in range(count + 1)]
        return [(moment, values.get(moment)) for moment in moments]

    def query(self, expression: str, at_s: float) -> Any:
        """An instant query's ``data`` at ``at_s`` (for ``gpumon report``).

        Raises:
            PrometheusError: as :meth:`history`.
        """
        return self._client.post("/api/v1/query", {"query": expression, "time": f"{at_s:.3f}"})

    def query_range(self, expression: str, start_s: float, end_s: float, step_s: float) -> Any:
        """A range query's ``data`` (for ``gpumon report``; the caller bounds the steps).

        Raises:
            PrometheusError: as :meth:`history`.
        """
        form = {
            "query": expression,
            "start": f"{start_s:.3f}",
            "end": f"{end_s:.3f}",
            "step": f"{step_s:g}",
        }
        return self._client.post("/api/v1/query_range", form)

    def _resolve(self, node: str) -> tuple[str, str | None, ExporterKind]:
        """(instance, job, exporter) of a node given by name or instance."""
        for candidate in self.last.nodes if self.last is not None else ():
            if node in (candidate.name, candidate.instance):
                return candidate.instance, candidate.job, candidate.exporter
        return node, None, ExporterKind.UNKNOWN
