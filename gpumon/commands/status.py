"""``gpumon status``: one short line for a tmux (or any other) status bar.

Run every few seconds, so it starts fast: one sample, no psutil, no textual, no colours. The
default is one cell per GPU, ``GPU 0:87/26% 1:FREE ...``, with ``?`` after a GPU whose
process list is unknown (never FREE); a ``--format`` without ``{free}`` reads no process list.
``--free-first`` leads with the FREE GPUs (``free 3,6,7 | GPU ...``, ``0 free``, ``free ?``
while a GPU's processes are unknown), the answer a status bar is mostly glanced at for.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Set
from typing import TYPE_CHECKING

from gpumon.data import format as fmt
from gpumon.data.fields import FIELDS as TABLE
from gpumon.data.model import ON_DEMAND_GPU_FIELDS, GpuStats, Sample

if TYPE_CHECKING:
    from gpumon.config import Settings

DEFAULT_FORMAT = "{index}:{util_num}/{mem_pct_num}%"
#: What the default format shows for a FREE GPU, in place of ``0/0%``.
FREE_CELL = "{index}:FREE"
#: What the default format adds after a GPU whose process list is unknown.
UNKNOWN_MARK = "?"
FREE = "FREE"
DEFAULT_SEPARATOR = " "
DEFAULT_PREFIX = "GPU "
#: What ``--free-first`` says when no GPU is free but some GPU's processes are unknown.
FREE_UNKNOWN = "free ?"
#: Between the ``--free-first`` lead and the GPUs.
LEAD_SEPARATOR = " | "
#: What the line says when there is no GPU data (no driver): never a blank status bar.
NO_DATA = "GPU N/A"

#: The fields ``--format`` may use, with what they hold. All are strings; N/A is "N/A":
#: the GPU's identity, every field of the field table (:mod:`gpumon.data.fields`) by its key, and
#: a few derived from them.
FIELDS: dict[str, str] = {
    "index": "NVML index (0, 1, ...)",
    "name": "product name",
    "uuid": "full GPU UUID",
    "short_uuid": "GPU-1a2b3c4d",
    **{field.key: field.help for field in TABLE},
    "util_num": "GPU utilisation without the % sign (87)",
    "mem_pct": "memory used, percent of total (26%)",
    "mem_pct_num": "memory used, percent of total, without the % sign (26)",
    "free": "FREE when the GPU has no process and less memory in use than free_threshold_mib, "
    "else empty (also when its processes are unknown)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    fields = ", ".join(f"{{{name}}}" for name in FIELDS)
    parser.add_argument(
        "--format",
        default=DEFAULT_FORMAT,
        metavar="TEMPLATE",
        # argparse %-formats help texts: the default's "%" must be doubled.
        help=f"Python format string applied to each GPU (default: {DEFAULT_FORMAT!r}, and "
        f"{FREE_CELL!r} for a FREE GPU); fields: {fields}".replace("%", "%%"),
    )
    parser.add_argument(
        "--separator",
        default=DEFAULT_SEPARATOR,
        metavar="TEXT",
        help=f"text between GPUs (default: {DEFAULT_SEPARATOR!r})",
    )
    parser.add_argument(
        "--prefix",
        metavar="TEXT",
        help=f"text before the first GPU (default: {DEFAULT_PREFIX!r} with the default "
        "format, nothing with your own --format)",
    )
    parser.add_argument(
        "--free-first",
        action="store_true",
        help="lead with the FREE GPUs: 'free 3,6,7 | GPU ...' ('0 free' when none is, "
        "'free ?' when a GPU's processes are unknown)",
    )


def run(
    settings: Settings,
    *,
    format: str,
    separator: str,
    prefix: str | None,
    free_first: bool = False,
) -> int:
    """``gpumon status``: print the line (exit 0), or ``GPU N/A`` without GPU data (exit 1)."""
    template = format
    problem = None if template == DEFAULT_FORMAT else check_template(template)
    if problem is not None:
        shown = fmt.safe_text(template, 80)
        print(f"gpumon status: error: bad --format {shown!r}: {problem}", file=sys.stderr)
        return 2
    from gpumon.sampling.snapshot import no_gpu_data, report_unavailable, take_sample

    # NVML's process lists only when the line shows FREE, never the host's per-process reads
    # (the line shows no process); PCIe only when the template shows it.
    shows_free = free_first or template == DEFAULT_FORMAT or "{free" in template
    details = False  # the fields the source may leave unread: only where the template shows one
    if template != DEFAULT_FORMAT:
        import string  # only a template of the user's own is looked at

        names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        details = any(f.key in names and f.attribute in ON_DEMAND_GPU_FIELDS for f in TABLE)
    sample = take_sample(
        settings,
        processes=shows_free,
        pcie="{pcie_" in template,
        host_details=False,
        details=details,
    )
    if no_gpu_data(sample):
        assert sample.unavailable is not None
        print(NO_DATA)  # the bar says so; the reason goes to stderr (tmux shows stdout only)
        report_unavailable(sample.unavailable)
        return 1
    from gpumon.data.free import free_gpu_indices, processes_known

    free = free_gpu_indices(sample, settings.free_threshold_mib)
    unknown = {gpu.index for gpu in sample.gpus if shows_free and not processes_known(gpu, sample)}
    line = status_line(
        sample, template=template, separator=separator, prefix=prefix, free=free, unknown=unknown
    )
    if free_first:
        demo = "DEMO " if sample.simulated else ""  # DEMO still comes first
        lead = free_lead(free, len(sample.gpus), len(unknown))
        line = demo + lead + line.removeprefix(demo)
    print(line)
    return 0


#: A field's format spec: ``[[fill]align][width][.precision]``, nothing else (no nested
#: fields, no attribute or index access, no conversion), widths bounded.
_SPEC = re.compile(
    r"(?:(?P<fill>[^{}])?[<>^])?(?P<width>[0-9]{1,6})?(?:\.(?P<precision>[0-9]{1,6}))?"
)
MAX_WIDTH = 200


def check_template(template: str) -> str | None:
    """Why ``template`` cannot be used, or ``None``: only :data:`FIELDS`, each with at most a
    ``[[fill]align][width][.precision]`` spec up to :data:`MAX_WIDTH` (no Python internals, no
    gigabyte strings).
    """
    import string  # only a template of the user's own is checked

    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        return str(error)
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name == "" or name.isdigit():
            return "use named fields such as {util}, not {} or {0}"
        shown = fmt.safe_text(name, 40)
        if name not in FIELDS:
            return f"unknown field {{{shown}}} (known: {', '.join(FIELDS)})"
        if conversion is not None:
            return f"{{{shown}!{fmt.safe_text(conversion)}}}: conversions are not supported"
        match = _SPEC.fullmatch(spec or "")
        if match is None:
            return (
                f"{{{shown}:{fmt.safe_text(spec or '', 40)}}}: a field takes "
                "[[fill]align][width][.precision], e.g. {util:>4}"
            )
        fill = match.group("fill")
        if fill is not None and not fill.isprintable():
            return f"{{{shown}}}: the fill character must be printable"
        for part in ("width", "precision"):
            value = match.group(part)
            if value is not None and int(value) > MAX_WIDTH:
                return f"{{{shown}}}: {part} {value} is more than {MAX_WIDTH}"
    try:
        template.format(**dict.fromkeys(FIELDS, fmt.NA))
    except (ValueError, IndexError, KeyError, AttributeError, TypeError) as error:
        return str(error)
    return None


def gpu_fields(gpu: GpuStats, ascii_only: bool = False, free: bool = False) -> dict[str, str]:
    """The ``--format`` fields of one GPU, as strings (N/A when not known); ``free`` says
    whether the GPU is FREE (:func:`gpumon.data.free.free_gpu_indices`)."""
    fraction = gpu.memory_used_fraction
    values = {field.key: field.show(gpu) for field in TABLE}
    if ascii_only:
        values = {key: text.replace("°C", "C") for key, text in values.items()}
    return {
        **values,
        "index": str(gpu.index),
        "name": gpu.name or fmt.NA,
        "uuid": gpu.uuid or fmt.NA,
        "short_uuid": gpu.short_uuid,
        "util_num": _number(gpu.utilization_gpu_pct),
        "mem_pct": fmt.percent(None if fraction is None else 100 * fraction),
        "mem_pct_num": _number(None if fraction is None else 100 * fraction),
        "free": FREE if free else "",
    }


def _cell(gpu: GpuStats, template: str, ascii_only: bool, free: bool, unknown: bool) -> str:
    if gpu.lost:
        return f"{gpu.index}:LOST"
    if template != DEFAULT_FORMAT:
        return template.format(**gpu_fields(gpu, ascii_only, free))
    if free:
        return FREE_CELL.format(index=gpu.index)
    return template.format(**gpu_fields(gpu, ascii_only)) + (UNKNOWN_MARK if unknown else "")


def free_lead(free: Set[int], total: int, unknown: int) -> str:
    """``--free-first``'s lead: ``free 3,6,7 | ``, ``0 free | ``, ``free ? | ``."""
    from gpumon.data.free import free_summary

    said = free_summary(sorted(free), total, unknown, word="free")
    return (said or FREE_UNKNOWN) + LEAD_SEPARATOR


