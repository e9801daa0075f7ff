"""Field by field: every reading gpumon takes, against nvidia-smi read around it.

The field table (:data:`gpumon.data.fields.FIELDS`) is the map: a field's ``query`` is its
``--query-gpu`` property; a field without one is looked up by its ``-q: <label>`` in
``nvidia-smi -q``, and reads ``gpumon only`` where nvidia-smi shows no such line. The GPU's
identity (name, UUID, PCI bus id) and the driver version are compared too. The exporter's check
(:mod:`tests.gpu_check.exporter_check`) compares its series with the same :func:`compare_gpu`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpumon.data.fields import FIELDS, Field
from gpumon.data.model import Sample
from tests.gpu_check import rules
from tests.gpu_check.report import Section, table
from tests.gpu_check.smi import NvidiaSmi, SmiError

#: Identity readings that are no field of the table: (key in gpumon's values, property, rule).
IDENTITY: tuple[tuple[str, str, rules.Rule], ...] = (
    ("name", "name", rules.TEXT),
    ("uuid", "uuid", rules.TEXT),
    ("pci_bus_id", "pci.bus_id", rules.BUS_ID),
    ("driver_version", "driver_version", rules.TEXT),
)
#: Fields nvidia-smi has no reading for: the Xid errors NVML reports as events (nvidia-smi
#: shows none; the kernel log has them). They read "gpumon only".
NOT_IN_NVIDIA_SMI = frozenset({"xid", "xid_count"})
#: Properties of --help-query-gpu that are no GPU reading: never listed as lacking.
NOT_READINGS = frozenset({"timestamp", "index", "count", "hostname"})
#: What gpumon lacks when --help-query-gpu cannot be read: a few well-known properties.
KNOWN_LACKING = (
    "utilization.jpeg", "utilization.ofa", "power.draw.instant",
    "power.default_limit", "power.max_limit", "clocks.current.video", "clocks.max.sm",
    "pcie.link.gen.current", "pcie.link.width.current", "ecc.mode.current",
    "ecc.errors.corrected.volatile.total", "retired_pages.pending",
    "compute_cap", "vbios_version",
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    gpu: int
    key: str
    smi_name: str
    mine: str
    theirs: str
    result: str
    score: str = ""
    unit: str = ""


@dataclass(frozen=True)
class Reading:
    """One reading of nvidia-smi: ``--query-gpu`` rows by index, ``-q`` blocks by bus id."""

    rows: Mapping[int, Mapping[str, str]]
    details: Mapping[str, Mapping[str, str]]

    def answer(self, gpu: int, query: str) -> str | None:
        return self.rows.get(gpu, {}).get(query)

    def line(self, gpu: int, label: str) -> str | None:
        bus = (self.answer(gpu, "pci.bus_id") or "").lower()
        return self.details.get(bus, {}).get(label)


def queries() -> list[str]:
    """Every property the check asks nvidia-smi for."""
    return [field.query for field in FIELDS if field.query] + [q for _, q, _ in IDENTITY]


def read(smi: NvidiaSmi, names: Sequence[str], with_details: bool = True) -> Reading:
    return Reading(smi.query(names), smi.details() if with_details else {})


def smi_name(field: Field) -> str:
    """How the table names the field's nvidia-smi side."""
    if field.query:
        return field.query
    return field.smi if field.smi.startswith("-q: ") else ""


def gpu_values(sample: Sample) -> dict[int, dict[str, Any]]:
    """Per GPU, every field's reading by attribute, plus the identity keys."""
    driver = sample.driver.driver_version if sample.driver else None
    values = {}
    for gpu in sample.gpus:
        one = {field.attribute: field.read(gpu) for field in FIELDS}
        one.update(name=gpu.name, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id)
        one["driver_version"] = driver
        values[gpu.index] = one
    return values


def _shown(rule: rules.Rule | None, value: Any) -> str:
    if rule is None or value is None:
        return rules.shown(value)
    try:
        return rules.shown(rule.mine(value))
    except (TypeError, ValueError):
        return repr(value)


def compare_gpu(
    gpu: int,
    mine: Sequence[Mapping[str, Any]],
    readings: Sequence[Reading],
    rejected: Sequence[str],
) -> list[Row]:
    """GPU ``gpu``'s rows: ``mine[r]`` (attribute -> value) against ``readings[r]`` and
    ``readings[r + 1]``. Identity keys missing from ``mine`` are left out."""
    rows = []
    for key, query, rule in IDENTITY:
        if key not in mine[-1]:
            continue
        answers = [[readings[r].answer(gpu, query), readings[r + 1].answer(gpu, query)]
                   for r in range(len(mine))]  # fmt: skip
        verdict = rules.compare_rounds(rule, [m[key] for m in mine], answers)
        rows.append(
            Row(gpu, key, query, verdict.mine, verdict.theirs, verdict.result, verdict.score)
        )
    for field in FIELDS:
        rows.append(_field_row(gpu, field, mine, readings, rejected))
    return rows


