"""NvmlSource against a fake NVML: every field, NOT_SUPPORTED, lost GPUs, broken drivers."""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

import pynvml
import pytest

from gpumon.data.free import free_gpu_indices
from gpumon.data.model import GpuStats, HostStats, ProcessKind, UnavailableReason
from gpumon.sources.host.inspector import ProcessInspector
from gpumon.sources.nvml.errors import PROCESSES_NOT_SUPPORTED
from gpumon.sources.nvml.processes import IMPOSSIBLE_PID
from gpumon.sources.nvml.settings import SETTINGS_REFRESH_S
from gpumon.sources.nvml.source import NvmlSource
from tests.support.fake_nvml import (
    GIB,
    MIB,
    Fail,
    FakeNvml,
    FakeProcess,
    FakeProcessTable,
    MemoryV2,
    PciInfo,
    ProcessInfo,
    Utilization,
    make_gpu,
    user_name,
)

HOST = HostStats(
    hostname="gpu-box",
    cpu_pct=12.5,
    load_average=(1.0, 0.5, 0.25),
    memory_used_bytes=8 * GIB,
    memory_total_bytes=64 * GIB,
    swap_used_bytes=0,
    swap_total_bytes=GIB,
    cpu_count=16,
)
NOW = 5_000.0
MY_UID = 1000

