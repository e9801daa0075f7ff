"""One descriptor per GPU field: every output iterates this table.

A field's key, label, unit, attribute (its JSON name), format, help line, nvidia-smi names
and exporter series. Adding a metric is the model, the source (and the demo), and one
:class:`Field` here; tests check it is exported, in the schema and in the help. No Textual,
psutil or pynvml: ``gpumon status`` imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpumon.data import format as fmt
from gpumon.data.model import GpuStats


@dataclass(frozen=True, slots=True)
class Prometheus:
    """How ``gpumon export`` serves a field: ``gauge`` or ``counter`` (value times ``scale``), or
    ``state`` (one series per state, value 1, the state in ``label``).
    """

    name: str
    kind: str = "gauge"
    scale: float = 1.0
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Field:
    """One GPU field. ``smi`` names it as nvidia-smi shows it (``-q: <label>`` for ``-q``),
    ``query`` its ``--query-gpu`` property (``""``: none); tests/gpu_check compares through them.
    """

    key: str
    attribute: str
    label: str
    unit: str
    help: str
    text: Callable[[Any], str]
    smi: str = ""
    prometheus: Prometheus | None = None
    query: str = ""

    def read(self, gpu: GpuStats) -> Any:
        """The reading (``None``: N/A)."""
        return getattr(gpu, self.attribute)

    def show(self, gpu: GpuStats) -> str:
        """The reading as every text mode shows it (``N/A`` when not known)."""
        value = getattr(gpu, self.attribute)
        return fmt.NA if value is None else self.text(value)


_PCT = 0.01  # percent -> ratio, as Prometheus conventions ask
_MHZ = 1e6


def _rate(value: int) -> str:
    return f"{fmt.bytes_short(value)}/s"


def _energy(value: float) -> str:
    return f"{value / 3.6e6:.1f}kWh" if value >= 3.6e5 else f"{value / 1000:.1f}kJ"


def _reasons(value: tuple[str, ...]) -> str:
    return ", ".join(value) if value else "none"


def _xid(value: int) -> str:
    return "none" if value == 0 else str(value)


FIELDS: tuple[Field, ...] = (
    Field(
        "util", "utilization_gpu_pct", "GPU", "%",
        "utilisation: share of the last sample period (1/6 s to 1 s) a kernel ran; N/A with MIG",
        fmt.percent, "GPU-Util",
        Prometheus("gpumon_gpu_utilization_ratio", scale=_PCT),
        query="utilization.gpu",
    ),
    Field(
        "mem_util", "utilization_memory_pct", "MemBW", "%",
        "memory-controller utilisation: share of that period memory was read or written",
        fmt.percent, "-q: Memory Util",
        Prometheus("gpumon_gpu_memory_utilization_ratio", scale=_PCT),
        query="utilization.memory",
    ),
    Field(
        "enc", "utilization_encoder_pct", "Enc", "%", "video encoder utilisation",
        fmt.percent, "-q: Encoder Util",
        Prometheus("gpumon_gpu_encoder_utilization_ratio", scale=_PCT),
        query="utilization.encoder",
    ),
    Field(
        "dec", "utilization_decoder_pct", "Dec", "%", "video decoder utilisation",
        fmt.percent, "-q: Decoder Util",
        Prometheus("gpumon_gpu_decoder_utilization_ratio", scale=_PCT),
        query="utilization.decoder",
    ),
    Field(
        "mem_used", "memory_used_bytes", "MEM used", "bytes",
        "memory in use; NVML's memory info v2, as nvidia-smi on R510+ (reserved not counted)",
        fmt.bytes_short, "Memory-Usage",
        Prometheus("gpumon_gpu_memory_used_bytes"),
        query="memory.used",
    ),
    Field(
        "mem_total", "memory_total_bytes", "MEM total", "bytes", "total memory",
        fmt.bytes_short, "Memory-Usage",
        Prometheus("gpumon_gpu_memory_total_bytes"),
        query="memory.total",
    ),
    Field(
        "mem_free", "memory_free_bytes", "MEM free", "bytes",
        "memory free: total - used - reserved", fmt.bytes_short, "-q: Free",
        Prometheus("gpumon_gpu_memory_free_bytes"),
        query="memory.free",
    ),
    Field(
        "mem_reserved", "memory_reserved_bytes", "rsv", "bytes",
        "memory reserved by the driver and firmware", fmt.bytes_short, "-q: Reserved",
        Prometheus("gpumon_gpu_memory_reserved_bytes"),
        query="memory.reserved",
    ),
    Field(
        "temp", "temperature_c", "Temp", "°C",
        "GPU core temperature",
        fmt.celsius, "Temp",
        Prometheus("gpumon_gpu_temperature_celsius"),
        query="temperature.gpu",
    ),
    Field(
        "temp_slowdown", "temperature_slowdown_c", "Slowdown", "°C",
        "temperature at which the GPU slows itself down",
        fmt.celsius, "-q: GPU Slowdown Temp",
        Prometheus("gpumon_gpu_temperature_slowdown_celsius"),
    ),
    Field(
        "temp_shutdown", "temperature_shutdown_c", "Shutdown", "°C",
        "temperature at which the GPU shuts down",
        fmt.celsius, "-q: GPU Shutdown Temp",
        Prometheus("gpumon_gpu_temperature_shutdown_celsius"),
    ),
    Field(
        "temp_mem", "temperature_memory_c", "MemTemp", "°C",
        "memory temperature (HBM boards; N/A on most GDDR ones)",
        fmt.celsius, "-q: Memory Current Temp",
        Prometheus("gpumon_gpu_memory_temperature_celsius"),
        query="temperature.memory",
    ),
    Field(
        "fan", "fan_pct", "Fan", "%",
        "fan speed, % of maximum (may exceed 100); N/A on boards without a fan (SXM)",
        fmt.percent, "Fan",
        Prometheus("gpumon_gpu_fan_speed_ratio", scale=_PCT),
        query="fan.speed",
    ),
    Field(
        "power", "power_draw_w", "PWR", "W", "power draw",
        lambda value: f"{value:.0f}W", "Pwr:Usage",
        Prometheus("gpumon_gpu_power_draw_watts"),
        query="power.draw",
    ),
    Field(
        "power_limit", "power_limit_w", "Cap", "W", "enforced power limit",
        lambda value: f"{value:.0f}W", "Pwr:Cap",
        Prometheus("gpumon_gpu_power_limit_watts"),
        query="enforced.power.limit",
    ),
    Field(
        "energy", "energy_j", "Energy", "J",
        "energy used since the driver was loaded (Volta and newer)",
        _energy, "-q: Total Energy Consumption",
        Prometheus("gpumon_gpu_energy_joules", kind="counter"),
    ),
    Field(
        "sm_clock", "clock_sm_mhz", "SM", "MHz", "SM clock",
        fmt.mhz, "-q: Clocks SM",
        Prometheus("gpumon_gpu_clock_sm_hertz", scale=_MHZ),
        query="clocks.current.sm",
    ),
    Field(
        "mem_clock", "clock_memory_mhz", "Mem", "MHz", "memory clock",
        fmt.mhz, "-q: Clocks Memory",
        Prometheus("gpumon_gpu_clock_memory_hertz", scale=_MHZ),
        query="clocks.current.memory",
    ),
    Field(
        "gr_clock", "clock_graphics_mhz", "Gr", "MHz", "graphics clock",
        fmt.mhz, "-q: Clocks Graphics",
        Prometheus("gpumon_gpu_clock_graphics_hertz", scale=_MHZ),
        query="clocks.current.graphics",
    ),
    Field(
        "clock_events", "clock_event_reasons", "Held", "",
        "why the clocks are held down (gpu_idle, sw_power_cap, hw_thermal_slowdown...)",
        _reasons, "-q: Clocks Event Reasons",
        Prometheus("gpumon_gpu_clock_event_reason", kind="state", label="reason"),
        query="clocks_event_reasons.active",
    ),
    Field(
        "pcie_rx", "pcie_rx_bytes_per_s", "PCIe rx", "bytes/s",
        "PCIe receive throughput (read every few seconds: NVML's call takes 20 ms)",
        _rate, "-q: Rx Throughput",
        Prometheus("gpumon_gpu_pcie_rx_bytes_per_second"),
    ),
    Field(
        "pcie_tx", "pcie_tx_bytes_per_s", "PCIe tx", "bytes/s",
        "PCIe transmit throughput (read every few seconds)",
        _rate, "-q: Tx Throughput",
        Prometheus("gpumon_gpu_pcie_tx_bytes_per_second"),
    ),
    Field(
        "pstate", "performance_state", "P", "", "performance state, P0 (fastest) to P15",
        fmt.pstate, "Perf",
        Prometheus("gpumon_gpu_performance_state"),
        query="pstate",
    ),
    Field(
        "ecc", "ecc_errors_uncorrected_volatile", "ECC", "errors",
        "uncorrected ECC errors since the driver was loaded; N/A with ECC off",
        str, "Volatile Uncorr. ECC",
        Prometheus("gpumon_gpu_ecc_errors_uncorrected_volatile", kind="counter"),
        query="ecc.errors.uncorrected.volatile.total",
    ),
    Field(
        "pcie_replays", "pcie_replays", "Replays", "replays",
        "PCIe replays (link-level retries) since the GPU was reset; read every few seconds",
        str, "-q: Replays Since Reset",
        Prometheus("gpumon_gpu_pcie_replays", kind="counter"),
    ),
    Field(
        "rows_corr", "remapped_rows_correctable", "RowsCorr", "rows",
        "memory rows remapped for correctable errors, over the board's life (Ampere+)",
        str, "-q: Remapped Rows: Correctable Error",
        Prometheus("gpumon_gpu_remapped_rows_correctable", kind="counter"),
        query="remapped_rows.correctable",
    ),
    Field(
        "rows_uncorr", "remapped_rows_uncorrectable", "RowsUncorr", "rows",
        "memory rows remapped for uncorrectable errors, over the board's life (Ampere+)",
        str, "-q: Remapped Rows: Uncorrectable Error",
        Prometheus("gpumon_gpu_remapped_rows_uncorrectable", kind="counter"),
        query="remapped_rows.uncorrectable",
    ),
    Field(
        "rows_pending", "remapped_rows_pending", "RowsPend", "",
        "a row remapping waits for a GPU reset",
        fmt.yes_no, "-q: Remapped Rows: Pending",
        Prometheus("gpumon_gpu_remapped_rows_pending"),
        query="remapped_rows.pending",
    ),
    Field(
        "rows_failed", "remapped_rows_failed", "RowsFail", "",
        "a row remapping failed: the board needs service",
        fmt.yes_no, "-q: Remapped Rows: Remapping Failure Occurred",
        Prometheus("gpumon_gpu_remapped_rows_failed"),
        query="remapped_rows.failure",
    ),
    Field(
        "xid", "xid_last", "Xid", "",
        "the last Xid error NVML reported since gpumon began watching (none: 0)",
        _xid, "",
        Prometheus("gpumon_gpu_xid_last"),
    ),
    Field(
        "xid_count", "xid_count", "Xids", "errors",
        "Xid errors NVML reported since gpumon began watching",
        str, "",
        Prometheus("gpumon_gpu_xid_errors", kind="counter"),
    ),
    Field(
        "persistence", "persistence_mode", "Persist", "", "persistence mode",
        fmt.on_off, "Persistence-M",
        Prometheus("gpumon_gpu_persistence_mode"),
        query="persistence_mode",
    ),
    Field(
        "display", "display_active", "Disp", "", "a display is active on this GPU",
        fmt.on_off, "Disp.A",
        Prometheus("gpumon_gpu_display_active"),
        query="display_active",
    ),
    Field(
        "compute_mode", "compute_mode", "Compute", "", "compute mode",
        str, "Compute M.",
        Prometheus("gpumon_gpu_compute_mode", kind="state", label="mode"),
        query="compute_mode",
    ),
    Field(
        "mig", "mig_mode", "MIG", "", "MIG mode; with MIG on, utilisation is N/A by design",
        fmt.on_off, "MIG M.",
        Prometheus("gpumon_gpu_mig_mode"),
        query="mig.mode.current",
    ),
)  # fmt: skip

BY_KEY: dict[str, Field] = {field.key: field for field in FIELDS}

#: GpuStats attributes that are the GPU's identity or state, not readings: no descriptor.
IDENTITY = ("index", "uuid", "name", "pci_bus_id", "lost", "lost_reason", "processes_error")
#: GpuStats attributes that list parts of the GPU, each with readings of its own: no
#: descriptor either. Each output shows them its own way (MIG instances: ``once --json``'s
#: ``mig_instances``, the exporter's ``gpumon_mig_*`` series).
PARTS = ("mig_instances",)
