"""``gpumon export --dcgm-compat``: the series NVIDIA's dcgm-exporter serves, from gpumon's data.

For dashboards built for dcgm-exporter: ``DCGM_FI_DEV_*`` series with its units and labels,
from the same sample, added to gpumon's metrics. What NVML's device queries cannot give (the
``DCGM_FI_PROF_*`` profiling fields) is left out rather than faked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpumon.data.model import GpuStats, Sample

#: dcgm-exporter's label names, in its order.
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One dcgm-exporter series: its name, type and help, and how to read it in its unit."""

    name: str
    kind: str  # "gauge", or "unknown" for dcgm-exporter's counters (see DCGM_FIELDS)
    help: str
    #: The :class:`GpuStats` field read as it is, or how to read it in dcgm-exporter's unit.
    read: str | Callable[[GpuStats], float | None]
    #: Labels of this series only, after dcgm-exporter's own (DCGM_LABELS).
    extra_labels: Callable[[GpuStats], dict[str, str]] | None = None

    def value(self, gpu: GpuStats) -> float | None:
        if callable(self.read):
            return self.read(gpu)
        value = getattr(gpu, self.read)
        return None if value is None else float(value)


def _mib(value: int | None) -> float | None:
    # dcgm-exporter reports whole MiB.
    return None if value is None else float(value // _MIB)


def _free_mib(gpu: GpuStats) -> float | None:
    if gpu.memory_total_bytes is None or gpu.memory_used_bytes is None:
        return None
    reserved = gpu.memory_reserved_bytes or 0  # v1 drivers count reserved memory as used
    return _mib(max(0, gpu.memory_total_bytes - gpu.memory_used_bytes - reserved))


#: What some common Xids mean, in a few words (NVIDIA's Xid catalogue says more); other
#: codes get an empty ``err_msg``.
XID_MESSAGES = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}


def _xid_labels(gpu: GpuStats) -> dict[str, str]:
    code = gpu.xid_last or 0
    return {"err_code": str(code), "err_msg": XID_MESSAGES.get(code, "")}


DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "clock_sm_mhz"),
    DcgmField(
        "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "clock_memory_mhz",
    ),
    DcgmField(
        "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "temperature_memory_c",
    ),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c"),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_draw_w"),
    # dcgm-exporter types this (and the replay and remapped-rows counts) a counter. In
    # OpenMetrics (which Prometheus asks for first) a counter's samples must end in _total,
    # which would rename the series dashboards query; untyped keeps the name, and rate()
    # works on it all the same.
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "unknown",
        "Total energy consumption since the driver was loaded (in mJ).",
        lambda gpu: None if gpu.energy_j is None else round(gpu.energy_j * 1000.0),
    ),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization_gpu_pct"),
    DcgmField(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "unknown", "Total number of PCIe retries.",
        "pcie_replays",
    ),
    DcgmField(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
        "utilization_memory_pct",
    ),
    DcgmField(
        "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "utilization_encoder_pct",
    ),
    DcgmField(
        "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "utilization_decoder_pct",
    ),
    # The last Xid's code, with it in err_code (and err_msg), as dcgm-exporter; 0 when none.
    DcgmField(
        "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
        "xid_last", _xid_labels,
    ),
    DcgmField("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", _free_mib),
    DcgmField(
        "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
        lambda gpu: _mib(gpu.memory_used_bytes),
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
        lambda gpu: _mib(gpu.memory_reserved_bytes),
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "unknown",
        "Number of remapped rows for uncorrectable errors",
        "remapped_rows_uncorrectable",
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "unknown",
        "Number of remapped rows for correctable errors",
        "remapped_rows_correctable",
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
        "remapped_rows_failed",
    ),
)  # fmt: skip


def dcgm_families(sample: Sample, note: str, label_value: Callable[[str | None], str]) -> list[Any]:
    """dcgm-exporter's families for ``sample`` (a lost GPU and an N/A reading have no series);
    ``note`` ends every help text, ``label_value`` makes label values safe.
    """
    from prometheus_client.metrics_core import Metric

    readable = [gpu for gpu in sample.gpus if not gpu.lost]
    host = label_value(sample.host.hostname)
    families: list[Any] = []
    for field in DCGM_FIELDS:
        family = Metric(field.name, field.help + note, field.kind)
        for gpu in readable:
            value = field.value(gpu)
            if value is not None:
                labels = _labels(gpu, host, label_value)
                if field.extra_labels is not None:
                    labels.update(field.extra_labels(gpu))
                family.add_sample(field.name, labels, value)
        families.append(family)
    return families


def _labels(gpu: GpuStats, host: str, label_value: Callable[[str | None], str]) -> dict[str, str]:
    values = (
        str(gpu.index),
        label_value(gpu.uuid),
        label_value(gpu.pci_bus_id),
        f"nvidia{gpu.index}",  # as dcgm-exporter names the device node of GPU N
        label_value(gpu.name),
        host,
    )
    return dict(zip(DCGM_LABELS, values, strict=True))
