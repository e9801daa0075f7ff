"""NvmlSource's activity readings: PCIe throughput and its call rate, clock event reasons,
encoder/decoder utilisation, free memory and per-process SM utilisation."""

from __future__ import annotations

import dataclasses
import time

import pynvml
import pytest

from gpumon.data.model import GpuProcess
from gpumon.sources.nvml.device import CLOCK_EVENT_REASONS, PCIE_REFRESH_S, clock_event_names
from tests.sources.nvml.test_nvml_source import (
    EXPECTED_GPU_0,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    NOT_SUPPORTED,
    FakeClock,
    make_source,
    two_gpus,
)
from tests.support.fake_nvml import (
    GIB,
    Fail,
    FakeNvml,
    FakeProcess,
    FakeProcessTable,
    ProcessInfo,
    ProcessUtilizationSample,
    make_gpu,
)

RX, TX = pynvml.NVML_PCIE_UTIL_RX_BYTES, pynvml.NVML_PCIE_UTIL_TX_BYTES
PCIE = "nvmlDeviceGetPcieThroughput"


# -- PCIe throughput: read at most every PCIE_REFRESH_S per GPU --------------------------------


def test_pcie_throughput_is_in_bytes_per_second() -> None:
    fake = FakeNvml([make_gpu(0, pcie_rx=3_000, pcie_tx=7)])  # KB/s

    gpu = make_source(fake).sample().gpus[0]

    assert (gpu.pcie_rx_bytes_per_s, gpu.pcie_tx_bytes_per_s) == (3_000 * 1024, 7 * 1024)


