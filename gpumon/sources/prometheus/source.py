"""A cluster read from Prometheus' HTTP query API: one :class:`~gpumon.data.cluster.Node` per target.

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
    password)``. Both are sent pre-emptively and never follow a redirect to another address.
    HTTPS verifies the certificate and the host name; ``ca_file`` names a PEM bundle of a
    private CA. ``timeout_s`` bounds each request (connecting and the whole answer).
    ``clock`` is only used where the server gives no time. ``opener`` replaces urllib's
    (anything with ``open(request, timeout=...)``, as :class:`urllib.request.OpenerDirector`):
    for tests. Raises :class:`ValueError` for a URL that is not ``http(s)://host...`` and for a
    CA file that cannot be read. ``repr()`` shows header names only, never values or
    passwords; so does every error text.

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
  the ``process`` label, the executable's base name only; ``kind`` is COMPUTE (the exporter
  does not say); ``visible`` True, ``is_current_user`` False; host details (CPU, RSS, elapsed)
  ``None``. A GPU without ``gpumon_gpu_processes`` (the exporter leaves it out when the list is
  unknown) gets ``processes_error``, as does one whose count exceeds the listed processes (a
  process whose memory is N/A has no series): unknown, never free. ``processes_read`` is True
  when some GPU's count is served. Absent ``gpumon_gpu_clock_event_reason`` series read
  ``None`` (the exporter serves none both when nothing holds the clocks and when it cannot
  tell).
- dcgm-exporter (kind DCGM): the readings of :data:`DCGM_READINGS` (MiB to bytes, mJ to J);
  total memory from ``DCGM_FI_DEV_FB_TOTAL`` where served, else used + free (+ reserved);
  everything else ``None``; ``processes_read`` False (dcgm-exporter lists no process).
- Every label value is other machines' text and passes :func:`gpumon.data.format.safe_text`.
  NaN and infinite values are ``None``.

Staleness
=========

State per node by :func:`gpumon.data.cluster.classify`, against the server's evaluation time
(not this machine's clock, which may be skewed): DOWN when ``up == 0``; STALE when its
latest scrape is older than three scrape intervals, or when it has no ``up`` series any
more (removed from the scrape config or service discovery: listed for an hour after); STALE
too when its exporter answers but serves no GPU series (gpumon's exporter drops them when a
sample fails). A DOWN or STALE node keeps the last GPUs this source read for it (or, on a
first sample, the GPUs its identity series named in the last hour, without readings).

``last_seen_s`` is its latest successful scrape. ``down_since_s`` is the scrape after the last
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

import base64
import dataclasses
import gzip
import http.client
import json
import math
import ssl
import statistics
import time
import typing
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpumon import __version__
from gpumon.data.cluster import ClusterSample, ExporterKind, Node, NodeState, classify, node_names
from gpumon.data.fields import BY_KEY, FIELDS, Field
from gpumon.data.format import safe_text
from gpumon.data.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    HostStats,
    MigInstance,
    ProcessKind,
    Sample,
)

#: Used where fewer than two scrapes of a target were seen in five minutes.
DEFAULT_SCRAPE_INTERVAL_S = 15.0
#: How far back a node that is down is remembered (its identity, when it was last up).
LOOKBACK = "1h"
#: The most an answer may hold, decompressed: a misdirected URL must not fill the memory.
MAX_ANSWER_BYTES = 256 * 1024 * 1024
_MIB = 1024 * 1024
_ERROR_MAX_CHARS = 300

# --- The queries ----------------------------------------------------------------------------

_FACT = "gpumon_fact"
TARGETS_QUERY = " or ".join(
    f'label_replace({expression}, "{_FACT}", "{fact}", "", "")'
    for fact, expression in (
        ("up", "up"),
        ("scraped", "timestamp(up)"),
        ("last_up", f"max_over_time((timestamp(up) and up == 1)[{LOOKBACK}:15s])"),
        ("scrapes_5m", "count_over_time(up[5m])"),
        ("first_5m", "min_over_time(timestamp(up)[5m:1s])"),
    )
)


def _series_name(name: str, kind: str) -> str:
    # prometheus_client serves a counter family as NAME_total.
    return f"{name}_total" if kind == "counter" else name


#: gpumon series name -> the GpuStats field it holds, from the field table (never a copy).
GPUMON_READINGS: dict[str, Field] = {
    _series_name(spec.name, spec.kind): item
    for item in FIELDS
    if (spec := item.prometheus) is not None
}
_GPUMON_OTHERS = (
    "gpumon_host_info",
    "gpumon_gpu_info",
    "gpumon_gpu_up",
    "gpumon_gpu_processes",
    "gpumon_process_gpu_memory_bytes",
    "gpumon_mig_memory_used_bytes",
    "gpumon_mig_memory_total_bytes",
    "gpumon_simulated",
    "gpumon_driver_info",
    "gpumon_sample_timestamp_seconds",
)

#: dcgm-exporter series -> (GpuStats field, factor to the model's unit).
DCGM_READINGS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_gpu_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("utilization_memory_pct", 1.0),
    "DCGM_FI_DEV_ENC_UTIL": ("utilization_encoder_pct", 1.0),
    "DCGM_FI_DEV_DEC_UTIL": ("utilization_decoder_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", _MIB),
    "DCGM_FI_DEV_FB_FREE": ("memory_free_bytes", _MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("memory_reserved_bytes", _MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("memory_total_bytes", _MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": ("temperature_slowdown_c", 1.0),
    "DCGM_FI_DEV_SHUTDOWN_TEMP": ("temperature_shutdown_c", 1.0),
    "DCGM_FI_DEV_FAN_SPEED": ("fan_pct", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_draw_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 0.001),
    "DCGM_FI_DEV_SM_CLOCK": ("clock_sm_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("clock_memory_mhz", 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_errors_uncorrected_volatile", 1.0),
}
#: The dcgm-exporter series whose labels name a GPU of a node that is down now.
DCGM_IDENTITY = "DCGM_FI_DEV_GPU_TEMP"

DATA_METRICS: tuple[str, ...] = (*_GPUMON_OTHERS, *GPUMON_READINGS, *DCGM_READINGS)
DATA_QUERY = '{__name__=~"' + "|".join(DATA_METRICS) + '"}'
IDENTITY_QUERY = (
    f'last_over_time({{__name__=~"gpumon_host_info|gpumon_gpu_info|{DCGM_IDENTITY}"}}[{LOOKBACK}])'
)
#: Every query one refresh runs, in order.
QUERIES = (TARGETS_QUERY, DATA_QUERY, IDENTITY_QUERY)


# --- HTTP ----------------------------------------------------------------------------------


class PrometheusError(Exception):
    """A query failed; ``str()`` is one line without credentials."""


class _BadAnswer(Exception):
    """An answer that arrived and cannot be used (too large, broken encoding)."""


class Opener(Protocol):
    def open(self, fullurl: urllib.request.Request, *, timeout: float) -> Any: ...


class Backoff:
    """Delays between retries: 1, 2, 4 … ``maximum_s`` seconds; back to none on success."""

    def __init__(self, initial_s: float = 1.0, maximum_s: float = 60.0) -> None:
        self.initial_s = initial_s
        self.maximum_s = maximum_s
        self.delay_s: float | None = None

    def failed(self) -> float:
        """Count a failure; returns how long to wait before the next try."""
        if self.delay_s is None:
            self.delay_s = self.initial_s
        else:
            self.delay_s = min(self.maximum_s, self.delay_s * 2)
        return self.delay_s

    def succeeded(self) -> None:
        self.delay_s = None


class _Client:
    """POSTs forms to the API and returns its ``data``; every failure a PrometheusError."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        basic_auth: tuple[str, str] | None,
        ca_file: str | None,
        timeout_s: float,
        opener: Opener | None,
    ) -> None:
        self.base, self.shown, url_auth = _split_url(url)
        auth = basic_auth or url_auth
        self.headers = dict(headers)
        self.secrets = [value for value in self.headers.values() if len(value) >= 4]
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self.headers["Authorization"] = f"Basic {token}"
            self.secrets += [token, auth[1]] if len(auth[1]) >= 4 else [token]
        self.timeout_s = timeout_s
        self.opener = opener if opener is not None else _default_opener(ca_file)

    def post(self, path: str, form: Mapping[str, str]) -> Any:
        request = urllib.request.Request(
            self.base + path, data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        request.add_header("Accept", "application/json")
        request.add_header("Accept-Encoding", "gzip")
        request.add_header("User-Agent", f"gpumon/{__version__}")
        for name, value in self.headers.items():
            request.add_unredirected_header(name, value)  # never sent on to a redirect
        try:
            body = self._fetch(request)
        except _BadAnswer as error:
            raise self.error(str(error)) from None
        except urllib.error.HTTPError as error:
            raise self.error(_http_error_text(error)) from None
        except TimeoutError:
            raise self.error(f"no answer within {self.timeout_s:g} s") from None
        except urllib.error.URLError as error:
            raise self.error(_url_error_text(error.reason, self.timeout_s)) from None
        except (OSError, http.client.HTTPException) as error:
            raise self.error(f"connection failed: {_describe(error)}") from None
        return _api_data(body, self.error)

    def _fetch(self, request: urllib.request.Request) -> bytes:
        deadline = time.monotonic() + self.timeout_s
        with self.opener.open(request, timeout=self.timeout_s) as response:
            chunks, size = [], 0
            while chunk := response.read(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise _BadAnswer("the answer is too large")
                if time.monotonic() > deadline:
                    raise TimeoutError
            body = b"".join(chunks)
            if (response.headers.get("Content-Encoding") or "").lower() == "gzip":
                body = _gunzip(body)
            return body

    def error(self, reason: str) -> PrometheusError:
        return PrometheusError(self.redact(f"Prometheus at {self.shown}: {reason}"))

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        text = " ".join(safe_text(text, _ERROR_MAX_CHARS).split())  # one safe line
        return text


def _split_url(url: str) -> tuple[str, str, tuple[str, str] | None]:
    """(base for requests, the same to show, basic auth from the URL or None)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the Prometheus URL must be http(s)://HOST[:PORT][/PATH]")
    try:
        parts.port  # noqa: B018 (validates the port)
    except ValueError:
        raise ValueError("the Prometheus URL has a port that is not a number") from None
    netloc = parts.netloc.rpartition("@")[2]
    base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    auth = None
    if parts.username is not None:
        password = urllib.parse.unquote(parts.password or "")
        auth = (urllib.parse.unquote(parts.username), password)
    return base, base, auth


def _default_opener(ca_file: str | None) -> Opener:
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"cannot use the CA file {ca_file!r}: {_describe(error)}") from None
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))


def _gunzip(body: bytes) -> bytes:
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, MAX_ANSWER_BYTES + 1)
    except (zlib.error, gzip.BadGzipFile):
        raise _BadAnswer("the answer's gzip encoding is broken") from None
    if len(data) > MAX_ANSWER_BYTES:
        raise _BadAnswer("the answer is too large")
    return data


def _describe(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return str(text)


def _http_error_text(error: urllib.error.HTTPError) -> str:
    text = f"HTTP {error.code} {error.reason or ''}".rstrip()
    if error.code in (401, 403):
        text += " (credentials missing or refused)"
    try:
        detail = json.loads(error.read(65536) or b"null")
    except (ValueError, OSError, http.client.HTTPException):
        detail = None
    if isinstance(detail, dict) and isinstance(detail.get("error"), str):
        text += f": {detail['error']}"
    return text


def _url_error_text(reason: Any, timeout_s: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"certificate not trusted: {reason.verify_message or reason}"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed: {reason.reason or reason}"
    if isinstance(reason, BaseException):
        return f"cannot connect: {_describe(reason)}"
    return f"cannot connect: {reason}"


def _api_data(body: bytes, error: Callable[[str], PrometheusError]) -> Any:
    try:
        answer = json.loads(body)
    except ValueError:
        raise error("the answer is not JSON (is this Prometheus' address?)") from None
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        raise error("the answer is not Prometheus' API JSON (is this its address?)")
    if answer["status"] == "error":
        raise error(f"query failed: {answer.get('errorType', '')}: {answer.get('error', '')}")
    data = answer.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise error("the answer is not Prometheus' API JSON (no result)")
    return data


# --- Parsing answers ------------------------------------------------------------------------

Target = tuple[str, str]  # (instance, job)


@dataclass(frozen=True, slots=True)
class _Series:
    name: str | None
    labels: dict[str, str]  # as Prometheus gave them, ``__name__`` included
    value: float | None
    time_s: float

    def label(self, name: str) -> str | None:
        """The label's value made safe, or None when absent or empty."""
        value = self.labels.get(name)
        return safe_text(value) if value else None


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _vector(data: Any) -> list[_Series]:
    """An instant query's result as series; malformed entries are skipped."""
    found = []
    for item in data.get("result", ()):
        try:
            labels, (time_s, text) = item["metric"], item["value"]
            moment = float(time_s)
        except (KeyError, TypeError, ValueError):
            continue
        if type(labels) is dict:  # label values are strings in every answer Prometheus gives
            found.append(_Series(labels.get("__name__"), labels, _number(text), moment))
    return found


def _target(series: _Series) -> Target | None:
    instance = series.labels.get("instance")
    return None if instance is None else (instance, series.labels.get("job", ""))


def _by_target(series: Iterable[_Series]) -> dict[Target, list[_Series]]:
    grouped: dict[Target, list[_Series]] = {}
    for item in series:
        target = _target(item)
        if target is not None:
            grouped.setdefault(target, []).append(item)
    return grouped


@dataclass(slots=True)
class _Facts:
    up: float | None = None
    scraped_s: float | None = None
    last_up_s: float | None = None
    scrapes_5m: float | None = None
    first_5m_s: float | None = None
    evaluated_s: float | None = None

    @property
    def interval_s(self) -> float | None:
        """Seconds between scrapes: the time the last five minutes' scrapes span over their
        number. ``first_5m_s`` is the latest scrape at or before the window's first second:
        before the window for a target older than that (one gap more than the count)."""
        first, last, count = self.first_5m_s, self.scraped_s, self.scrapes_5m
        if first is None or last is None or count is None or self.evaluated_s is None:
            return None
        gaps = count if first <= self.evaluated_s - 300 else count - 1
        if gaps < 1 or last <= first:
            return None
        return (last - first) / gaps


def _facts(series: Iterable[_Series]) -> dict[Target, _Facts]:
    facts: dict[Target, _Facts] = {}
    slots = {
        "up": "up",
        "scraped": "scraped_s",
        "last_up": "last_up_s",
        "scrapes_5m": "scrapes_5m",
        "first_5m": "first_5m_s",
    }
    for item in series:
        target, slot = _target(item), slots.get(item.labels.get(_FACT, ""))
        if target is not None and slot is not None:
            target_facts = facts.setdefault(target, _Facts())
            setattr(target_facts, slot, item.value)
            target_facts.evaluated_s = item.time_s
    return facts


def _kind(series: Iterable[_Series]) -> ExporterKind:
    names = {item.name or _identity_name(item) for item in series}
    if any(name.startswith("gpumon_") for name in names):
        return ExporterKind.GPUMON
    if any(name.startswith("DCGM_") for name in names):
        return ExporterKind.DCGM
    return ExporterKind.UNKNOWN


def _identity_name(item: _Series) -> str:
    """The metric an identity series came from, where the server dropped its name."""
    if "UUID" in item.labels or "modelName" in item.labels:
        return DCGM_IDENTITY
    return "gpumon_gpu_info" if "gpu" in item.labels else "gpumon_host_info"


def _host(series: Iterable[_Series]) -> str | None:
    for item in series:
        name = item.name or _identity_name(item)
        host = item.label("hostname" if name == "gpumon_host_info" else "Hostname")
        if host and (name == "gpumon_host_info" or name.startswith("DCGM_")):
            return host
    return None


def _gpu_index(item: _Series) -> int | None:
    text = item.labels.get("gpu", "")
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else None


_TYPES = typing.get_type_hints(GpuStats)


def _as_model(attribute: str, value: float) -> Any:
    """A reading in the model's type: ints rounded, booleans from 1/0."""
    kind = str(_TYPES[attribute])
    if kind.startswith("bool") or "bool |" in kind:
        return value != 0
    if kind.startswith("int") or "int |" in kind:
        return round(value)
    return value


@dataclass(slots=True)
class _Gpu:
    index: int
    values: dict[str, Any] = field(default_factory=dict)
    states: dict[str, list[str]] = field(default_factory=dict)
    processes: float | None = None
    lost: bool = False
    mig: list[_Series] = field(default_factory=list)

    def identify(self, item: _Series, uuid: str, name: str) -> None:
        if "pci_bus_id" in self.values and "name" in self.values and "uuid" in self.values:
            return
        for attribute, label in (("uuid", uuid), ("name", name), ("pci_bus_id", "pci_bus_id")):
            if attribute not in self.values and item.label(label):
                self.values[attribute] = item.label(label)


def _gpumon_gpus(series: list[_Series]) -> dict[int, _Gpu]:
    gpus: dict[int, _Gpu] = {}
    for item in series:
        index = _gpu_index(item)
        if index is None or item.name in ("gpumon_process_gpu_memory_bytes", None):
            continue
        gpu = gpus.setdefault(index, _Gpu(index))
        if item.name.startswith("gpumon_mig_"):
            gpu.mig.append(item)
            continue
        gpu.identify(item, "uuid", "name")
        if item.name == "gpumon_gpu_up":
            gpu.lost = item.value == 0
        elif item.name == "gpumon_gpu_processes":
            gpu.processes = item.value
        elif (reading := GPUMON_READINGS.get(item.name)) is not None:
            spec = reading.prometheus
            assert spec is not None  # GPUMON_READINGS holds only exported fields
            if spec.kind == "state":
                state = item.label(spec.label or "")
                if state is not None and item.value:
                    gpu.states.setdefault(reading.attribute, []).append(state)
            elif item.value is not None:
                gpu.values[reading.attribute] = _as_model(
                    reading.attribute, item.value / spec.scale
                )
    return gpus


def _gpumon_sample(series: list[_Series], host: str, when: float) -> Sample:
    gpus = _gpumon_gpus(series)
    processes = _processes(series)
    listed: dict[int, int] = {}
    for process in processes:
        listed[process.gpu_index] = listed.get(process.gpu_index, 0) + 1
    stats = tuple(_gpumon_stats(gpus[index], listed.get(index, 0)) for index in sorted(gpus))
    scalars = {item.name: item for item in series if "gpu" not in item.labels}
    stamp = scalars.get("gpumon_sample_timestamp_seconds")
    simulated = scalars.get("gpumon_simulated")
    return Sample(
        timestamp_s=stamp.value if stamp is not None and stamp.value is not None else when,
        host=_host_stats(host),
        driver=_driver(series),
        gpus=stats,
        processes=tuple(p for p in processes if p.gpu_index in gpus),
        simulated=simulated is not None and bool(simulated.value),
        processes_read=any(gpu.processes is not None for gpu in gpus.values()),
    )


def _gpumon_stats(gpu: _Gpu, listed: int) -> GpuStats:
    values = dict(gpu.values)
    for attribute, states in gpu.states.items():
        ordered = tuple(sorted(set(states)))
        values[attribute] = ordered if "tuple" in str(_TYPES[attribute]) else ordered[0]
    if gpu.lost:
        identity = {key: values.get(key) for key in ("uuid", "name", "pci_bus_id")}
        reason = "lost: the exporter reports that it stopped answering (gpumon_gpu_up 0)"
        return GpuStats(gpu.index, lost=True, lost_reason=reason, **identity)
    if gpu.processes is None:
        values["processes_error"] = "the exporter does not report this GPU's processes"
    elif gpu.processes > listed:
        values["processes_error"] = (
            f"the exporter counts {gpu.processes:.0f} processes and lists {listed} "
            "(a process's GPU memory is not reported)"
        )
    values["mig_instances"] = _mig(gpu) if values.get("mig_mode") else ()
    uuid = values.pop("uuid", None)
    return GpuStats(gpu.index, uuid, **values)


def _mig(gpu: _Gpu) -> tuple[MigInstance, ...] | None:
    """MIG instances in (GPU instance, compute instance) order; None when none is served."""
    instances: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in gpu.mig:
        labels = item.labels
        key = (
            labels.get("gpu_instance_id", ""),
            labels.get("compute_instance_id", ""),
            labels.get("uuid", ""),
        )
        entry = instances.setdefault(
            key, {"uuid": item.label("uuid"), "profile": item.label("profile")}
        )
        if item.value is not None and item.name is not None:
            entry[item.name] = round(item.value)
    if not instances:
        return None
    ordered = sorted(
        instances.items(), key=lambda pair: (_int(pair[0][0]) or 0, _int(pair[0][1]) or 0)
    )
    return tuple(
        MigInstance(
            gpu.index,
            number,
            _int(key[0]),
            _int(key[1]),
            entry["profile"],
            entry["uuid"],
            entry.get("gpumon_mig_memory_used_bytes"),
            entry.get("gpumon_mig_memory_total_bytes"),
        )
        for number, (key, entry) in enumerate(ordered)
    )


def _int(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def _processes(series: list[_Series]) -> list[GpuProcess]:
    found = []
    for item in series:
        if item.name != "gpumon_process_gpu_memory_bytes":
            continue
        index, pid = _gpu_index(item), _int(item.labels.get("pid", ""))
        if index is None or not pid:
            continue  # not a process gpumon's exporter would serve
        found.append(
            GpuProcess(
                gpu_index=index,
                gpu_uuid=item.label("uuid"),
                pid=pid,
                kind=ProcessKind.COMPUTE,  # the exporter does not say
                gpu_memory_bytes=None if item.value is None else round(item.value),
                user=item.label("user"),
                command=item.label("process"),  # the executable's base name only
                job_id=item.label("job_id"),
                container_id=item.label("container_id"),
            )
        )
    return sorted(found, key=lambda process: (process.gpu_index, process.pid))


def _driver(series: list[_Series]) -> DriverInfo | None:
    for item in series:
        if item.name == "gpumon_driver_info":
            names = ("driver_version", "cuda_driver_version", "nvml_version")
            return DriverInfo(*(item.label(name) for name in names))
    return None


def _host_stats(host: str) -> HostStats:
    return HostStats(host, None, None, None, None, None, None)


def _dcgm_sample(series: list[_Series], host: str, when: float) -> Sample:
    gpus: dict[int, _Gpu] = {}
    for item in series:
        index = _gpu_index(item)
        reading = DCGM_READINGS.get(item.name or "")
        if index is None or reading is None:
            continue
        gpu = gpus.setdefault(index, _Gpu(index))
        gpu.identify(item, "UUID", "modelName")
        attribute, factor = reading
        if item.value is not None:
            gpu.values[attribute] = _as_model(attribute, item.value * factor)
    return Sample(
        timestamp_s=when,
        host=_host_stats(host),
        driver=None,
        gpus=tuple(_dcgm_stats(gpus[index]) for index in sorted(gpus)),
        processes_read=False,
    )


def _dcgm_stats(gpu: _Gpu) -> GpuStats:
    values = dict(gpu.values)
    used, free = values.get("memory_used_bytes"), values.get("memory_free_bytes")
    if "memory_total_bytes" not in values and used is not None and free is not None:
        values["memory_total_bytes"] = used + free + (values.get("memory_reserved_bytes") or 0)
    uuid = values.pop("uuid", None)
    return GpuStats(gpu.index, uuid, **values)


def _identity_sample(series: list[_Series], host: str, when: float) -> Sample:
    """The GPUs a node's identity series named, without readings (the node is down)."""
    gpus: dict[int, _Gpu] = {}
    for item in series:
        index = _gpu_index(item)
        if index is not None:
            dcgm = (item.name or _identity_name(item)).startswith("DCGM_")
            gpus.setdefault(index, _Gpu(index)).identify(
                item, *(("UUID", "modelName") if dcgm else ("uuid", "name"))
            )
    stats = []
    for index in sorted(gpus):
        values = gpus[index].values
        stats.append(GpuStats(index, values.pop("uuid", None), **values))
    return Sample(when, _host_stats(host), None, tuple(stats), processes_read=False)


# --- The source -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Known:
    """What was last read of a target while it served data."""

    host: str | None
    kind: ExporterKind
    sample: Sample


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
            return self._failed(self._client.redact(f"unexpected answer: {_describe(error)}"))
        self._backoff.succeeded()
        self.last = sample
        return sample

    def _failed(self, reason: str) -> ClusterSample:
        self._backoff.failed()
        previous = self.last
        nodes = () if previous is None else tuple(_no_longer_current(n) for n in previous.nodes)
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
        times = [item.time_s for item in (*facts_series, *data, *identity)]
        now = max(times) if times else self._clock() + self._clock_offset_s
        if times:
            self._clock_offset_s = now - self._clock()
        facts, by_target, identities = _facts(facts_series), _by_target(data), _by_target(identity)
        targets = _node_targets(facts, by_target, identities)
        intervals = [f.interval_s for t in targets if (f := facts.get(t)) and f.interval_s]
        built = [
            self._node(t, facts.get(t), by_target.get(t, []), identities.get(t, []), now)
            for t in targets
        ]
        self._known = {target: self._known[target] for target in targets if target in self._known}
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

    def _node(
        self,
        target: Target,
        facts: _Facts | None,
        data: list[_Series],
        identity: list[_Series],
        now: float,
    ) -> tuple[str | None, Node]:
        facts = facts or _Facts()
        state, last_seen, down_since = _state(facts, now)
        known = self._known.get(target)
        host = _host(data) or _host(identity) or (known.host if known else None)
        shown = host or safe_text(target[0])
        kind = _kind(data)
        if kind is not ExporterKind.UNKNOWN and any(_gpu_index(item) is not None for item in data):
            build = _gpumon_sample if kind is ExporterKind.GPUMON else _dcgm_sample
            sample = build(data, shown, last_seen or now)
            self._known[target] = _Known(host, kind, sample)
        else:
            # Nothing about its GPUs now: down, gone, or an exporter that could not read them
            # (gpumon's drops its GPU series when a sample fails). The last known GPUs.
            if known is not None:
                kind, sample = known.kind, known.sample
            else:
                kind = _kind(identity) if kind is ExporterKind.UNKNOWN else kind
                sample = _identity_sample(identity, shown, last_seen or now)
            if state is NodeState.UP and kind is not ExporterKind.UNKNOWN:
                state = NodeState.STALE
        node = Node(
            name=shown,
            instance=safe_text(target[0]),
            job=safe_text(target[1]) or None,
            exporter=kind,
            state=state,
            sample=sample,
            last_seen_s=last_seen,
            down_since_s=down_since,
        )
        return host, node

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
                with_time = _number(pair[0]) if isinstance(pair, list) and len(pair) == 2 else None
                if with_time is not None:
                    value = _number(pair[1])
                    values[round(with_time, 3)] = None if value is None else value * factor
        count = round((end - start) / step_s)
        moments = [round(start + number * step_s, 3) for number in range(count + 1)]
        return [(moment, values.get(moment)) for moment in moments]

    def _resolve(self, node: str) -> tuple[str, str | None, ExporterKind]:
        """(instance, job, exporter) of a node given by name or instance."""
        for candidate in self.last.nodes if self.last is not None else ():
            if node in (candidate.name, candidate.instance):
                return candidate.instance, candidate.job, candidate.exporter
        return node, None, ExporterKind.UNKNOWN


def _state(facts: _Facts, now: float) -> tuple[NodeState, float | None, float | None]:
    """(state, last seen, down since) of a target. No ``up`` series: gone from Prometheus."""
    interval = facts.interval_s or DEFAULT_SCRAPE_INTERVAL_S
    last_seen = facts.scraped_s if facts.up else facts.last_up_s
    if facts.up is None:
        return NodeState.STALE, last_seen, None
    state = classify(facts.up, last_seen, now, interval)
    down_since = None
    if state is NodeState.DOWN and facts.last_up_s is not None:
        # The scrape after the last good one (found at 15 s steps), not after the latest.
        down_since = facts.last_up_s + interval
        if facts.scraped_s is not None:
            down_since = min(down_since, facts.scraped_s)
    return state, last_seen, down_since


def _promql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _node_targets(
    facts: Mapping[Target, _Facts],
    data: Mapping[Target, list[_Series]],
    identity: Mapping[Target, list[_Series]],
) -> list[Target]:
    """Targets that are nodes: GPU series now or within the hour, or a job that has some."""
    gpu_targets = {
        t
        for t, series in (*data.items(), *identity.items())
        if _kind(series) is not ExporterKind.UNKNOWN
    }
    gpu_jobs = {job for _, job in gpu_targets}
    everything = set(facts) | set(data) | set(identity)
    return sorted(t for t in everything if t in gpu_targets or t[1] in gpu_jobs)


def _unique(names: list[str], built: list[tuple[str | None, Node]]) -> list[str]:
    """Names that are still alike (one instance in two jobs) get the job added."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return [
        f"{name} [{node.job}]" if counts[name] > 1 and node.job else name
        for name, (_, node) in zip(names, built, strict=True)
    ]


def _no_longer_current(node: Node) -> Node:
    """Prometheus did not answer: an UP node's data is no longer current."""
    if node.state is NodeState.UP:
        return dataclasses.replace(node, state=NodeState.STALE)
    return node
