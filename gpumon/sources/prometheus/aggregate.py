"""The node list from aggregate PromQL: a refresh's few queries, asked at once, have a few
series per node (and per user on a node) in their answers, however many GPUs each node has.

Each expression is told apart by its ``gpumon_fact`` label, as in the targets query, and is
either evaluated raw or read from the recording rules of contrib/prometheus/gpumon-recording.yml
(:data:`RULES` names them; the YAML is tested to hold these very expressions). A GPU is
counted FREE by the rules of :mod:`gpumon.data.free`; queries and cost: docs/cluster.md.
"""

from __future__ import annotations

from gpumon.sources.prometheus.queries import (
    DCGM_READINGS,
    LOOKBACK,
    _any,
    _fact,
    targets_query,
)

_MIB = 1024 * 1024
_NODE = "instance, job"
_ON_GPU = f"on ({_NODE}, gpu)"
#: No NVML reading is negative or this large (the source's ``_reading`` rule).
_SANE = ">= 0 < 18446744073709551616"
_DCGM_ANY = '{__name__=~"' + "|".join(DCGM_READINGS) + '"}'


def _bytes(metric: str, factor: int = 1) -> str:
    scaled = metric if factor == 1 else f"{metric} * {factor}"
    return f"round({scaled} {_SANE})"


_DCGM_TOTAL = (
    f"{_bytes('DCGM_FI_DEV_FB_TOTAL', _MIB)} or {_ON_GPU} ("
    f"{_bytes('DCGM_FI_DEV_FB_USED', _MIB)} + {_ON_GPU} {_bytes('DCGM_FI_DEV_FB_FREE', _MIB)}"
    f" + {_ON_GPU} ({_bytes('DCGM_FI_DEV_FB_RESERVED', _MIB)} or {_ON_GPU}"
    f" (0 * {_bytes('DCGM_FI_DEV_FB_USED', _MIB)})))"
)
_GPUMON_UTIL = "round(gpumon_gpu_utilization_ratio / 0.01 >= 0 <= 100)"
_DCGM_UTIL = "round(DCGM_FI_DEV_GPU_UTIL >= 0 <= 100)"
#: A GPU whose count of processes is 0, memory in use below the threshold, not lost, and
#: whose MIG instances are readable where MIG is on. ``{threshold}``: bytes.
_FREE_GPUS = (
    "(gpumon_gpu_processes == 0)"
    f" and {_ON_GPU} (gpumon_gpu_memory_used_bytes >= 0 < {{threshold}})"
    f" unless {_ON_GPU} (gpumon_gpu_up == 0)"
    f" unless {_ON_GPU} ((gpumon_gpu_mig_mode > 0 < 18446744073709551616)"
    f" unless {_ON_GPU} gpumon_mig_memory_used_bytes"
    f" unless {_ON_GPU} gpumon_mig_memory_total_bytes)"
)
_PROCESS_MEMORY = f"(gpumon_process_gpu_memory_bytes {_SANE})"