def test_pcie_throughput_is_read_at_most_once_per_refresh_period_per_gpu() -> None:
    """Each call blocks ~20 ms: at a 1 s tick, two calls per GPU every 5 s, not every tick."""
    clock = FakeClock()
    fake = two_gpus()
    source = make_source(fake, monotonic=clock)
    shown: list[tuple[int | None, ...]] = []

    for tick in range(60):
        fake.gpus[0]["pcie_rx"] = 1_000 + tick  # changes every tick; read only when due
        gpus = source.sample().gpus
        shown.append((gpus[0].pcie_rx_bytes_per_s, gpus[1].pcie_rx_bytes_per_s))
        clock.advance(1.0)

    reads = int(60 / PCIE_REFRESH_S)
    for index in (0, 1):
        assert fake.count(PCIE, index, RX) == reads
        assert fake.count(PCIE, index, TX) == reads
    # Between reads the last reading is repeated: ticks 0-4 show tick 0's value, and so on.
    assert [rx for rx, _ in shown] == [(1_000 + tick // 5 * 5) * 1024 for tick in range(60)]
    assert {other for _, other in shown} == {24_000_000 * 1024}
    # Everything else is read every tick.
    assert fake.count("nvmlDeviceGetPowerUsage", 0) == 60


def test_pcie_is_read_again_exactly_when_the_period_is_over() -> None:
    clock = FakeClock()
    fake = FakeNvml([make_gpu(0)])
    source = make_source(fake, monotonic=clock)

    source.sample()
    clock.advance(PCIE_REFRESH_S - 0.001)
    source.sample()
    assert fake.count(PCIE, 0, RX) == 1
    clock.advance(0.001)
    source.sample()
    assert fake.count(PCIE, 0, RX) == 2


def test_pcie_is_read_again_when_the_clock_goes_backwards() -> None:
    """A clock that jumps back must not freeze the reading for good."""
    clock = FakeClock(now=1_000.0)
    fake = FakeNvml([make_gpu(0)])
    source = make_source(fake, monotonic=clock)

    source.sample()
    clock.now = 10.0
    source.sample()

    assert fake.count(PCIE, 0, RX) == 2


def test_a_transient_pcie_error_is_na_until_the_next_read() -> None:
    clock = FakeClock()
    fake = FakeNvml([make_gpu(0, pcie_rx=Fail(pynvml.NVML_ERROR_UNKNOWN), pcie_tx=5)])
    source = make_source(fake, monotonic=clock)

    first = source.sample().gpus[0]
    fake.gpus[0]["pcie_rx"] = 9
    clock.advance(1.0)
    second = source.sample().gpus[0]
    clock.advance(PCIE_REFRESH_S)
    third = source.sample().gpus[0]

    assert (first.pcie_rx_bytes_per_s, first.pcie_tx_bytes_per_s) == (None, 5 * 1024)
    assert second.pcie_rx_bytes_per_s is None
    assert third.pcie_rx_bytes_per_s == 9 * 1024
    assert fake.count(PCIE, 0, RX) == 2


@pytest.mark.parametrize("unsupported", [NOT_SUPPORTED, FUNCTION_NOT_FOUND], ids=["3", "13"])
def test_unsupported_pcie_is_na_and_never_asked_again(unsupported: Fail) -> None:
    clock = FakeClock()
    fake = FakeNvml([make_gpu(0, pcie_rx=unsupported, pcie_tx=unsupported)])
    source = make_source(fake, monotonic=clock)

    for _ in range(4):
        gpu = source.sample().gpus[0]
        assert (gpu.pcie_rx_bytes_per_s, gpu.pcie_tx_bytes_per_s) == (None, None)
        clock.advance(PCIE_REFRESH_S)

    assert fake.count(PCIE, 0) == 2  # RX once, TX once


def test_gpu_lost_while_reading_pcie() -> None:
    clock = FakeClock()
    fake = two_gpus()
    source = make_source(fake, monotonic=clock)
    source.sample()

    fake.gpus[0]["pcie_tx"] = GPU_IS_LOST
    clock.advance(1.0)
    not_due = source.sample()
    clock.advance(PCIE_REFRESH_S)
    due = source.sample()

    assert not_due.gpus[0].lost is False  # not asked: nothing to notice yet
    lost = due.gpus[0]
    assert lost.lost is True
    assert (lost.pcie_rx_bytes_per_s, lost.pcie_tx_bytes_per_s) == (None, None)
    assert due.gpus[1].pcie_rx_bytes_per_s == 24_000_000 * 1024


def test_a_source_told_not_to_read_pcie_never_calls_it() -> None:
    """For modes that do not show it (`gpumon status`): 40 ms per GPU saved on every call."""
    fake = two_gpus()

    gpus = make_source(fake, read_pcie=False).sample().gpus

    assert fake.count(PCIE) == 0
    assert [(gpu.pcie_rx_bytes_per_s, gpu.pcie_tx_bytes_per_s) for gpu in gpus] == [
        (None, None),
        (None, None),
    ]
    assert gpus[0] == dataclasses.replace(
        EXPECTED_GPU_0, pcie_rx_bytes_per_s=None, pcie_tx_bytes_per_s=None
    )


# -- clock event reasons ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, ()),
        (pynvml.nvmlClocksEventReasonGpuIdle, ("gpu_idle",)),
        (
            pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown,
            ("sw_power_cap", "hw_slowdown"),
        ),
        (
            pynvml.nvmlClocksEventReasonAll,
            (
                "gpu_idle",
                "applications_clocks_setting",
                "sw_power_cap",
                "hw_slowdown",
                "sync_boost",
                "sw_thermal_slowdown",
                "hw_thermal_slowdown",
                "hw_power_brake_slowdown",
                "display_clock_setting",
            ),
        ),
        (0x200, ("unknown_0x200",)),
        (
            pynvml.nvmlClocksEventReasonGpuIdle | 0x400 | 1 << 40,
            ("gpu_idle", "unknown_0x400", "unknown_0x10000000000"),
        ),
    ],
    ids=["none", "idle", "power-and-hw", "all-nine", "unknown", "known-and-unknown"],
)
def test_clock_event_reasons_are_names(mask: int, names: tuple[str, ...]) -> None:
    fake = FakeNvml([make_gpu(0, clock_events=mask)])

    assert make_source(fake).sample().gpus[0].clock_event_reasons == names
    assert clock_event_names(mask) == names


