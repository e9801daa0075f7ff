"""The exporter's ``/metrics`` against nvidia-smi: every ``gpumon_gpu_*`` series of the field
table, plus ``gpumon_gpu_info``'s identity and ``gpumon_driver_info``'s driver version.

A series' value divided by its descriptor's scale is the field's reading (a ``state`` series
gives its label instead; no series is N/A, or no reason for the clock event reasons), then it
is compared as the fields section compares (:func:`tests.gpu_check.fields_check.compare_gpu`).
On a GPU the exporter runs as users run it (``gpumon export --listen 127.0.0.1:0``); with
``--fake`` the page is rendered in-process from the faked NVML sample.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from gpumon.data.fields import FIELDS
from tests.gpu_check import rules
from tests.gpu_check.children import Child
from tests.gpu_check.fields_check import Reading, add_table, compare_gpu, queries, read
from tests.gpu_check.report import Section
from tests.gpu_check.smi import NvidiaSmi, SmiError

_SERIES = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SERVING = re.compile(r"serving (http://\S+/metrics)")

Series = tuple[str, dict[str, str], float]


def parse_metrics(text: str) -> list[Series]:
    """Every series of a text exposition: (name, labels, value)."""
    found = []
    for line in text.splitlines():
        match = _SERIES.match(line)
        if match and not line.startswith("#"):
            labels = {key: value.replace('\\"', '"').replace("\\\\", "\\")
                      for key, value in _LABEL.findall(match.group(2) or "")}  # fmt: skip
            found.append((match.group(1), labels, float(match.group(3))))
    return found


def exported_values(series: list[Series], gpu: int) -> dict[str, Any]:
    """GPU ``gpu``'s readings as the exporter serves them, by field attribute (and identity)."""
    mine = [(name, labels, value) for name, labels, value in series
            if labels.get("gpu") == str(gpu)]  # fmt: skip
    values: dict[str, Any] = {}
    for field in FIELDS:
        spec = field.prometheus
        if spec is None:
            continue
        if spec.kind == "state":
            states = tuple(sorted(labels[spec.label or ""] for name, labels, value in mine
                                  if name == spec.name and value == 1))  # fmt: skip
            many = rules.rule_for(field) is rules.CLOCK_EVENTS
            values[field.attribute] = states if many else (states[0] if states else None)
            continue
        name = spec.name + ("_total" if spec.kind == "counter" else "")
        found = [value for series_name, _, value in mine if series_name == name]
        values[field.attribute] = found[0] / spec.scale if found else None
    info = next((labels for name, labels, _ in mine if name == "gpumon_gpu_info"), {})
    values.update(name=info.get("name"), uuid=info.get("uuid"), pci_bus_id=info.get("pci_bus_id"))
    driver = next((labels for name, labels, _ in series if name == "gpumon_driver_info"), {})
    values["driver_version"] = driver.get("driver_version")
    return values


def check_metrics(fetch: Callable[[], str], smi: NvidiaSmi, *, rounds: int = 3) -> Section:
    """``rounds`` pages of /metrics, each between two nvidia-smi readings."""
    section = Section("exporter", f"Exporter: /metrics against nvidia-smi ({rounds} rounds)")
    names = queries()
    try:
        readings: list[Reading] = [read(smi, names)]
        pages: list[list[Series]] = []
        for _ in range(rounds):
            pages.append(parse_metrics(fetch()))
            readings.append(read(smi, names))
    except (SmiError, OSError) as error:
        section.fail(f"{type(error).__name__}: {error}")
        return section
    gpus = sorted({int(labels["gpu"]) for name, labels, _ in pages[0] if name == "gpumon_gpu_up"})
    if not gpus:
        section.fail("no gpumon_gpu_up series: the exporter serves no GPU")
        return section
    rows = [
        row
        for gpu in gpus
        for row in compare_gpu(
            gpu, [exported_values(page, gpu) for page in pages], readings, smi.rejected
        )
    ]
    add_table(section, rows, rounds, "/metrics", with_legend=False)
    section.lines.append("Legend and tolerances: as in the fields section.")
    return section


def serve(python: str, smi: NvidiaSmi, *, rounds: int = 3, timeout_s: float = 60) -> Section:
    """Start ``gpumon export`` on a free loopback port, check its pages, stop it."""
    argv = [python, "-m", "gpumon", "export", "--listen", "127.0.0.1:0", "--interval", "0.5"]
    with Child(argv, merge=True) as exporter:
        deadline = time.monotonic() + timeout_s
        url = None
        output = []
        while url is None and time.monotonic() < deadline:
            line = exporter.line(deadline - time.monotonic())
            if line is None:
                break
            output.append(line)
            match = _SERVING.search(line)
            url = match.group(1) if match else None
        if url is None:
            section = Section("exporter", "Exporter: /metrics against nvidia-smi")
            section.fail(f"gpumon export never said where it serves: {' | '.join(output[-5:])}")
            return section
        section = check_metrics(lambda: _fetch(url, deadline), smi, rounds=rounds)
        section.lines.insert(0, f"gpumon export served {url}")
        return section


def _fetch(url: str, deadline: float) -> str:
    """The page, once the first sample is in (503 until then)."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text: str = response.read().decode("utf-8")
                return text
        except urllib.error.HTTPError as error:
            if error.code != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
