"""NvmlSource on GPUs in MIG mode: MIG devices, N/A utilisation, processes in instances,
non-root users, lost GPUs; and process lists read without host details."""

from __future__ import annotations

import sys

import pynvml
import pytest

from gpumon.data.model import GpuProcess, MigInstance, ProcessKind, Sample
from gpumon.sources.host.inspector import ProcessInspector
from gpumon.sources.nvml.mig import MIG_RESCAN_S, mig_profile
from gpumon.sources.nvml.source import NvmlSource
from tests.sources.nvml.test_nvml_source import GPU_IS_LOST, NOT_SUPPORTED, FakeClock, make_source
from tests.support.fake_nvml import (
    A100_40GB,
    GIB,
    MIB,
    NO_INSTANCE_ID,
    Fail,
    FakeNvml,
    FakeProcess,
    FakeProcessTable,
    MemoryV2,
    ProcessInfo,
    ProcessUtilizationSample,
    Utilization,
    make_gpu,
    make_mig_device,
    make_mig_gpu,
    user_name,
)

NO_PERMISSION = Fail(pynvml.NVML_ERROR_NO_PERMISSION)
IN_INSTANCE_1 = {"gpu_instance_id": 1, "compute_instance_id": 0}
IN_INSTANCE_2 = {"gpu_instance_id": 2, "compute_instance_id": 0}
MIG_UUID_1 = "MIG-00000100-aaaa-bbbb-cccc-000000000001"


def mig_server() -> FakeNvml:
    """GPU 0: an A100 in MIG mode, three instances (3g.20gb, 2g.10gb, 1g.5gb) in slots 0-2
    and a job in two of them. GPU 1: an H100 without MIG, with a job of its own."""
    return FakeNvml(
        [
            make_mig_gpu(
                0,
                [
                    make_mig_device(0, 1, "3g.20gb", used=9 * GIB),
                    make_mig_device(0, 2, "2g.10gb", used=4 * GIB),
                    make_mig_device(0, 3, "1g.5gb"),
                ],
                compute_processes=[
                    ProcessInfo(100, 9 * GIB, gpuInstanceId=1, computeInstanceId=0),
                    ProcessInfo(101, 4 * GIB, gpuInstanceId=2, computeInstanceId=0),
                ],
            ),
            make_gpu(1, compute_processes=[ProcessInfo(200, 2 * GIB)]),
        ]
    )


def jobs() -> FakeProcessTable:
    return FakeProcessTable(FakeProcess(100), FakeProcess(101), FakeProcess(200))


def instance(index: int, gpu_instance_id: int, profile: str, used: int) -> MigInstance:
    """What mig_server's GPU 0 should show for one of its instances."""
    total = int(profile.split(".")[-1].removesuffix("gb")) * GIB
    return MigInstance(
        gpu_index=0,
        index=index,
        gpu_instance_id=gpu_instance_id,
        compute_instance_id=0,
        profile=profile,
        uuid=f"MIG-0000{gpu_instance_id:02x}00-aaaa-bbbb-cccc-{gpu_instance_id:012x}",
        memory_used_bytes=used,
        memory_total_bytes=total,
    )


EXPECTED_INSTANCES = (
    instance(0, 1, "3g.20gb", 9 * GIB),
    instance(1, 2, "2g.10gb", 4 * GIB),
    instance(2, 3, "1g.5gb", 13 * MIB),
)


# -- MIG devices -------------------------------------------------------------------------------


def test_mig_devices_are_listed_with_ids_profile_uuid_and_memory() -> None:
    sample = make_source(mig_server(), jobs()).sample()

    gpu = sample.gpus[0]
    assert gpu.mig_mode is True
    assert gpu.mig_instances == EXPECTED_INSTANCES
    assert gpu.mig_instances[0].uuid == MIG_UUID_1
    assert gpu.mig_instances[0].memory_used_fraction == pytest.approx(9 / 20)
    assert sample.gpus[1].mig_mode is False and sample.gpus[1].mig_instances == ()


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "1c.3g.20gb"),  # a compute instance's share
        ("NVIDIA H100 NVL MIG 1g.12gb+me", "1g.12gb+me"),
        ("NVIDIA A100-SXM4-40GB", None),
        ("", None),
        (None, None),
    ],
)
def test_profile_is_what_the_name_ends_with_after_mig(
    name: str | None, profile: str | None
) -> None:
    assert mig_profile(name) == profile