NOT_SUPPORTED = Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
FUNCTION_NOT_FOUND = Fail(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
GPU_IS_LOST = Fail(pynvml.NVML_ERROR_GPU_IS_LOST)


class FakeClock:
    """A monotonic clock that moves only when a test moves it."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_source(
    fake: FakeNvml,
    processes: FakeProcessTable | None = None,
    *,
    monotonic: FakeClock | None = None,
    read_pcie: bool = True,
) -> NvmlSource:
    """A source over ``fake``; its monotonic clock stands still unless one is given, so PCIe
    throughput is read on the first sample only."""
    inspector = ProcessInspector(
        process_factory=processes or FakeProcessTable(),  # type: ignore[arg-type]
        current_uid=MY_UID,
        clock=lambda: NOW,
    )
    return NvmlSource(
        nvml=fake,
        inspector=inspector,
        host_sampler=lambda: HOST,
        clock=lambda: NOW,
        monotonic=monotonic or FakeClock(),
        read_pcie=read_pcie,
    )


def two_gpus() -> FakeNvml:
    """GPU 0 answers in str (nvidia-ml-py >= 11.5), GPU 1 in bytes (older bindings)."""
    return FakeNvml(
        [
            make_gpu(0),
            make_gpu(
                1,
                uuid=b"GPU-b1b1b1b1-0000-0000-0000-000000000001",
                name=b"NVIDIA A100-SXM4-40GB",
                pci=PciInfo(busId=b"00000000:3B:00.0", busIdLegacy=b"0000:3B:00.0"),
                memory_v2=MemoryV2(
                    total=40 * GIB, reserved=300 * MIB, free=724 * MIB, used=39 * GIB
                ),
                # Never asked: MIG is on (below), which has no device-level utilisation.
                utilization=Utilization(gpu=100, memory=87),
                encoder=[100, 200_000],
                decoder=[0, 200_000],
                pcie_rx=24_000_000,  # KB/s
                pcie_tx=0,
                power=61_500,
                power_limit=400_000,
                energy=12_345_678_901,  # mJ
                persistence=pynvml.NVML_FEATURE_DISABLED,
                display=pynvml.NVML_FEATURE_ENABLED,
                pstate=pynvml.NVML_PSTATE_8,
                compute_mode=pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
                mig=[pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE],
                fan=100,
                temperature=83,
                temperature_slowdown=90,
                temperature_shutdown=95,
                clock_graphics=1410,
                clock_sm=1410,
                clock_memory=1215,
                # SW power cap and HW thermal slowdown
                clock_events=pynvml.nvmlClocksEventReasonSwPowerCap
                | pynvml.nvmlClocksEventReasonHwThermalSlowdown,
                ecc_uncorrected_volatile=3,
            ),
        ],
        driver_version=b"550.54.15",
        cuda_driver_version=12040,
        nvml_version=b"12.550.54.15",
    )


EXPECTED_GPU_0 = GpuStats(
    index=0,
    uuid="GPU-00000000-1111-2222-3333-444455556666",
    name="NVIDIA H100 80GB HBM3",
    pci_bus_id="00000000:18:00.0",
    lost=False,
    persistence_mode=True,
    display_active=False,
    performance_state=0,
    fan_pct=30,
    temperature_c=50,
    temperature_slowdown_c=87,
    temperature_shutdown_c=92,
    power_draw_w=150.25,
    power_limit_w=700.0,
    energy_j=86_400_000.0,
    memory_used_bytes=1000 * MIB,  # v2: reserved memory is not counted as used
    memory_total_bytes=80 * GIB,
    memory_free_bytes=80 * GIB - 1500 * MIB,
    memory_reserved_bytes=500 * MIB,
    utilization_gpu_pct=40,
    utilization_memory_pct=20,
    utilization_encoder_pct=0,
    utilization_decoder_pct=10,
    pcie_rx_bytes_per_s=1_500_000 * 1024,  # NVML's KB/s are KiB/s
    pcie_tx_bytes_per_s=250_000 * 1024,
    clock_graphics_mhz=1755,
    clock_sm_mhz=1980,
    clock_memory_mhz=2619,
    clock_event_reasons=(),
    compute_mode="Default",
    ecc_errors_uncorrected_volatile=0,
    mig_mode=False,
)

EXPECTED_GPU_1 = GpuStats(
    index=1,
    uuid="GPU-b1b1b1b1-0000-0000-0000-000000000001",
    name="NVIDIA A100-SXM4-40GB",
    pci_bus_id="00000000:3B:00.0",
    lost=False,
    persistence_mode=False,
    display_active=True,
    performance_state=8,
    fan_pct=100,
    temperature_c=83,
    temperature_slowdown_c=90,
    temperature_shutdown_c=95,
    power_draw_w=61.5,
    power_limit_w=400.0,
    energy_j=12_345_678.901,
    memory_used_bytes=39 * GIB,
    memory_total_bytes=40 * GIB,
    memory_free_bytes=724 * MIB,
    memory_reserved_bytes=300 * MIB,
    utilization_gpu_pct=None,  # MIG mode: N/A, whatever the driver would answer
    utilization_memory_pct=None,
    utilization_encoder_pct=100,
    utilization_decoder_pct=0,
    pcie_rx_bytes_per_s=24_000_000 * 1024,
    pcie_tx_bytes_per_s=0,
    clock_graphics_mhz=1410,
    clock_sm_mhz=1410,
    clock_memory_mhz=1215,
    clock_event_reasons=("sw_power_cap", "hw_thermal_slowdown"),
    compute_mode="Exclusive Process",
    ecc_errors_uncorrected_volatile=3,
    mig_mode=True,
)

# Readings a lost GPU must not show (everything but its identity).
IDENTITY = {"index", "uuid", "name", "pci_bus_id", "lost", "lost_reason"}
READINGS = [f.name for f in dataclasses.fields(GpuStats) if f.name not in IDENTITY]


# -- 1. every field ----------------------------------------------------------------------------


def test_every_field_is_read_exactly() -> None:
    source = make_source(two_gpus())

    sample = source.sample()

    assert sample.gpus == (EXPECTED_GPU_0, EXPECTED_GPU_1)
    assert sample.host == HOST
    assert sample.timestamp_s == NOW
    assert sample.simulated is False
    assert sample.unavailable is None
    assert source.unavailable is None


def test_driver_versions_are_decoded_and_cuda_is_dotted() -> None:
    sample = make_source(two_gpus()).sample()

    assert sample.driver is not None
    assert sample.driver.driver_version == "550.54.15"
    assert sample.driver.cuda_driver_version == "12.4"
    assert sample.driver.nvml_version == "12.550.54.15"


@pytest.mark.parametrize(
    ("reported", "shown"),
    [(12040, "12.4"), (11080, "11.8"), (12020, "12.2"), (13000, "13.0"), (0, None)],
)
def test_cuda_driver_version(reported: int, shown: str | None) -> None:
    fake = FakeNvml([make_gpu(0)], cuda_driver_version=reported)

    driver = make_source(fake).sample().driver

    assert driver is not None
    assert driver.cuda_driver_version == shown


def test_a_failing_system_call_leaves_only_that_version_unknown() -> None:
    fake = FakeNvml([make_gpu(0)], cuda_driver_version=FUNCTION_NOT_FOUND)

    driver = make_source(fake).sample().driver

    assert driver is not None
    assert driver.cuda_driver_version is None
    assert driver.driver_version == "535.183.01"


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        (pynvml.NVML_COMPUTEMODE_DEFAULT, "Default"),
        (pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD, "Exclusive Thread"),
        (pynvml.NVML_COMPUTEMODE_PROHIBITED, "Prohibited"),
        (pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, "Exclusive Process"),
    ],
)
def test_compute_mode_names(mode: int, shown: str) -> None:
    gpu = make_source(FakeNvml([make_gpu(0, compute_mode=mode)])).sample().gpus[0]

    assert gpu.compute_mode == shown


def test_mig_mode_is_the_current_mode_not_the_pending_one() -> None:
    """Enabling MIG takes effect only after a GPU reset: until then it is still off."""
    mig = [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    assert make_source(FakeNvml([make_gpu(0, mig=mig)])).sample().gpus[0].mig_mode is False


def test_unknown_performance_state_is_not_a_number() -> None:
    fake = FakeNvml([make_gpu(0, pstate=pynvml.NVML_PSTATE_UNKNOWN)])

    assert make_source(fake).sample().gpus[0].performance_state is None


def test_handles_are_fetched_once_not_every_tick() -> None:
    fake = two_gpus()
    source = make_source(fake)

    for _ in range(3):
        source.sample()

    assert fake.count("nvmlDeviceGetHandleByIndex", 0) == 1
    assert fake.count("nvmlDeviceGetHandleByIndex", 1) == 1
    assert fake.count("nvmlDeviceGetPowerUsage", 0) == 3


def test_close_shuts_nvml_down_once() -> None:
    fake = two_gpus()
    source = make_source(fake)
    source.sample()

    source.close()
    source.close()

    assert fake.shutdowns == 1


def test_nvml_is_initialised_on_the_first_sample_not_on_construction() -> None:
    """The dashboard builds its source on the event loop: nvmlInit (seconds without
    persistence mode) must wait for the first sample, which runs on the poller thread."""
    fake = two_gpus()
    source = make_source(fake)
    assert not fake.initialised
    source.close()  # never started: nothing to shut down
    assert fake.shutdowns == 0
    assert len(make_source(fake).sample().gpus) == 2


# -- 2. NOT_SUPPORTED field by field, remembered -------------------------------------------------

# fake field, the NVML call (and arguments) behind it, the GpuStats fields it feeds
PER_TICK_FIELDS: list[tuple[str, str, tuple[Any, ...], tuple[str, ...]]] = [
    (
        "utilization",
        "nvmlDeviceGetUtilizationRates",
        (),
        ("utilization_gpu_pct", "utilization_memory_pct"),
    ),
    ("power", "nvmlDeviceGetPowerUsage", (), ("power_draw_w",)),
    ("pstate", "nvmlDeviceGetPerformanceState", (), ("performance_state",)),
    ("fan", "nvmlDeviceGetFanSpeed", (), ("fan_pct",)),
    ("encoder", "nvmlDeviceGetEncoderUtilization", (), ("utilization_encoder_pct",)),
    ("decoder", "nvmlDeviceGetDecoderUtilization", (), ("utilization_decoder_pct",)),
    (
        "clock_graphics",
        "nvmlDeviceGetClockInfo",
        (pynvml.NVML_CLOCK_GRAPHICS,),
        ("clock_graphics_mhz",),
    ),
    (
        "temperature",
        "nvmlDeviceGetTemperature",
        (pynvml.NVML_TEMPERATURE_GPU,),
        ("temperature_c",),
    ),
    ("clock_sm", "nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_SM,), ("clock_sm_mhz",)),
]

# Settings and counters: read on the first sample, then at most every
# SETTINGS_REFRESH_S or HEALTH_REFRESH_S (the test clock stands still); MIG mode also every
# sample while it is on (GPU 1), the memory clock when the performance state changes.
SLOW_FIELDS: list[tuple[str, str, tuple[Any, ...], tuple[str, ...]]] = [
    ("energy", "nvmlDeviceGetTotalEnergyConsumption", (), ("energy_j",)),
    (
        "clock_memory",
        "nvmlDeviceGetClockInfo",
        (pynvml.NVML_CLOCK_MEM,),
        ("clock_memory_mhz",),
    ),
    ("power_limit", "nvmlDeviceGetEnforcedPowerLimit", (), ("power_limit_w",)),
    ("persistence", "nvmlDeviceGetPersistenceMode", (), ("persistence_mode",)),
    ("display", "nvmlDeviceGetDisplayActive", (), ("display_active",)),
    ("compute_mode", "nvmlDeviceGetComputeMode", (), ("compute_mode",)),
    ("mig", "nvmlDeviceGetMigMode", (), ("mig_mode",)),
    (
        "ecc_uncorrected_volatile",
        "nvmlDeviceGetTotalEccErrors",
        (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        ("ecc_errors_uncorrected_volatile",),
    ),
]

# Read on the first sample, then at most every PCIE_REFRESH_S (the test clock stands still).
PCIE_FIELDS: list[tuple[str, str, tuple[Any, ...], tuple[str, ...]]] = [
    (
        "pcie_rx",
        "nvmlDeviceGetPcieThroughput",
        (pynvml.NVML_PCIE_UTIL_RX_BYTES,),
        ("pcie_rx_bytes_per_s",),
    ),
    (
        "pcie_tx",
        "nvmlDeviceGetPcieThroughput",
        (pynvml.NVML_PCIE_UTIL_TX_BYTES,),
        ("pcie_tx_bytes_per_s",),
    ),
]

IDENTITY_FIELDS: list[tuple[str, str, tuple[Any, ...], tuple[str, ...]]] = [
    ("name", "nvmlDeviceGetName", (), ("name",)),
    ("pci", "nvmlDeviceGetPciInfo", (), ("pci_bus_id",)),
    (
        "temperature_slowdown",
        "nvmlDeviceGetTemperatureThreshold",
        (pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,),
        ("temperature_slowdown_c",),
    ),
    (
        "temperature_shutdown",
        "nvmlDeviceGetTemperatureThreshold",
        (pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,),
        ("temperature_shutdown_c",),
    ),
]


def _ids(cases: list[tuple[str, str, tuple[Any, ...], tuple[str, ...]]]) -> list[str]:
    return [case[0] for case in cases]


@pytest.mark.parametrize("unsupported", [NOT_SUPPORTED, FUNCTION_NOT_FOUND], ids=["13", "3"])
@pytest.mark.parametrize(
    ("field", "function", "args", "shown_as"),
    PER_TICK_FIELDS + SLOW_FIELDS + PCIE_FIELDS + IDENTITY_FIELDS,
    ids=_ids(PER_TICK_FIELDS + SLOW_FIELDS + PCIE_FIELDS + IDENTITY_FIELDS),
)
def test_unsupported_field_is_na_and_never_asked_again(
    field: str, function: str, args: tuple[Any, ...], shown_as: tuple[str, ...], unsupported: Fail
) -> None:
    fake = two_gpus()
    fake.gpus[0][field] = unsupported
    source = make_source(fake)

    samples = [source.sample() for _ in range(3)]

    expected_0 = dataclasses.replace(EXPECTED_GPU_0, **dict.fromkeys(shown_as))
    for sample in samples:
        assert sample.gpus == (expected_0, EXPECTED_GPU_1)
    assert fake.count(function, 0, *args) == 1
    # The other GPU supports it: asked every tick (or once, for identity, settings, counters
    # and PCIe fields, the clock standing still; never, for the utilisation of a GPU in MIG
    # mode, whose MIG mode is asked every tick).
    asked = 3 if field in _ids(PER_TICK_FIELDS) else 1
    if field == "utilization":
        asked = 0
    if field == "mig":
        asked = 3
    assert fake.count(function, 1, *args) == asked


def test_unsupported_uuid_is_unknown_not_a_placeholder() -> None:
    """A made-up value in the uuid field would break every join on it."""
    fake, table = four_gpus_with_jobs()
    fake.gpus[0]["uuid"] = NOT_SUPPORTED
    fake.gpus[1]["uuid"] = NOT_SUPPORTED

    sample = make_source(fake, table).sample()

    assert [gpu.uuid for gpu in sample.gpus[:2]] == [None, None]
    assert sample.gpus[0].temperature_c is not None
    # Processes still land on the right GPU: they are joined by NVML index.
    assert [p.pid for p in sample.processes_on(0)] == [1000]
    assert [p.pid for p in sample.processes_on(1)] == [1001]


def test_transient_error_is_na_this_tick_and_asked_again() -> None:
    fake = two_gpus()
    fake.gpus[0]["fan"] = Fail(pynvml.NVML_ERROR_UNKNOWN)
    source = make_source(fake)

    first = source.sample()
    fake.gpus[0]["fan"] = 44
    second = source.sample()

    assert first.gpus[0].fan_pct is None
    assert second.gpus[0].fan_pct == 44
    assert fake.count("nvmlDeviceGetFanSpeed", 0) == 2


def test_memory_not_supported_at_all() -> None:
    fake = two_gpus()
    fake.gpus[0]["memory_v2"] = NOT_SUPPORTED
    fake.gpus[0]["memory"] = NOT_SUPPORTED
    source = make_source(fake)

    samples = [source.sample() for _ in range(3)]

    gpu = samples[-1].gpus[0]
    memory = (
        gpu.memory_used_bytes,
        gpu.memory_total_bytes,
        gpu.memory_free_bytes,
        gpu.memory_reserved_bytes,
    )
    assert memory == (None, None, None, None)
    assert gpu.temperature_c == 50
    assert fake.count("nvmlDeviceGetMemoryInfo", 0) == 2  # v2 once, v1 once
    assert samples[-1].gpus[1] == EXPECTED_GPU_1


@pytest.mark.parametrize("field", ["compute_processes", "graphics_processes"])
def test_unsupported_process_list_is_not_asked_again(field: str) -> None:
    """And without the compute list the processes are unknown, whatever the graphics list
    says: a compute job would be missing, and the GPU would read free."""
    other = "graphics_processes" if field == "compute_processes" else "compute_processes"
    fake = FakeNvml([make_gpu(0, **{field: NOT_SUPPORTED, other: [ProcessInfo(300, GIB)]})])
    source = make_source(fake, FakeProcessTable(FakeProcess(300)))
    function = {
        "compute_processes": "nvmlDeviceGetComputeRunningProcesses",
        "graphics_processes": "nvmlDeviceGetGraphicsRunningProcesses",
    }

    samples = [source.sample() for _ in range(3)]

    if field == "graphics_processes":
        assert [(p.pid, p.gpu_memory_bytes) for p in samples[-1].processes] == [(300, GIB)]
    else:
        assert samples[-1].gpus[0].processes_error == PROCESSES_NOT_SUPPORTED
        assert samples[-1].processes == ()
        assert free_gpu_indices(samples[-1], 1024) == set()
    assert fake.count(function[field], 0) == 1
    assert fake.count(function[other], 0) == 3


# -- 3. memory v2 and its fallback ----------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    ],
)
def test_memory_v2_unsupported_falls_back_to_v1_for_good(code: int) -> None:
    fake = two_gpus()
    fake.gpus[0]["memory_v2"] = Fail(code)
    source = make_source(fake)

    samples = [source.sample() for _ in range(3)]

    for sample in samples:
        gpu = sample.gpus[0]
        assert gpu.memory_used_bytes == 1500 * MIB  # v1: reserved counted as used
        assert gpu.memory_total_bytes == 80 * GIB
        assert gpu.memory_free_bytes == 80 * GIB - 1500 * MIB  # total - used
        assert gpu.memory_reserved_bytes is None
        assert sample.gpus[1] == EXPECTED_GPU_1
    assert fake.count("nvmlDeviceGetMemoryInfo", 0, pynvml.nvmlMemory_v2) == 1
    assert fake.count("nvmlDeviceGetMemoryInfo", 0) == 1 + 3


def test_transient_memory_v2_error_is_not_remembered() -> None:
    fake = two_gpus()
    fake.gpus[0]["memory_v2"] = Fail(pynvml.NVML_ERROR_UNKNOWN)
    source = make_source(fake)

    first = source.sample()
    fake.gpus[0]["memory_v2"] = make_gpu(0)["memory_v2"]
    second = source.sample()

    assert first.gpus[0].memory_used_bytes is None
    assert second.gpus[0] == EXPECTED_GPU_0
    assert fake.count("nvmlDeviceGetMemoryInfo", 0, pynvml.nvmlMemory_v2) == 2
    # Never fell back to v1, whose numbers disagree with nvidia-smi.
    assert fake.count("nvmlDeviceGetMemoryInfo", 0) == 2


def test_binding_without_memory_v2_uses_v1() -> None:
    fake = two_gpus()
    del fake.nvmlMemory_v2

    gpu = make_source(fake).sample().gpus[0]

    assert (gpu.memory_used_bytes, gpu.memory_reserved_bytes) == (1500 * MIB, None)
    assert fake.count("nvmlDeviceGetMemoryInfo", 0, pynvml.nvmlMemory_v2) == 0


# -- 4. a lost GPU ---------------------------------------------------------------------------------


def four_gpus_with_jobs() -> tuple[FakeNvml, FakeProcessTable]:
    fake = FakeNvml(
        [make_gpu(i, compute_processes=[ProcessInfo(1000 + i, (i + 1) * GIB)]) for i in range(4)]
    )
    table = FakeProcessTable(*(FakeProcess(1000 + i) for i in range(4)))
    return fake, table


def _heat_up(fake: FakeNvml, tick: int) -> None:
    for index, gpu in enumerate(fake.gpus):
        gpu["temperature"] = 60 + 10 * tick + index
        gpu["utilization"] = Utilization(gpu=10 * tick + index, memory=tick)


@pytest.mark.parametrize(
    "failing_field",
    [
        "memory_v2",
        "temperature",
        "ecc_uncorrected_volatile",
        "compute_processes",
        "mig",
        "encoder",
        "clock_graphics",
        "clock_events",
        "process_utilization",
    ],
)
def test_one_lost_gpu_of_four_does_not_stop_the_others(failing_field: str) -> None:
    fake, table = four_gpus_with_jobs()
    clock = FakeClock()
    source = make_source(fake, table, monotonic=clock)
    first = source.sample()

    _heat_up(fake, 2)
    # A lost GPU answers GPU_IS_LOST to every call, the fake to one field only: the settings
    # and counters read every few seconds (MIG mode, ECC) must be due for it to be asked.
    clock.advance(SETTINGS_REFRESH_S)
    fake.gpus[2][failing_field] = GPU_IS_LOST
    second = source.sample()
    calls_on_lost_gpu = fake.device_calls(2)
    _heat_up(fake, 3)
    fake.gpus[2][failing_field] = GPU_IS_LOST
    third = source.sample()

    lost = second.gpus[2]
    assert lost.lost is True
    assert (lost.index, lost.uuid, lost.name, lost.pci_bus_id) == (
        2,
        first.gpus[2].uuid,
        "NVIDIA H100 80GB HBM3",
        first.gpus[2].pci_bus_id,
    )
    assert lost.lost_reason is not None and "fell off the bus" in lost.lost_reason
    assert {name: getattr(lost, name) for name in READINGS} == dict.fromkeys(READINGS)
    assert third.gpus[2] == lost
    for tick, sample in ((2, second), (3, third)):
        assert [gpu.index for gpu in sample.gpus] == [0, 1, 2, 3]
        for index in (0, 1, 3):
            gpu = sample.gpus[index]
            assert gpu.lost is False
            assert gpu.temperature_c == 60 + 10 * tick + index
            assert gpu.utilization_gpu_pct == 10 * tick + index
        assert sorted(p.pid for p in sample.processes) == [1000, 1001, 1003]
        assert sample.processes_on(lost.index) == ()
    # A lost GPU is not asked anything more.
    assert fake.device_calls(2) == calls_on_lost_gpu


def test_gpu_lost_before_start_is_shown_lost_and_others_work() -> None:
    fake, table = four_gpus_with_jobs()
    fake.gpus[1]["handle"] = GPU_IS_LOST
    source = make_source(fake, table)

    first = source.sample()
    second = source.sample()

    assert source.unavailable is None
    for sample in (first, second):
        assert [gpu.index for gpu in sample.gpus] == [0, 1, 2, 3]
        assert sample.gpus[1].lost is True
        assert "fell off the bus" in (sample.gpus[1].lost_reason or "")
        assert {name: getattr(sample.gpus[1], name) for name in READINGS} == dict.fromkeys(READINGS)
        assert [gpu.lost for gpu in sample.gpus] == [False, True, False, False]
        assert sorted(p.pid for p in sample.processes) == [1000, 1002, 1003]
    assert fake.count("nvmlDeviceGetHandleByIndex", 1) == 1
    assert fake.device_calls(1) == 1


def test_gpu_lost_before_start_has_no_made_up_uuid() -> None:
    """Not "LOST-1": JSON and Prometheus consumers join on the UUID."""
    fake, table = four_gpus_with_jobs()
    fake.gpus[1]["handle"] = GPU_IS_LOST

    gpus = make_source(fake, table).sample().gpus

    assert gpus[1].uuid is None
    assert gpus[1].short_uuid == "N/A"
    assert [gpu.uuid is not None for gpu in gpus] == [True, False, True, True]


def test_gpu_nvml_cannot_open_says_why_instead_of_fell_off_the_bus() -> None:
    """A handle refused for another reason (a cgroup-restricted GPU, say) is not an Xid 79."""
    fake, table = four_gpus_with_jobs()
    fake.gpus[2]["handle"] = Fail(pynvml.NVML_ERROR_NO_PERMISSION)

    gpus = make_source(fake, table).sample().gpus

    assert gpus[2].lost is True
    reason = gpus[2].lost_reason or ""
    assert "fell off the bus" not in reason
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)) in reason
    assert [gpu.lost for gpu in gpus] == [False, False, True, False]
    assert all(gpu.lost_reason is None for gpu in gpus if not gpu.lost)


def test_identity_that_failed_once_at_start_is_read_again() -> None:
    """A transient error on the UUID or name must not leave a placeholder for days."""
    fake, table = four_gpus_with_jobs()
    real_uuid, real_name = fake.gpus[1]["uuid"], fake.gpus[1]["name"]
    fake.gpus[1]["uuid"] = Fail(pynvml.NVML_ERROR_UNKNOWN)
    fake.gpus[1]["name"] = Fail(pynvml.NVML_ERROR_TIMEOUT)
    source = make_source(fake, table)

    first = source.sample()
    fake.gpus[1]["uuid"], fake.gpus[1]["name"] = real_uuid, real_name
    second = source.sample()
    asked = fake.count("nvmlDeviceGetUUID", 1)
    third = source.sample()

    assert first.gpus[1].uuid is None and first.gpus[1].name is None
    assert (second.gpus[1].uuid, second.gpus[1].name) == (real_uuid, real_name)
    assert second.processes_on(1) != ()
    # Once complete, identity is not asked again.
    assert fake.count("nvmlDeviceGetUUID", 1) == asked
    assert third.gpus[1].uuid == real_uuid


def test_reading_a_missing_name_again_never_replaces_a_good_uuid() -> None:
    fake, table = four_gpus_with_jobs()
    real_uuid, real_name = fake.gpus[0]["uuid"], fake.gpus[0]["name"]
    fake.gpus[0]["name"] = Fail(pynvml.NVML_ERROR_UNKNOWN)
    source = make_source(fake, table)

    first = source.sample()
    fake.gpus[0]["uuid"] = Fail(pynvml.NVML_ERROR_UNKNOWN)  # would flip to a placeholder
    second = source.sample()
    fake.gpus[0]["name"] = real_name
    third = source.sample()

    assert [sample.gpus[0].uuid for sample in (first, second, third)] == [real_uuid] * 3
    assert [sample.gpus[0].name for sample in (first, second, third)] == [None, None, real_name]


def test_a_process_list_nvml_refuses_is_unknown_not_empty() -> None:
    """MIG GPUs answer NO_PERMISSION to non-root users: that GPU's processes are N/A, not none."""
    fake, table = four_gpus_with_jobs()
    fake.gpus[1]["compute_processes"] = Fail(pynvml.NVML_ERROR_NO_PERMISSION)
    source = make_source(fake, table)

    first = source.sample()
    fake.gpus[1]["compute_processes"] = [ProcessInfo(1001, 2 * GIB)]  # permission granted
    second = source.sample()

    refused = first.gpus[1]
    assert refused.processes_error is not None
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)) in refused.processes_error
    assert refused.lost is False and refused.temperature_c is not None  # the rest still reads
    assert first.processes_on(refused.index) == ()
    assert [gpu.processes_error for gpu in first.gpus if gpu.index != 1] == [None] * 3
    assert second.gpus[1].processes_error is None
    assert [p.pid for p in second.processes_on(refused.index)] == [1001]


