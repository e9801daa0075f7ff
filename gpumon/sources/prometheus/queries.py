"""The PromQL the Prometheus source sends, and the series it reads.

gpumon's series names come from the field table, never a copy. No HTTP, no parsing.
"""

from __future__ import annotations

from gpumon.data.fields import FIELDS, Field

#: How far back a node that is down is remembered (its identity, when it was last up).
LOOKBACK = "1h"
_MIB = 1024 * 1024

_FACT = "gpumon_fact"


#: The windows a target's scrape interval is measured over, the longer where the target is
#: older than it: seconds.
WINDOWS = (300, 60)
#: Per target, the moment of each scrape that found it up: the recording rules' series that
#: tells when a target that is down now was last up without a subquery.
UP_RECORDED = "gpumon:target_up_timestamp_seconds"
#: Per target, its scrape interval (:func:`scrape_interval`) as the recording rules record it:
#: most of a whole targets query's cost to Prometheus otherwise (180 ms of 330 at 5,000).
INTERVAL_RECORDED = "gpumon:target_scrape_interval_seconds"


def targets_query(selector: str = "", *, lean: bool = False, recorded: bool = False) -> str:
    """Per target (those matching ``selector``, a PromQL label list): its facts, each told
    apart by the ``gpumon_fact`` label: its latest scrape, and ``up`` only where it is not 1
    (a target scraped is up unless told). ``lean``: those only; ``recorded``: when it was
    last up from :data:`UP_RECORDED`, not a subquery over every target, and its scrape
    interval from :data:`INTERVAL_RECORDED` (most of the query's cost to Prometheus). The
    last time up is told only for a target not up now."""
    up = _selected("up", selector)
    facts = {"up": f"{up} != 1", "scraped": f"timestamp({up})"}
    if not lean:
        last = (
            f"max_over_time({_selected(UP_RECORDED, selector)}[{LOOKBACK}])"
            if recorded
            else f"max_over_time(({up_moments(up)})[{LOOKBACK}:15s])"
        )
        facts["last_up"] = f"{last} unless on (instance, job) ({up} == 1)"
        facts["interval"] = (
            _selected(INTERVAL_RECORDED, selector) if recorded else scrape_interval(up)
        )
    return _any([_fact(fact, expression) for fact, expression in facts.items()])


def scrape_interval(up: str = "up") -> str:
    """Per target, seconds between its scrapes: over the longest window the target is older
    than, the time from the latest scrape at or before the window's start (so that the span
    holds as many intervals as the window's scrapes) to the latest, over those scrapes. The
    scrapes are counted one millisecond short of the window: Prometheus 2's range selector
    holds both its ends, and a scrape at the window's very start (as the recording rules'
    evaluations and scrapes align) is the one before the window."""
    return " or ".join(
        f"((timestamp({up}) - timestamp({up} offset {window}s))"
        f" / count_over_time({up}[{window * 1000 - 1}ms]) > 0)"
        for window in WINDOWS
    )


def _fact(name: str, expression: str) -> str:
    """``expression`` with the label that tells its series apart in a joined answer."""
    return f'label_replace({expression}, "{_FACT}", "{name}", "", "")'


def _any(parts: list[str]) -> str:
    """``parts`` (each a :func:`_fact`, of its own name) joined by ``or`` as a balanced tree:
    Prometheus matches each ``or``'s sides, and a chain matches its growing left side again
    at every part. They are matched on their fact's name alone, which no two parts share:
    hashing every label of every series cost 8 % of the targets' facts at 5,000 nodes."""
    if len(parts) == 1:
        return parts[0]
    half = len(parts) // 2
    return f"({_any(parts[:half])}) or on ({_FACT}) ({_any(parts[half:])})"


def up_moments(up: str = "up") -> str:
    """The moment of each target's latest scrape while it is up (:data:`UP_RECORDED`)."""
    return f"timestamp({up}) and {up} == 1"


def _selected(metric: str, selector: str) -> str:
    return f"{metric}{{{selector}}}" if selector else metric


TARGETS_QUERY = targets_query()


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
    "gpumon_sample_age_seconds",  # with the next: the exporter says its sampler is stuck
    "gpumon_sampler_stalled",
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
    "DCGM_FI_DEV_MEMORY_TEMP": ("temperature_memory_c", 1.0),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replays", 1.0),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", 1.0),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", 1.0),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remapped_rows_failed", 1.0),
    # The last Xid's code (its err_code label too); how many there were, DCGM does not say.
    "DCGM_FI_DEV_XID_ERRORS": ("xid_last", 1.0),
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


def node_queries(matchers: dict[str, str]) -> tuple[str, str, str]:
    """:data:`QUERIES` for the targets whose labels equal ``matchers`` (one node's)."""
    selector = ",".join(f'{label}="{_promql_string(value)}"' for label, value in matchers.items())
    targets = targets_query(selector)
    data = DATA_QUERY[:-1] + f",{selector}}}"
    identity = IDENTITY_QUERY.replace('"}[', f'",{selector}}}[')
    return targets, data, identity


def _promql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
