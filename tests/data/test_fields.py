"""The field table: every GPU reading has one descriptor, and every output iterates it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gpumon.commands import status
from gpumon.commands.export import collector as export
from gpumon.data import fields
from gpumon.data.model import GpuStats
from gpumon.sampling.snapshot import SCHEMA_PATH
from gpumon.sources.demo import DemoSource

ROOT = Path(__file__).resolve().parents[2]


def every_field_set() -> GpuStats:
    """A GPU whose every reading is known (the demo's, plus what its boards lack)."""
    gpu = DemoSource(gpu_count=1).sample().gpus[0]
    return dataclasses.replace(
        gpu,
        ecc_errors_uncorrected_volatile=1,
        mig_mode=False,
        clock_event_reasons=("sw_power_cap", "hw_thermal_slowdown"),
        temperature_memory_c=71,
        remapped_rows_correctable=2,
        remapped_rows_uncorrectable=0,
        remapped_rows_pending=False,
        remapped_rows_failed=False,
    )


def test_every_reading_of_the_model_has_exactly_one_descriptor() -> None:
    not_readings = set(fields.IDENTITY) | set(fields.PARTS)
    readings = {f.name for f in dataclasses.fields(GpuStats)} - not_readings
    assert {field.attribute for field in fields.FIELDS} == readings
    assert len({field.key for field in fields.FIELDS}) == len(fields.FIELDS)
    assert len({field.label for field in fields.FIELDS}) == len(fields.FIELDS)


def test_every_descriptor_is_in_the_json_schema_and_its_docs() -> None:
    schema = json.loads(Path(SCHEMA_PATH).read_text())
    gpu = schema["$defs"]["gpu"]
    docs = (ROOT / "docs" / "json-schema.md").read_text()
    for field in fields.FIELDS:
        assert field.attribute in gpu["properties"], field.attribute
        assert field.attribute in gpu["required"], field.attribute
        assert f"`{field.attribute}`" in docs, field.attribute


def test_every_descriptor_is_exported_and_documented() -> None:
    families = export.build_families(
        dataclasses.replace(DemoSource(gpu_count=1).sample(), gpus=(every_field_set(),))
    )
    series = {family.name: family for family in families}
    docs = (ROOT / "docs" / "prometheus.md").read_text()
    for field in fields.FIELDS:
        assert field.prometheus is not None, field.key
        family = series[field.prometheus.name]
        assert family.samples, field.key  # a series when the reading is known
        shown = field.prometheus.name + ("_total" if field.prometheus.kind == "counter" else "")
        assert f"`{shown}`" in docs, shown
    reasons = {s.labels["reason"] for s in series["gpumon_gpu_clock_event_reason"].samples}
    assert reasons == {"sw_power_cap", "hw_thermal_slowdown"}


def test_status_format_offers_every_descriptor() -> None:
    gpu = every_field_set()
    values = status.gpu_fields(gpu)
    for field in fields.FIELDS:
        assert field.key in status.FIELDS
        assert values[field.key] == field.show(gpu)
    assert status.check_template(" ".join(f"{{{key}}}" for key in status.FIELDS)) is None


def test_na_is_na_in_every_descriptor() -> None:
    lost = GpuStats(index=0, uuid=None)
    for field in fields.FIELDS:
        assert field.read(lost) is None
        assert field.show(lost) == "N/A"
