"""The store: the latest sample, bounded history with gaps for N/A, and "the next sample"."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import threading
import tracemalloc
from array import array
from dataclasses import dataclass

import pytest

from gpumon.data.model import DriverInfo, GpuProcess, GpuStats, HostStats, ProcessKind, Sample
from gpumon.sampling.store import (
    GPU_FIELDS,
    MAX_POINTS,
    MIN_POINTS,
    PROCESS_FIELDS,
    Store,
    history_points,
    numeric_fields,
)

GIB = 1024**3
HOST = HostStats("testhost", 12.0, (1.0, 0.5, 0.25), 8 * GIB, 64 * GIB, 0, 4 * GIB, 16)
DRIVER = DriverInfo("550.54.15", "12.4", "12.550.54.15")


def gpu(index: int, **fields: object) -> GpuStats:
    values: dict[str, object] = dict(
        uuid=f"GPU-{index:08x}-aaaa-bbbb-cccc-dddddddddddd",
        temperature_c=50 + index,
        power_draw_w=100.5,
        memory_used_bytes=12 * GIB,
        memory_total_bytes=24 * GIB,
        utilization_gpu_pct=73,
    )
    values.update(fields)
    return GpuStats(index, **values)  # type: ignore[arg-type]


def process(gpu_index: int, pid: int, **fields: object) -> GpuProcess:
    values: dict[str, object] = dict(gpu_memory_bytes=2 * GIB, cpu_pct=99.0, rss_bytes=3 * GIB)
    values.update(fields)
    return GpuProcess(gpu_index, None, pid, ProcessKind.COMPUTE, **values)  # type: ignore[arg-type]


def sample(
    timestamp_s: float, gpus: tuple[GpuStats, ...] = (), processes: tuple[GpuProcess, ...] = ()
) -> Sample:
    return Sample(timestamp_s, HOST, DRIVER, gpus, processes)


def buffers_size(store: Store) -> int:
    """Bytes held by every history buffer (the arrays themselves)."""
    series = [store._timestamps, *store._gpus.values()]
    series += [one._series for one in store._processes.values()]
    return sum(sys.getsizeof(one._values) for one in series)


# -- what has a history --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FutureStats:
    """A model with a field of every kind: only int and float readings have a history."""

    index: int
    fan_rpm: int | None = None
    voltage_v: float | None = None
    throttled: bool | None = None
    name: str | None = None
    reasons: tuple[str, ...] | None = None
    kind: ProcessKind = ProcessKind.COMPUTE
    samples: int = 0


def test_numeric_fields_are_found_from_the_annotations() -> None:
    assert numeric_fields(FutureStats, exclude={"index"}) == ("fan_rpm", "voltage_v", "samples")


def test_every_numeric_reading_of_the_model_has_a_history_and_nothing_else() -> None:
    assert {"temperature_c", "power_draw_w", "energy_j", "memory_used_bytes"} <= set(GPU_FIELDS)
    assert {"performance_state", "ecc_errors_uncorrected_volatile"} <= set(GPU_FIELDS)
    # Keys, flags and text: no history.
    assert not {"index", "uuid", "lost", "mig_mode", "compute_mode", "name"} & set(GPU_FIELDS)
    assert {"gpu_memory_bytes", "cpu_pct", "rss_bytes"} <= set(PROCESS_FIELDS)
    assert not {"gpu_index", "pid", "visible", "user", "kind"} & set(PROCESS_FIELDS)


@pytest.mark.parametrize(
    ("interval_s", "points"),
    [(0.25, 2400), (0.5, 1200), (1.0, 600), (1.5, 400), (2.0, 300), (60.0, 300)],
)
def test_history_covers_ten_minutes_within_fixed_bounds(interval_s: float, points: int) -> None:
    assert history_points(interval_s) == points
    assert MIN_POINTS <= points <= MAX_POINTS
    assert points * interval_s >= min(600, MAX_POINTS * interval_s)


# -- bounds ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_hundred_thousand_pushes_keep_every_buffer_at_capacity_and_memory_flat() -> None:
    store = Store(1.0)
    samples = [
        sample(float(n), (gpu(0, temperature_c=n % 90), gpu(1)), (process(0, 7, cpu_pct=n),))
        for n in range(1000)
    ]
    for n in range(2 * store.capacity):  # full
        store.push(samples[n % 1000])
    size = buffers_size(store)
    tracemalloc.start()
    try:
        store.push(samples[0])  # what tracing sees replaced from here on is traced
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1, 100_000):
            store.push(samples[n % 1000])
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.capacity == 600
    assert len(store.timestamps()) == 600
    assert len(store.gpu_history(0, "temperature_c")) == 600
    assert len(store.process_history((0, 7), "cpu_pct")) == 600
    assert buffers_size(store) == size
    assert grown < 16 * 1024, grown
    # The newest 600, oldest first.
    assert store.timestamps() == [float(n % 1000) for n in range(100_000 - 600, 100_000)]
    assert store.process_history((0, 7), "cpu_pct")[-1] == 99_999 % 1000
    assert store.sequence == 2 * 600 + 100_000


@pytest.mark.slow
def test_process_churn_keeps_only_the_processes_of_the_latest_sample() -> None:
    """16 processes, 4 of them replaced on every poll: 100,000 PIDs go by, memory is flat."""
    store = Store(0.25)
    gpus = (gpu(0),)
    processes = [process(0, pid) for pid in range(100_000 + 16)]

    def churn(n: int) -> Sample:
        return sample(float(n), gpus, tuple(processes[4 * n : 4 * n + 16]))

    tracemalloc.start()
    try:
        for n in range(store.capacity):
            store.push(churn(n))
        before = tracemalloc.get_traced_memory()[0]
        for n in range(store.capacity, 25_000):
            store.push(churn(n))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert sorted(store.process_keys()) == [(0, pid) for pid in range(99_996, 100_012)]
    assert store.process_history((0, 5), "gpu_memory_bytes") == []  # gone long ago
    # The oldest process of the latest sample has been there for 4 samples.
    assert store.process_history((0, 99_996), "gpu_memory_bytes") == [2.0 * GIB] * 4
    assert grown < 16 * 1024, grown


def test_a_process_history_is_its_samples_since_it_appeared() -> None:
    store = Store()
    store.push(sample(1.0, (gpu(0),), (process(0, 1),)))
    store.push(sample(2.0, (gpu(0),), (process(0, 1, cpu_pct=None), process(0, 2, cpu_pct=5.0))))
    store.push(sample(3.0, (gpu(0),), (process(0, 2, cpu_pct=7.5),)))
    assert store.timestamps() == [1.0, 2.0, 3.0]
    # The last two timestamps: the newest as read, the one before it the maximum of its
    # record (PROCESS_POINT_S: both fall in one).
    assert store.process_history((0, 2), "cpu_pct") == [7.5, 7.5]
    assert store.process_history((0, 1), "cpu_pct") == []  # gone: dropped
    store.push(sample(4.0, (gpu(0),), (process(0, 1, cpu_pct=1.0),)))
    assert store.process_history((0, 1), "cpu_pct") == [1.0]  # back: a new history


# -- gaps ------------------------------------------------------------------------------------


def test_na_is_a_gap_never_zero_and_a_real_zero_stays_zero() -> None:
    store = Store()
    store.push(sample(1.0, (gpu(0, temperature_c=61, utilization_gpu_pct=0),)))
    store.push(sample(2.0, (gpu(0, temperature_c=None, utilization_gpu_pct=None),)))
    store.push(sample(3.0, (gpu(0, temperature_c=63, utilization_gpu_pct=0),)))
    assert store.gpu_history(0, "temperature_c") == [61.0, None, 63.0]
    assert store.gpu_history(0, "utilization_gpu_pct") == [0.0, None, 0.0]
    assert store.gpu_history(0, "fan_pct") == [None, None, None]  # never supported


def test_a_lost_gpu_is_all_gaps() -> None:
    store = Store()
    store.push(sample(1.0, (gpu(0), gpu(1))))
    # Even a reading a lost GPU might still carry is not a reading of this instant.
    lost = GpuStats(1, None, lost=True, lost_reason="fell off the bus", memory_total_bytes=GIB)
    store.push(sample(2.0, (gpu(0), lost)))
    store.push(sample(3.0, (gpu(0), gpu(1, temperature_c=70))))
    assert store.gpu_history(1, "temperature_c") == [51.0, None, 70.0]
    assert store.gpu_history(1, "memory_total_bytes") == [24.0 * GIB, None, 24.0 * GIB]
    assert store.gpu_history(0, "temperature_c") == [50.0, 50.0, 50.0]


def test_gpus_that_appear_and_disappear_stay_aligned_with_the_timestamps() -> None:
    store = Store(60.0)  # 300 points
    store.push(sample(1.0, (gpu(0),)))
    store.push(sample(2.0, (gpu(0), gpu(1))))
    store.push(sample(3.0, (gpu(1),)))
    store.push(sample(4.0))  # no driver: no GPU at all
    assert store.gpu_history(0, "temperature_c") == [50.0, 50.0, None, None]
    assert store.gpu_history(1, "temperature_c") == [None, 51.0, 51.0, None]
    assert store.gpu_history(7, "temperature_c") == [None] * 4  # never seen
    assert store.gpu_indices() == [0, 1]
    # Missing for a whole history: nothing of it is left to show, and it is dropped.
    for n in range(store.capacity):
        store.push(sample(5.0 + n, (gpu(1),)))
    assert store.gpu_indices() == [1]
    assert len(store.gpu_history(1, "temperature_c")) == store.capacity


def test_an_unknown_field_is_an_error_naming_the_known_ones() -> None:
    store = Store()
    with pytest.raises(ValueError, match=r"'lost' is not a numeric GpuStats field.*temperature_c"):
        store.gpu_history(0, "lost")
    with pytest.raises(ValueError, match="'pid' is not a numeric GpuProcess field"):
        store.process_history((0, 1), "pid")


# -- what is kept, and how compactly --------------------------------------------------------


def test_a_field_nobody_reads_has_no_buffer() -> None:
    store = Store(gpu_fields=("temperature_c", "power_draw_w"), process_fields=("cpu_pct",))
    store.push(sample(1.0, (gpu(0, temperature_c=61),), (process(0, 7, cpu_pct=12.5),)))
    store.push(sample(2.0, (gpu(0, temperature_c=None),), (process(0, 7, cpu_pct=0.0),)))
    assert store.gpu_fields == ("temperature_c", "power_draw_w")  # the model's order
    assert store.gpu_history(0, "temperature_c") == [61.0, None]
    assert store.gpu_history(0, "power_draw_w") == [100.5, 100.5]
    assert store.process_history((0, 7), "cpu_pct") == [12.5, 0.0]
    # One 4-byte float per kept field and sample, nothing for the others.
    assert len(store._gpus[0]._values) == 2 * 2 and store._gpus[0]._values.itemsize == 4
    assert len(store._processes[(0, 7)]._series._values) == 1  # one record: PROCESS_POINT_S
    with pytest.raises(ValueError, match=r"keeps no history of 'fan_pct'.*temperature_c"):
        store.gpu_history(0, "fan_pct")
    with pytest.raises(ValueError, match="keeps no history of 'rss_bytes'"):
        store.process_history((0, 7), "rss_bytes")
    with pytest.raises(ValueError, match="'lost' is not a numeric GpuStats field"):
        store.gpu_history(0, "lost")
    with pytest.raises(ValueError, match="no history for name, uuid"):
        Store(gpu_fields=("uuid", "temperature_c", "name"))


def test_readings_round_trip_within_float32_precision() -> None:
    """Four-byte floats: counts, percentages, degrees and MHz come back exactly, bytes and
    watts within 1 part in 2**24; an energy counter keeps 8 bytes (it passes 2**24 J in
    hours); timestamps always do."""
    readings = dict(
        temperature_c=87,
        utilization_gpu_pct=99,
        clock_sm_mhz=1980,
        xid_count=16_777_215,
        power_draw_w=312.437,
        memory_used_bytes=141 * 10**9 - 12_345,
        pcie_rx_bytes_per_s=25_123_456_789,
    )
    compact = Store(gpu_fields=readings, process_fields=("gpu_memory_bytes", "cpu_pct"))
    now = 1_790_000_000.123
    compact.push(
        sample(now, (gpu(0, **readings),), (process(0, 7, gpu_memory_bytes=79 * GIB + 4096),))
    )
    for field, value in readings.items():
        (stored,) = compact.gpu_history(0, field)
        assert stored is not None
        assert abs(stored - value) <= abs(value) * 2**-24, field
        if isinstance(value, int) and value < 2**24:
            assert stored == value, field
    (memory,) = compact.process_history((0, 7), "gpu_memory_bytes")
    assert memory is not None and abs(memory - (79 * GIB + 4096)) <= 79 * GIB * 2**-24
    assert compact.timestamps() == [now]
    every = Store()  # every field, energy_j among them: 8-byte floats
    every.push(sample(now, (gpu(0, energy_j=123_456_789_012.5),)))
    assert every.gpu_history(0, "energy_j") == [123_456_789_012.5]


def test_the_dashboards_full_history_of_8_gpus_and_64_processes_fits_in_2_4_mib() -> None:
    """What the dashboard keeps at --interval 0.25 once its ten minutes are full: 2,400
    samples of the graphed fields, 4 bytes each (it was 6.3 MiB with every field)."""
    from gpumon.ui.widgets.graphs import GRAPHED_GPU_FIELDS, GRAPHED_PROCESS_FIELDS

    store = Store(0.25, gpu_fields=GRAPHED_GPU_FIELDS, process_fields=GRAPHED_PROCESS_FIELDS)
    gpus = tuple(gpu(index) for index in range(8))
    processes = tuple(process(n % 8, 1000 + n, sm_utilization_pct=n) for n in range(64))
    for n in range(store.capacity + 10):
        store.push(sample(float(n), gpus, processes))
    per_gpu = sys.getsizeof(store._gpus[0]._values)
    per_process = sys.getsizeof(store._processes[(0, 1000)]._series._values)
    assert store.capacity == 2400
    assert per_gpu <= 2400 * len(GRAPHED_GPU_FIELDS) * 4 + 100  # 66 KiB and a header
    # One record of a process per PROCESS_POINT_S (16 samples): 151 records, 1.8 KiB.
    assert per_process <= 151 * len(GRAPHED_PROCESS_FIELDS) * 4 + 100
    assert buffers_size(store) < 2.4 * 1024**2
    assert store.process_history((0, 1008), "sm_utilization_pct")[-1] == 8.0


def test_a_process_history_keeps_a_record_per_few_seconds_and_every_spike() -> None:
    """512 processes at 0.25 s used to keep 14.7 MB of history; now a process keeps one
    record per PROCESS_POINT_S, the maximum of each field over it, read back one value per
    sample (the newest exactly as read), aligned to the timestamps as before."""
    store = Store(0.25)
    readings = [10.0] * 40
    readings[21] = 95.0  # a spike one sample long
    for n, value in enumerate(readings):
        store.push(sample(float(n), (gpu(0),), (process(0, 1, cpu_pct=value),)))
    history = store.process_history((0, 1), "cpu_pct")
    assert len(history) == 40 and len(store.timestamps()) == 40
    assert max(history) == 95.0  # the spike stays, over its record's 16 samples
    assert history[16:32] == [95.0] * 16 and history[:16] == [10.0] * 16
    assert history[-1] == 10.0  # the newest as read
    assert len(store._processes[(0, 1)]._series) == 3  # records of 16 samples: 40 -> 3


def test_resize_keeps_the_newest_points() -> None:
    store = Store(1.0)
    for n in range(600):
        store.push(sample(float(n), (gpu(0, temperature_c=n),), (process(0, 1, cpu_pct=n),)))
    store.resize(2.0)  # 300 points
    assert store.capacity == 300
    assert store.timestamps() == [float(n) for n in range(300, 600)]
    assert store.gpu_history(0, "temperature_c") == [float(n) for n in range(300, 600)]
    # Records of 4 samples (PROCESS_POINT_S at 1 s), each the maximum of its samples.
    assert store.process_history((0, 1), "cpu_pct") == [float(n | 3) for n in range(300, 600)]
    store.resize(0.25)  # 2400 points: room for more, nothing made up
    store.push(sample(600.0, (gpu(0, temperature_c=600),)))
    assert len(store.timestamps()) == 301
    assert store.gpu_history(0, "temperature_c")[-2:] == [599.0, 600.0]


def test_without_history_only_the_latest_sample_is_kept() -> None:
    store = Store(history=False)
    for n in range(10):
        store.push(sample(float(n), (gpu(0),), (process(0, n),)))
    assert store.capacity == 0 and buffers_size(store) == sys.getsizeof(array("d"))
    assert store.timestamps() == [] and store.process_keys() == []
    assert store.latest is not None and store.latest.timestamp_s == 9.0
    assert store.sequence == 10


# -- subscribers and next_sample ---------------------------------------------------------------


def test_latest_and_subscribers_see_every_sample_once_in_order() -> None:
    store = Store()
    assert store.latest is None and store.sequence == 0
    seen: list[tuple[str, float, float | None]] = []

    def first(new: Sample) -> None:
        # The store is up to date when subscribers are called.
        assert store.latest is new
        seen.append(("first", new.timestamp_s, store.timestamps()[-1]))

    store.subscribe(first)
    store.subscribe(lambda new: seen.append(("second", new.timestamp_s, None)))
    store.push(sample(1.0))
    store.push(sample(2.0))
    assert seen == [
        ("first", 1.0, 1.0),
        ("second", 1.0, None),
        ("first", 2.0, 2.0),
        ("second", 2.0, None),
    ]
    assert store.sequence == 2


async def test_next_sample_is_the_next_one_pushed_never_one_already_there() -> None:
    store = Store()
    store.push(sample(1.0))
    waiting = store.next_sample()
    await asyncio.sleep(0)
    assert not waiting.done()  # sample 1 is older than the call
    store.push(sample(2.0))
    assert (await waiting).timestamp_s == 2.0
    assert store.next_sample() is not waiting


async def test_a_waiter_added_while_a_sample_is_handed_out_gets_the_one_after() -> None:
    store = Store()
    asked: list[asyncio.Future[Sample]] = []
    store.subscribe(lambda new: asked.append(store.next_sample()) if not asked else None)
    store.push(sample(1.0))
    store.push(sample(2.0))
    assert (await asked[0]).timestamp_s == 2.0


async def test_every_waiter_gets_the_sample_and_a_cancelled_one_is_forgotten() -> None:
    store = Store()
    waiters = [store.next_sample() for _ in range(3)]
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(store.next_sample(), 0.01)  # the probe gave up waiting
    store.push(sample(1.0))
    assert [(await waiter).timestamp_s for waiter in waiters] == [1.0] * 3
    # Nothing is kept for the waiter that gave up (the probe asks at most 5 times per step,
    # a dashboard open for days runs many probes).
    assert store._waiters == []


async def test_a_sample_pushed_on_another_thread_resolves_on_the_waiters_loop() -> None:
    store = Store(history=False)
    waiting = store.next_sample()
    resolved_on: list[str] = []
    waiting.add_done_callback(lambda _: resolved_on.append(threading.current_thread().name))
    pusher = threading.Thread(target=store.push, args=(sample(5.0),), name="sampler")
    pusher.start()
    pusher.join()
    assert (await asyncio.wait_for(waiting, 5)).timestamp_s == 5.0
    assert resolved_on == [threading.current_thread().name]


def test_samples_are_frozen_so_latest_is_safe_to_read_from_any_thread() -> None:
    """Readers on other threads only read ``latest``: a whole sample, never changed."""
    store = Store()
    store.push(sample(1.0, (gpu(0),)))
    assert store.latest is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        store.latest.gpus[0].temperature_c = 0  # type: ignore[misc]


def test_a_new_process_on_a_reused_pid_starts_a_history_of_its_own() -> None:
    """PID 7 ended and a new process got the number: its graph is not the old one's."""
    store = Store(1.0)
    gpus = (gpu(0),)
    old = process(0, 7, gpu_memory_bytes=70 * GIB, create_time_s=100.0)
    for n in range(5):
        store.push(sample(float(n), gpus, (old,)))
    new = process(0, 7, gpu_memory_bytes=1 * GIB, create_time_s=104.5)
    store.push(sample(5.0, gpus, (new,)))
    assert store.process_history((0, 7), "gpu_memory_bytes") == [1.0 * GIB]