def _field_row(
    gpu: int,
    field: Field,
    mine: Sequence[Mapping[str, Any]],
    readings: Sequence[Reading],
    rejected: Sequence[str],
) -> Row:
    rule = rules.rule_for(field)
    values = [m.get(field.attribute) for m in mine]
    name = smi_name(field)
    unit = rule.unit if rule else ""
    if field.query:
        if field.query in rejected:
            return Row(gpu, field.key, name, _shown(rule, values[-1]), "", rules.NOT_QUERYABLE)
        answers = [[readings[r].answer(gpu, field.query), readings[r + 1].answer(gpu, field.query)]
                   for r in range(len(mine))]  # fmt: skip
    elif name:
        label = name.removeprefix("-q: ")
        answers = [[readings[r].line(gpu, label), readings[r + 1].line(gpu, label)]
                   for r in range(len(mine))]  # fmt: skip
    else:
        answers = []
    if all(text is None for around in answers for text in around):
        return Row(gpu, field.key, name, _shown(rule, values[-1]), "", rules.GPUMON_ONLY, unit=unit)
    verdict = rules.compare_rounds(rule, values, answers)
    return Row(
        gpu, field.key, name, verdict.mine, verdict.theirs, verdict.result, verdict.score, unit
    )


def rows_table(rows: Sequence[Row], mine: str = "gpumon") -> list[str]:
    """The table of rows: GPU, field, nvidia-smi's name, both values, the result."""
    return table(
        ("GPU", "field", "nvidia-smi name", mine, "nvidia-smi", "unit", "result", "rounds"),
        [
            (str(r.gpu), r.key, r.smi_name, r.mine, r.theirs, r.unit, r.result, r.score)
            for r in rows
        ],
    )


def tally(rows: Sequence[Row]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.result] = counts.get(row.result, 0) + 1
    return ", ".join(f"{count} {result}" for result, count in counts.items())


def legend(rounds: int) -> list[str]:
    rule_list = [rules.rule_for(field) for field in FIELDS]
    return [
        "Legend: values in nvidia-smi's units. nvidia-smi is read before and after each gpumon",
        "reading; a round agrees when gpumon lies within the tolerance of the range the two",
        "answers span (N/A on both sides agrees); a field agrees in a majority of the",
        f"{rounds} rounds. differ and 'no rule' fail the check; 'not queryable here': this",
        "nvidia-smi refuses the property; 'gpumon only': nvidia-smi shows no such reading.",
        "Tolerances:",
        *rules.legend([rule for rule in rule_list if rule is not None] + [rules.TEXT]),
    ]


def lacking(smi: NvidiaSmi) -> tuple[list[str], str]:
    """The --query-gpu properties gpumon does not read, and where the list comes from."""
    used = set(queries()) | NOT_READINGS
    properties = smi.properties()
    if not properties:
        return list(KNOWN_LACKING), "a fixed list: --help-query-gpu could not be read"
    names = [names[0] for names in properties if not used.intersection(names)]
    return names, "nvidia-smi --help-query-gpu"


def add_table(
    section: Section,
    rows: Sequence[Row],
    rounds: int,
    mine: str = "gpumon",
    with_legend: bool = True,
) -> None:
    """The table, its legend and the verdict, into ``section``."""
    section.lines += rows_table(rows, mine)
    if with_legend:
        section.lines += ["", *legend(rounds)]
    section.data["rows"] = [asdict(row) for row in rows]
    failing = [f"GPU {r.gpu} {r.key}" for r in rows if r.result in rules.FAILING]
    section.summary = tally(rows)
    if failing:
        section.fail(f"{', '.join(failing)} disagree")
        section.summary = f"{tally(rows)}; differ: {', '.join(failing)}"


def check_fields(source: Any, smi: NvidiaSmi, *, rounds: int = 3) -> Section:
    """The fields section: ``rounds`` gpumon samples, each between two nvidia-smi readings."""
    section = Section("fields", f"Fields: gpumon against nvidia-smi ({rounds} rounds)")
    first = source.sample()  # NVML's start (seconds without persistence mode) is not timed
    if first.unavailable is not None:
        section.fail(f"gpumon: {first.unavailable.headline} ({first.unavailable.detail})")
        return section
    names = queries()
    try:
        readings = [read(smi, names)]
        mine: list[dict[int, dict[str, Any]]] = []
        for _ in range(rounds):
            mine.append(gpu_values(source.sample()))
            readings.append(read(smi, names))
    except SmiError as error:
        section.fail(str(error))
        return section
    rows = [
        row
        for gpu in sorted(mine[0])
        for row in compare_gpu(gpu, [m[gpu] for m in mine], readings, smi.rejected)
    ]
    add_table(section, rows, rounds)
    section.data["not_queryable"] = list(smi.rejected)
    if smi.rejected:
        section.lines.append(f"Not queryable here (refused by this nvidia-smi): {smi.rejected}")
    names_lacking, origin = lacking(smi)
    section.data["gpumon_lacks"] = names_lacking
    section.lines.append(
        f"nvidia-smi has {len(names_lacking)} properties gpumon does not read ({origin}):"
    )
    section.lines += textwrap.wrap(", ".join(names_lacking), 96, initial_indent="  ",
                                   subsequent_indent="  ")  # fmt: skip
    return section
