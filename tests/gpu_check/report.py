"""The check's report: one :class:`Section` per part, printed as each ends, and written out.

Plain text for people (``gpu-check.txt``), JSON for machines (``gpu-check.json``); both are
rewritten after every section, so that a run cut short still leaves what it found.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

PASS = "pass"
FAIL = "fail"
SKIP = "skip"
_LABELS = {PASS: "PASS", FAIL: "FAIL", SKIP: "SKIP"}

TEXT_NAME = "gpu-check.txt"
JSON_NAME = "gpu-check.json"


@dataclass
class Section:
    """One part of the check: its verdict, a one-line summary, the lines that explain it."""

    name: str
    title: str
    status: str = PASS
    summary: str = ""
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def fail(self, problem: str) -> None:
        """Mark the section failed; the first problem becomes the summary."""
        if self.status != FAIL:
            self.summary = problem
        self.status = FAIL
        self.lines.append(f"FAILED: {problem}")

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        """One checked statement: ``ok`` or ``FAILED`` with what was expected."""
        text = f"{what}: {detail}" if detail else what
        if ok:
            self.lines.append(f"ok      {text}")
        else:
            self.fail(text)
        return ok

    def text(self) -> str:
        head = f"[{_LABELS[self.status]}] {self.title}"
        if self.summary:
            head += f": {self.summary}"
        return "\n".join([head, *(f"    {line}" for line in self.lines)])


def skipped(name: str, title: str, reason: str) -> Section:
    """A section that did not run, and why."""
    return Section(name, title, SKIP, f"skipped: {reason}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart, the header underlined."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            f"{cell:<{width}}" for cell, width in zip(cells, widths, strict=True)
        ).rstrip()

    return [line(headers), line(["-" * width for width in widths]), *map(line, rows)]


class Report:
    """Every section so far, the header above them, and where to write them."""

    def __init__(
        self,
        header: Sequence[str],
        *,
        out_dir: Path | None = None,
        json_file: Path | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.header = list(header)
        self.sections: list[Section] = []
        self.out_dir = out_dir
        self.json_file = json_file
        self.stream = stream or sys.stdout
        print("\n".join(self.header), file=self.stream, flush=True)

    def add(self, section: Section) -> Section:
        """Record a finished section, print it, and rewrite the files."""
        self.sections.append(section)
        print(f"\n{section.text()}", file=self.stream, flush=True)
        self.write()
        return section

    @property
    def failed(self) -> list[Section]:
        return [section for section in self.sections if section.status == FAIL]

    def verdict(self) -> str:
        counts = {status: 0 for status in _LABELS}
        for section in self.sections:
            counts[section.status] += 1
        tally = f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
        if self.failed:
            return f"RESULT: FAIL ({tally}: {', '.join(s.name for s in self.failed)})"
        return f"RESULT: PASS ({tally})"

    def text(self) -> str:
        parts = ["\n".join(self.header), *(section.text() for section in self.sections)]
        return "\n\n".join([*parts, self.verdict()]) + "\n"

    def data(self) -> dict[str, Any]:
        return {
            "header": self.header,
            "ok": not self.failed,
            "verdict": self.verdict(),
            "sections": [asdict(section) for section in self.sections],
        }

    def write(self) -> None:
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / TEXT_NAME).write_text(self.text(), encoding="utf-8")
            self._write_json(self.out_dir / JSON_NAME)
        if self.json_file is not None:
            self._write_json(self.json_file)

    def _write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.data(), indent=2, default=str) + "\n", encoding="utf-8")
