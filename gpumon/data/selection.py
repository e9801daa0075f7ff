"""Which GPUs to show: ``--only`` and ``--only-visible``, as one pure function of a sample.

The dashboard and ``gpumon once`` both call :func:`select_gpus`, so they show the same GPUs.
``--only`` names GPUs by NVML index, GPU or MIG UUID or a unique prefix; ``--only-visible``
reads ``CUDA_VISIBLE_DEVICES`` as CUDA does (:func:`visible_gpus`); both: the GPUs both name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpumon.data import format as fmt
from gpumon.data.model import GpuStats, Sample

_LEADING_DIGITS = re.compile(r"[0-9]+", re.ASCII)


@dataclass(frozen=True, slots=True)
class GpuSelection:
    """What the user asked to see: ``only`` (``--only``), ``only_visible`` with ``visible``
    (``CUDA_VISIBLE_DEVICES`` then), ``pci_bus_order`` (``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
    """

    only: tuple[str, ...] = ()
    only_visible: bool = False
    visible: str | None = None
    pci_bus_order: bool = False

    @property
    def active(self) -> bool:
        return bool(self.only) or self.only_visible


def selection_from(
    only: Sequence[str], only_visible: bool, environ: Mapping[str, str]
) -> GpuSelection:
    """The selection ``--only`` and ``--only-visible`` ask for, in this environment."""
    return GpuSelection(
        only=tuple(only),
        only_visible=only_visible,
        visible=environ.get("CUDA_VISIBLE_DEVICES") if only_visible else None,
        pci_bus_order=environ.get("CUDA_DEVICE_ORDER", "").strip() == "PCI_BUS_ID",
    )


@dataclass(frozen=True, slots=True)
class Selected:
    """A sample cut to the chosen GPUs: ``total`` before the cut, ``missing`` per identifier that
    names no GPU (or several), ``notes`` on ``CUDA_VISIBLE_DEVICES``.
    """

    sample: Sample
    total: int
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """``GPUs 0,3 of 8``, ``GPU 2 of 8``, ``GPUs 0-3,6 of 8``, ``no GPU of 8``."""
        indices = [gpu.index for gpu in self.sample.gpus]
        if not indices:
            return f"no GPU of {self.total}"
        noun = "GPU" if len(indices) == 1 else "GPUs"
        return f"{noun} {index_ranges(indices)} of {self.total}"


def select_gpus(sample: Sample, selection: GpuSelection) -> Selected:
    """``sample`` with only the GPUs ``selection`` names, and their processes."""
    gpus = sample.gpus
    missing: list[str] = []
    notes: list[str] = []
    chosen = {gpu.index for gpu in gpus}
    if selection.only:
        named, missing = _only(selection.only, gpus)
        chosen &= named
    if selection.only_visible:
        visible, notes = visible_gpus(selection.visible, gpus, selection.pci_bus_order)
        if visible is not None:
            chosen &= set(visible)
    if len(chosen) == len(gpus):
        return Selected(sample, len(gpus), tuple(missing), tuple(notes))
    cut = replace(
        sample,
        gpus=tuple(gpu for gpu in gpus if gpu.index in chosen),
        processes=tuple(p for p in sample.processes if p.gpu_index in chosen),
    )
    return Selected(cut, len(gpus), tuple(missing), tuple(notes))


def matching_gpus(identifier: str, gpus: Iterable[GpuStats]) -> list[GpuStats]:
    """The GPUs a UUID (or a prefix of one) names: ``GPU-...`` its own UUID, ``MIG-...`` one
    of its MIG instances' (``MIG-GPU-<uuid>/gi/ci``, the old form, its GPU's). Case is
    ignored, as UUIDs are hex."""
    wanted = identifier.casefold()
    if wanted.startswith("mig-gpu-"):
        wanted = wanted[4:].split("/")[0]
    found = []
    for gpu in gpus:
        if wanted.startswith("gpu-"):
            uuids = [gpu.uuid]
        else:
            uuids = [instance.uuid for instance in gpu.mig_instances or ()]
        if any(uuid is not None and uuid.casefold().startswith(wanted) for uuid in uuids):
            found.append(gpu)
    return found


def _only(only: Sequence[str], gpus: Sequence[GpuStats]) -> tuple[set[int], list[str]]:
    """The NVML indices ``--only`` names, and a line for each identifier that names none."""
    named: set[int] = set()
    missing: list[str] = []
    here = index_ranges(sorted(gpu.index for gpu in gpus)) or "none"
    for identifier in only:
        number = fmt.ascii_int(identifier, 6)
        if number is not None:
            found = [gpu for gpu in gpus if gpu.index == number]
        else:
            found = matching_gpus(identifier, gpus)
        if len(found) == 1:
            named.add(found[0].index)
        elif not found:
            missing.append(f"--only {identifier}: no such GPU here (GPUs here: {here})")
        else:
            several = ", ".join(str(gpu.index) for gpu in found)
            missing.append(f"--only {identifier}: matches GPUs {several}; give more of the UUID")
    return named, missing


def visible_gpus(
    value: str | None, gpus: Sequence[GpuStats], pci_bus_order: bool
) -> tuple[list[int] | None, list[str]]:
    """The NVML indices ``CUDA_VISIBLE_DEVICES=value`` makes visible, in CUDA's order, and a line
    for each thing a user should know; ``None`` for all (unset).

    Read as CUDA reads it: indices or UUIDs (or prefixes), one kind; the first entry naming no
    GPU ends the list, and a GPU named twice leaves none. CUDA's index is NVML's only in PCI
    order or with one model throughout; otherwise a line says so and NVML's order is taken.
    """
    if value is None:
        return None, []
    by_index = {gpu.index: gpu for gpu in gpus}
    visible: list[int] = []
    kind: str | None = None
    stop: str | None = None
    unsure: list[str] = []
    for entry in (part.strip() for part in value.split(",")):
        digits = _LEADING_DIGITS.match(entry)  # "1abc" is 1, as CUDA's strtol reads it
        gpu: GpuStats | None = None
        if digits is not None and kind != "uuid":
            kind = "index"
            gpu = by_index.get(int(digits.group()))
        elif entry[:4].casefold() in ("gpu-", "mig-") and kind != "index":
            kind = "uuid"
            found = matching_gpus(entry, gpus)
            unread = [g.index for g in gpus if g.mig_mode and g.mig_instances is None]
            if not found and entry[:4].casefold() == "mig-" and unread:
                # A MIG UUID names its instance, not its GPU: with instances that cannot be
                # read (non-root), it may be any of those GPUs', not "no GPU".
                unsure.append(
                    f"CUDA_VISIBLE_DEVICES: cannot tell which GPU holds {entry!r} (the MIG "
                    f"instances of GPU {index_ranges(unread)} cannot be read here): kept"
                )
                visible.extend(index for index in unread if index not in visible)
                continue
            gpu = found[0] if len(found) == 1 else None
        if gpu is None:
            stop = entry
            break
        if gpu.index in visible:
            twice = f"CUDA_VISIBLE_DEVICES={value!r} names GPU {gpu.index} twice: CUDA sees no GPU"
            return [], [twice]
        visible.append(gpu.index)
    notes = []
    if stop is not None and not visible:
        why = "it is empty" if not value.strip() else f"{stop!r} is no GPU here"
        notes.append(f"CUDA_VISIBLE_DEVICES={value!r}: CUDA sees no GPU ({why})")
    elif stop is not None:
        notes.append(
            f"CUDA_VISIBLE_DEVICES={value!r}: CUDA stops at {stop!r} (no GPU here): "
            f"it sees only {','.join(map(str, visible))}"
        )
    models = {gpu.name for gpu in gpus}
    if kind == "index" and visible and not pci_bus_order and (len(models) > 1 or None in models):
        notes.append(
            "CUDA_VISIBLE_DEVICES: these GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID, "
            "so CUDA's indices may not be NVML's; taken in NVML's order (use UUIDs to be sure)"
        )
    return visible, [*unsure, *notes]


def index_ranges(indices: Iterable[int]) -> str:
    """``0,3`` for [0, 3]; ``0-3,6`` for [0, 1, 2, 3, 6]; in the order given."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ",".join(
        str(run[0]) if len(run) == 1 else f"{run[0]},{run[1]}" if len(run) == 2
        else f"{run[0]}-{run[-1]}"
        for run in runs
    )  # fmt: skip
