"""NvmlSource's health readings against a fake NVML: memory temperature, PCIe replays and
remapped rows (N/A where not supported, the counters read every few seconds), and Xid errors
from NVML's events, never waited for."""

from __future__ import annotations

import pynvml
import pytest

from gpumon.data.model import GpuStats
from gpumon.sources.nvml.health import HEALTH_REFRESH_S, MAX_XID_EVENTS_PER_SAMPLE
from gpumon.sources.nvml.source import NvmlSource
from tests.sources.nvml.test_nvml_source import (
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    FakeClock,
    make_source,
)
from tests.support.fake_nvml import Fail, FakeNvml, make_gpu

HEALTHY = {
    "memory_temperature": 64,
    "pcie_replays": 7,
    "remapped_rows": (3, 1, 1, 0),
    "xid_events": True,
}
HEALTH_FIELDS = (
    "temperature_memory_c",
    "pcie_replays",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failed",
    "xid_last",
    "xid_count",
)


def gpus(source: NvmlSource) -> tuple[GpuStats, ...]:
    return source.sample().gpus


def test_a_board_without_them_reads_na_and_is_not_asked_again() -> None:
    """make_gpu answers NOT_SUPPORTED for every health call (the memory temperature as a GDDR
    board does: the call answers, the field says NOT_SUPPORTED)."""
    fake = FakeNvml([make_gpu(0)])
    clock = FakeClock()
    source = make_source(fake, monotonic=clock)
    for _ in range(4):
        (gpu,) = gpus(source)
        assert {name: getattr(gpu, name) for name in HEALTH_FIELDS} == dict.fromkeys(HEALTH_FIELDS)
        clock.advance(HEALTH_REFRESH_S)
    for function in (
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceRegisterEvents",
    ):
        assert fake.count(function, 0) == 1, function  # remembered as unsupported


def test_readings_and_their_units() -> None:
    fake = FakeNvml([make_gpu(0, **HEALTHY)])
    (gpu,) = gpus(make_source(fake))
    assert gpu.temperature_memory_c == 64
    assert gpu.pcie_replays == 7
    assert (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable) == (3, 1)
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failed) == (True, False)


def test_counters_are_read_every_few_seconds_the_memory_temperature_every_sample() -> None:
    fake = FakeNvml([make_gpu(0, **HEALTHY)])
    clock = FakeClock()
    source = make_source(fake, monotonic=clock)
    gpus(source)
    fake.gpus[0].update(memory_temperature=70, pcie_replays=9, remapped_rows=(4, 1, 0, 0))
    clock.advance(HEALTH_REFRESH_S - 0.5)
    (gpu,) = gpus(source)
    assert (gpu.temperature_memory_c, gpu.pcie_replays, gpu.remapped_rows_correctable) == (
        70,  # every sample: one call that samples nothing over a window
        7,  # repeated between readings
        3,
    )
    clock.advance(0.5)
    (gpu,) = gpus(source)
    assert (gpu.pcie_replays, gpu.remapped_rows_correctable) == (9, 4)
    assert fake.count("nvmlDeviceGetPcieReplayCounter", 0) == 2
    assert fake.count("nvmlDeviceGetRemappedRows", 0) == 2
    assert fake.count("nvmlDeviceGetFieldValues", 0) == 3


def test_a_driver_or_binding_without_the_functions_reads_na() -> None:
    """The C fake NVML (shared/fakenvml) exports none of these: pynvml raises
    FunctionNotFound. A binding without the function at all reads N/A too."""
    fake = FakeNvml(
        [
            make_gpu(
                0,
                memory_temperature=FUNCTION_NOT_FOUND,
                pcie_replays=FUNCTION_NOT_FOUND,
                remapped_rows=FUNCTION_NOT_FOUND,
                xid_events=FUNCTION_NOT_FOUND,
            )
        ]
    )
    clock = FakeClock()
    source = make_source(fake, monotonic=clock)
    for _ in range(3):
        (gpu,) = gpus(source)
        clock.advance(HEALTH_REFRESH_S)
    assert all(getattr(gpu, name) is None for name in HEALTH_FIELDS)
    assert fake.count("nvmlDeviceGetRemappedRows", 0) == 1

    old_binding = FakeNvml([make_gpu(0, **HEALTHY)])
    for name in ("nvmlDeviceGetFieldValues", "nvmlDeviceGetRemappedRows", "nvmlEventSetCreate"):
        setattr(old_binding, name, None)  # as a binding without them: getattr gives None
    source = make_source(old_binding)
    for _ in range(3):
        (gpu,) = gpus(source)
    assert gpu.pcie_replays == 7  # what the binding has is read
    assert (gpu.temperature_memory_c, gpu.remapped_rows_correctable, gpu.xid_last) == (None,) * 3