def test_clock_event_reason_bits_are_nvmls() -> None:
    """The names' bits are the binding's nvmlClocksEventReason* constants."""
    binding = {
        "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
        "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
        "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
        "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
        "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
        "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        "hw_power_brake_slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        "display_clock_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
    }
    assert {name: bit for bit, name in CLOCK_EVENT_REASONS} == binding


def test_clock_event_reasons_prefer_the_newer_call() -> None:
    fake = FakeNvml([make_gpu(0, clock_events=0x4, clock_throttle=0x1)])
    source = make_source(fake)

    reasons = [source.sample().gpus[0].clock_event_reasons for _ in range(3)]

    assert reasons == [("sw_power_cap",)] * 3
    assert fake.count("nvmlDeviceGetCurrentClocksEventReasons", 0) == 3
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 0


def test_an_older_driver_answers_the_throttle_reasons_call() -> None:
    fake = FakeNvml([make_gpu(0, clock_events=FUNCTION_NOT_FOUND, clock_throttle=0x20)])
    source = make_source(fake)

    reasons = [source.sample().gpus[0].clock_event_reasons for _ in range(3)]

    assert reasons == [("sw_thermal_slowdown",)] * 3
    assert fake.count("nvmlDeviceGetCurrentClocksEventReasons", 0) == 1  # not asked again
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 3


def test_a_binding_without_the_newer_call_reads_throttle_reasons() -> None:
    class OlderBinding(FakeNvml):
        def __getattribute__(self, name: str) -> object:
            if name == "nvmlDeviceGetCurrentClocksEventReasons":
                raise AttributeError(name)
            return super().__getattribute__(name)

    fake = OlderBinding([make_gpu(0, clock_throttle=0x8)])

    assert make_source(fake).sample().gpus[0].clock_event_reasons == ("hw_slowdown",)


def test_clock_event_reasons_unsupported_are_na_not_none_and_never_asked_again() -> None:
    fake = FakeNvml([make_gpu(0, clock_events=NOT_SUPPORTED, clock_throttle=NOT_SUPPORTED)])
    source = make_source(fake)

    reasons = [source.sample().gpus[0].clock_event_reasons for _ in range(3)]

    assert reasons == [None] * 3  # N/A, which is not () ("nothing holds the clocks down")
    assert fake.count("nvmlDeviceGetCurrentClocksEventReasons", 0) == 1
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 1


def test_a_transient_clock_event_reasons_error_does_not_fall_back() -> None:
    fake = FakeNvml([make_gpu(0, clock_events=Fail(pynvml.NVML_ERROR_UNKNOWN))])
    source = make_source(fake)

    first = source.sample().gpus[0].clock_event_reasons
    fake.gpus[0]["clock_events"] = 0x1
    second = source.sample().gpus[0].clock_event_reasons

    assert (first, second) == (None, ("gpu_idle",))
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 0


# -- encoder, decoder, graphics clock, free memory -----------------------------------------------


def test_encoder_and_decoder_are_the_percentage_not_the_sampling_period() -> None:
    fake = FakeNvml([make_gpu(0, encoder=[37, 167_000], decoder=[100, 1_000_000])])

    gpu = make_source(fake).sample().gpus[0]

    assert (gpu.utilization_encoder_pct, gpu.utilization_decoder_pct) == (37, 100)


def test_graphics_clock_is_its_own_reading() -> None:
    fake = FakeNvml([make_gpu(0, clock_graphics=1095, clock_sm=1980)])

    gpu = make_source(fake).sample().gpus[0]

    assert (gpu.clock_graphics_mhz, gpu.clock_sm_mhz) == (1095, 1980)
    assert fake.count("nvmlDeviceGetClockInfo", 0, pynvml.NVML_CLOCK_GRAPHICS) == 1


