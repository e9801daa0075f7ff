"""``--fake``: the check without a GPU, nvidia-smi or torch, so that it runs in the test suite.

gpumon's side is its own :class:`~gpumon.sources.nvml.source.NvmlSource` driving the faked
``pynvml`` of :mod:`tests.support.fake_nvml`; nvidia-smi's side is :class:`FakeSmi`, a runner that
answers ``--query-gpu``, ``-q``, ``--query-compute-apps`` and ``--help-query-gpu`` from the
same faked NVML readings, written as nvidia-smi writes them (MiB, ``P0``, ``Enabled``,
``Exclusive_Process``, the clock event mask in hex, ``[N/A]``...). Every field then agrees,
unless ``disagree`` names one: its answer is changed, to prove that the check says ``differ``
and fails. ``reject`` names properties this nvidia-smi refuses, as an older driver would.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import pynvml

from gpumon.data.fields import FIELDS
from tests.support.fake_nvml import MIB, Fail, FakeNvml, make_gpu

Gpu = dict[str, Any]
NA = "[N/A]"

_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def fake_nvml() -> FakeNvml:
    """One faked H100 whose readings exercise the conversions: a compute mode spelt
    differently by the two tools, two clock event bits, a fan, no MIG, its memory temperature,
    PCIe replays and remapped rows."""
    return FakeNvml(
        [
            make_gpu(
                0,
                compute_mode=pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
                clock_events=0x5,
                clock_throttle=0x5,
                memory_temperature=58,
                pcie_replays=3,
                remapped_rows=(2, 0, 0, 0),
                xid_events=True,
            )
        ]
    )


def _value(gpu: Gpu, key: str) -> Any:
    """The faked NVML answer, or ``None`` where NVML would raise (N/A)."""
    value = gpu.get(key)
    return None if value is None or isinstance(value, (Fail, BaseException)) else value


def _text(key: str, show: Callable[[Any], str]) -> Callable[[Gpu], str]:
    def answer(gpu: Gpu) -> str:
        value = _value(gpu, key)
        return NA if value is None else show(value)

    return answer


def _enabled(value: Any) -> str:
    return "Enabled" if value else "Disabled"


def _mib(part: str) -> Callable[[Gpu], str]:
    return _text("memory_v2", lambda info: str(getattr(info, part) // MIB))


#: What this nvidia-smi answers for each property it knows, from a faked GPU dict.
ANSWERS: dict[str, Callable[[Gpu], str]] = {
    "name": _text("name", str),
    "uuid": _text("uuid", str),
    "pci.bus_id": _text("pci", lambda pci: str(pci.busId)),
    "utilization.gpu": _text("utilization", lambda rates: str(rates.gpu)),
    "utilization.memory": _text("utilization", lambda rates: str(rates.memory)),
    "utilization.encoder": _text("encoder", lambda answer: str(answer[0])),
    "utilization.decoder": _text("decoder", lambda answer: str(answer[0])),
    "memory.used": _mib("used"),
    "memory.total": _mib("total"),
    "memory.free": _mib("free"),
    "memory.reserved": _mib("reserved"),
    "temperature.gpu": _text("temperature", str),
    "fan.speed": _text("fan", str),
    "power.draw": _text("power", lambda mw: f"{mw / 1000:.2f}"),
    "enforced.power.limit": _text("power_limit", lambda mw: f"{mw / 1000:.2f}"),
    "clocks.current.sm": _text("clock_sm", str),
    "clocks.current.memory": _text("clock_memory", str),
    "clocks.current.graphics": _text("clock_graphics", str),
    "clocks_event_reasons.active": _text("clock_events", lambda mask: f"0x{mask:016x}"),
    "pstate": _text("pstate", lambda state: f"P{state}"),
    "ecc.errors.uncorrected.volatile.total": _text("ecc_uncorrected_volatile", str),
    "persistence_mode": _text("persistence", _enabled),
    "display_active": _text("display", _enabled),
    "compute_mode": _text("compute_mode", lambda mode: _COMPUTE_MODES[mode]),
    "mig.mode.current": _text("mig", lambda modes: _enabled(modes[0])),
    "temperature.memory": _text("memory_temperature", str),
    "remapped_rows.correctable": _text("remapped_rows", lambda rows: str(rows[0])),
    "remapped_rows.uncorrectable": _text("remapped_rows", lambda rows: str(rows[1])),
    "remapped_rows.pending": _text("remapped_rows", lambda rows: "Yes" if rows[2] else "No"),
    "remapped_rows.failure": _text("remapped_rows", lambda rows: "Yes" if rows[3] else "No"),
    # What nvidia-smi has and gpumon does not read.
    "utilization.jpeg": lambda gpu: "0",
    "power.default_limit": lambda gpu: "700.00",
    "clocks.max.sm": lambda gpu: "1980",
    "compute_cap": lambda gpu: "9.0",
}
_ALIASES = {"name": "gpu_name", "uuid": "gpu_uuid", "clocks.current.sm": "clocks.sm"}


def wrong(text: str) -> str:
    """A different answer of the same shape (to inject a disagreement)."""
    text = text.strip()
    swaps = {"Enabled": "Disabled", "Disabled": "Enabled", "Default": "Prohibited"}
    swaps.update({mode: "Default" for mode in _COMPUTE_MODES.values() if mode != "Default"})
    if text in swaps:
        return swaps[text]
    if text.startswith("0x"):
        return f"0x{int(text, 16) ^ 0x4:016x}"
    if text.startswith("P") and text[1:].isdigit():
        return f"P{(int(text[1:]) + 8) % 16}"
    number, _, unit = text.partition(" ")
    try:
        value = float(number)
    except ValueError:
        return f"not {text}"
    changed = value * 2 + 50
    answer = f"{changed:.2f}" if "." in number else f"{changed:.0f}"
    return f"{answer} {unit}".strip()


class FakeSmi:
    """An nvidia-smi runner (see :data:`tests.gpu_check.smi.Runner`) over a :class:`FakeNvml`.

    ``disagree`` holds ``--query-gpu`` properties or ``-q`` labels whose answers are changed;
    ``reject`` properties refused as not valid to query.
    """

    def __init__(
        self, nvml: FakeNvml, *, disagree: Collection[str] = (), reject: Collection[str] = ()
    ) -> None:
        self.nvml = nvml
        self.disagree = set(disagree)
        self.reject = set(reject)
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> tuple[int, str]:
        self.calls.append(list(argv))
        option = argv[1]
        if option.startswith("--query-gpu="):
            return self._query(option.removeprefix("--query-gpu=").split(","))
        if option.startswith("--query-compute-apps="):
            return 0, ""  # no process on the faked GPU
        if option == "-q":
            return 0, self._details()
        if option == "--help-query-gpu":
            return 0, self._help()
        return 2, f"fake nvidia-smi: unknown option {option}"

    def _answer(self, name: str, gpu_index: int, gpu: Gpu) -> str:
        if name == "index":
            return str(gpu_index)
        if name == "driver_version":
            text = str(self.nvml.system["driver_version"])
        elif name == "count":
            text = str(len(self.nvml.gpus))
        else:
            text = ANSWERS[name](gpu)
        return wrong(text) if name in self.disagree else text

    def _query(self, names: list[str]) -> tuple[int, str]:
        known = {"index", "driver_version", "count", *ANSWERS}
        for name in names:
            if name not in known or name in self.reject:
                return 2, f'Field "{name}" is not a valid field to query.\n'
        rows = [
            ", ".join(self._answer(name, index, gpu) for name in names)
            for index, gpu in enumerate(self.nvml.gpus)
        ]
        return 0, "\n".join(rows) + "\n"

    def _line(self, label: str, text: str, indent: int = 8) -> str:
        if label in self.disagree:
            text = wrong(text)
        return f"{' ' * indent}{label:<{34 - indent}}: {text}"

    def _details(self) -> str:
        lines = [
            "==============NVSMI LOG==============",
            "",
            f"Driver Version                            : {self.nvml.system['driver_version']}",
            f"Attached GPUs                             : {len(self.nvml.gpus)}",
        ]
        for gpu in self.nvml.gpus:
            bus = ANSWERS["pci.bus_id"](gpu)
            lines += [
                f"GPU {bus}",
                self._line("Product Name", ANSWERS["name"](gpu), 4),
                "    PCI",
                self._line("Bus Id", bus),
                self._line("Tx Throughput", _text("pcie_tx", _kb_s)(gpu)),
                self._line("Rx Throughput", _text("pcie_rx", _kb_s)(gpu)),
                self._line("Replays Since Reset", _text("pcie_replays", str)(gpu)),
                "    Temperature",
                self._line("GPU Current Temp", _text("temperature", _celsius)(gpu)),
                self._line("GPU Shutdown Temp", _text("temperature_shutdown", _celsius)(gpu)),
                self._line("GPU Slowdown Temp", _text("temperature_slowdown", _celsius)(gpu)),
            ]
        return "\n".join(lines).replace("[N/A]", "N/A") + "\n"

    @staticmethod
    def _help() -> str:
        lines = ['List of valid properties to query for the switch "--query-gpu=":', ""]
        for name in ["index", "driver_version", "count", *ANSWERS]:
            alias = _ALIASES.get(name)
            lines += [f'"{name}"' + (f' or "{alias}"' if alias else ""), "Some text.", ""]
        return "\n".join(lines)


def _celsius(value: Any) -> str:
    return f"{value} C"


def _kb_s(value: Any) -> str:
    return f"{value} KB/s"


def field_names(keys: Collection[str]) -> set[str]:
    """The ``--query-gpu`` property, or else the ``-q`` label, of each field key (or of each
    identity property, ``name``, ``uuid``, ``pci.bus_id``, ``driver_version``, as is)."""
    names = set()
    for key in keys:
        field = next((field for field in FIELDS if field.key == key), None)
        if field is None:
            names.add(key)
        elif field.query:
            names.add(field.query)
        elif field.smi.startswith("-q: "):
            names.add(field.smi.removeprefix("-q: "))
        else:
            raise ValueError(f"field {key!r} has no nvidia-smi name to disagree on")
    return names