def test_mig_device_names_in_bytes_from_an_older_binding() -> None:
    device = make_mig_device(0, 1, "3g.20gb", name=b"NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    device["uuid"] = MIG_UUID_1.encode()
    fake = FakeNvml([make_mig_gpu(0, [device])])

    (only,) = make_source(fake).sample().gpus[0].mig_instances or ()

    assert (only.profile, only.uuid) == ("3g.20gb", MIG_UUID_1)


def test_empty_slots_are_skipped() -> None:
    """Slots are NVML's MIG device indices: an instance keeps its index when one before it
    is destroyed, and empty slots (NOT_FOUND) are no instance."""
    devices = [make_mig_device(0, 1, "3g.20gb"), None, make_mig_device(0, 5, "1g.5gb")]
    fake = FakeNvml([make_mig_gpu(0, devices)])

    instances = make_source(fake).sample().gpus[0].mig_instances or ()

    assert [(mig.index, mig.gpu_instance_id, mig.profile) for mig in instances] == [
        (0, 1, "3g.20gb"),
        (2, 5, "1g.5gb"),
    ]
    # Every slot below the maximum count is asked once, not past it.
    assert fake.count("nvmlDeviceGetMigDeviceHandleByIndex", 0) == 7


def test_a_mig_field_that_fails_reads_na_and_the_rest_still_shows() -> None:
    """An error other than NOT_SUPPORTED is this MIG device's alone: the others answer."""
    devices = [
        make_mig_device(0, 1, "3g.20gb", uuid=Fail(pynvml.NVML_ERROR_UNKNOWN)),
        make_mig_device(0, 2, "2g.10gb", memory_v2=Fail(pynvml.NVML_ERROR_UNKNOWN)),
        make_mig_device(0, 3, "1g.5gb", name=NO_PERMISSION),
    ]
    devices[0]["gpu_instance_id"] = NO_PERMISSION
    fake = FakeNvml([make_mig_gpu(0, devices)])

    first, second, third = make_source(fake).sample().gpus[0].mig_instances or ()

    assert (first.uuid, first.gpu_instance_id, first.profile) == (None, None, "3g.20gb")
    assert first.memory_total_bytes == 20 * GIB
    assert (second.memory_used_bytes, second.memory_total_bytes) == (None, None)
    assert second.uuid is not None and second.gpu_instance_id == 2
    assert third.profile is None and third.memory_total_bytes == 5 * GIB
    assert third.uuid is not None and third.gpu_instance_id == 3


def test_a_mig_field_not_supported_is_not_asked_of_any_mig_device_again() -> None:
    """What NVML does not support on one MIG device it supports on none of the GPU's."""
    devices = [make_mig_device(0, 1, "3g.20gb", name=NOT_SUPPORTED)]
    devices += [make_mig_device(0, 2, "2g.10gb"), make_mig_device(0, 3, "1g.5gb")]
    fake = FakeNvml([make_mig_gpu(0, devices)])
    source = make_source(fake)

    instances = source.sample().gpus[0].mig_instances or ()

    assert [mig.profile for mig in instances] == [None, None, None]
    assert [fake.mig_device_calls(0, slot, "nvmlDeviceGetName") for slot in range(3)] == [1, 0, 0]


def test_mig_memory_falls_back_to_v1_when_v2_is_not_supported() -> None:
    device = make_mig_device(0, 1, "3g.20gb", used=GIB, memory_v2=NOT_SUPPORTED)
    fake = FakeNvml([make_mig_gpu(0, [device])])

    (only,) = make_source(fake).sample().gpus[0].mig_instances or ()

    assert (only.memory_used_bytes, only.memory_total_bytes) == (GIB, 20 * GIB)


def test_what_stays_is_read_once_and_memory_every_sample() -> None:
    fake = mig_server()
    source = make_source(fake, jobs())
    samples = [source.sample() for _ in range(3)]

    fake.gpus[0]["mig_devices"][0]["memory_v2"] = MemoryV2(
        total=20 * GIB, reserved=0, free=8 * GIB, used=12 * GIB
    )
    last = source.sample()

    assert [sample.gpus[0].mig_instances for sample in samples] == [EXPECTED_INSTANCES] * 3
    assert last.gpus[0].mig_instances is not None
    assert last.gpus[0].mig_instances[0].memory_used_bytes == 12 * GIB
    assert fake.count("nvmlDeviceGetMaxMigDeviceCount", 0) == 1
    assert fake.count("nvmlDeviceGetMigDeviceHandleByIndex", 0) == 7
    for slot in range(3):
        for function in ("nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetGpuInstanceId"):
            assert fake.mig_device_calls(0, slot, function) == 1
        assert fake.mig_device_calls(0, slot, "nvmlDeviceGetMemoryInfo") == 4


def test_a_destroyed_instance_goes_at_once_and_a_created_one_comes_within_the_rescan() -> None:
    fake = mig_server()
    clock = FakeClock()
    source = make_source(fake, jobs(), monotonic=clock)
    source.sample()

    fake.gpus[0]["mig_devices"][1] = None  # 2g.10gb destroyed: its kept handle stops answering
    after_destroy = source.sample()
    fake.gpus[0]["mig_devices"][1] = make_mig_device(0, 4, "2g.10gb")  # created in its place
    before_rescan = source.sample()
    clock.advance(MIG_RESCAN_S)
    after_rescan = source.sample()

    def slots(sample: Sample) -> list[tuple[int, int | None]]:
        instances = sample.gpus[0].mig_instances or ()
        return [(mig.index, mig.gpu_instance_id) for mig in instances]

    assert slots(after_destroy) == [(0, 1), (2, 3)]
    assert slots(before_rescan) == [(0, 1), (2, 3)]
    assert slots(after_rescan) == [(0, 1), (1, 4), (2, 3)]


def test_mig_mode_unknown_count_means_unknown_instances() -> None:
    """MIG on but its devices cannot be enumerated: unknown (None), not "no instance"."""
    fake = FakeNvml([make_mig_gpu(0, [make_mig_device(0, 1, "3g.20gb")])])
    del fake.gpus[0]["mig_max_count"]  # NOT_SUPPORTED

    gpu = make_source(fake).sample().gpus[0]

    assert gpu.mig_mode is True and gpu.mig_instances is None
    assert gpu.temperature_c is not None


def test_a_binding_without_mig_calls_has_unknown_instances() -> None:
    """nvidia-ml-py before 11.450 has no MIG functions: N/A, and no AttributeError."""

    class OldBinding(FakeNvml):
        def __getattribute__(self, name: str) -> object:
            if name == "nvmlDeviceGetMaxMigDeviceCount":
                raise AttributeError(name)
            return super().__getattribute__(name)

    fake = OldBinding([make_mig_gpu(0, [make_mig_device(0, 1, "3g.20gb")])])

    assert make_source(fake).sample().gpus[0].mig_instances is None


# -- utilisation under MIG ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer", [NOT_SUPPORTED, Utilization(gpu=0, memory=0)], ids=["not-supported", "zero"]
)
def test_device_utilization_under_mig_is_na_never_0(answer: object) -> None:
    """nvtop #256, nvitop #5: a MIG GPU is not idle because NVML cannot say how busy it is;
    a driver that answers 0 anyway is not believed (it is not even asked)."""
    fake = FakeNvml([make_mig_gpu(0, [make_mig_device(0, 1, "3g.20gb")], utilization=answer)])
    source = make_source(fake)

    gpus = [source.sample().gpus[0] for _ in range(2)]

    assert [(gpu.utilization_gpu_pct, gpu.utilization_memory_pct) for gpu in gpus] == [
        (None, None)
    ] * 2
    assert fake.count("nvmlDeviceGetUtilizationRates", 0) == 0


