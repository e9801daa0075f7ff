"""How a gpumon reading and nvidia-smi's answer for it are compared: units, N/A, tolerances.

Pure functions and data only (no subprocess, no NVML), so that the test suite checks them
directly. Each :class:`Rule` turns both sides into the same value in nvidia-smi's unit
(``--format=csv,nounits``, or the number before the unit on a ``-q`` line) and says how far
apart they may be. A field finds its rule by attribute, then by how it is shown, then by unit
(:func:`rule_for`); a field no rule fits reads ``no rule`` in the table, which fails the check,
so a new field cannot slip past it.

Readings that move (utilisation, power, clocks, temperature...) are not read by both tools at
the same instant: nvidia-smi is read before and after each gpumon reading, and gpumon agrees
in a round when it lies within the tolerance of the range the two nvidia-smi answers span.
Over several rounds a field agrees when a majority of rounds agree (:func:`compare_rounds`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpumon.data import format as fmt
from gpumon.data.fields import Field
from gpumon.sources.nvml.device import clock_event_names

MIB = 1024**2
KIB = 1024

# Results of a row. DIFFER and NO_RULE fail the check; the others do not.
AGREE = "agree"
DIFFER = "differ"
BOTH_NA = "N/A on both"
NOT_QUERYABLE = "not queryable here"
GPUMON_ONLY = "gpumon only"
NO_RULE = "no rule"
FAILING = frozenset({DIFFER, NO_RULE})


def smi_na(text: str | None) -> bool:
    """nvidia-smi's ways of saying N/A: ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``
    (any text in brackets), and ``N/A`` / ``Not Supported`` on ``-q`` lines."""
    if text is None:
        return True
    text = text.strip()
    bracketed = text.startswith("[") and text.endswith("]")
    return bracketed or text in ("", "N/A", "Not Supported", "Unknown Error")


def smi_number(text: str) -> float:
    """The number of an answer: ``69.31`` (nounits) or ``92 C`` / ``0 KB/s`` (``-q``)."""
    return float(text.strip().split()[0])


def _enabled(value: Any) -> str:
    return "Enabled" if value else "Disabled"


def _events(value: Any) -> frozenset[str]:
    return frozenset(value)


def _smi_events(text: str) -> frozenset[str]:
    # gpumon names the bits with its own table (device.CLOCK_EVENT_REASONS): decoding
    # nvidia-smi's mask with it compares the bits, and a bit gpumon lacks shows as unknown_0x...
    return frozenset(clock_event_names(int(text.strip(), 16)))


def _yes_no(text: str) -> str:
    # nvidia-smi writes its remapped-rows flags as Yes/No in -q; accept its other spellings.
    word = text.strip().lower()
    return {"1": "Yes", "true": "Yes", "yes": "Yes", "0": "No", "false": "No", "no": "No"}.get(
        word, text.strip()
    )


def _compute_mode(text: Any) -> str:
    # nvidia-smi: Exclusive_Process; gpumon: Exclusive Process.
    return str(text).strip().replace("_", " ")


@dataclass(frozen=True)
class Rule:
    """How one kind of reading is compared.

    ``mine`` turns gpumon's value (model units: bytes, W, names...) and ``theirs`` nvidia-smi's
    text (never N/A) into the same value; numbers agree within ``max(absolute, relative *
    reading)`` of the range nvidia-smi's answers span, anything else when equal to one of them.
    """

    name: str
    unit: str
    tolerance: str
    mine: Callable[[Any], Any]
    theirs: Callable[[str], Any]
    absolute: float = 0.0
    relative: float = 0.0

    def agrees(self, mine: Any, theirs: Sequence[Any]) -> bool:
        """Whether gpumon's value (converted) agrees with nvidia-smi's (converted, not N/A)."""
        numbers = [v for v in theirs if _is_number(v)]
        if _is_number(mine) and numbers and len(numbers) == len(theirs):
            low, high = min(numbers), max(numbers)
            slack = max(self.absolute, self.relative * max(abs(low), abs(high)))
            return bool(low - slack <= mine <= high + slack)
        return mine in theirs


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


PERCENT = Rule("utilisation, fan", "%", "±5 points", float, smi_number, absolute=5)
MEMORY = Rule(
    "memory", "MiB", "±1 MiB (nvidia-smi rounds to whole MiB)",
    lambda value: value / MIB, smi_number, absolute=1,
)  # fmt: skip
TEMPERATURE = Rule("temperature", "°C", "±2 °C", float, smi_number, absolute=2)
THRESHOLD = Rule("temperature thresholds", "°C", "exact", float, smi_number)
POWER = Rule(
    "power draw", "W", "±5 W or ±5 %, whichever is more", float, smi_number,
    absolute=5, relative=0.05,
)  # fmt: skip
POWER_LIMIT = Rule("power limit", "W", "±0.5 W (two decimals)", float, smi_number, absolute=0.5)
ENERGY = Rule("energy", "J", "±1 % (a counter)", float, smi_number, relative=0.01)
CLOCK = Rule(
    "clocks", "MHz", "±15 MHz or ±5 %, whichever is more", float, smi_number,
    absolute=15, relative=0.05,
)  # fmt: skip
PCIE = Rule(
    "PCIe throughput", "KB/s", "±16 MiB/s or ±20 % (NVML samples 20 ms windows)",
    lambda value: value / KIB, smi_number, absolute=16 * 1024, relative=0.2,
)  # fmt: skip
COUNT = Rule("ECC errors", "", "exact", int, lambda text: int(smi_number(text)))
COUNTER = Rule(
    "replays, remapped rows", "", "exact", int, lambda text: int(smi_number(text))
)  # fmt: skip
YES_NO = Rule(
    "flags", "", "exact (Yes/No; 1/0 and True/False read as Yes/No)",
    lambda value: "Yes" if value else "No", _yes_no,
)  # fmt: skip
PSTATE = Rule("performance state", "", "exact", int, lambda text: int(text.strip().lstrip("P")))
ENABLED = Rule("modes", "", "exact (Enabled/Disabled)", _enabled, str.strip)
COMPUTE_MODE = Rule(
    "compute mode", "", "exact (Exclusive_Process = Exclusive Process)",
    _compute_mode, _compute_mode,
)  # fmt: skip
CLOCK_EVENTS = Rule(
    "clock event reasons", "", "same bits (nvidia-smi's mask named by gpumon's table)",
    _events, _smi_events,
)  # fmt: skip
TEXT = Rule("identity", "", "exact", str, str.strip)
BUS_ID = Rule("PCI bus id", "", "exact, any case", lambda v: str(v).lower(), str.lower)

RULE_BY_ATTRIBUTE: dict[str, Rule] = {
    "power_limit_w": POWER_LIMIT,
    "temperature_slowdown_c": THRESHOLD,
    "temperature_shutdown_c": THRESHOLD,
    "clock_event_reasons": CLOCK_EVENTS,
    "compute_mode": COMPUTE_MODE,
    "xid_last": COUNTER,
}
RULE_BY_UNIT: dict[str, Rule] = {
    "%": PERCENT,
    "bytes": MEMORY,
    "°C": TEMPERATURE,
    "W": POWER,
    "J": ENERGY,
    "MHz": CLOCK,
    "bytes/s": PCIE,
    "errors": COUNT,
    "replays": COUNTER,
    "rows": COUNTER,
}


def rule_for(field: Field) -> Rule | None:
    """The rule that compares ``field``, or ``None`` when none fits (a new kind of field)."""
    if field.attribute in RULE_BY_ATTRIBUTE:
        return RULE_BY_ATTRIBUTE[field.attribute]
    if field.text is fmt.on_off:
        return ENABLED
    if field.text is fmt.pstate:
        return PSTATE
    if field.text is fmt.yes_no:
        return YES_NO
    return RULE_BY_UNIT.get(field.unit)


def legend(rules: Sequence[Rule]) -> list[str]:
    """The tolerances of ``rules``, one line each, as the table's legend prints them."""
    seen: dict[str, Rule] = {}
    for rule in rules:
        seen.setdefault(rule.name, rule)
    width = max((len(name) for name in seen), default=0)
    return [f"  {name:<{width}}  {rule.tolerance}" for name, rule in seen.items()]


