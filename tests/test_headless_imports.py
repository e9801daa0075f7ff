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
        ["pick", "--demo", "--wait", "1s"],
        ["pick"],  # no driver here; and claims (the dashboard's notes read them too)
    ],
)
def test_headless_commands_import_no_ui_or_torch(argv: list[str]) -> None:
    result = run_clean(f"from gpumon.cli import main\nmain({argv!r})")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("clean")


def test_exporter_collector_imports_no_ui_or_torch() -> None:
    body = """
from prometheus_client import CollectorRegistry, generate_latest
from gpumon.commands.export.collector import SampleCollector
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


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--demo"],
        ["status"],  # no driver here
        ["once", "--no-processes"],
        ["--interval", "2", "status", "--demo", "--format", "{util}"],
    ],
)
def test_status_loads_only_what_its_line_needs(argv: list[str]) -> None:
    """tmux runs `gpumon status` every few seconds: no psutil (it shows no process or host
    reading), no other subcommand's module, no logging or JSON, no package metadata (the
    version is read where it is shown) and no completion or man page generator."""
    body = f"""
from gpumon.cli import main
main({argv!r})
loaded = [name for name in ("psutil", "gpumon.sources.host.inspector",
          "gpumon.commands.export.collector", "gpumon.probe",
          "gpumon.probe.cli", "logging", "json", "importlib.metadata",
          "gpumon.cli_docs") if name in sys.modules]
assert not loaded, loaded
"""
    result = run_clean(body)
    assert result.returncode == 0, result.stderr


def test_status_tells_free_without_the_views_classes() -> None:
    """FREE is :mod:`gpumon.data.free`; the views' dataclasses (filters, the per-user
    summary) are for `once`, the dashboard and the exporter."""
    body = """
from gpumon.cli import main
main(["status", "--demo"])
assert "gpumon.data.free" in sys.modules
assert "gpumon.data.views" not in sys.modules
"""
    result = run_clean(body)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["status"], "status"),
        (["--demo", "once", "--json"], "once"),
        (["--probe-python", "status", "once"], "once"),  # "status" is a value here
        (["--interval=2", "export"], "export"),
        (["--demo"], None),
        (["--", "status"], None),
    ],
)
def test_the_subcommand_is_found_before_parsing(argv: list[str], expected: str | None) -> None:
    from gpumon import cli

    assert cli.chosen_subcommand(argv) == expected


def test_top_level_value_options_are_all_known() -> None:
    """chosen_subcommand must know every top-level option that takes a value."""
    from gpumon import cli
    from gpumon.config import flags

    parser = cli.build_parser(only="status")
    taking_values = {
        option
        for action in parser._actions  # argparse keeps no public list
        if action.option_strings and action.nargs != 0
        for option in action.option_strings
    }
    assert taking_values == flags.TOP_LEVEL_VALUE_OPTIONS


def test_the_store_poller_and_exporter_import_no_ui() -> None:
    """The data layers below the UI: the exporter runs them with no terminal at all."""
    body = """
import gpumon.sampling.store, gpumon.sampling.poller, gpumon.commands.export.http
import gpumon.data.fields, gpumon.config
"""
    result = run_clean(body)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--demo", "--print-config"],
        ["--interval", "2", "--theme", "nord", "--print-config"],
        ["--interval=0.5", "--only", "0,1", "--print-config"],
    ],
)
def test_the_dashboards_options_are_parsed_without_the_subcommands(argv: list[str]) -> None:
    """`gpumon` with options only (the dashboard) builds no subcommand's parser and imports
    no subcommand's module: ~20 ms less CPU before the first frame."""
    body = f"""
from gpumon.cli import main
assert main({argv!r}) == 0
loaded = sorted(name for name in sys.modules if name.startswith("gpumon.commands"))
assert not loaded, loaded
"""
    result = run_clean(body)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("argv", "operand"),
    [
        (["--demo"], False),
        (["--interval", "2", "--probe-python", "/usr/bin/python3"], False),
        (["--interval=2"], False),
        (["stauts"], True),  # a typo keeps every subcommand: argparse names the choices
        (["--demo", "once"], True),
        (["--", "--demo"], True),
        (["-5"], True),  # argparse: a negative number, an operand
        (["-"], True),
        (["--idle-below", "-5"], False),  # a value
        (["-x y"], True),
    ],
)
def test_an_operand_is_told_from_option_values(argv: list[str], operand: bool) -> None:
    from gpumon import cli

    assert cli.has_operand(argv) is operand


def test_a_typo_of_a_subcommand_still_lists_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gpumon.cli import main

    with pytest.raises(SystemExit) as ended:
        main(["--demo", "stauts"])
    assert ended.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'stauts'" in error and "'status'" in error


@pytest.mark.parametrize(
    "argv",
    [["--he"], ["--hel"], ["-hh"], ["--demo", "--help"], ["--hel", "status"], ["-h", "once"]],
)
def test_help_in_any_form_lists_every_subcommand(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse takes --he and -hh for --help: the top level's help with every subcommand."""
    from gpumon.cli import main

    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in ("status", "once", "pick", "report", "record"))