def test_free_memory_is_v2s_free_not_total_minus_used() -> None:
    """v2's free leaves reserved memory out: total = reserved + used + free."""
    gpu = make_source(FakeNvml([make_gpu(0)])).sample().gpus[0]

    assert gpu.memory_free_bytes is not None
    assert gpu.memory_reserved_bytes is not None and gpu.memory_used_bytes is not None
    assert gpu.memory_total_bytes == (
        gpu.memory_reserved_bytes + gpu.memory_used_bytes + gpu.memory_free_bytes
    )


def test_free_memory_from_v1_is_total_minus_used() -> None:
    fake = FakeNvml([make_gpu(0, memory_v2=FUNCTION_NOT_FOUND)])

    gpu = make_source(fake).sample().gpus[0]

    assert gpu.memory_total_bytes is not None and gpu.memory_used_bytes is not None
    assert gpu.memory_free_bytes == gpu.memory_total_bytes - gpu.memory_used_bytes
    assert gpu.memory_reserved_bytes is None


# -- per-process SM utilisation ------------------------------------------------------------------


def busy_gpu(samples: list[ProcessUtilizationSample]) -> tuple[FakeNvml, FakeProcessTable]:
    """PIDs 100 and 101 compute, 102 graphics; samples as given."""
    fake = FakeNvml(
        [
            make_gpu(
                0,
                compute_processes=[ProcessInfo(100, GIB), ProcessInfo(101, GIB)],
                graphics_processes=[ProcessInfo(102, GIB)],
                process_utilization=samples,
            )
        ]
    )
    return fake, FakeProcessTable(FakeProcess(100), FakeProcess(101), FakeProcess(102))


def sm(processes: tuple[GpuProcess, ...]) -> dict[int, int | None]:
    return {process.pid: process.sm_utilization_pct for process in processes}


def test_the_latest_sample_per_pid_is_shown() -> None:
    fake, table = busy_gpu(
        [
            ProcessUtilizationSample(pid=100, timeStamp=2_000, smUtil=55),
            ProcessUtilizationSample(pid=100, timeStamp=1_000, smUtil=30),
            ProcessUtilizationSample(pid=101, timeStamp=1_500, smUtil=70),
            ProcessUtilizationSample(pid=999, timeStamp=2_500, smUtil=90),  # not running
        ]
    )

    processes = make_source(fake, table).sample().processes

    assert sm(processes) == {100: 55, 101: 70, 102: None}  # 102: graphics, no sample: N/A
    assert fake.count("nvmlDeviceGetProcessUtilization", 0, 0) == 1  # every sample, first


def test_each_call_asks_only_for_samples_newer_than_the_newest_seen() -> None:
    fake, table = busy_gpu([ProcessUtilizationSample(pid=100, timeStamp=2_000, smUtil=55)])
    source = make_source(fake, table)

    first = source.sample().processes
    second = source.sample().processes  # nothing new: NVML answers NOT_FOUND
    fake.gpus[0]["process_utilization"] = [
        ProcessUtilizationSample(pid=100, timeStamp=2_000, smUtil=55),
        ProcessUtilizationSample(pid=101, timeStamp=3_000, smUtil=12),
    ]
    third = source.sample().processes

    assert sm(first) == {100: 55, 101: 0, 102: None}
    assert sm(second) == {100: 0, 101: 0, 102: None}  # no new sample: idle, not the old one
    assert sm(third) == {100: 0, 101: 12, 102: None}
    assert fake.count("nvmlDeviceGetProcessUtilization", 0, 0) == 1
    assert fake.count("nvmlDeviceGetProcessUtilization", 0, 2_000) == 2
    assert fake.count("nvmlDeviceGetProcessUtilization", 0, 3_000) == 0
    source.sample()
    assert fake.count("nvmlDeviceGetProcessUtilization", 0, 3_000) == 1


