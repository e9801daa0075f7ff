"""What ``/metrics`` answers: the latest sample's series rendered once, and whether they are
still current (the families come from :mod:`gpumon.commands.export.collector`).

Each sample is rendered once, on the sampling thread, in both formats and gzipped; a scrape
only joins bytes and appends the exporter's health. Stale data is never served as current:
past 3 intervals (monotonic clock) or after a failed read, only identity and health series
are served. Details: docs/prometheus.md, "Rendering and staleness".
"""

from __future__ import annotations

import itertools
import math
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import exposition as text_format
from prometheus_client.openmetrics import exposition as openmetrics_format
from prometheus_client.registry import Collector

from gpumon.commands.export.collector import Latest, SampleCollector, exporter_families
from gpumon.data.model import Sample
from gpumon.data.views import is_stale

#: Prometheus' text format: what every scraper reads, and what is served unless OpenMetrics
#: is asked for. (prometheus_client renders version 0.0.4 for gpumon's names.)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_EOF = b"# EOF\n"  # OpenMetrics' last line
_GZIP_LEVEL = 6  # a page of 8 GPUs compresses in well under a millisecond
_GZIP_WBITS = 31  # zlib's gzip wrapper (header and CRC), as Content-Encoding: gzip means


class _One(Collector):
    def __init__(self, family: Any) -> None:
        self.family = family

    def collect(self) -> Iterator[Any]:
        yield self.family


def render(
    families: tuple[Any, ...] | list[Any], *, openmetrics: bool = False
) -> list[tuple[frozenset[str], bytes]]:
    """Each family in the text format (or OpenMetrics, without its ``# EOF`` line), with the
    names of the series it holds."""
    parts = []
    for family in families:
        if openmetrics:
            text = openmetrics_format.generate_latest(_One(family)).removesuffix(_EOF)
        else:
            text = text_format.generate_latest(_One(family))
        parts.append((frozenset(sample.name for sample in family.samples), text))
    return parts


class Page:
    """Families rendered once: their text, each family's part (``?name[]=``) and a flushed gzip
    stream that :meth:`gzip_tail` finishes. Built on the sampling thread, then only read.
    """

    def __init__(self, families: tuple[Any, ...] | list[Any], *, openmetrics: bool) -> None:
        parts = render(families, openmetrics=openmetrics)
        self.text = b"".join(text for _, text in parts)
        # Where each family's part is in the text (not a copy of it): the series it holds,
        # where it starts and ends.
        ends = list(itertools.accumulate(len(text) for _, text in parts))
        self._parts = [
            (series, end - len(text), end) for (series, text), end in zip(parts, ends, strict=True)
        ]
        compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
        # A sync flush ends the compressed data on a byte boundary: what a copy of the
        # compressor adds next continues the same stream.
        self.gzip_head = compressor.compress(self.text) + compressor.flush(zlib.Z_SYNC_FLUSH)
        self._compressor = compressor

    def gzip_tail(self, tail: bytes) -> bytes:
        """What follows :attr:`gzip_head` to make ``text + tail`` one gzip stream."""
        finish = self._compressor.copy()  # the page's compressor is never used itself
        return finish.compress(tail) + finish.flush()

    def select(self, names: frozenset[str]) -> bytes:
        """The parts of the families holding a series named in ``names`` (as
        prometheus_client's ``?name[]=``: counters by their ``_total`` name)."""
        return b"".join(
            self.text[start:end] for series, start, end in self._parts if series & names
        )


def _pages(families: tuple[Any, ...]) -> tuple[Page, Page]:
    """The families as text (first) and as OpenMetrics."""
    return Page(families, openmetrics=False), Page(families, openmetrics=True)


_EMPTY = _pages(())


@dataclass(frozen=True, slots=True)
class Metrics:
    """One scrape's answer: ``parts`` sent one after the other, uncopied (the page's bytes are
    shared by every scrape of the sample).
    """

    parts: tuple[bytes, ...]
    gzipped: bool = False

    @property
    def body(self) -> bytes:
        """The whole body in one piece (tests; the server sends ``parts``)."""
        return b"".join(self.parts)


