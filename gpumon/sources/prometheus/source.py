"""A cluster read from Prometheus' HTTP query API: one row per scrape target from a few
aggregate queries (:mod:`.aggregate`, :mod:`.rows`), and one target's GPUs and processes as a
:class:`~gpumon.data.cluster.Node` on demand, from gpumon's exporter or dcgm-exporter.

A failed refresh keeps the last rows and nodes, STALE, so that no view counts their GPUs
free. The queries, their cost and the recording rules: docs/cluster.md, "How the cluster is
read".
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpumon.config.settings import Settings
from gpumon.data.cluster import (
    ClusterSample,
    ExporterKind,
    Node,
    NodeState,
    NodeSummary,
    Ranked,
    fleet_of,
    no_longer_current,
    node_names,
    summarize,
)
from gpumon.data.fields import BY_KEY
from gpumon.data.format import error_text, known_time, safe_text
from gpumon.data.views import user_summary
from gpumon.sources.prometheus.aggregate import (
    RULES_EVALUATED,
    RULES_FREE_THRESHOLD_MIB,
    TOP_USERS,
    rows_queries,
    rules_usable,
)
from gpumon.sources.prometheus.client import Backoff, Opener, PrometheusError, _Client
from gpumon.sources.prometheus.nodes import DEFAULT_SCRAPE_INTERVAL_S, _build_node, _Known
from gpumon.sources.prometheus.queries import (
    DCGM_READINGS,
    QUERIES,
    _promql_string,
    _series_name,
    node_queries,
)
from gpumon.sources.prometheus.rows import Answer, Recorded, Remembered, read_rows
from gpumon.sources.prometheus.series import _number, _Series, _series, _vector
from gpumon.sources.prometheus.targets import (
    Target,
    _by_target,
    _Facts,
    _facts,
    _node_targets,
    _unique,
    _with_fleet_interval,
)

__all__ = ["DEFAULT_SCRAPE_INTERVAL_S", "PrometheusError", "PrometheusSource"]

#: How the rows were read (``ClusterSample.path``), said in the header.
RECORDING_RULES, RAW_QUERIES = "recording rules", "raw queries"
FREE_THRESHOLD_MIB: int = Settings().free_threshold_mib
#: How long the targets' facts a whole request read (scrape intervals, last times up, host
#: names, what named the nodes serving no GPU) serve the lean refreshes after it.
FACTS_FOR_S = 60.0


class PrometheusSource:
    """A cluster's GPUs from a Prometheus server.

    ``url`` is the server's base address (``/api/v1/...`` is appended; credentials in it become
    basic auth). ``headers`` and ``basic_auth`` are sent with every request; no redirect is
    followed; ``ca_file`` names a PEM bundle of a private CA. ``timeout_s`` bounds each request
    as a whole. ``clock`` is used only where the server gives no real moment; ``opener``
    replaces urllib's, for tests. ``free_threshold_mib``: a GPU with no process and less
    memory in use is FREE (the settings' ``free_threshold_mib``). Raises :class:`ValueError`
    for a URL that is not ``http(s)://host...`` or an unreadable CA file. No ``repr()`` or
    error text holds a credential.
    """

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
        free_threshold_mib: int = FREE_THRESHOLD_MIB,
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
        self._known_rows: dict[Target, Remembered] = {}
        self._free_threshold_mib = free_threshold_mib
        # The recording rules were loaded at the last refresh; at first, whether they would be
        # usable if they were (asking them costs little where they are not).
        self._rules = free_threshold_mib == RULES_FREE_THRESHOLD_MIB
        self._facts: dict[Target, _Facts] = {}  # the targets' facts of the last whole answer
        self._facts_at = -math.inf
        #: The rules' series read last: when the rules were evaluated then (None: not asked
        #: yet), whether every user was read, and what they told.
        self._recorded: tuple[float | None, bool, Recorded] | None = None
        self._backoff = Backoff()
        self.last: ClusterSample | None = None
        #: Refreshes read every user on each node (the node list filters by user): most of an
        #: answer's series, which nothing else needs. A row keeps the users last read.
        self.users_wanted = False

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

    def sample(self, detail: bool = False) -> ClusterSample:
        """Every node now, one row each from aggregate queries (``nodes`` empty); with
        ``detail`` also every node's GPUs and processes (``nodes``, and rows from them).
        Blocks, never raises.

        On failure the previous rows and nodes come back not current (UP turns STALE) with
        ``stale=True`` and ``error`` set to one safe line; wait :attr:`next_retry_s` before
        the next try.
        """
        try:
            sample = self._detailed() if detail else self._aggregated()
        except PrometheusError as error:
            return self._failed(str(error))
        except Exception as error:  # a bug must not take the dashboard down: say it
            said = self._client.server_text(error_text(error))  # it may quote the answer
            return self._failed(str(self._client.error(f"unexpected answer: {said}")))
        self._backoff.succeeded()
        self.last = sample
        return sample

    def detail(self, node: str) -> Node:
        """One node's GPUs and processes now (``node``: a name or instance from the rows).

        Raises :class:`PrometheusError` when a query fails or the node is not in the answer.
        Blocks; safe beside :meth:`sample`.
        """
        instance, job, _ = self._resolve(node)
        matchers = {"instance": instance} | ({} if job is None else {"job": job})
        facts, data, identity = (self._query(q) for q in node_queries(matchers))
        built = self._build(facts, data, identity, keep_others=True)
        for found in built.nodes:
            if found.instance == instance and (job is None or found.job == job):
                shown = self._shown_name(found.instance, found.job) or found.name
                return dataclasses.replace(found, name=shown)
        raise self._client.error(f"no node {safe_text(node, 100)} in the answer")

    def _query(self, expression: str) -> list[_Series]:
        return _vector(self._client.post("/api/v1/query", {"query": expression}))

    def _aggregated(self) -> ClusterSample:
        earlier: dict[Target, _Facts] | None = self._facts
        if self._clock() - self._facts_at > FACTS_FOR_S:
            earlier = None
        rules, users = self._rules, self.users_wanted
        evaluated, recorded = self._rules_read(users) if rules else (None, None)
        answer = self._ask(rules, earlier, users, recorded)
        if rules and not rules_usable(answer.rules_loaded, self._free_threshold_mib):
            rules = False  # not recorded (any more): the expressions, in the same refresh
            answer = self._ask(rules, earlier, users)
        if answer.changed:
            earlier = None
            answer = self._ask(rules, earlier, users, recorded if rules else None)
        if earlier is None:
            self._facts, self._facts_at = answer.facts, self._clock()
        self._known_rows = answer.known
        self._rules = rules_usable(answer.rules_loaded, self._free_threshold_mib)
        self._recorded = (evaluated, users, answer.recorded) if rules else None
        return ClusterSample(
            timestamp_s=answer.now_s,
            url=self.url,
            nodes=(),
            scrape_interval_s=answer.scrape_interval_s,
            rows=answer.rows,
            fleet=fleet_of(answer.rows, answer.top_users),
            path=RECORDING_RULES if rules else RAW_QUERIES,
        )

    def _rules_read(self, users: bool) -> tuple[float | None, Recorded | None]:
        """When the rules were last evaluated, asked once their series were read (else None),
        and those series' reading where it still holds: the rules were not evaluated since
        and it read the same users. Prometheus evaluates them every minute by default and a
        refresh comes every few seconds: most refreshes read no rule series."""
        if self._recorded is None:
            return None, None
        found = self._query(RULES_EVALUATED)
        evaluated = found[0].value if len(found) == 1 else None
        same = evaluated is not None and self._recorded[:2] == (evaluated, users)
        return evaluated, self._recorded[2] if same else None

    def _ask(
        self,
        rules: bool,
        earlier: dict[Target, _Facts] | None,
        users: bool,
        recorded: Recorded | None = None,
    ) -> Answer:
        """The rows from one refresh's queries: the rules' series (or those ``recorded``) or
        the expressions, lean with the targets' ``earlier`` facts."""

        def read(entries: Iterator[Any]) -> Answer:
            # One series at a time: only what the rows keep of the answer stays in memory.
            return read_rows(
                _series(entries), self._now, self._known_rows, rules, earlier, users, recorded
            )

        lean = earlier is not None
        queries = rows_queries(
            self._free_threshold_mib,
            rules=rules,
            lean=lean,
            users=users,
            recorded=recorded is not None,
        )
        return self._client.read("/api/v1/query", [{"query": q} for q in queries], read)

    def _detailed(self) -> ClusterSample:
        # What only the aggregate queries tell (site labels, idle-held memory) joins the rows
        # built from the same nodes as the GPUs shown, so that their counts agree.
        told = {(row.instance, row.job): row for row in self._aggregated().rows or ()}
        facts, data, identity = (self._query(q) for q in QUERIES)
        sample = self._build(facts, data, identity)
        rows = tuple(
            _with_aggregates(summarize(node, self._free_threshold_mib), told)
            for node in sample.nodes
        )
        processes = [p for node in sample.nodes if node.usable for p in node.sample.processes]
        users = [
            Ranked(usage.user, float(usage.gpu_memory_bytes))
            for usage in user_summary(processes)
            if usage.gpu_memory_bytes is not None
        ]
        fleet = fleet_of(rows, users, TOP_USERS)
        return dataclasses.replace(sample, rows=rows, fleet=fleet, path=RAW_QUERIES)

    def _failed(self, reason: str) -> ClusterSample:
        self._backoff.failed()
        previous = self.last
        nodes = () if previous is None else tuple(no_longer_current(n) for n in previous.nodes)
        rows = None
        if previous is not None and previous.rows is not None:
            rows = tuple(_not_current(row) for row in previous.rows)
        top = () if previous is None or previous.fleet is None else previous.fleet.top_users
        return ClusterSample(
            timestamp_s=self._clock(),
            url=self.url,
            nodes=nodes,
            scrape_interval_s=None if previous is None else previous.scrape_interval_s,
            error=reason,
            stale=True,
            rows=rows,
            fleet=None if rows is None else fleet_of(rows, top, TOP_USERS),
            path=None if previous is None else previous.path,
        )

    def _now(self, latest: float | None) -> float:
        """The server's evaluation time, the ``latest`` its series tell (without one, this
        machine's clock, corrected)."""
        if latest is None:
            return self._clock() + self._clock_offset_s
        self._clock_offset_s = latest - self._clock()
        return latest

    def _shown_name(self, instance: str, job: str | None) -> str | None:
        """The name the latest rows gave the target."""
        for row in self.last.rows or () if self.last is not None else ():
            if row.instance == instance and row.job == job:
                return row.name
        return None

    def _build(
        self,
        facts_series: list[_Series],
        data: list[_Series],
        identity: list[_Series],
        keep_others: bool = False,
    ) -> ClusterSample:
        times = (item.time_s for part in (facts_series, data, identity) for item in part)
        now = self._now(max((t for t in times if t is not None), default=None))
        facts, by_target, identities = _facts(facts_series), _by_target(data), _by_target(identity)
        targets = _node_targets(facts, by_target, identities)
        interval = _with_fleet_interval(facts, targets)
        built, known = [], dict(self._known) if keep_others else {}
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
        names = node_names([(host, node.instance) for host, node in built])
        names = _unique(names, [node.job for _, node in built])
        nodes = tuple(
            dataclasses.replace(node, name=name)
            for name, (_, node) in zip(names, built, strict=True)
        )
        return ClusterSample(
            timestamp_s=now,
            url=self.url,
            nodes=tuple(sorted(nodes, key=lambda node: (node.name, node.instance))),
            scrape_interval_s=interval,
        )

    def history(
        self,
        node: str,
        gpu_index: int,
        field_key: str,
        seconds: float = 3600.0,
        step: float | None = None,
    ) -> list[tuple[float, float | None]]:
        """One GPU field of one node over ``seconds``, in the model's units.

        ``None`` where Prometheus has no value; ``[]`` when the node's exporter does not serve
        the field. Raises :class:`ValueError` for an unknown or name-valued key and
        :class:`PrometheusError` when the query fails. Blocks; safe beside :meth:`sample`.
        """
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
        data = self.query_range(f"max({metric}{{{selector}}})", start, end, step_s)
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
        """An instant query's ``data`` at ``at_s``; raises :class:`PrometheusError`."""
        return self._client.post("/api/v1/query", {"query": expression, "time": f"{at_s:.3f}"})

    def query_range(self, expression: str, start_s: float, end_s: float, step_s: float) -> Any:
        """A range query's ``data`` (the caller bounds the steps); raises PrometheusError."""
        form = {
            "query": expression,
            "start": f"{start_s:.3f}",
            "end": f"{end_s:.3f}",
            "step": f"{step_s:g}",
        }
        return self._client.post("/api/v1/query_range", form)

    def _resolve(self, node: str) -> tuple[str, str | None, ExporterKind]:
        """(instance, job, exporter) of a node given by name or instance."""
        last = self.last
        candidates: list[NodeSummary | Node] = []
        if last is not None:
            candidates = [*(last.rows or ()), *last.nodes]
        for candidate in candidates:
            if node in (candidate.name, candidate.instance):
                return candidate.instance, candidate.job, candidate.exporter
        return node, None, ExporterKind.UNKNOWN


def _not_current(row: NodeSummary) -> NodeSummary:
    """``row`` once Prometheus no longer answers: UP turns STALE, its GPUs never free."""
    if row.state is NodeState.UP:
        return dataclasses.replace(row, state=NodeState.STALE, free_gpus=None)
    return row


def _with_aggregates(
    row: NodeSummary, told: Mapping[tuple[str, str | None], NodeSummary]
) -> NodeSummary:
    """``row`` with the site labels and idle-held memory of the aggregate row of its target."""
    other = told.get((row.instance, row.job))
    if other is None:
        return row
    return dataclasses.replace(
        row,
        labels=other.labels,
        idle_held_bytes=other.idle_held_bytes if row.current else None,
        idle_holders=other.idle_holders if row.current else (),
    )