def _number(value: float | None) -> str:
    return fmt.NA if value is None else f"{value:.0f}"


def status_line(
    sample: Sample,
    *,
    template: str = DEFAULT_FORMAT,
    separator: str = DEFAULT_SEPARATOR,
    prefix: str | None = None,
    ascii_only: bool | None = None,
    free: Set[int] = frozenset(),
    unknown: Set[int] = frozenset(),
) -> str:
    """One line (no newline): ``template`` applied to each GPU's :func:`gpu_fields`, a lost GPU
    ``2:LOST``, ``DEMO `` before simulated data. ``prefix`` ``None``: :data:`DEFAULT_PREFIX` with
    the default template; ``ascii_only`` ``None``: from the locale; ``free`` and ``unknown``: the
    NVML indices of the FREE GPUs and of those whose process list is unknown (``4:0/0%?``)."""
    if ascii_only is None:
        ascii_only = not fmt.locale_is_utf8()
    parts = [
        _cell(gpu, template, ascii_only, gpu.index in free, gpu.index in unknown)
        for gpu in sample.gpus
    ]
    if prefix is None:
        prefix = DEFAULT_PREFIX if template == DEFAULT_FORMAT else ""
    line = prefix + separator.join(parts)
    return f"DEMO {line}" if sample.simulated else line