def test_a_gpu_that_supports_neither_process_list_has_unknown_processes() -> None:
    """53 GiB in use and NOT_SUPPORTED for both lists is not "no processes"."""
    fake, table = four_gpus_with_jobs()
    for field in (
        "compute_processes",
        "compute_processes_v2",
        "graphics_processes",
        "graphics_processes_v2",
    ):
        fake.gpus[1][field] = NOT_SUPPORTED
    source = make_source(fake, table)

    for sample in (source.sample(), source.sample()):
        gpu = sample.gpus[1]
        assert gpu.processes_error == PROCESSES_NOT_SUPPORTED
        assert sample.processes_on(1) == ()
        assert gpu.temperature_c is not None  # the rest still reads
        assert [g.processes_error for g in sample.gpus if g.index != 1] == [None] * 3


def test_a_graphics_list_the_gpu_does_not_support_is_just_empty() -> None:
    fake, table = four_gpus_with_jobs()
    fake.gpus[0]["graphics_processes"] = NOT_SUPPORTED
    fake.gpus[0]["graphics_processes_v2"] = NOT_SUPPORTED

    sample = make_source(fake, table).sample()

    assert sample.gpus[0].processes_error is None
    assert [p.pid for p in sample.processes_on(0)] == [1000]


def test_gpu_lost_while_reading_its_identity() -> None:
    fake, table = four_gpus_with_jobs()
    fake.gpus[3]["name"] = GPU_IS_LOST

    gpus = make_source(fake, table).sample().gpus

    assert gpus[3].lost is True
    assert gpus[3].uuid == "GPU-00000003-1111-2222-3333-444455556666"
    assert [gpu.lost for gpu in gpus[:3]] == [False, False, False]