@pytest.mark.parametrize(("age_s", "held"), [(0.5, True), (5.0, False)])
def test_a_window_without_a_new_sample_keeps_a_recent_one(age_s: float, held: bool) -> None:
    """Polling faster than NVML samples (every second or so): a busy job does not flicker to
    0 % in the windows between its samples; a sample older than the hold is no longer its
    value."""
    stamp = int((time.time() - age_s) * 1e6)  # NVML's timestamps: µs since the epoch
    fake, table = busy_gpu([ProcessUtilizationSample(pid=100, timeStamp=stamp, smUtil=95)])
    source = make_source(fake, table)

    first = source.sample().processes
    second = source.sample().processes  # nothing new: NVML answers NOT_FOUND

    assert sm(first)[100] == 95
    assert sm(second)[100] == (95 if held else 0)
    assert sm(second)[101] == 0  # no sample ever: idle


def test_samples_older_than_asked_for_are_ignored() -> None:
    """A driver that returns its whole buffer must not show a finished burst as current."""
    fake, table = busy_gpu([ProcessUtilizationSample(pid=100, timeStamp=2_000, smUtil=55)])
    fake.honours_last_seen = False
    source = make_source(fake, table)

    first, second = source.sample().processes, source.sample().processes

    assert sm(first)[100] == 55
    assert sm(second)[100] == 0


@pytest.mark.parametrize(("reported", "shown"), [(371, 100), (100, 100), (0, 0)])
def test_process_sm_utilization_is_clamped_to_0_100(reported: int, shown: int) -> None:
    fake, table = busy_gpu([ProcessUtilizationSample(pid=100, timeStamp=1, smUtil=reported)])

    assert sm(make_source(fake, table).sample().processes)[100] == shown


@pytest.mark.parametrize("unsupported", [NOT_SUPPORTED, FUNCTION_NOT_FOUND], ids=["3", "13"])
def test_process_utilization_unsupported_is_na_and_never_asked_again(unsupported: Fail) -> None:
    """MIG GPUs do not support it: N/A, not 0 %."""
    fake, table = busy_gpu([])
    fake.gpus[0]["process_utilization"] = unsupported
    source = make_source(fake, table)

    samples = [source.sample() for _ in range(3)]

    for sample in samples:
        assert sm(sample.processes) == {100: None, 101: None, 102: None}
        assert sample.gpus[0].processes_error is None  # the list itself is known
    assert fake.count("nvmlDeviceGetProcessUtilization", 0) == 1


def test_no_processes_no_utilization_call() -> None:
    fake = FakeNvml([make_gpu(0, process_utilization=[ProcessUtilizationSample(5, 1, 50)])])

    sample = make_source(fake).sample()

    assert sample.processes == ()
    assert fake.count("nvmlDeviceGetProcessUtilization") == 0


def test_a_lost_gpu_during_process_utilization_has_no_processes_and_the_others_do() -> None:
    fake = FakeNvml(
        [
            make_gpu(
                index,
                compute_processes=[ProcessInfo(100 + index, GIB)],
                process_utilization=[ProcessUtilizationSample(100 + index, 10, 40 + index)],
            )
            for index in range(2)
        ]
    )
    fake.gpus[0]["process_utilization"] = GPU_IS_LOST
    table = FakeProcessTable(FakeProcess(100), FakeProcess(101))

    sample = make_source(fake, table).sample()

    assert sample.gpus[0].lost is True
    assert sample.processes_on(0) == ()
    assert sm(sample.processes_on(1)) == {101: 41}


def test_a_clock_stepped_back_does_not_read_busy_jobs_as_idle() -> None:
    """NVML's sample timestamps follow the wall clock: after a step back of an hour, asking
    for samples newer than the old newest got none for that hour (0 % SM, then IDLE)."""
    now_us = int(time.time() * 1e6)
    before_step = now_us + 3600 * 10**6  # what the clock said an hour "ahead"
    fake, table = busy_gpu([ProcessUtilizationSample(pid=100, timeStamp=before_step, smUtil=97)])
    source = make_source(fake, table)
    source.sample()
    fake.gpus[0]["process_utilization"] = [
        ProcessUtilizationSample(pid=100, timeStamp=before_step, smUtil=97),
        ProcessUtilizationSample(pid=100, timeStamp=now_us, smUtil=96),
    ]

    processes = source.sample().processes

    assert sm(processes)[100] == 96