@dataclass(frozen=True, slots=True)
class _Rendered:
    latest: Latest = field(default_factory=Latest)
    read_at: float | None = None  # monotonic: when latest.sample was read
    stalls: int = 0  # stalls that a good sample has ended
    current: tuple[Page, Page] = _EMPTY  # latest.families, as text and OpenMetrics
    identity: tuple[Page, Page] = _EMPTY  # latest.identity


class Exposition:
    """The latest sample as ``/metrics`` serves it: the sampling thread calls :meth:`sampled` and
    :meth:`failed`, the HTTP thread :meth:`not_ready` and :meth:`metrics`, sharing one reference
    replaced by each read. A good sample older than 3 ``interval_s`` is stale.
    """

    def __init__(
        self,
        collector: SampleCollector,
        interval_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.collector = collector
        self.interval_s = interval_s
        self._clock = clock
        self._started = clock()
        self._rendered = _Rendered(collector.latest)
        #: Whether ``--record`` writes the history now; ``None`` without ``--record``.
        self.recording: Callable[[], bool] | None = None

    def sampled(self, sample: Sample) -> None:
        """A read gave ``sample``: render it, and count the stall it ends, if any."""
        now = self._clock()
        before = self._rendered
        ended_a_stall = before.read_at is not None and self._stalled(before, now)
        stalls = before.stalls + int(ended_a_stall)
        latest = self.collector.update(sample)
        self._rendered = _Rendered(
            latest, now, stalls, _pages(latest.families), _pages(latest.identity)
        )

    def failed(self) -> None:
        """A read failed: from now on only the sample's identity and the health are served."""
        before = self._rendered
        self._rendered = _Rendered(
            self.collector.sampling_failed(), before.read_at, before.stalls, _EMPTY, before.identity
        )

    @property
    def not_ready(self) -> str | None:
        """Why ``/metrics`` answers 503 (one line), or ``None``."""
        return self._rendered.latest.not_ready

    def metrics(
        self,
        *,
        gzip: bool = False,
        openmetrics: bool = False,
        names: frozenset[str] | None = None,
    ) -> Metrics:
        """The answer to one scrape (once :attr:`not_ready` is ``None``): gzipped, in
        OpenMetrics, or only the families of ``names`` (``?name[]=``, uncompressed).
        """
        rendered = self._rendered
        now = self._clock()
        stalled = self._stalled(rendered, now)
        pages = rendered.current if rendered.latest.current and not stalled else rendered.identity
        page = pages[openmetrics]
        read_at = rendered.read_at
        # This stall counts already, before a good sample ends it and sampled() keeps it.
        in_a_stall = stalled and read_at is not None
        errors = rendered.latest.sampling_errors + rendered.stalls + int(in_a_stall)
        health = exporter_families(
            rendered.latest.simulated,
            errors,
            # Rounded up: a stalled page never reads an age of 3 intervals or less.
            age_s=None if read_at is None else math.ceil((now - read_at) * 1000) / 1000,
            stalled=stalled,
            recording=None if self.recording is None else self.recording(),
        )
        end = _EOF if openmetrics else b""
        health_parts = render(health, openmetrics=openmetrics)
        if names is not None:
            chosen = [text for series, text in health_parts if series & names]
            return Metrics((page.select(names), *chosen, end))
        tail = b"".join(text for _, text in health_parts) + end
        if gzip:
            return Metrics((page.gzip_head, page.gzip_tail(tail)), gzipped=True)
        return Metrics((page.text, tail))

    def _stalled(self, rendered: _Rendered, now: float) -> bool:
        # Before the first good sample, time runs from the start (reads that keep failing).
        since = self._started if rendered.read_at is None else rendered.read_at
        return is_stale(since, now, self.interval_s)
