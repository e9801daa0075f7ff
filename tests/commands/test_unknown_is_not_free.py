"""Unknown is never shown as free, zero or none in the headless outputs: a GPU whose
processes cannot be known, a UUID NVML has not told, a fan above 100 % and a power cap that
is N/A (once, once --json, status and export)."""

from __future__ import annotations

import json

from gpumon.commands import once
from gpumon.data import format as fmt
from gpumon.data.model import GpuStats, notable_unlisted_memory_bytes, unlisted_memory_bytes
from gpumon.sampling import snapshot
from tests.commands.test_once import validate
from tests.support.ui_helpers import GIB, MIB, make_gpu, make_process, make_sample


def busy_gpu_with_unlisted_processes() -> tuple[GpuStats, GpuStats]:
    """GPU 0: 53 GiB in use, one 2 GiB process listed. GPU 1: 12 GiB, all of it listed."""
    return (
        make_gpu(0, memory_used_bytes=53 * GIB, memory_total_bytes=80 * GIB),
        make_gpu(1, memory_used_bytes=12 * GIB + 3 * MIB),
    )


def test_unlisted_memory_is_what_the_listed_processes_do_not_hold() -> None:
    busy, full = busy_gpu_with_unlisted_processes()
    listed = (make_process(busy, 100, gpu_memory_bytes=2 * GIB),)
    all_listed = (make_process(full, 200, gpu_memory_bytes=12 * GIB),)

    assert unlisted_memory_bytes(busy, listed) == 51 * GIB
    assert notable_unlisted_memory_bytes(busy, listed) == 51 * GIB
    # A few MiB of driver overhead is not worth a word.
    assert unlisted_memory_bytes(full, all_listed) == 3 * MIB
    assert notable_unlisted_memory_bytes(full, all_listed) is None
    # Cannot be told: processes unknown, or a process whose memory is N/A.
    refused = make_gpu(2, processes_error="NVML: Insufficient Permissions")
    assert unlisted_memory_bytes(refused, ()) is None
    assert unlisted_memory_bytes(busy, (make_process(busy, 1, gpu_memory_bytes=None),)) is None


def test_once_and_json_say_memory_is_held_by_processes_not_listed() -> None:
    busy, full = busy_gpu_with_unlisted_processes()
    sample = make_sample(
        (busy, full),
        (
            make_process(busy, 100, gpu_memory_bytes=2 * GIB),
            make_process(full, 200, gpu_memory_bytes=12 * GIB),
        ),
    )

    table = once.render_table(sample)
    document = snapshot.sample_to_dict(sample)

    assert "51.0G used by processes not listed" in table
    assert table.count("used by processes not listed") == 1
    validate(document)
    assert [gpu["memory_unlisted_bytes"] for gpu in document["gpus"]] == [51 * GIB, 3 * MIB]
    # --no-processes: not asked, so not known.
    bare = snapshot.sample_to_dict(sample, include_processes=False)
    assert [gpu["memory_unlisted_bytes"] for gpu in bare["gpus"]] == [None, None]


def test_a_gpu_lost_at_start_has_a_null_uuid_in_json_and_once() -> None:
    lost = GpuStats(index=1, uuid=None, lost=True, lost_reason="fell off the bus")
    sample = make_sample((make_gpu(0), lost))

    document = snapshot.sample_to_dict(sample)
    table = once.render_table(sample)

    validate(document)
    assert document["gpus"][1]["uuid"] is None
    assert "LOST" in table and "None" not in table


def test_a_fan_above_100_percent_is_valid_json() -> None:
    """NVML allows a fan speed over 100 % (nvidia-smi documents it)."""
    document = snapshot.sample_to_dict(make_sample((make_gpu(0, fan_pct=107),)))

    validate(document)
    assert json.loads(json.dumps(document))["gpus"][0]["fan_pct"] == 107


def test_power_with_one_side_unknown_reads_the_same_in_every_mode() -> None:
    assert fmt.watts_pair(158.2, 700.0) == "158 / 700W"
    assert fmt.watts_pair(158.2, None) == "158W / N/A"
    assert fmt.watts_pair(None, 700.0) == "N/A / 700W"
    assert fmt.watts_pair(None, None) == "N/A"
    table = once.render_table(make_sample((make_gpu(0, power_draw_w=158.0, power_limit_w=None),)))
    assert "158W / N/A" in table


def test_an_idle_gpu_whose_processes_are_unknown_is_free_in_no_headless_output() -> None:
    """Idle by every reading (0 %, 10 MiB in use, none listed), but its process list was
    refused, or it is lost: once, once --json, status and export never call it FREE; the
    readable idle GPU beside it is FREE in all four."""
    from gpumon.commands import status
    from gpumon.commands.export import collector as export
    from gpumon.data.free import free_gpu_indices

    idle = {"memory_used_bytes": 10 * MIB, "utilization_gpu_pct": 0}
    readable = make_gpu(0, **idle)
    refused = make_gpu(1, **idle, processes_error="NVML: Insufficient Permissions")
    lost = GpuStats(index=2, uuid=None, lost=True, lost_reason="fell off the bus")
    sample = make_sample((readable, refused, lost))
    free = free_gpu_indices(sample, 1024)

    table = once.render_table(sample, free=free)
    document = snapshot.sample_to_dict(sample)
    line = status.status_line(sample, free=free)
    (family,) = [f for f in export.build_families(sample) if f.name == "gpumon_gpu_free"]

    assert [row.endswith("| FREE") for row in table.splitlines() if row[:1] == "["] == [
        True,
        False,
        False,
    ]
    validate(document)
    assert [gpu["free"] for gpu in document["gpus"]] == [True, False, False]
    assert line == "GPU 0:FREE 1:0/0% 2:LOST"
    assert {s.labels["gpu"]: s.value for s in family.samples} == {"0": 1.0}  # unknown: none
