"""Fields only the GPU screen shows (the graphics clock, why the clocks are held down, the
memory's temperature) are read while it is open, not every second for nobody (one NVML
call each per GPU and sample). What a user notices: the GPU screen shows them from the
sample it asks for when it opens, never N/A for "not read"; one-shot commands and exporters
read them always."""

from __future__ import annotations

import pynvml

from gpumon.data.model import ON_DEMAND_GPU_FIELDS
from gpumon.ui.dashboard.app import create_app
from gpumon.ui.dashboard.gpu_detail import GpuDetailScreen
from gpumon.ui.widgets.gpu_fields import NOT_READ_YET
from gpumon.ui.widgets.text_lines import TextLines
from tests.sources.nvml.test_nvml_source import make_source
from tests.support.fake_nvml import FakeNvml, make_gpu

DETAIL_CALLS = (
    ("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_GRAPHICS),
    ("nvmlDeviceGetCurrentClocksEventReasons",),
    ("nvmlDeviceGetFieldValues",),  # NVML_FI_DEV_MEMORY_TEMP, the only field asked
    ("nvmlDeviceGetEncoderUtilization",),
    ("nvmlDeviceGetDecoderUtilization",),
    ("nvmlDeviceGetTotalEnergyConsumption",),
    ("nvmlDeviceGetPcieReplayCounter",),
    ("nvmlDeviceGetRemappedRows",),
)


def fake() -> FakeNvml:
    return FakeNvml(
        [
            make_gpu(
                0,
                clock_graphics=1755,
                clock_events=pynvml.nvmlClocksEventReasonSwPowerCap,
                memory_temperature=64,
                encoder=[12, 167_000],
                energy=5_000_000,
                pcie_replays=3,
                remapped_rows=(2, 0, 0, 0),
            )
        ]
    )


def detail_calls(nvml: FakeNvml) -> list[int]:
    return [nvml.count(name, 0, *args) for name, *args in DETAIL_CALLS]


def test_the_source_reads_them_by_default_and_not_when_told() -> None:
    nvml = fake()
    source = make_source(nvml)
    full = source.sample()
    assert full.unread_gpu_fields == frozenset()
    gpu = full.gpus[0]
    assert (gpu.clock_graphics_mhz, gpu.clock_event_reasons) == (1755, ("sw_power_cap",))
    assert (gpu.temperature_memory_c, gpu.utilization_encoder_pct, gpu.energy_j) == (64, 12, 5000)
    assert (gpu.pcie_replays, gpu.remapped_rows_correctable) == (3, 2)
    assert detail_calls(nvml) == [1] * len(DETAIL_CALLS)

    source.read_details = False
    lean = source.sample()
    assert lean.unread_gpu_fields == ON_DEMAND_GPU_FIELDS
    assert all(getattr(lean.gpus[0], name) is None for name in ON_DEMAND_GPU_FIELDS)
    assert lean.gpus[0].clock_sm_mhz == gpu.clock_sm_mhz  # the cards' clock is always read
    assert lean.gpus[0].ecc_errors_uncorrected_volatile == gpu.ecc_errors_uncorrected_volatile
    assert detail_calls(nvml) == [1] * len(DETAIL_CALLS)  # not asked

    # Asked again (the GPU screen opens): the readings are there at once, read now (the
    # idle encoder's few seconds do not hold them back) or, for the counters, the reading
    # with details that their five seconds have not yet made due again.
    source.read_details = True
    again = source.sample()
    assert again.unread_gpu_fields == frozenset()
    assert detail_calls(nvml) == [2, 2, 2, 2, 2, 1, 1, 1]
    assert (again.gpus[0].energy_j, again.gpus[0].utilization_encoder_pct) == (5000, 12)


def test_counters_last_read_without_details_are_read_at_once_when_asked() -> None:
    nvml = fake()
    source = make_source(nvml)
    source.read_details = False
    source.sample()
    assert nvml.count("nvmlDeviceGetTotalEnergyConsumption", 0) == 0
    source.read_details = True
    gpu = source.sample().gpus[0]
    assert (gpu.energy_j, gpu.pcie_replays) == (5000, 3)  # not N/A for up to five seconds


async def test_the_gpu_screen_reads_them_while_open_and_never_shows_na_for_unread() -> None:
    nvml = fake()
    source = make_source(nvml)
    app = create_app(source=source, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert source.read_details is False  # the dashboard shows none of them
        app.receive_sample(source.sample())
        await pilot.pause()
        assert detail_calls(nvml) == [0] * len(DETAIL_CALLS)

        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, GpuDetailScreen)
        assert source.read_details is True  # and a sample is asked for at once
        fields = screen.query_one("#gpu-detail-fields", TextLines).content.plain
        gr_line = next(line for line in fields.splitlines() if line.strip().startswith("Gr "))
        assert NOT_READ_YET in gr_line and "N/A" not in gr_line

        app.receive_sample(source.sample())  # the sample it asked for
        await pilot.pause()
        fields = screen.query_one("#gpu-detail-fields", TextLines).content.plain
        assert "1755" in fields and "sw_power_cap" in fields and NOT_READ_YET not in fields

        await pilot.press("escape")
        await pilot.pause()
        assert source.read_details is False
