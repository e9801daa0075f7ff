"""``pytest -m gpu``: each test's outcome, and the reason for each skip.

Only the test files that carry the ``gpu`` mark are given to pytest: collecting the whole
suite would import what a GPU machine may lack (textual, jsonschema, pyte...) and stop at
collection errors. Plugins are not auto-loaded (a GPU machine's own, such as hypothesis or
xdist, stay out); pytest-asyncio is loaded by name when it is installed, for the async tests.
Outcomes are read from pytest's JUnit XML.
"""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from tests.gpu_check.children import ROOT, run
from tests.gpu_check.report import Section, table

XML_NAME = "pytest-gpu.xml"
LOG_NAME = "pytest-gpu.log"
#: What pytest says of an async test when no plugin runs it.
_NO_ASYNC = "async def functions are not natively supported"


def gpu_test_files(root: Path = ROOT) -> list[Path]:
    """The test files that mark tests ``gpu``."""
    return [
        path
        for path in sorted((root / "tests").rglob("test_*.py"))
        if "pytest.mark.gpu" in path.read_text(encoding="utf-8")
    ]


def outcomes(xml_path: Path) -> list[tuple[str, str, str]]:
    """(test, outcome, message) per test case of a JUnit XML report."""
    found = []
    for case in ElementTree.parse(xml_path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = (element.get("message") or element.text or "").strip()
                break
        found.append((name, outcome, message.splitlines()[0] if message else ""))
    return found


def _short(message: str, limit: int = 110) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def check_pytest(python: str, out_dir: Path, *, timeout_s: float) -> Section:
    """Run ``pytest -m gpu`` on the marked files and report every test."""
    section = Section("pytest", "pytest -m gpu")
    files = [str(path.relative_to(ROOT)) for path in gpu_test_files()]
    xml_path = out_dir / XML_NAME
    argv = [python, "-m", "pytest", "-m", "gpu", "-rs", "-v", "-p", "no:cacheprovider"]
    has_asyncio = importlib.util.find_spec("pytest_asyncio") is not None
    if has_asyncio:
        argv += ["-p", "pytest_asyncio.plugin"]
    argv += [f"--junitxml={xml_path}", *files]
    section.lines.append(f"$ python {' '.join(argv[1:])}")
    status, out, err = run(argv, timeout_s, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    (out_dir / LOG_NAME).write_text(out + ("\n" + err if err else ""), encoding="utf-8")
    if status is None:
        section.fail(f"pytest did not finish within {timeout_s:.0f} s (log: {LOG_NAME})")
    if not xml_path.exists():
        section.fail(f"pytest wrote no report (status {status}): {out.strip()[-300:]}")
        return section
    rows = []
    failed = []
    for name, outcome, message in outcomes(xml_path):
        if outcome == "failed" and _NO_ASYNC in message and not has_asyncio:
            outcome, message = "skipped", "needs pytest-asyncio (not installed here)"
        if outcome in ("failed", "error"):
            failed.append(name)
        rows.append((name, outcome, message))
    shown = [(name, outcome, _short(message)) for name, outcome, message in rows]
    section.lines += table(("test", "outcome", "reason / message"), shown)
    section.data["tests"] = [
        dict(zip(("test", "outcome", "message"), row, strict=True)) for row in rows
    ]
    counts = {o: sum(r[1] == o for r in rows) for o in ("passed", "skipped", "failed", "error")}
    section.summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    if not rows:
        section.fail(f"no test ran (status {status})")
    for name in failed:
        section.fail(f"{name} failed")
    if failed:
        section.summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    return section
