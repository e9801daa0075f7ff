"""How a screen shares its room between the GPU panel and the process table, for both
dashboards (the one-machine screen, a cluster node's screen): the table's minimum share, a
widget's fixed size from the stylesheet, and the process count of each MIG instance.
"""

from __future__ import annotations

from textual.css.scalar import Unit
from textual.widget import Widget

from gpumon.data.free import processes_known
from gpumon.data.model import Sample

#: The process table keeps at least this share of the screen: the GPU panel falls back to
#: two-line, then one-line rows (and scrolls) before it takes more.
TABLE_MIN_SHARE = 1 / 3


def fixed_cells(widget: Widget, axis: str) -> int:
    """A widget's height or width as its stylesheet fixes it in cells (0 when it does not)."""
    scalar = widget.styles.height if axis == "height" else widget.styles.width
    if scalar is None or scalar.unit is not Unit.CELLS:
        return 0
    return int(scalar.value)


def mig_process_counts(sample: Sample | None) -> dict[tuple[int, int | None], int]:
    """Processes per MIG instance, (GPU index, GPU instance id) -> count; only for GPUs
    whose process lists were read (unknown is not zero)."""
    if sample is None:
        return {}
    known = {gpu.index for gpu in sample.gpus if processes_known(gpu, sample)}
    counts: dict[tuple[int, int | None], int] = {}
    for gpu in sample.gpus:
        if gpu.index in known and gpu.mig_instances:
            for instance in gpu.mig_instances:
                counts[(gpu.index, instance.gpu_instance_id)] = 0
    for process in sample.processes:
        key = (process.gpu_index, process.gpu_instance_id)
        if key in counts:
            counts[key] += 1
    return counts
