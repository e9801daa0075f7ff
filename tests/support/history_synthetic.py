"""A month (or any number of days) of a busy 8-GPU server's history, written straight into the
history database's tables in seconds, with what a report must say computed by hand beside it
(``tests/sampling/history/test_history_usage.py`` checks one against the other; the benchmark
times it).

The server: 8 GPUs x 64 process slots. Slot ``p`` of GPU ``g`` belongs to user ``u00`` to
``u15`` (``(64 g + p) % 16``), Slurm job ``g * 8 + p // 8`` (eight slots a job), container
``c0`` to ``c2`` (or none when ``p % 4 == 3``); it runs every hour but one in six
(``(hour + p) % 6 == 0``: not listed), at ``p % 10`` % SM, holding ``(p % 8 + 1)`` GiB; a slot
with ``p % 10 == 0`` is IDLE. A holder's row for an hour follows the writer's rules: held the
whole hour when one of its processes runs, used by the sum of their SM (at most 1), held idle
when one of them is IDLE and none of the others holds memory without being IDLE (here every
process holds at least 1 GiB). Each slot's process restarts every day: one session a day.
GPU minute rows: one a minute, 6 samples each.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpumon.data.usage import GROUPINGS
from gpumon.sampling.history.schema import DAY_S, HISTORY_FIELDS, HOUR_S, SCHEMA_VERSION, create

GIB = 1024**3
GPUS = 8
SLOTS = 64
USERS = 16


def uuid(gpu: int) -> str:
    return f"GPU-{gpu:08x}-1111-2222-3333-444444444444"


def keys(gpu: int, slot: int, jobs_per_gpu: int = 8) -> tuple[str, str, str, str]:
    """The slot's key in each grouping: user, job, container, GPU (``''`` for none)."""
    container = "" if slot % 4 == 3 else f"c{slot % 4}"
    job = str(gpu * jobs_per_gpu + slot * jobs_per_gpu // SLOTS)
    return (f"u{(SLOTS * gpu + slot) % USERS:02d}", job, container, "")


def running(hour: int, slot: int) -> bool:
    return (hour + slot) % 6 != 0


@dataclass
class Expected:
    """What the rows add up to, per grouping and key: hours held, used, held idle (whole
    hours only: :meth:`totals` sums a range of them), peak memory."""

    # (grouping, key, hour index) -> (held_s, used_s, idle_s, peak)
    hours: dict[tuple[int, str, int], list[float]] = field(default_factory=dict)

    def totals(self, by: str, first_hour: int, hours: int) -> dict[str, tuple[float, ...]]:
        grouping = GROUPINGS.index(by)
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        for (kind, key, hour), (held, used, idle, peak) in self.hours.items():
            if kind == grouping and first_hour <= hour < first_hour + hours:
                total = sums[key]
                total[0] += held / HOUR_S
                total[1] += used / HOUR_S
                total[2] += idle / HOUR_S
                total[3] = max(total[3], peak)
        return {key: tuple(values) for key, values in sums.items()}


def usage_rows(
    start_s: int, days: int, expected: Expected | None, jobs_per_gpu: int = 8
) -> Iterator[tuple[object, ...]]:
    """The ``usage_hours`` rows, filling ``expected`` (when given) as they go."""
    for hour in range(days * 24):
        hour_start = start_s + hour * HOUR_S
        for gpu in range(GPUS):
            holders: dict[tuple[int, str], list[float]] = {}
            for slot in range(SLOTS):
                if not running(hour, slot):
                    continue
                idle = 1.0 if slot % 10 == 0 else 0.0
                for grouping, key in enumerate(keys(gpu, slot, jobs_per_gpu)):
                    # used, any idle, any in use without being idle, peak
                    holder = holders.setdefault((grouping, key), [0.0, 0.0, 0.0, 0.0])
                    holder[0] += (slot % 10) / 100
                    holder[1] = max(holder[1], idle)
                    holder[2] = max(holder[2], 1.0 - idle)
                    holder[3] = max(holder[3], (slot % 8 + 1) * GIB)
            for (grouping, key), (used, idle, in_use, peak) in holders.items():
                row = [HOUR_S, min(1.0, used) * HOUR_S, HOUR_S * idle * (1 - in_use), peak]
                if expected is None:
                    yield (grouping, hour_start, gpu + 1, key, *row)
                    continue
                owner = uuid(gpu) if grouping == GROUPINGS.index("gpu") else key
                found = expected.hours.setdefault((grouping, owner, hour), [0.0, 0.0, 0.0, 0.0])
                for position in range(3):
                    found[position] += row[position]
                found[3] = max(found[3], peak)
                yield (grouping, hour_start, gpu + 1, key, *row)


def sessions(start_s: int, days: int, jobs_per_gpu: int = 8) -> Iterator[tuple[object, ...]]:
    for day in range(days):
        for gpu in range(GPUS):
            for slot in range(SLOTS):
                user, job, container, _ = keys(gpu, slot, jobs_per_gpu)
                first = start_s + day * DAY_S + slot * 60
                yield (
                    gpu + 1,
                    10_000 + slot,
                    first - 5.0,
                    user,
                    job,
                    container or None,
                    f"python slot_{slot}.py",
                    None,
                    None,
                    first,
                    start_s + (day + 1) * DAY_S - 1,
                    (slot % 8 + 1) * GIB,
                    (slot % 8 + 1) * GIB,
                )


def session_counts(start_s: int, days: int, by: str, period: tuple[float, float]) -> dict:
    """How many sessions of each key overlap ``period``."""
    counts: dict[str, int] = defaultdict(int)
    grouping = GROUPINGS.index(by)
    for row in sessions(start_s, days):
        gpu, first, last = int(str(row[0])) - 1, float(str(row[9])), float(str(row[10]))
        if last >= period[0] and first < period[1]:
            key = uuid(gpu) if by == "gpu" else keys(gpu, int(str(row[1])) - 10_000)[grouping]
            counts[key] += 1
    return counts


def minute_rows(start_s: int, days: int) -> Iterator[tuple[object, ...]]:
    for minute in range(days * 24 * 60):
        for gpu in range(GPUS):
            utilization = float((minute + gpu) % 100)
            values: list[float] = [
                utilization,
                utilization + 0.5,
                40.0 * GIB,
                41.0 * GIB,
                250.5,
                300.0,
                61.5,
                64.0,
                15030.0,
                15030.0,
            ]
            yield (start_s + minute * 60, gpu + 1, 6, *values)


def fill(
    connection: sqlite3.Connection,
    start_s: int,
    days: int,
    *,
    minutes: bool = True,
    jobs_per_gpu: int = 8,
    expected: bool = True,
    version: int = SCHEMA_VERSION,
) -> Expected:
    """Write ``days`` days from ``start_s`` (a whole day) into an empty database of schema
    ``version``; what a report must say (empty without ``expected``: a benchmark's year
    would not fit). Usage rows leave ``known_s`` NULL (as a version-1 recorder did)."""
    create(connection, target=version)
    sums = Expected()
    connection.execute("BEGIN")
    connection.executemany(
        "INSERT INTO gpus (id, uuid, gpu_index, name) VALUES (?, ?, ?, 'NVIDIA H100')",
        [(gpu + 1, uuid(gpu), gpu) for gpu in range(GPUS)],
    )
    connection.executemany(
        "INSERT INTO usage_hours (grouping, start_s, gpu_id, key, held_s, used_s, idle_held_s, "
        "peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        usage_rows(start_s, days, sums if expected else None, jobs_per_gpu),
    )
    connection.executemany(
        "INSERT INTO sessions (gpu_id, pid, create_time_s, user, job_id, container_id, "
        "command, gpu_instance_id, compute_instance_id, first_seen_s, last_seen_s, "
        "memory_bytes, peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        sessions(start_s, days, jobs_per_gpu),
    )
    if minutes:
        columns = ", ".join(f"{name}_mean, {name}_max" for name in HISTORY_FIELDS)
        connection.executemany(
            f"INSERT INTO gpu_minutes (start_s, gpu_id, samples, {columns}) "
            f"VALUES ({', '.join('?' * (3 + 2 * len(HISTORY_FIELDS)))})",
            minute_rows(start_s, days),
        )
    end = start_s + days * DAY_S
    connection.executemany(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
        [("first_sample_s", start_s), ("last_sample_s", end - 10), ("interval_s", 10.0)],
    )
    connection.execute("COMMIT")
    return sums
