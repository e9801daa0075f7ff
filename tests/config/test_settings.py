"""Each setting is declared once, on its :class:`Settings` field, and everything about it is
made from that declaration: the README's sample config, the variables the tests clear, the
options each subcommand offers."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import tomllib

from gpumon.cli import build_parser
from gpumon.config import SETTINGS, Settings, load_settings
from gpumon.config.flags import FLAGGED, SHARED
from gpumon.config.load import sample_config
from gpumon.config.settings import VARIABLES

ROOT = Path(__file__).resolve().parents[2]


def test_every_settings_field_but_the_bookkeeping_is_a_declared_setting() -> None:
    names = [item.name for item in fields(Settings)]
    assert [spec.attribute for spec in SETTINGS] == names[:-3]
    assert names[-3:] == ["config_path", "system_config_paths", "origins"]
    for place in ("key", "env", "flag"):
        given = [getattr(spec, place) for spec in SETTINGS if getattr(spec, place)]
        assert len(given) == len(set(given)), f"two settings share a {place}"


def test_the_readme_sample_config_is_the_one_the_settings_make() -> None:
    """Regenerate it with: python -c "from gpumon.config.load import sample_config as s;
    print(s(), end='')" and paste it between the README's ```toml fences."""
    readme = (ROOT / "README.md").read_text()
    assert f"```toml\n{sample_config()}```" in readme


def test_the_sample_config_reads_back_as_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(sample_config())
    path.chmod(0o600)
    assert tomllib.loads(sample_config())
    assert load_settings({}, environ={}, config=str(path)) == Settings(config_path=str(path))


def test_every_gpumon_variable_the_code_names_is_in_the_table_the_tests_clear() -> None:
    """tests/conftest.py clears VARIABLES: a GPUMON_ variable read anywhere must be in it."""
    named = {
        name
        for source in (ROOT / "gpumon").rglob("*.py")
        for name in re.findall(r"[\"'](GPUMON_[A-Z_]+)[\"']", source.read_text())
    }
    assert named and named <= VARIABLES, named - VARIABLES


def test_each_subcommand_parses_exactly_the_settings_that_name_it() -> None:
    parser = build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    every_flag = {spec.flag for spec in FLAGGED}
    for name, sub in subparsers.choices.items():  # type: ignore[attr-defined]
        offered = {flag for action in sub._actions for flag in action.option_strings}
        wanted = {spec.flag for spec in FLAGGED if spec.commands and name in spec.commands}
        assert offered & every_flag == wanted, name
    top = {action.dest for action in parser._actions}
    assert {dest for dest in SHARED if not dest.endswith("_after")} <= top


def test_a_subcommand_says_its_own_default_interval() -> None:
    parser = build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    for name, default in (("export", "1"), ("pick", "1"), ("record", "10")):
        sub = subparsers.choices[name]  # type: ignore[attr-defined]
        interval = next(action for action in sub._actions if "--interval" in action.option_strings)
        assert f"(default: {default})" in interval.help, name
