"""Settings: defaults ← config file ← environment ← flags, and every kind of bad input is one
line naming where it came from, exit 2, and gpumon does not start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from gpumon import settings as S
from gpumon.cli import main

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "config.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_defaults_without_a_file() -> None:
    settings = S.load_settings({}, environ={"XDG_CONFIG_HOME": "/nonexistent"})
    assert settings.interval_s == 1.0 and settings.theme == "textual-dark"
    assert settings.config_path is None and dict(settings.origins) == {}


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, 'interval = 5\ntheme = "nord"\nload_hot_pct = 90\n')
    environ = {"GPUMON_INTERVAL": "2.5", "GPUMON_THEME": ""}  # empty: not set
    settings = S.load_settings({"theme": "textual-light"}, environ, config=str(path))
    assert settings.interval_s == 2.5
    assert settings.theme == "textual-light"
    assert settings.load_hot_pct == 90
    assert settings.origins == {
        "interval_s": "GPUMON_INTERVAL",
        "theme": "--theme",
        "load_hot_pct": str(path),
    }
    assert settings.config_path == str(path)


def test_the_default_file_is_under_xdg_config_home(tmp_path: Path) -> None:
    (tmp_path / "gpumon").mkdir()
    (tmp_path / "gpumon" / "config.toml").write_text("history_minutes = 30\n")
    settings = S.load_settings({}, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert settings.history_minutes == 30
    home = S.default_config_path({})
    assert home.endswith("/.config/gpumon/config.toml")


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("intervall = 2\n", "unknown key 'intervall' (known: interval, theme"),
        ('interval = "fast"\n', "interval: expected seconds from 0.25 to 60, got 'fast'"),
        ("interval = 0.1\n", "interval: expected seconds from 0.25 to 60, got 0.1"),
        ("interval = true\n", "interval: expected seconds from 0.25 to 60, got True"),
        ("interval = nan\n", "interval: expected seconds from 0.25 to 60, got nan"),
        ("load_hot_pct = 80.5\n", "load_hot_pct: expected a percentage from 1 to 100, got 80.5"),
        ('theme = "solarised"\n', "theme: expected one of textual-dark, "),
        ("probe_python = 3\n", "probe_python: expected the path of a Python interpreter"),
        ("interval = \n", "not valid TOML: "),
        ("[gpu]\ninterval = 2\n", "unknown key 'gpu'"),
        (b"theme = '\xff'\n", "not valid TOML: the file is not UTF-8"),
        ("load_warn_pct = 90\nload_hot_pct = 80\n", "load_warn_pct (90) must not be above"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_file_and_key_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, complaint: str
) -> None:
    path = write(tmp_path, text)
    code = main(["--config", str(path), "status", "--demo"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""  # nothing ran with half a config
    assert captured.err.startswith(f"gpumon: error: {path}: ")
    assert complaint in captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_a_missing_config_named_on_the_command_line_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(tmp_path / "nope.toml"), "status", "--demo"]) == 2
    assert capsys.readouterr().err == f"gpumon: error: {tmp_path / 'nope.toml'}: no such file\n"


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        ("GPUMON_INTERVAL", "fast", "GPUMON_INTERVAL: expected seconds from 0.25 to 60"),
        ("GPUMON_INTERVAL", "1e1", "GPUMON_INTERVAL: expected seconds"),  # ASCII decimals only
        ("GPUMON_THEME", "neon", "GPUMON_THEME: expected one of"),
    ],
)
def test_a_bad_environment_variable_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    complaint: str,
) -> None:
    monkeypatch.setenv(name, value)
    assert main(["status", "--demo"]) == 2
    err = capsys.readouterr().err
    assert complaint in err and err.count("\n") == 1


def test_a_bad_theme_flag_lists_the_themes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--theme", "neon", "status", "--demo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpumon: error: --theme: expected one of textual-dark, textual-light")


def test_print_config_is_toml_with_where_each_value_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, 'theme = "nord"\n')
    monkeypatch.setenv("GPUMON_INTERVAL", "3")
    assert main(["--config", str(path), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert f'theme = "nord"  # {path}' in out
    assert "interval = 3.0  # GPUMON_INTERVAL" in out
    assert "load_warn_pct = 50  # default" in out
    parsed = tomllib.loads(out)  # paste it into a config file as it is
    assert parsed["theme"] == "nord" and parsed["interval"] == 3.0
    assert set(parsed) <= set(S.KEYS)


def test_the_config_interval_reaches_the_command(tmp_path: Path) -> None:
    path = write(tmp_path, "interval = 0.5\n")
    settings = S.load_settings({}, {}, config=str(path))
    assert settings.interval_s == 0.5
    flag = S.load_settings({"interval_s": 2.0}, {}, config=str(path))
    assert flag.interval_s == 2.0 and flag.origins["interval_s"] == "--interval"


def test_themes_are_textuals_own() -> None:
    from textual.theme import BUILTIN_THEMES

    assert set(S.THEMES) == set(BUILTIN_THEMES)


def test_settings_module_stays_light() -> None:
    code = (
        "import sys, gpumon.settings as s; s.load_settings({});"
        "heavy = [m for m in ('textual', 'psutil', 'pynvml', 'tomllib', 'argparse') "
        "if m in sys.modules]; assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
