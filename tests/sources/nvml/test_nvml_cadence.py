"""How often NvmlSource asks NVML for each field (the target: no more NVML calls than nvitop).

Settings (power limit, persistence, display, compute and MIG mode) and error counters (ECC)
change when an administrator changes them, not from one sample to the next: they are read at
the first sample, so that a one-shot command has everything, then every SETTINGS_REFRESH_S or
HEALTH_REFRESH_S, and a change shows within that time; so is the energy counter. The video
encoder and decoder are read every CODECS_IDLE_REFRESH_S while both read 0. What is read
every sample stays read every sample; MIG mode and the memory clock are read at once when a
cheaper reading says they may have changed.
"""

from __future__ import annotations

import pynvml

from gpumon.sources.nvml.codecs import CODECS_IDLE_REFRESH_S
from gpumon.sources.nvml.health import HEALTH_REFRESH_S
from gpumon.sources.nvml.settings import SETTINGS_REFRESH_S
from tests.sources.nvml.test_nvml_source import GPU_IS_LOST, NOT_SUPPORTED, FakeClock, make_source
from tests.support.fake_nvml import FakeNvml, ProcessInfo, Utilization, make_gpu, make_mig_device

SETTINGS_CALLS = (
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetMigMode",
)


def test_the_first_sample_has_every_setting_and_later_ones_repeat_it_until_due() -> None:
    fake = FakeNvml([make_gpu(0, power_limit=350_000, ecc_uncorrected_volatile=2)])
    clock = FakeClock()
    source = make_source(fake, monotonic=clock)

    first = source.sample().gpus[0]
    steady = [source.sample().gpus[0] for _ in range(3)]

    assert (first.power_limit_w, first.persistence_mode, first.display_active) == (
        350.0,
        True,
        False,
    )
    assert (first.compute_mode, first.mig_mode, first.ecc_errors_uncorrected_volatile) == (
        "Default",
        False,
        2,
    )
    assert steady == [first] * 3
    assert [fake.count(call, 0) for call in SETTINGS_CALLS] == [1] * len(SETTINGS_CALLS)
    assert fake.count("nvmlDeviceGetTotalEccErrors", 0) == 1

    clock.advance(SETTINGS_REFRESH_S)
    source.sample()

    assert [fake.count(call, 0) for call in SETTINGS_CALLS] == [2] * len(SETTINGS_CALLS)
    assert fake.count("nvmlDeviceGetTotalEccErrors", 0) == 2  # HEALTH_REFRESH_S is shorter


def test_a_changed_power_limit_shows_within_the_refresh() -> None:
    """`nvidia-smi -pl 300` while gpumon runs: shown within SETTINGS_REFRESH_S."""
    fake = FakeNvml([make_gpu(0)])
    clock = FakeClock()
    source = make_source(fake, monotonic=clock)
    assert source.sample().gpus[0].power_limit_w == 700.0

    fake.gpus[0]["power_limit"] = 300_000
    fake.gpus[0]["compute_mode"] = pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    clock.advance(SETTINGS_REFRESH_S / 2)
    before = source.sample().gpus[0]
    clock.advance(SETTINGS_REFRESH_S / 2)
    after = source.sample().gpus[0]

    assert (before.power_limit_w, before.compute_mode) == (700.0, "Default")
    assert (after.power_limit_w, after.compute_mode) == (300.0, "Exclusive Process")


def test_new_ecc_errors_and_energy_show_within_the_health_refresh() -> None:
    fake = FakeNvml([make_gpu(0, energy=5_000_000)])
    clock = FakeClock()
    source = make_source(fake, monotonic=clock)
    first = source.sample().gpus[0]
    assert (first.ecc_errors_uncorrected_volatile, first.energy_j) == (0, 5_000.0)

    fake.gpus[0]["ecc_uncorrected_volatile"] = 1
    fake.gpus[0]["energy"] = 5_700_000
    clock.advance(HEALTH_REFRESH_S / 2)
    before = source.sample().gpus[0]
    clock.advance(HEALTH_REFRESH_S / 2)
    after = source.sample().gpus[0]

    assert (before.ecc_errors_uncorrected_volatile, before.energy_j) == (0, 5_000.0)
    assert (after.ecc_errors_uncorrected_volatile, after.energy_j) == (1, 5_700.0)


def test_the_memory_clock_is_read_again_when_the_performance_state_changes() -> None:
    """A GPU going idle (P0 -> P8) drops its memory clock: shown in the same sample."""
    fake = FakeNvml([make_gpu(0)])
    source = make_source(fake)  # the clock stands still: the settings are never due
    busy = [source.sample().gpus[0] for _ in range(3)]

    fake.gpus[0]["pstate"] = pynvml.NVML_PSTATE_8
    fake.gpus[0]["clock_memory"] = 405
    idle = source.sample().gpus[0]

    assert [gpu.clock_memory_mhz for gpu in busy] == [2619] * 3
    assert (idle.performance_state, idle.clock_memory_mhz) == (8, 405)
    assert fake.count("nvmlDeviceGetClockInfo", 0, pynvml.NVML_CLOCK_MEM) == 2


def test_the_memory_clock_is_read_every_sample_while_the_performance_state_is_unknown() -> None:
    fake = FakeNvml([make_gpu(0, pstate=NOT_SUPPORTED)])
    source = make_source(fake)
    source.sample()

    fake.gpus[0]["clock_memory"] = 405

    assert source.sample().gpus[0].clock_memory_mhz == 405


