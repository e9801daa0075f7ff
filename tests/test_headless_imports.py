"""Headless modes never import textual or torch (checked in a fresh interpreter each time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("textual", "torch", "rich")

CHECK = """
import sys
{body}
heavy = sorted(name for name in {forbidden!r} if name in sys.modules)
assert not heavy, f"imported: {{heavy}}"
print("clean")
"""


def run_clean(body: str) -> subprocess.CompletedProcess[str]:
    code = CHECK.format(body=body, forbidden=FORBIDDEN)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["once", "--demo"],
        ["once", "--demo", "--json", "--demo-gpus", "8"],
        ["once", "--demo", "--color", "always", "--no-processes"],
        ["status", "--demo"],
        ["once"],  # no driver here: the failure path must stay light too
        ["status"],
    ],
)
def test_headless_commands_import_no_ui_or_torch(argv: list[str]) -> None:
    result = run_clean(f"from gpumon.cli import main\nmain({argv!r})")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("clean")


def test_exporter_collector_imports_no_ui_or_torch() -> None:
    body = """
from prometheus_client import CollectorRegistry, generate_latest
from gpumon.export import SampleCollector
from gpumon.sources.demo import DemoSource
collector = SampleCollector()
collector.update(DemoSource(gpu_count=2).sample())
registry = CollectorRegistry(auto_describe=False)
registry.register(collector)
assert b"gpumon_gpu_up" in generate_latest(registry)
"""
    result = run_clean(body)
    assert result.returncode == 0, result.stderr


def test_building_the_parser_imports_no_exporter_dependencies() -> None:
    # `gpumon status` runs every few seconds: parsing the command line must stay cheap.
    body = """
from gpumon.cli import build_parser
build_parser()
for name in ("prometheus_client", "psutil", "pynvml", "jsonschema"):
    assert name not in sys.modules, name
"""
    result = run_clean(body)
    assert result.returncode == 0, result.stderr