def test_utilization_is_read_again_once_mig_is_off() -> None:
    """Under MIG nothing is remembered as unsupported: after MIG is turned off (a GPU reset)
    the utilisation reads again, and the MIG devices go."""
    fake = FakeNvml([make_mig_gpu(0, [make_mig_device(0, 1, "3g.20gb")])])
    source = make_source(fake)
    under_mig = source.sample().gpus[0]

    fake.gpus[0]["mig"] = [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]
    fake.gpus[0]["utilization"] = Utilization(gpu=63, memory=21)
    calls = fake.mig_calls(0)
    after = source.sample().gpus[0]

    assert under_mig.utilization_gpu_pct is None and under_mig.mig_instances
    assert (after.mig_mode, after.utilization_gpu_pct, after.mig_instances) == (False, 63, ())
    assert fake.mig_calls(0) == calls


def test_process_sm_utilization_under_mig_is_na_and_not_asked() -> None:
    fake = mig_server()
    fake.gpus[0]["process_utilization"] = [ProcessUtilizationSample(100, 1, 0)]

    sample = make_source(fake, jobs()).sample()

    assert {p.pid: p.sm_utilization_pct for p in sample.processes_on(0)} == {100: None, 101: None}
    assert fake.count("nvmlDeviceGetProcessUtilization", 0) == 0