# -- 5. an older driver than the binding (FunctionNotFound) ---------------------------------------


def test_temperature_prefers_the_versioned_call_and_falls_back() -> None:
    """nvmlDeviceGetTemperature is deprecated: newer drivers answer nvmlDeviceGetTemperatureV."""
    fake = FakeNvml(
        [
            make_gpu(0, temperature=40, temperature_v=41),
            make_gpu(1, temperature=50, temperature_v=FUNCTION_NOT_FOUND),  # an older driver
        ]
    )
    source = make_source(fake)

    first, second = source.sample(), source.sample()

    assert [gpu.temperature_c for gpu in first.gpus] == [41, 50]
    assert [gpu.temperature_c for gpu in second.gpus] == [41, 50]
    assert fake.count("nvmlDeviceGetTemperature", 0) == 0
    assert fake.count("nvmlDeviceGetTemperatureV", 1) == 1  # not asked again


def test_a_binding_without_the_deprecated_temperature_call_still_reads_it() -> None:
    class NewerBinding(FakeNvml):
        def __getattribute__(self, name: str) -> Any:
            if name == "nvmlDeviceGetTemperature":
                raise AttributeError(name)  # removed from the binding (CUDA 14)
            return super().__getattribute__(name)

    fake = NewerBinding([make_gpu(0, temperature=40, temperature_v=44)])

    assert make_source(fake).sample().gpus[0].temperature_c == 44


