"""Asking nvidia-smi: ``--query-gpu``, ``-q``, ``--query-compute-apps`` and ``--help-query-gpu``.

Every call goes through one :data:`Runner` (argv in; exit status and output out): the real one
runs nvidia-smi, the ``--fake`` one (:mod:`tests.gpu_check.fake`) answers from faked NVML
readings, so the parsing here is the same in both.

An nvidia-smi that does not know a property (an older driver, a renamed one) refuses the whole
query with ``Field "NAME" is not a valid field to query.``: :meth:`NvidiaSmi.query` drops each
refused name, remembers it in :attr:`NvidiaSmi.rejected`, and asks again.
"""

from __future__ import annotations

import csv
import re
import subprocess
from collections.abc import Callable, Sequence

#: Runs argv and returns (exit status, stdout and stderr together).
Runner = Callable[[Sequence[str], float], tuple[int, str]]

TIMEOUT_S = 30.0
_REJECTED = re.compile(r'Field "([^"]+)" is not a valid field to query')
# A property in --help-query-gpu: a line of quoted names, e.g. "name" or "gpu_name".
_PROPERTY = re.compile(r'^"([^"\s]+)"((?:\s+or\s+"[^"\s]+")*)\s*$')
_ALIAS = re.compile(r'"([^"\s]+)"')


class SmiError(RuntimeError):
    """nvidia-smi failed (missing, timed out, or an answer that cannot be read)."""


def run_command(argv: Sequence[str], timeout_s: float) -> tuple[int, str]:
    """The real runner: the command's exit status and its output (stderr after stdout)."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as error:
        return 127, str(error)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer within {timeout_s:g} s"
    return done.returncode, done.stdout + done.stderr


class NvidiaSmi:
    """nvidia-smi through a runner; remembers the properties it refused."""

    def __init__(self, run: Runner = run_command, *, command: str = "nvidia-smi") -> None:
        self.run = run
        self.command = command
        #: Properties this nvidia-smi refused ("not a valid field to query"), in order.
        self.rejected: list[str] = []

    def query(self, names: Sequence[str]) -> dict[int, dict[str, str]]:
        """One ``--query-gpu`` reading: per NVML index, each answered property's raw text.

        A refused property is left out of the answer (and listed in :attr:`rejected`);
        ``index`` is always asked first, to key the rows.
        """
        wanted = [name for name in dict.fromkeys(names) if name not in self.rejected]
        asked = ["index", *(name for name in wanted if name != "index")]
        while True:
            status, output = self.run(
                [
                    self.command,
                    f"--query-gpu={','.join(asked)}",
                    "--format=csv,noheader,nounits",
                ],
                TIMEOUT_S,
            )
            if status == 0:
                return _rows(asked, output)
            refused = [name for name in _REJECTED.findall(output) if name in asked[1:]]
            if not refused:
                refused = self._refused_one_by_one(asked[1:]) if _REJECTED.search(output) else []
            if not refused:
                raise SmiError(f"nvidia-smi --query-gpu failed ({status}): {output.strip()}")
            self.rejected += refused
            asked = [name for name in asked if name not in refused]

    def _refused_one_by_one(self, names: Sequence[str]) -> list[str]:
        """The names nvidia-smi refuses, asked one at a time (its message named none we
        asked for: a differently spelt message, or an alias it reports by another name)."""
        refused = []
        for name in names:
            status, output = self.run(
                [self.command, f"--query-gpu={name}", "--format=csv,noheader,nounits"],
                TIMEOUT_S,
            )
            if status != 0 and _REJECTED.search(output):
                refused.append(name)
        return refused

    def details(self) -> dict[str, dict[str, str]]:
        """``nvidia-smi -q``: per GPU (its PCI bus id, lower case), the first value of each
        label (``GPU Slowdown Temp`` -> ``87 C``)."""
        status, output = self.run([self.command, "-q"], TIMEOUT_S)
        if status != 0:
            raise SmiError(f"nvidia-smi -q failed ({status}): {output.strip()[:300]}")
        return parse_details(output)

    def compute_apps(self) -> list[dict[str, str]]:
        """``--query-compute-apps``: one dict (pid, used_memory in MiB, gpu_uuid) per process."""
        names = ["pid", "used_memory", "gpu_uuid"]
        status, output = self.run(
            [
                self.command,
                f"--query-compute-apps={','.join(names)}",
                "--format=csv,noheader,nounits",
            ],
            TIMEOUT_S,
        )
        if status != 0:
            raise SmiError(f"nvidia-smi --query-compute-apps failed ({status}): {output.strip()}")
        return [
            dict(zip(names, row, strict=True)) for row in _csv(output) if len(row) == len(names)
        ]

    def properties(self) -> list[tuple[str, ...]]:
        """Every ``--query-gpu`` property ``--help-query-gpu`` lists, each with its aliases
        (``("name", "gpu_name")``); empty when the help cannot be read."""
        status, output = self.run([self.command, "--help-query-gpu"], TIMEOUT_S)
        return parse_properties(output) if status == 0 else []


def _csv(output: str) -> list[list[str]]:
    lines = [line for line in output.splitlines() if line.strip()]
    return [[cell.strip() for cell in row] for row in csv.reader(lines, skipinitialspace=True)]


def _rows(names: Sequence[str], output: str) -> dict[int, dict[str, str]]:
    rows: dict[int, dict[str, str]] = {}
    for row in _csv(output):
        if len(row) != len(names):
            raise SmiError(f"nvidia-smi answered {len(row)} values for {len(names)}: {row}")
        rows[int(row[0])] = dict(zip(names, row, strict=True))
    return rows


def parse_details(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi -q`` output: per ``GPU <bus id>`` block, label -> first value."""
    blocks: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("GPU ") and ":" in line and " : " not in line:
            current = blocks.setdefault(line[4:].strip().lower(), {})
        elif current is not None and " : " in line:
            label, _, value = line.partition(" : ")
            current.setdefault(label.strip(), value.strip())
    return blocks


def parse_properties(text: str) -> list[tuple[str, ...]]:
    """The quoted property names of ``nvidia-smi --help-query-gpu``, each with its aliases."""
    found = []
    for line in text.splitlines():
        match = _PROPERTY.match(line.strip())
        if match:
            found.append((match.group(1), *_ALIAS.findall(match.group(2))))
    return found