# -- processes in MIG instances ----------------------------------------------------------------


def test_processes_carry_their_mig_instance() -> None:
    fake = mig_server()
    fake.gpus[0]["compute_processes"].append(ProcessInfo(102, GIB))  # ids not set
    assert fake.gpus[0]["compute_processes"][-1].gpuInstanceId == NO_INSTANCE_ID
    table = jobs()
    table.add(FakeProcess(102))

    sample = make_source(fake, table).sample()

    instances = {p.pid: (p.gpu_instance_id, p.compute_instance_id) for p in sample.processes}
    assert instances == {100: (1, 0), 101: (2, 0), 102: (None, None), 200: (None, None)}
    assert sample.gpus[0].processes_error is None
    on_mig = next(p for p in sample.processes if p.pid == 100)
    assert (on_mig.kind, on_mig.gpu_memory_bytes, on_mig.user) == (
        ProcessKind.COMPUTE,
        9 * GIB,
        user_name(1000),
    )


def test_instance_ids_from_the_v2_process_call_of_an_older_driver() -> None:
    gpu = make_mig_gpu(0, [make_mig_device(0, 1, "3g.20gb")])
    gpu["compute_processes"] = Fail(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    gpu["compute_processes_v2"] = [ProcessInfo(100, GIB, gpuInstanceId=1, computeInstanceId=0)]

    (process,) = make_source(FakeNvml([gpu]), jobs()).sample().processes

    assert (process.gpu_instance_id, process.compute_instance_id) == (1, 0)


def test_instance_ids_of_zero_are_ids_not_unset() -> None:
    """GPU instance 0 exists (a 7g full-GPU instance): only 0xFFFFFFFF means "not set"."""
    gpu = make_mig_gpu(0, [make_mig_device(0, 0, "7g.40gb")])
    gpu["compute_processes"] = [ProcessInfo(100, GIB, gpuInstanceId=0, computeInstanceId=0)]

    (process,) = make_source(FakeNvml([gpu]), jobs()).sample().processes

    assert (process.gpu_instance_id, process.compute_instance_id) == (0, 0)


# -- a non-root user ---------------------------------------------------------------------------


def test_non_root_gets_unknown_instances_and_unknown_processes_and_the_rest() -> None:
    """NVML refuses MIG devices and a MIG GPU's process lists to non-root users: both are
    unknown (never "no instance", never "no process"); the GPU's other readings and the other
    GPU are as for root."""
    fake = mig_server()
    fake.non_root = True
    source = make_source(fake, jobs())

    samples = [source.sample() for _ in range(2)]

    for sample in samples:
        mig, other = sample.gpus
        assert mig.lost is False and mig.mig_mode is True
        assert mig.mig_instances is None
        assert mig.processes_error is not None and "Insufficient Permissions" in mig.processes_error
        assert sample.processes_on(0) == ()
        assert mig.temperature_c is not None and mig.memory_used_bytes is not None
        assert mig.utilization_gpu_pct is None
        assert other.mig_instances == () and other.processes_error is None
        assert [p.pid for p in sample.processes_on(1)] == [200]
        assert sample.processes_read is True


def test_non_root_then_root_reads_the_instances() -> None:
    """NO_PERMISSION is not remembered as unsupported: permission granted, they show."""
    fake = mig_server()
    fake.non_root = True
    source = make_source(fake, jobs())
    refused = source.sample()

    fake.non_root = False
    granted = source.sample()

    assert refused.gpus[0].mig_instances is None
    assert granted.gpus[0].mig_instances == EXPECTED_INSTANCES
    assert sorted(p.pid for p in granted.processes_on(0)) == [100, 101]


# -- a lost GPU --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    ["max_count", "handle", "gpu_instance_id", "uuid", "memory_v2"],
)
def test_gpu_is_lost_from_a_mig_call_makes_the_gpu_lost(where: str) -> None:
    fake = mig_server()
    if where == "max_count":
        fake.gpus[0]["mig_max_count"] = GPU_IS_LOST
    elif where == "handle":
        fake.gpus[0]["mig_devices"][1] = GPU_IS_LOST
    else:
        fake.gpus[0]["mig_devices"][2][where] = GPU_IS_LOST
    source = make_source(fake, jobs())

    first, second = source.sample(), source.sample()

    for sample in (first, second):
        lost, other = sample.gpus
        assert lost.lost is True and "fell off the bus" in (lost.lost_reason or "")
        assert lost.mig_instances is None and lost.utilization_gpu_pct is None
        assert lost.name == A100_40GB  # its identity stays
        assert sample.processes_on(0) == ()
        assert other.lost is False and [p.pid for p in sample.processes_on(1)] == [200]


