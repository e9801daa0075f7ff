"""Settings: defaults ← config file ← environment ← flags, and every kind of bad input is one
line naming where it came from, exit 2, and gpumon does not start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from gpumon import config as S
from gpumon.cli import main
from gpumon.config import checks
from gpumon.config.files import default_config_path
from gpumon.config.settings import BY_KEY

ROOT = Path(__file__).resolve().parents[2]


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
    home = default_config_path({})
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
        (
            'probe_python = "envs/train/bin/python"\n',
            "probe_python: expected an absolute path or a command name, got "
            "'envs/train/bin/python' (a relative path would depend on the directory gpumon",
        ),
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
        ("GPUMON_PROBE_PYTHON", "./bin/python", "GPUMON_PROBE_PYTHON: expected an absolute path"),
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


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("/opt/envs/train/bin/python", "/opt/envs/train/bin/python"),
        ("~/envs/train/bin/python", str(Path.home() / "envs/train/bin/python")),
        ("python3", "python3"),  # a command name: looked up on PATH, as a shell would
    ],
)
def test_probe_python_from_the_file_and_environment_is_absolute_or_a_command_name(
    tmp_path: Path, given: str, used: str
) -> None:
    path = write(tmp_path, f"probe_python = {given!r}\n".replace("'", '"'))
    assert S.load_settings({}, environ={}, config=str(path)).probe_python == used
    environ = {"GPUMON_PROBE_PYTHON": given, "XDG_CONFIG_HOME": "/nonexistent"}
    assert S.load_settings({}, environ=environ).probe_python == used


def test_a_relative_probe_python_flag_is_the_one_in_the_directory_it_was_typed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    assert main(["--probe-python", "venv/bin/python", "--print-config"]) == 0
    printed = tomllib.loads(capsys.readouterr().out)
    assert printed["probe_python"] == str(tmp_path / "venv" / "bin" / "python")


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
    assert set(parsed) <= set(BY_KEY)


def test_the_config_interval_reaches_the_command(tmp_path: Path) -> None:
    path = write(tmp_path, "interval = 0.5\n")
    settings = S.load_settings({}, {}, config=str(path))
    assert settings.interval_s == 0.5
    flag = S.load_settings({"interval_s": 2.0}, {}, config=str(path))
    assert flag.interval_s == 2.0 and flag.origins["interval_s"] == "--interval"


def test_themes_are_textuals_own() -> None:
    from textual.theme import BUILTIN_THEMES

    assert set(checks.THEMES) == set(BUILTIN_THEMES)


def test_settings_module_stays_light() -> None:
    code = (
        "import sys, gpumon.config as s; s.load_settings({});"
        "heavy = [m for m in ('textual', 'psutil', 'pynvml', 'tomllib', 'argparse') "
        "if m in sys.modules]; assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


# --- the Prometheus server of a cluster ------------------------------------------------------

PROMETHEUS = "https://prometheus.example:9090/prom"
SECRET = "hunter2-s3cr3t"


def test_prometheus_settings_from_file_environment_and_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'prometheus_url = "http://file:9090"\nprometheus_user = "ops"\n'
        'prometheus_ca_file = "~/ca.pem"\nprometheus_timeout_s = 2.5\n'
        'prometheus_headers = ["X-Scope-OrgID: lab"]\n',
    )
    environ = {"GPUMON_PROMETHEUS_URL": PROMETHEUS, "GPUMON_PROMETHEUS_PASSWORD": SECRET}
    flags = {"prometheus_headers": ("X-Scope-OrgID: team",), "prometheus_timeout_s": 9.0}
    settings = S.load_settings(flags, environ, config=str(path))
    assert settings.prometheus_url == PROMETHEUS
    assert (settings.prometheus_user, settings.prometheus_password) == ("ops", SECRET)
    assert settings.prometheus_headers == ("X-Scope-OrgID: team",)  # the flag's list wins
    assert settings.prometheus_ca_file is not None
    assert (
        settings.prometheus_ca_file.endswith("/ca.pem") and "~" not in settings.prometheus_ca_file
    )
    assert settings.prometheus_timeout_s == 9.0
    assert settings.origins["prometheus_url"] == "GPUMON_PROMETHEUS_URL"
    assert settings.origins["prometheus_headers"] == "--prometheus-header"
    assert settings.origins["prometheus_user"] == str(path)


def test_prometheus_defaults() -> None:
    settings = S.load_settings({}, environ={"XDG_CONFIG_HOME": "/nonexistent"})
    assert settings.prometheus_url is None and settings.prometheus_headers == ()
    assert settings.prometheus_timeout_s == 5.0


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        (
            "ftp://prometheus:9090",
            "expected an http:// or https:// URL, got 'ftp://prometheus:9090'",
        ),
        ("prometheus:9090", "expected an http:// or https:// URL"),
        ("http://", "expected an http:// or https:// URL"),
        ("http://host:port", "expected an http:// or https:// URL"),
        ("http://host:9090/a b", "without spaces or control characters"),
        ("http://ho\nst:9090", "without spaces or control characters"),
    ],
)
def test_a_bad_prometheus_url_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], url: str, complaint: str
) -> None:
    assert main(["--prometheus", url, "once"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpumon: error: --prometheus: ") and complaint in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "url",
    [
        f"https://ops:{SECRET}@prometheus.example:9090",
        f"https://{SECRET}@prometheus.example",
        f"http://ops:{SECRET}@host:notaport",
        f"ops:{SECRET}@prometheus.example:9090",
    ],
)
def test_credentials_in_the_url_are_refused_without_showing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    for argv in (
        ["--prometheus", url, "once"],
        ["--config", str(write(tmp_path, f'prometheus_url = "{url}"\n')), "once"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert SECRET not in err and err.count("\n") == 1
    monkeypatch.setenv("GPUMON_PROMETHEUS_URL", url)
    assert main(["once"]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err and err.startswith("gpumon: error: GPUMON_PROMETHEUS_URL: ")


def test_a_url_with_a_user_points_at_the_user_and_password_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--prometheus", f"https://ops:{SECRET}@prometheus.example", "once"]) == 2
    err = capsys.readouterr().err
    assert "prometheus_user and prometheus_password" in err
    assert "GPUMON_PROMETHEUS_USER and GPUMON_PROMETHEUS_PASSWORD" in err


@pytest.mark.parametrize(
    ("headers", "complaint"),
    [
        (f"Authorization Bearer {SECRET}", 'header 1: expected "Name: value"'),
        (f"Bad Name: {SECRET}", 'header 1: expected "Name: value"'),
        ("X-Empty:", "header X-Empty: expected a value without line breaks"),
        (f"X-Evil: {SECRET}\r\nX-Injected: 1", "header X-Evil: expected a value without line"),
    ],
)
def test_a_bad_header_names_it_and_never_shows_its_value(
    capsys: pytest.CaptureFixture[str], headers: str, complaint: str
) -> None:
    assert main(["--prometheus-header", headers, "once", "--demo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpumon: error: --prometheus-header: ") and complaint in err
    assert SECRET not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('prometheus_headers = "Authorization: x"\n', 'expected a list of "Name: value" strings'),
        ("prometheus_headers = [3]\n", 'header 1: expected a "Name: value" string'),
        (
            "prometheus_password = 12345678\n",
            "expected a non-empty string (the value is not shown)",
        ),
        ('prometheus_user = "a:b"\nprometheus_password = "x"\n', "without a colon"),
        ('prometheus_user = "ops"\n', "prometheus_user is set but prometheus_password is not"),
        ('prometheus_password = "x"\n', "prometheus_password is set but prometheus_user is not"),
        (
            'prometheus_user = "ops"\nprometheus_password = "x"\n'
            'prometheus_headers = ["authorization: Bearer x"]\n',
            "an Authorization header and prometheus_user are both set: use one",
        ),
        ("prometheus_timeout_s = 0\n", "expected seconds from 0.5 to 120, got 0"),
        ("prometheus_ca_file = 1\n", "expected the path of a file"),
    ],
)
def test_bad_prometheus_settings_in_the_file_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, complaint: str
) -> None:
    path = write(tmp_path, text)
    assert main(["--config", str(path), "once", "--demo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpumon: error: {path}: ") and complaint in err
    assert "12345678" not in err and err.count("\n") == 1


def test_a_password_with_a_line_break_in_the_environment_is_refused_unseen(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUMON_PROMETHEUS_USER", "ops")
    monkeypatch.setenv("GPUMON_PROMETHEUS_PASSWORD", f"{SECRET}\nX: y")
    assert main(["once", "--demo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpumon: error: GPUMON_PROMETHEUS_PASSWORD: ") and SECRET not in err


def test_print_config_shows_secrets_as_set_and_never_their_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, f'prometheus_headers = ["X-Scope-OrgID: {SECRET}"]\n')
    monkeypatch.setenv("GPUMON_PROMETHEUS_USER", "ops")
    monkeypatch.setenv("GPUMON_PROMETHEUS_PASSWORD", SECRET)
    argv = ["--config", str(path), "--prometheus", PROMETHEUS, "--print-config"]
    argv += ["--prometheus-header", f"Authorization-Proxy: Bearer {SECRET}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert SECRET not in out
    assert f'prometheus_url = "{PROMETHEUS}"  # --prometheus' in out
    assert 'prometheus_user = "ops"  # GPUMON_PROMETHEUS_USER' in out
    assert "# prometheus_password = (set)  # GPUMON_PROMETHEUS_PASSWORD" in out
    assert '# prometheus_headers = ["Authorization-Proxy: (set)"]  # --prometheus-header' in out
    assert "prometheus_timeout_s = 5.0  # default" in out
    parsed = tomllib.loads(out)  # still pastes as a config file, without made-up secrets
    assert "prometheus_password" not in parsed and "prometheus_headers" not in parsed


def test_settings_repr_hides_the_secrets() -> None:
    settings = S.Settings(prometheus_password=SECRET, prometheus_headers=(f"X: {SECRET}",))
    assert SECRET not in repr(settings)
