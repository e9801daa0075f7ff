"""A sample as Prometheus metric families, and the exporter's own health (docs/prometheus.md).

:class:`SampleCollector` feeds its idle tracker and makes each sample's families once
(:func:`sample_families`); the health (:func:`exporter_families`) depends on the scrape's
time and is made for each. An N/A value, and every reading of a lost GPU, is left out rather
than exported as 0; ``gpumon_gpu_up`` says which GPUs answered.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpumon.commands.export.series import (
    GPU_METRICS,
    add_activity_series,
    add_gpu_series,
    add_mig_series,
    add_usage_series,
    label_value,
    process_name,
)
from gpumon.data.idle import Activity, ProcessKey
from gpumon.data.model import DriverInfo, HostStats, Sample
from gpumon.sampling.idle import IdleTracker
from gpumon.sampling.snapshot import DEFAULT_FREE_THRESHOLD_MIB

# Re-exported: what the exporter serves is asked of this module.
__all__ = [
    "GPU_METRICS",
    "WAITING",
    "Latest",
    "SampleCollector",
    "build_families",
    "exporter_families",
    "label_value",
    "process_name",
    "sample_families",
]

_DEMO_NOTE = " [DEMO: simulated data from gpumon --demo]"
#: What /metrics answers (503) before the first sample has been read.
WAITING = "waiting for the first sample\n"


def build_families(
    sample: Sample | None,
    sampling_errors: int = 0,
    *,
    dcgm_compat: bool = False,
    free_threshold_mib: int = DEFAULT_FREE_THRESHOLD_MIB,
) -> list[Any]:
    """One sample as metric families: :func:`exporter_families` then :func:`sample_families`
    (``sample`` ``None``: the latest read failed). N/A values and lost GPUs' readings have no
    series; one sample tells no idleness (every ``gpumon_process_idle_seconds`` is 0).
    """
    simulated = sample is not None and sample.simulated
    families = exporter_families(simulated, sampling_errors)
    if sample is not None:
        tracker = IdleTracker()
        tracker.observe(sample)
        families += sample_families(
            sample,
            dcgm_compat=dcgm_compat,
            free_threshold_mib=free_threshold_mib,
            activities=tracker.view.processes,
        )
    return families


def exporter_families(
    simulated: bool,
    sampling_errors: int,
    *,
    age_s: float | None = None,
    stalled: bool | None = None,
    recording: bool | None = None,
) -> list[Any]:
    """The exporter's own health, served whatever state sampling is in: ``sampling_errors``
    (failed reads plus stalls), and the sample's age, the stall flag and whether ``--record``
    writes, each left out when ``None``.
    """
    families = _Families(_DEMO_NOTE if simulated else "")
    families.gauge("gpumon_simulated", "1 when the data is simulated (gpumon --demo).")
    families[-1].add_metric([], 1.0 if simulated else 0.0)
    families.counter(
        "gpumon_sampling_errors",
        "Samples that failed, plus one per stall (no good sample for over 3 intervals), "
        "since the exporter started.",
    )
    families[-1].add_metric([], float(sampling_errors))
    # The optional gauges: each is served only where its caller knows its value.
    optional = (
        ("gpumon_sample_age_seconds", "Seconds since the latest good sample was read.",
         None if age_s is None else max(0.0, age_s)),
        ("gpumon_sampler_stalled",
         "1 when no good sample was read for over 3 sampling intervals: GPU, process and "
         "MIG series are left out until sampling recovers.",
         None if stalled is None else float(stalled)),
        ("gpumon_history_recording",
         "1 while export --record writes the history; 0 while it cannot (the exporter's "
         "log says why in one line).",
         None if recording is None else float(recording)),
    )  # fmt: skip
    for name, text, value in optional:
        if value is not None:
            families.gauge(name, text)
            families[-1].add_metric([], value)
    return list(families)


def sample_families(
    sample: Sample,
    *,
    readings: bool = True,
    dcgm_compat: bool = False,
    free_threshold_mib: int = DEFAULT_FREE_THRESHOLD_MIB,
    activities: Mapping[ProcessKey, Activity] | None = None,
) -> list[Any]:
    """What one read sample says, as metric families; ``readings`` False: its identity only (what
    is served once it is too old). ``activities`` (the idle tracker's view) give
    ``gpumon_process_idle_seconds``.
    """
    families = _Families(_DEMO_NOTE if sample.simulated else "")
    host = families.gauge(
        "gpumon_host_info",
        "The machine's host name, as gpumon shows it (value always 1): cluster views name "
        "the node by it.",
        ("hostname",),
    )
    host.add_metric([label_value(sample.host.hostname)], 1.0)
    families.gauge(
        "gpumon_sample_timestamp_seconds", "When the exported sample was taken (Unix time)."
    )
    families[-1].add_metric([], sample.timestamp_s)
    families.gauge("gpumon_sample_duration_seconds", "How long reading the exported sample took.")
    families[-1].add_metric([], sample.duration_s)
    if not readings:
        return list(families)
    if sample.driver is not None:
        info = families.gauge(
            "gpumon_driver_info",
            "Driver, CUDA driver and NVML versions (value always 1).",
            ("driver_version", "cuda_driver_version", "nvml_version"),
        )
        driver = sample.driver
        versions = (driver.driver_version, driver.cuda_driver_version, driver.nvml_version)
        info.add_metric([label_value(version) for version in versions], 1.0)
    add_gpu_series(sample, families.gauge, families.counter)
    add_usage_series(sample, families.gauge, free_threshold_mib)
    add_activity_series(sample, families.gauge, activities or {})
    add_mig_series(sample, families.gauge)
    if dcgm_compat:
        from gpumon.commands.export.dcgm import dcgm_families

        families.extend(dcgm_families(sample, families.note, label_value))
    return list(families)


class _Families(list[Any]):
    """Families in the order they are made; every help text ends with ``note``."""

    def __init__(self, note: str) -> None:
        super().__init__()
        self.note = note

    def gauge(self, name: str, text: str, labels: Iterable[str] = ()) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        self.append(GaugeMetricFamily(name, text + self.note, labels=list(labels)))
        return self[-1]

    def counter(self, name: str, text: str, labels: Iterable[str] = ()) -> Any:
        from prometheus_client.core import CounterMetricFamily

        self.append(CounterMetricFamily(name, text + self.note, labels=list(labels)))
        return self[-1]


@functools.cache
def _every_family(dcgm_compat: bool) -> tuple[Any, ...]:
    """One empty family of each name the collector can yield, for ``describe()``."""
    host = HostStats("", None, None, None, None, None, None)
    empty = Sample(0.0, host, DriverInfo(None, None, None), gpus=())
    return (
        *exporter_families(False, 0, age_s=0.0, stalled=False, recording=False),
        *sample_families(empty, dcgm_compat=dcgm_compat),
    )


@dataclass(frozen=True, slots=True)
class Latest:
    """What the reads so far give, replaced by each read: ``not_ready`` (why nothing is served
    yet), the latest ``sample`` (kept through failed reads), ``current`` (no read failed since),
    its ``families`` and ``identity`` (``readings=False``), and ``sampling_errors``.
    """

    not_ready: str | None = WAITING
    sample: Sample | None = None
    current: bool = False
    families: tuple[Any, ...] = ()
    identity: tuple[Any, ...] = ()
    sampling_errors: int = 0

    @property
    def simulated(self) -> bool:
        """The data is the demo's."""
        return self.sample is not None and self.sample.simulated


class SampleCollector:
    """A prometheus_client collector of the latest sample's families: :meth:`update` builds them
    once per sample, ``collect`` only hands them out. ``latest.not_ready`` says why there is
    nothing to serve (before the first sample, or without a driver): the HTTP side answers 503.
    """

    def __init__(
        self,
        *,
        dcgm_compat: bool = False,
        free_threshold_mib: int = DEFAULT_FREE_THRESHOLD_MIB,
        idle: IdleTracker | None = None,
    ) -> None:
        """``idle`` is fed every sample :meth:`update` gets (the exporter's settings; by
        default gpumon's default rule on a monotonic clock)."""
        self._dcgm_compat = dcgm_compat
        self._free_threshold_mib = free_threshold_mib
        self.idle = idle or IdleTracker()
        #: One reference, replaced by each read: a scrape sees one state.
        self.latest = Latest()

    def update(self, sample: Sample) -> Latest:
        """Expose ``sample`` from the next scrape on; returns the new :attr:`latest`."""
        errors = self.latest.sampling_errors
        self.idle.observe(sample)
        if sample.unavailable is not None and not sample.simulated:
            reason = f"no NVIDIA GPU data: {sample.unavailable.headline}\n"
            self.latest = Latest(reason, sampling_errors=errors)
        else:
            build = functools.partial(
                sample_families,
                sample,
                dcgm_compat=self._dcgm_compat,
                free_threshold_mib=self._free_threshold_mib,
                activities=self.idle.view.processes,
            )
            families, identity = build(), build(readings=False)
            self.latest = Latest(None, sample, True, tuple(families), tuple(identity), errors)
        return self.latest

    def sampling_failed(self) -> Latest:
        """The latest read failed: expose no GPU series rather than stale ones."""
        latest = self.latest
        self.latest = dataclasses.replace(
            latest,
            not_ready=None,
            current=False,
            families=(),
            sampling_errors=latest.sampling_errors + 1,
        )
        return self.latest

    def describe(self) -> Iterator[Any]:
        """Every family name :meth:`collect` can yield: lets ``/metrics?name[]=`` filter."""
        yield from _every_family(self._dcgm_compat)

    def collect(self) -> Iterator[Any]:
        """The exporter's families (without the scrape's time: no age or stall flag) and the
        latest sample's, or only its identity after a failed read."""
        latest = self.latest
        if latest.not_ready is not None:
            return
        yield from exporter_families(latest.simulated, latest.sampling_errors)
        yield from latest.families if latest.current else latest.identity