@pytest.mark.parametrize("field", ["fan", "power", "mig", "ecc_uncorrected_volatile"])
def test_function_not_found_is_na_and_remembered(field: str) -> None:
    case = next(case for case in PER_TICK_FIELDS + SLOW_FIELDS if case[0] == field)
    _, function, args, shown_as = case
    fake = two_gpus()
    fake.gpus[1][field] = FUNCTION_NOT_FOUND
    source = make_source(fake)

    first, second = source.sample(), source.sample()

    expected = dataclasses.replace(EXPECTED_GPU_1, **dict.fromkeys(shown_as))
    if field == "mig":  # MIG mode unknown: the utilisation is read, as on any GPU
        expected = dataclasses.replace(expected, utilization_gpu_pct=100, utilization_memory_pct=87)
    for sample in (first, second):
        assert sample.gpus[1] == expected
    assert fake.count(function, 1, *args) == 1


def test_driver_without_v3_process_calls_falls_back_to_v2() -> None:
    """nvidia-ml-py raises NVMLLibraryMismatchError (not an NVMLError) on pre-R535 drivers."""
    fake = FakeNvml(
        [
            make_gpu(
                0,
                compute_processes=FUNCTION_NOT_FOUND,
                graphics_processes=FUNCTION_NOT_FOUND,
                compute_processes_v2=[ProcessInfo(500, 3 * GIB)],
                graphics_processes_v2=[ProcessInfo(501, 100 * MIB)],
            )
        ]
    )
    source = make_source(fake, FakeProcessTable(FakeProcess(500), FakeProcess(501)))

    samples = [source.sample() for _ in range(3)]

    for sample in samples:
        assert sorted((p.pid, p.kind, p.gpu_memory_bytes) for p in sample.processes) == [
            (500, ProcessKind.COMPUTE, 3 * GIB),
            (501, ProcessKind.GRAPHICS, 100 * MIB),
        ]
        assert sample.gpus[0] == EXPECTED_GPU_0
    assert fake.count("nvmlDeviceGetComputeRunningProcesses", 0) == 1
    assert fake.count("nvmlDeviceGetGraphicsRunningProcesses", 0) == 1
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v2", 0) == 3