def test_gpu_lost_on_a_later_memory_read() -> None:
    fake = mig_server()
    source = make_source(fake, jobs())
    source.sample()

    fake.gpus[0]["mig_devices"][0]["memory_v2"] = GPU_IS_LOST
    lost = source.sample().gpus[0]

    assert lost.lost is True and lost.mig_instances is None


# -- MIG off: nothing more asked ---------------------------------------------------------------


def test_mig_off_has_no_instances_and_asks_nothing_of_mig() -> None:
    """A GPU without MIG asks nothing of MIG but its mode, at the first sample and then every
    SETTINGS_REFRESH_S (the test clock stands still)."""
    fake = FakeNvml([make_gpu(0), make_gpu(1, mig=NOT_SUPPORTED)])
    source = make_source(fake)

    samples = [source.sample() for _ in range(3)]

    for sample in samples:
        assert [gpu.mig_instances for gpu in sample.gpus] == [(), ()]
        assert [gpu.utilization_gpu_pct for gpu in sample.gpus] == [40, 41]
    assert fake.mig_calls(0) == fake.mig_calls(1) == 0
    assert fake.count("nvmlDeviceGetMigMode", 0) == 1


def test_pending_mig_mode_is_off_and_asks_nothing_of_mig() -> None:
    """Enabled but pending a GPU reset: still a GPU without MIG devices."""
    mig = [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE]
    fake = FakeNvml([make_gpu(0, mig=mig, mig_devices=[make_mig_device(0, 1, "3g.20gb")])])

    gpu = make_source(fake).sample().gpus[0]

    assert (gpu.mig_mode, gpu.mig_instances) == (False, ())
    assert gpu.utilization_gpu_pct == 40
    assert fake.mig_calls(0) == 0


# -- read_host_details=False -------------------------------------------------------------------


def test_process_lists_without_host_details(monkeypatch: pytest.MonkeyPatch) -> None:
    """For `gpumon status`: NVML says which GPUs have processes; neither psutil nor /proc is
    read (gpumon.sources.host.inspector cannot even be imported here)."""
    table = jobs()
    inspector = ProcessInspector(
        process_factory=table,  # type: ignore[arg-type]
        current_uid=1000,
    )
    monkeypatch.setitem(sys.modules, "gpumon.sources.host.inspector", None)
    fake = mig_server()
    source = NvmlSource(nvml=fake, inspector=inspector, read_host_details=False)

    sample = source.sample()

    assert sample.processes_read is True
    assert sorted(sample.processes, key=lambda p: p.pid) == [
        GpuProcess(0, fake.gpus[0]["uuid"], 100, ProcessKind.COMPUTE, 9 * GIB, **IN_INSTANCE_1),
        GpuProcess(0, fake.gpus[0]["uuid"], 101, ProcessKind.COMPUTE, 4 * GIB, **IN_INSTANCE_2),
        GpuProcess(1, fake.gpus[1]["uuid"], 200, ProcessKind.COMPUTE, 2 * GIB),
    ]
    assert all(p.visible and p.user is None and p.command is None for p in sample.processes)
    assert all(table.lookups(pid) == 0 for pid in (100, 101, 200))
    assert sample.host.cpu_pct is None and sample.host.memory_total_bytes is None
    assert sample.host.hostname
    # Nor NVML's per-process utilisation: a detail status never shows.
    assert fake.count("nvmlDeviceGetProcessUtilization") == 0


def test_unknown_processes_stay_unknown_without_host_details() -> None:
    fake = mig_server()
    fake.non_root = True

    sample = NvmlSource(nvml=fake, read_host_details=False).sample()

    assert sample.gpus[0].processes_error is not None
    assert [p.pid for p in sample.processes] == [200]


def test_no_processes_read_stays_no_processes_read_whatever_host_details_says() -> None:
    fake = mig_server()

    sample = NvmlSource(nvml=fake, read_processes=False, read_host_details=False).sample()

    assert (sample.processes, sample.processes_read) == ((), False)
    assert fake.count("nvmlDeviceGetComputeRunningProcesses") == 0