#: Rule name -> expression, per node (``instance, job``) or per user on a node. The free
#: count's ``{threshold}`` is the rules' :data:`RULES_FREE_THRESHOLD_MIB` when recorded.
RULES: dict[str, str] = {
    "instance:gpumon_gpus:count": f"count by ({_NODE}) (gpumon_gpu_info)",
    # Absent where no GPU's processes are known: FREE unknown, never 0.
    "instance:gpumon_gpus_free:count": (
        f"count by ({_NODE}) ({_FREE_GPUS})"
        f" or on ({_NODE}) (0 * count by ({_NODE}) (gpumon_gpu_processes >= 0 <= 1000000))"
    ),
    "instance:gpumon_utilization:mean": (
        f"sum by ({_NODE}) ({_GPUMON_UTIL}) / count by ({_NODE}) ({_GPUMON_UTIL})"
    ),
    "instance:gpumon_utilization:max": f"max by ({_NODE}) ({_GPUMON_UTIL})",
    "instance:gpumon_memory_used_bytes:sum": (
        f"sum by ({_NODE}) ({_bytes('gpumon_gpu_memory_used_bytes')})"
    ),
    "instance:gpumon_memory_total_bytes:sum": (
        f"sum by ({_NODE}) ({_bytes('gpumon_gpu_memory_total_bytes')})"
    ),
    "instance:gpumon_temperature_celsius:max": (
        f"max by ({_NODE}) (round(gpumon_gpu_temperature_celsius {_SANE}))"
    ),
    "instance:gpumon_idle_told:count": f"count by ({_NODE}) (gpumon_process_idle_seconds)",
    # Absent where the data is not simulated: it labels the readings of the same evaluation.
    "instance:gpumon_simulated:max": f"max by ({_NODE}) (gpumon_simulated != 0)",
    # Every user with a process on the node, NaN where none of its memory is known.
    "instance_user:gpumon_process_memory_bytes:sum": (
        f"sum by ({_NODE}, user) {_PROCESS_MEMORY}"
        f" or count by ({_NODE}, user) (gpumon_process_gpu_memory_bytes) * NaN"
    ),
    "instance_user:gpumon_idle_held_bytes:sum": (
        f"sum by ({_NODE}, user) ({_PROCESS_MEMORY}"
        f" and on ({_NODE}, gpu, pid) (gpumon_process_idle_seconds > 0))"
    ),
    "instance:dcgm_gpus:count": (
        f"count by ({_NODE}, Hostname) (count by ({_NODE}, gpu, Hostname) ({_DCGM_ANY}))"
    ),
    "instance:dcgm_utilization:mean": (
        f"sum by ({_NODE}) ({_DCGM_UTIL}) / count by ({_NODE}) ({_DCGM_UTIL})"
    ),
    "instance:dcgm_utilization:max": f"max by ({_NODE}) ({_DCGM_UTIL})",
    "instance:dcgm_memory_used_bytes:sum": (
        f"sum by ({_NODE}) ({_bytes('DCGM_FI_DEV_FB_USED', _MIB)})"
    ),
    "instance:dcgm_memory_total_bytes:sum": f"sum by ({_NODE}) ({_DCGM_TOTAL})",
    "instance:dcgm_temperature_celsius:max": (
        f"max by ({_NODE}) (round(DCGM_FI_DEV_GPU_TEMP {_SANE}))"
    ),
}
#: The free threshold the recorded free counts use; the loaded marker's value says it.
RULES_FREE_THRESHOLD_MIB = 1024
RULES_LOADED = "gpumon:node_rules_loaded"
#: The marker's ``version`` label: the rules of another version (an older file lacks a rule
#: the rows need) are not used, the expressions are.
RULES_VERSION = "2"
#: When the rules were last evaluated: the marker is its group's last rule, and Prometheus
#: evaluates and stores that group's rules one after the other (a selector without a name
#: keeps its concurrent rule evaluation off the group), so that all of them are stored by then.
RULES_EVALUATED = f"timestamp({RULES_LOADED})"