def test_no_process_call_at_all_means_unknown_processes_and_no_crash() -> None:
    fake = FakeNvml(
        [
            make_gpu(
                0,
                compute_processes=FUNCTION_NOT_FOUND,
                graphics_processes=FUNCTION_NOT_FOUND,
                compute_processes_v2=FUNCTION_NOT_FOUND,
                graphics_processes_v2=FUNCTION_NOT_FOUND,
            )
        ]
    )
    source = make_source(fake)

    samples = [source.sample() for _ in range(2)]

    assert samples[-1].processes == ()
    # A driver without the calls cannot say who uses the GPU: unknown, not "none".
    assert samples[-1].gpus[0] == dataclasses.replace(
        EXPECTED_GPU_0, processes_error=PROCESSES_NOT_SUPPORTED
    )
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v2", 0) == 1


# -- 6. NVML cannot start ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason", "words"),
    [
        (
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            UnavailableReason.LIBRARY_NOT_FOUND,
            "no nvidia driver",
        ),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, UnavailableReason.DRIVER_NOT_LOADED, "not loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, UnavailableReason.VERSION_MISMATCH, "mismatch"),
        (pynvml.NVML_ERROR_NO_PERMISSION, UnavailableReason.NO_PERMISSION, "permission"),
        (pynvml.NVML_ERROR_UNKNOWN, UnavailableReason.OTHER, "could not"),
    ],
)
def test_nvml_init_failure_is_reported_not_raised(
    code: int, reason: UnavailableReason, words: str
) -> None:
    fake = FakeNvml([make_gpu(0)], init_error=code)

    source = make_source(fake)
    sample = source.sample()

    unavailable = source.unavailable
    assert unavailable is not None
    assert unavailable.reason is reason
    assert words in unavailable.headline.lower()
    assert "NVML_ERROR" not in unavailable.headline
    assert str(pynvml.NVMLError(code)) in unavailable.detail
    if reason is not UnavailableReason.OTHER:
        assert unavailable.hint
    assert sample.unavailable == unavailable
    assert sample.host == HOST
    assert sample.gpus == ()
    assert sample.processes == ()
    assert fake.device_calls(0) == 0
    source.close()
    assert fake.shutdowns == 0