def test_what_changes_is_read_every_sample() -> None:
    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(4242, 1024**3)])])
    source = make_source(fake)
    source.sample()

    fake.gpus[0]["utilization"] = Utilization(gpu=97, memory=50)
    fake.gpus[0]["power"] = 612_000
    fake.gpus[0]["temperature"] = 77
    fake.gpus[0]["clock_sm"] = 1410
    fake.gpus[0]["clock_graphics"] = 1400
    fake.gpus[0]["pstate"] = pynvml.NVML_PSTATE_2
    fake.gpus[0]["encoder"] = [55, 167_000]
    fake.gpus[0]["clock_events"] = pynvml.nvmlClocksEventReasonSwPowerCap
    fake.gpus[0]["compute_processes"] = []
    gpu = source.sample().gpus[0]

    assert (gpu.utilization_gpu_pct, gpu.power_draw_w, gpu.temperature_c) == (97, 612.0, 77)
    assert (gpu.clock_sm_mhz, gpu.clock_graphics_mhz, gpu.performance_state) == (1410, 1400, 2)
    assert (gpu.utilization_encoder_pct, gpu.clock_event_reasons) == (55, ("sw_power_cap",))
    assert source.sample().processes == ()


def test_a_steady_sample_costs_at_most_14_calls_per_gpu() -> None:
    """nvitop 1.7.2 makes ~17 NVML calls per GPU per refresh (pynvml's process calls count
    twice with the real library); gpumon made 22 here, on a board with a fan and processes,
    before settings, counters and idle codecs were read less often. (The second sample
    registers the Xid events.)"""
    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(4242, 1024**3)])])
    source = make_source(fake)
    source.sample()
    source.sample()
    before = fake.device_calls(0)

    source.sample()

    assert fake.device_calls(0) - before <= 14


def test_mig_turned_on_between_settings_reads_shows_at_once() -> None:
    """MIG on (after a GPU reset) answers NOT_SUPPORTED for device utilisation: that first
    NOT_SUPPORTED reads MIG mode at once, and is not remembered, so that utilisation is read
    again once MIG is off."""
    fake = FakeNvml([make_gpu(0)])
    source = make_source(fake)  # the clock stands still: the settings are never due
    assert source.sample().gpus[0].mig_mode is False

    fake.gpus[0]["mig"] = [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]
    fake.gpus[0]["mig_devices"] = [make_mig_device(0, 1, "3g.40gb")]
    fake.gpus[0]["utilization"] = NOT_SUPPORTED
    under_mig = source.sample().gpus[0]
    fake.gpus[0]["mig"] = [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]
    fake.gpus[0]["utilization"] = Utilization(gpu=12, memory=3)
    after = source.sample().gpus[0]

    assert under_mig.mig_mode is True and under_mig.utilization_gpu_pct is None
    assert [instance.profile for instance in under_mig.mig_instances or ()] == ["3g.40gb"]
    assert (after.mig_mode, after.mig_instances, after.utilization_gpu_pct) == (False, (), 12)


def test_a_gpu_without_utilization_asks_its_mig_mode_again_once() -> None:
    fake = FakeNvml([make_gpu(0, utilization=NOT_SUPPORTED)])
    source = make_source(fake)

    gpus = [source.sample().gpus[0] for _ in range(4)]

    assert [(gpu.utilization_gpu_pct, gpu.mig_mode) for gpu in gpus] == [(None, False)] * 4
    assert fake.count("nvmlDeviceGetUtilizationRates", 0) == 1
    assert fake.count("nvmlDeviceGetMigMode", 0) == 2


def test_a_lost_gpu_reads_lost_at_the_next_sample_between_settings_reads() -> None:
    fake = FakeNvml([make_gpu(0), make_gpu(1)])
    source = make_source(fake)
    source.sample()

    for field in ("memory_v2", "utilization", "power", "power_limit", "mig", "compute_mode"):
        fake.gpus[1][field] = GPU_IS_LOST  # a GPU that fell off the bus answers nothing
    second = source.sample()

    assert [gpu.lost for gpu in second.gpus] == [False, True]


def test_idle_video_engines_are_read_every_few_seconds_and_a_video_job_shows_within_them() -> None:
    fake = FakeNvml([make_gpu(0, encoder=[0, 167_000], decoder=[0, 167_000])])
    clock = FakeClock()
    source = make_source(fake, monotonic=clock)
    idle = [source.sample().gpus[0] for _ in range(3)]
    assert fake.count("nvmlDeviceGetEncoderUtilization", 0) == 1

    fake.gpus[0]["decoder"] = [35, 167_000]  # an ffmpeg job starts decoding
    clock.advance(CODECS_IDLE_REFRESH_S / 2)
    before = source.sample().gpus[0]
    clock.advance(CODECS_IDLE_REFRESH_S / 2)
    busy = [source.sample().gpus[0] for _ in range(3)]
    fake.gpus[0]["decoder"] = [0, 167_000]
    done = source.sample().gpus[0]

    assert [(gpu.utilization_encoder_pct, gpu.utilization_decoder_pct) for gpu in idle] == [
        (0, 0)
    ] * 3
    assert before.utilization_decoder_pct == 0
    assert [gpu.utilization_decoder_pct for gpu in busy] == [35] * 3
    assert done.utilization_decoder_pct == 0  # busy: read every sample, so its end shows at once
    assert fake.count("nvmlDeviceGetDecoderUtilization", 0) == 5


def test_a_steady_sample_of_a_gpu_without_video_work_costs_at_most_12_calls() -> None:
    fake = FakeNvml(
        [
            make_gpu(
                0,
                encoder=[0, 167_000],
                decoder=[0, 167_000],
                compute_processes=[ProcessInfo(4242, 1024**3)],
            )
        ]
    )
    source = make_source(fake)
    source.sample()
    source.sample()
    before = fake.device_calls(0)

    source.sample()

    assert fake.device_calls(0) - before <= 12