#: Series served once per node, read raw on both paths: its host (by the whole requests
#: only: the lean ones keep it, as the targets' other facts), and the sampler's health: its
#: sample's age (its timestamp where no age is told), and whether it is stalled (only where).
_NODE_SERIES = {
    "node:host": "gpumon_host_info",
    "node:age": f"gpumon_sample_age_seconds or on ({_NODE}) gpumon_sample_timestamp_seconds",
    "node:stalled": "gpumon_sampler_stalled != 0",
}
#: Who named a node and its GPUs within the hour, for nodes serving no GPU now (down, gone);
#: with the rules, its GPUs are the count recorded last (one series per node to read back).
_IDENTITY = {
    "seen_host": (
        f"count by ({_NODE}, hostname) (last_over_time(gpumon_host_info[{LOOKBACK}]))"
        f" unless on ({_NODE}) gpumon_host_info"
    ),
    "seen_gpus": (
        f"count by ({_NODE}) (count by ({_NODE}, gpu)"
        f" (last_over_time(gpumon_gpu_info[{LOOKBACK}])))"
        f" unless on ({_NODE}) gpumon_gpu_info"
    ),
    "seen_dcgm": (
        f"count by ({_NODE}, Hostname) (count by ({_NODE}, gpu, Hostname)"
        f" (last_over_time(DCGM_FI_DEV_GPU_TEMP[{LOOKBACK}])))"
        f" unless on ({_NODE}) DCGM_FI_DEV_GPU_TEMP"
    ),
}
#: (Told apart from the nodes with a count recorded now: one series each, where the GPUs'
#: own series are one per GPU, most of this part's cost.)
_RECORDED_IDENTITY = _IDENTITY | {
    fact: f"last_over_time({count}[{LOOKBACK}]) unless on ({_NODE}) {count}"
    for fact, count in (
        ("seen_gpus", "instance:gpumon_gpus:count"),
        ("seen_dcgm", "instance:dcgm_gpus:count"),
    )
}
#: How many users the fleet's top list holds.
TOP_USERS = 10
#: The fleet's users by the GPU memory their processes hold, and how the rules record it.
USERS_RULE = "user:gpumon_process_memory_bytes:sum"
USERS_EXPRESSION = "sum by (user) (instance_user:gpumon_process_memory_bytes:sum >= 0)"
#: Every user on a node (the node list's filter): most of a refresh's series, asked only
#: with ``users`` (:func:`rows_queries`).
NODE_USERS = "instance_user:gpumon_process_memory_bytes:sum"
#: Each node's user holding the most GPU memory (one of them on a tie; NaN ranks last), and
#: how the rules record it.
TOP_RULE = "instance_user:gpumon_process_memory_bytes:topk1"
TOP_EXPRESSION = f"topk by ({_NODE}) (1, {NODE_USERS})"


def rows_queries(
    free_threshold_mib: int,
    *,
    rules: bool,
    lean: bool = False,
    users: bool = False,
    recorded: bool = False,
) -> list[str]:
    """The queries of a refresh, asked at once: every node's aggregates (with ``rules``: the
    recording rules' series, told apart by their names; not when ``recorded``: those read
    last serve while the rules are not evaluated again) and top user, with ``users`` every
    user on it; the targets' facts (``lean``: their state and latest scrape only) with the
    nodes' own series, the fleet's top users and whether the rules are loaded; and but for a
    ``lean`` refresh, the identities. A node's health is judged on its facts and series of
    one instant: they share a query."""
    asked = {n: e for n, e in RULES.items() if n != NODE_USERS or users}
    if rules:  # most of the answer: one selector, matched by no ``or``
        aggregates = f'{{__name__=~"{"|".join([*asked, TOP_RULE])}"}}'
    else:
        asked[TOP_RULE] = TOP_EXPRESSION.replace(NODE_USERS, f"({RULES[NODE_USERS]})")
        threshold = str(free_threshold_mib * _MIB)
        aggregates = _any([_fact(n, e.replace("{threshold}", threshold)) for n, e in asked.items()])
    facts = [targets_query(lean=lean, recorded=rules)]
    facts.extend(_fact(n, e) for n, e in _NODE_SERIES.items() if not lean or n != "node:host")
    fleet_users = USERS_RULE if rules else f"sum by (user) {_PROCESS_MEMORY}"
    facts.append(_fact("top_user", f"topk({TOP_USERS}, {fleet_users})"))
    facts.append(_fact(RULES_LOADED, RULES_LOADED))
    queries = [_any(facts)] if rules and recorded else [aggregates, _any(facts)]
    if not lean:  # the lean refreshes keep what named the nodes, as their other facts
        identity = _RECORDED_IDENTITY if rules else _IDENTITY
        queries.append(_any([_fact(n, e) for n, e in identity.items()]))
    return queries


def rules_usable(loaded: float | None, free_threshold_mib: int) -> bool:
    """The rules are recorded (their marker's value, None: not of :data:`RULES_VERSION`),
    for the same free threshold as this viewer's."""
    return loaded is not None and loaded == RULES_FREE_THRESHOLD_MIB == free_threshold_mib