def test_driver_without_gpus() -> None:
    fake = FakeNvml([])

    source = make_source(fake)
    sample = source.sample()

    assert source.unavailable is not None
    assert source.unavailable.reason is UnavailableReason.NO_DEVICES
    assert sample.gpus == ()
    assert sample.host == HOST
    assert sample.driver is not None
    assert sample.driver.driver_version == "535.183.01"


def test_device_count_failing() -> None:
    fake = FakeNvml([make_gpu(0)])
    fake.device_count = Fail(pynvml.NVML_ERROR_UNKNOWN)

    source = make_source(fake)
    sample = source.sample()

    assert source.unavailable is not None
    assert source.unavailable.reason is UnavailableReason.OTHER
    assert "Unknown Error" in source.unavailable.detail
    assert sample.gpus == ()
    source.close()
    assert fake.shutdowns == 1


def test_shadowing_old_pynvml_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    old = types.ModuleType("pynvml")
    old.nvmlInit = lambda: None  # type: ignore[attr-defined]  # old bindings had no flags
    old.__file__ = "/usr/lib/python3/dist-packages/pynvml.py"
    monkeypatch.setitem(sys.modules, "pynvml", old)

    source = NvmlSource(host_sampler=lambda: HOST)
    sample = source.sample()

    unavailable = source.unavailable
    assert unavailable is not None
    assert unavailable.reason is UnavailableReason.SHADOWED_BINDING
    assert "shadow" in unavailable.headline
    assert "/usr/lib/python3/dist-packages/pynvml.py" in unavailable.detail
    assert "pip uninstall" in unavailable.hint
    assert "nvidia-ml-py" in unavailable.hint
    assert sample.gpus == ()
    assert sample.host == HOST
    source.close()


def test_missing_binding_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail

    source = NvmlSource(host_sampler=lambda: HOST)

    assert source.unavailable is not None
    assert source.unavailable.reason is UnavailableReason.LIBRARY_NOT_FOUND
    assert "nvidia-ml-py" in source.unavailable.hint
    assert source.sample().gpus == ()


# -- 7. processes joined with the host -------------------------------------------------------------


def test_processes_are_joined_with_host_details() -> None:
    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(4242, 6 * GIB)])])
    table = FakeProcessTable(
        FakeProcess(
            4242,
            create_time_s=NOW - 90,
            uid=MY_UID,
            cmdline_parts=["python", "train.py", "--lr", "3e-4"],
            cpu_percents=[0.0, 97.5],
            rss=3 * GIB,
        )
    )
    source = make_source(fake, table)

    first = source.sample().processes
    second = source.sample().processes

    (process,) = second
    assert process.gpu_index == 0
    assert process.gpu_uuid == EXPECTED_GPU_0.uuid
    assert process.kind is ProcessKind.COMPUTE
    assert process.gpu_memory_bytes == 6 * GIB
    assert process.command == "python train.py --lr 3e-4"
    assert process.rss_bytes == 3 * GIB
    assert process.user == user_name(MY_UID)
    assert process.elapsed_s == 90
    assert process.visible is True
    assert process.is_current_user is True
    # The first psutil reading only primes the counter: N/A, not 0 %.
    assert first[0].cpu_pct is None
    assert process.cpu_pct == 97.5