def shown(value: Any) -> str:
    """A converted value as the table prints it."""
    if value is None:
        return fmt.NA
    if isinstance(value, frozenset):
        return ",".join(sorted(value)) or "none"
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:.0f}"
    return str(value)


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing one field over every round."""

    result: str
    mine: str
    theirs: str
    agreed: int = 0
    rounds: int = 0

    @property
    def score(self) -> str:
        return f"{self.agreed}/{self.rounds}" if self.rounds else ""


@dataclass(frozen=True)
class _Round:
    agreed: bool
    both_na: bool
    mine: str
    theirs: str


def compare_round(rule: Rule, mine: Any, answers: Sequence[str | None]) -> _Round:
    """One gpumon reading against the nvidia-smi answers around it (``None``: not shown)."""
    readable = [text for text in answers if text is not None and not smi_na(text)]
    raw = [text for text in answers if text is not None]
    theirs_shown = "..".join(dict.fromkeys(text.strip() for text in raw)) or fmt.NA
    if mine is None:
        return _Round(not readable, not readable, fmt.NA, theirs_shown)
    try:
        converted = rule.mine(mine)
        mine_shown = shown(converted)
    except (TypeError, ValueError) as error:
        return _Round(False, False, f"unreadable: {error}", theirs_shown)
    if not readable:
        return _Round(False, False, mine_shown, theirs_shown)
    try:
        theirs = [rule.theirs(text) for text in readable]
    except (TypeError, ValueError):
        return _Round(False, False, mine_shown, f"unreadable: {theirs_shown}")
    return _Round(rule.agrees(converted, theirs), False, mine_shown, theirs_shown)


def compare_rounds(
    rule: Rule | None, mine: Sequence[Any], answers: Sequence[Sequence[str | None]]
) -> Verdict:
    """gpumon's reading in each round against the nvidia-smi answers around it.

    Agrees when a majority of rounds agree (N/A on both sides counts as agreeing); the values
    shown are the last round's, or the first disagreeing round's when the field differs.
    """
    if rule is None:
        return Verdict(NO_RULE, shown(mine[-1] if mine else None), "")
    rounds = [
        compare_round(rule, value, around) for value, around in zip(mine, answers, strict=True)
    ]
    agreed = sum(one.agreed for one in rounds)
    if agreed * 2 > len(rounds):
        last = rounds[-1]
        result = BOTH_NA if all(one.both_na for one in rounds) else AGREE
        return Verdict(result, last.mine, last.theirs, agreed, len(rounds))
    first = next(one for one in rounds if not one.agreed)
    return Verdict(DIFFER, first.mine, first.theirs, agreed, len(rounds))