def test_a_gpu_lost_while_reading_its_health_is_lost_the_others_read_on() -> None:
    fake = FakeNvml([make_gpu(0, **HEALTHY), make_gpu(1, **HEALTHY)])
    fake.gpus[0]["pcie_replays"] = GPU_IS_LOST
    lost, healthy = gpus(make_source(fake))
    assert lost.lost and lost.temperature_memory_c is None
    assert healthy.pcie_replays == 7


def test_xid_errors_are_counted_from_the_third_sample_and_never_waited_for() -> None:
    """Sample 1 touches no event API (a one-shot command pays nothing); sample 2 registers;
    from sample 3 on, 0 until an Xid arrives. Every wait has a timeout of 0."""
    fake = FakeNvml([make_gpu(0, **HEALTHY), make_gpu(1, **HEALTHY)])
    source = make_source(fake)
    assert [gpu.xid_last for gpu in gpus(source)] == [None, None]
    assert fake.event_sets_created == 0 and fake.count("nvmlDeviceRegisterEvents") == 0
    assert [gpu.xid_count for gpu in gpus(source)] == [None, None]
    assert fake.event_sets_created == 1 and fake.count("nvmlDeviceRegisterEvents") == 2
    assert [(gpu.xid_last, gpu.xid_count) for gpu in gpus(source)] == [(0, 0), (0, 0)]
    fake.xid_events += [(1, 13), (1, 79), (0, 48)]
    assert [(gpu.xid_last, gpu.xid_count) for gpu in gpus(source)] == [(48, 1), (79, 2)]
    assert [(gpu.xid_last, gpu.xid_count) for gpu in gpus(source)] == [(48, 1), (79, 2)]
    assert set(fake.event_waits) == {0}
    source.close()
    assert fake.event_sets_freed == 1 and fake.shutdowns == 1


def test_a_single_sample_never_touches_the_event_api() -> None:
    fake = FakeNvml([make_gpu(0, **HEALTHY)])
    source = make_source(fake)
    (gpu,) = gpus(source)
    source.close()
    assert gpu.xid_last is None
    assert (fake.event_sets_created, fake.event_waits, fake.event_sets_freed) == (0, [], 0)


def test_an_xid_storm_is_taken_a_bounded_number_per_sample() -> None:
    fake = FakeNvml([make_gpu(0, **HEALTHY)])
    source = make_source(fake)
    gpus(source)
    gpus(source)
    fake.xid_events += [(0, 13)] * (MAX_XID_EVENTS_PER_SAMPLE + 10)
    (gpu,) = gpus(source)
    assert gpu.xid_count == MAX_XID_EVENTS_PER_SAMPLE
    assert len(fake.event_waits) == MAX_XID_EVENTS_PER_SAMPLE
    (gpu,) = gpus(source)
    assert gpu.xid_count == MAX_XID_EVENTS_PER_SAMPLE + 10


def test_a_gpu_that_refuses_registration_reads_na_the_others_are_watched() -> None:
    fake = FakeNvml([make_gpu(0), make_gpu(1, **HEALTHY)])  # GPU 0: NOT_SUPPORTED
    source = make_source(fake)
    for _ in range(3):
        first, second = gpus(source)
    assert (first.xid_last, second.xid_last) == (None, 0)
    fake.xid_events += [(0, 13), (1, 31)]
    first, second = gpus(source)
    assert (first.xid_last, second.xid_last, second.xid_count) == (None, 31, 1)


@pytest.mark.parametrize(
    ("failure", "watched"),
    [(Fail(pynvml.NVML_ERROR_UNKNOWN), True), (Fail(pynvml.NVML_ERROR_NOT_SUPPORTED), False)],
)
def test_a_failing_wait_is_tried_again_unless_it_is_not_supported(
    failure: Fail, watched: bool
) -> None:
    fake = FakeNvml([make_gpu(0, **HEALTHY)])
    source = make_source(fake)
    for _ in range(3):
        gpus(source)
    fake.xid_events += [failure, (0, 43)]
    (gpu,) = gpus(source)
    assert gpu.xid_count == (0 if watched else None)
    (gpu,) = gpus(source)
    assert (gpu.xid_last, gpu.xid_count) == ((43, 1) if watched else (None, None))
    assert fake.event_sets_freed == (0 if watched else 1)