def test_every_host_detail_reaches_the_process() -> None:
    """Each field of what the host tells of a PID lands on its GpuProcess under its own name
    (the join goes by HostProcessInfo's field names: a field GpuProcess lacks must fail here)."""
    from gpumon.sources.host.inspector import HostProcessInfo

    host = HostProcessInfo(
        visible=False,
        user="alice",
        command="python train.py",
        cpu_pct=12.5,
        rss_bytes=3 * GIB,
        elapsed_s=90.0,
        is_current_user=True,
        create_time_s=NOW - 90,
        job_id="4242",
        container_id="0123456789ab",
        exited=True,
    )
    defaults = HostProcessInfo(visible=True)
    assert all(
        getattr(host, field.name) != getattr(defaults, field.name)
        for field in dataclasses.fields(HostProcessInfo)
    )  # so that a dropped field shows

    class Inspector:
        def inspect(self, pids: set[int]) -> dict[int, HostProcessInfo]:
            return {pid: host for pid in pids}

    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(4242, 6 * GIB)])])
    source = NvmlSource(
        nvml=fake,
        inspector=Inspector(),  # type: ignore[arg-type]
        host_sampler=lambda: HOST,
        clock=lambda: NOW,
        monotonic=FakeClock(),
    )
    (process,) = source.sample().processes
    for field in dataclasses.fields(HostProcessInfo):
        assert getattr(process, field.name) == getattr(host, field.name), field.name
    assert (process.pid, process.gpu_memory_bytes) == (4242, 6 * GIB)


def test_compute_and_graphics_pid_is_one_c_plus_g_row() -> None:
    fake = FakeNvml(
        [
            make_gpu(
                0,
                compute_processes=[ProcessInfo(100, GIB)],
                graphics_processes=[ProcessInfo(100, GIB), ProcessInfo(200, 64 * MIB)],
            )
        ]
    )
    table = FakeProcessTable(FakeProcess(100), FakeProcess(200))

    processes = make_source(fake, table).sample().processes

    assert sorted((p.pid, p.kind, p.gpu_memory_bytes) for p in processes) == [
        (100, ProcessKind.BOTH, GIB),
        (200, ProcessKind.GRAPHICS, 64 * MIB),
    ]


def test_pid_listed_twice_in_one_list_sums_its_memory() -> None:
    """With MIG, one process on two GPU instances appears twice in the parent's list."""
    fake = FakeNvml(
        [make_gpu(0, compute_processes=[ProcessInfo(100, GIB), ProcessInfo(100, 2 * GIB)])]
    )

    (process,) = make_source(fake, FakeProcessTable(FakeProcess(100))).sample().processes

    assert (process.kind, process.gpu_memory_bytes) == (ProcessKind.COMPUTE, 3 * GIB)


# nvidia-ml-py turns NVML_VALUE_NOT_AVAILABLE into None; older bindings pass ULLONG_MAX through.
@pytest.mark.parametrize("reported", [None, 2**64 - 1], ids=["None", "ULLONG_MAX"])
def test_unknown_process_memory_is_na(reported: int | None) -> None:
    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(100, reported)])])

    (process,) = make_source(fake, FakeProcessTable(FakeProcess(100))).sample().processes

    assert process.gpu_memory_bytes is None
    assert process.user == user_name(1000)


@pytest.mark.parametrize("garbage", [0, -1, 2**22 + 1, 2**32 - 1])
def test_a_list_with_a_garbage_pid_is_unknown_not_what_is_left(garbage: int) -> None:
    """A binding reading the driver's list with another layout (nvitop #75): the PIDs that
    look right are as untrustworthy, and the GPU must not read FREE."""
    fake = FakeNvml(
        [make_gpu(0, compute_processes=[ProcessInfo(garbage, GIB), ProcessInfo(777, 2 * GIB)])]
    )
    table = FakeProcessTable(FakeProcess(777))

    sample = make_source(fake, table).sample()

    assert sample.processes == ()
    assert sample.gpus[0].processes_error == IMPOSSIBLE_PID
    assert free_gpu_indices(sample, 1024 * 1024) == set()
    assert table.lookups(garbage) == 0


def test_process_gone_before_psutil_looks_keeps_its_gpu_memory() -> None:
    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(900, 5 * GIB)])])

    (process,) = make_source(fake, FakeProcessTable()).sample().processes

    assert process.visible is False
    assert process.gpu_memory_bytes == 5 * GIB
    assert (process.user, process.command, process.cpu_pct) == (None, None, None)


def test_process_that_exits_between_ticks() -> None:
    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(900, 5 * GIB)])])
    table = FakeProcessTable(FakeProcess(900))
    source = make_source(fake, table)

    first = source.sample().processes
    table.remove(900)
    second = source.sample().processes

    assert first[0].visible is True
    assert second[0].visible is False
    assert second[0].gpu_memory_bytes == 5 * GIB


def test_one_process_on_two_gpus_is_a_row_on_each() -> None:
    fake = FakeNvml(
        [
            make_gpu(0, compute_processes=[ProcessInfo(55, GIB)]),
            make_gpu(1, compute_processes=[ProcessInfo(55, 2 * GIB)]),
        ]
    )
    table = FakeProcessTable(FakeProcess(55))

    processes = make_source(fake, table).sample().processes

    assert sorted((p.gpu_index, p.gpu_memory_bytes, p.user) for p in processes) == [
        (0, GIB, user_name(1000)),
        (1, 2 * GIB, user_name(1000)),
    ]
    assert table.lookups(55) == 1


def test_a_source_for_modes_without_processes_makes_no_process_calls() -> None:
    """`gpumon status` and `once --no-processes` show no process: they read none."""
    fake, table = four_gpus_with_jobs()
    inspector = ProcessInspector(
        process_factory=table,  # type: ignore[arg-type]
        current_uid=MY_UID,
        clock=lambda: NOW,
    )
    source = NvmlSource(
        nvml=fake, inspector=inspector, host_sampler=lambda: HOST, read_processes=False
    )

    sample = source.sample()

    assert sample.processes == ()
    assert [gpu.temperature_c is not None for gpu in sample.gpus] == [True] * 4
    assert fake.count("nvmlDeviceGetComputeRunningProcesses", 0) == 0
    assert fake.count("nvmlDeviceGetGraphicsRunningProcesses", 0) == 0
    assert fake.count("nvmlDeviceGetProcessUtilization") == 0
    assert all(table.lookups(pid) == 0 for pid in range(1000, 1004))
