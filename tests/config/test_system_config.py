"""A system-wide config file ($XDG_CONFIG_DIRS/gpumon/config.toml, default /etc/xdg): what an
administrator sets for every user of a server, under each user's own file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.config import load_settings
from gpumon.config.files import default_config_path, system_config_paths


def write_config(directory: Path, text: str, mode: int = 0o644) -> Path:
    """``directory/gpumon/config.toml``, as an administrator (or a user) would write it."""
    (directory / "gpumon").mkdir(parents=True, exist_ok=True)
    path = directory / "gpumon" / "config.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    names = ("home", "site", "vendor")
    made = {name: tmp_path / name for name in names}
    for path in made.values():
        path.mkdir()
    return made


SERVER = (
    'prometheus_url = "http://prometheus.lab:9090"\nfree_threshold_mib = 2048\nreadonly = true\n'
)


def test_the_system_file_sets_defaults_for_a_user_without_a_file(dirs: dict[str, Path]) -> None:
    system = write_config(dirs["site"], SERVER)
    environ = {"XDG_CONFIG_HOME": str(dirs["home"]), "XDG_CONFIG_DIRS": str(dirs["site"])}
    settings = load_settings({}, environ)
    assert settings.prometheus_url == "http://prometheus.lab:9090"
    assert settings.free_threshold_mib == 2048
    assert settings.readonly is True
    assert settings.origins["readonly"] == str(system)
    assert settings.system_config_paths == (str(system),)
    assert settings.config_path is None


def test_the_users_file_wins_over_the_system_file(dirs: dict[str, Path]) -> None:
    system = write_config(dirs["site"], SERVER)
    user = write_config(dirs["home"], "readonly = false\n", mode=0o600)
    environ = {"XDG_CONFIG_HOME": str(dirs["home"]), "XDG_CONFIG_DIRS": str(dirs["site"])}
    settings = load_settings({}, environ)
    assert settings.readonly is False and settings.origins["readonly"] == str(user)
    assert settings.free_threshold_mib == 2048
    assert settings.origins["free_threshold_mib"] == str(system)
    # The environment and the command line still win over both.
    settings = load_settings({"free_threshold_mib": 10}, environ)
    assert settings.free_threshold_mib == 10


def test_earlier_xdg_config_dirs_win_and_relative_entries_are_ignored(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    site = write_config(dirs["site"], "free_threshold_mib = 100\n")
    vendor = write_config(dirs["vendor"], "free_threshold_mib = 200\nload_hot_pct = 90\n")
    # A relative entry would be read from wherever gpumon was started: never.
    monkeypatch.chdir(dirs["home"].parent)
    write_config(dirs["home"].parent / "relative", "interval = 7\n")
    value = f"relative:{dirs['site']}::{dirs['vendor']}:{dirs['site']}"
    settings = load_settings({}, {"XDG_CONFIG_HOME": str(dirs["home"]), "XDG_CONFIG_DIRS": value})
    assert settings.free_threshold_mib == 100 and settings.origins["free_threshold_mib"] == str(
        site
    )
    assert settings.load_hot_pct == 90 and settings.origins["load_hot_pct"] == str(vendor)
    assert settings.interval_s == 1.0
    assert settings.system_config_paths == (str(site), str(vendor))


def test_xdg_config_dirs_defaults_to_etc_xdg() -> None:
    assert system_config_paths({}) == ["/etc/xdg/gpumon/config.toml"]
    assert system_config_paths({"XDG_CONFIG_DIRS": ""}) == ["/etc/xdg/gpumon/config.toml"]
    assert system_config_paths({"XDG_CONFIG_DIRS": "relative/only"}) == []


def test_a_relative_xdg_config_home_is_ignored(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(dirs["home"])
    monkeypatch.setenv("HOME", str(dirs["vendor"]))
    write_config(dirs["home"] / "cfg", "interval = 7\n", mode=0o600)
    environ = {"XDG_CONFIG_HOME": "cfg", "XDG_CONFIG_DIRS": str(dirs["site"])}
    assert default_config_path(environ) == str(dirs["vendor"] / ".config/gpumon/config.toml")
    assert load_settings({}, environ).interval_s == 1.0


def test_print_config_says_which_file_each_value_came_from(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    system = write_config(dirs["site"], SERVER)
    user = write_config(dirs["home"], 'theme = "nord"\n', mode=0o600)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(dirs["home"]))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(dirs["site"]))
    assert main(["--print-config"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"# gpumon settings (config file: {user}; system-wide: {system})"
    )
    assert f"free_threshold_mib = 2048  # {system}" in out
    assert f'prometheus_url = "http://prometheus.lab:9090"  # {system}' in out
    assert f'theme = "nord"  # {user}' in out


def test_a_bad_system_file_is_one_line_naming_it_and_exit_2(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    system = write_config(dirs["site"], "free_treshold_mib = 2048\n")
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(dirs["site"]))
    assert main(["status", "--demo"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"gpumon: error: {system}: unknown key 'free_treshold_mib'")


def test_a_system_file_others_may_write_is_refused(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The system file names programs gpumon runs (probe_python) for every user: the same
    rules as the user's file."""
    system = write_config(dirs["site"], 'probe_python = "/tmp/evil"\n', mode=0o666)
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(dirs["site"]))
    assert main(["--print-config"]) == 2
    captured = capsys.readouterr()
    assert "/tmp/evil" not in captured.out
    assert captured.err == (
        f"gpumon: error: {system}: refused: the file is writable by other users "
        "(chmod go-w fixes it)\n"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_system_file_another_user_owns_is_refused(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    system = write_config(dirs["site"], 'probe_python = "/tmp/evil"\n')
    os.chown(system, 65534, 65534)
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(dirs["site"]))
    assert main(["--print-config"]) == 2
    assert "belongs to another user, nobody (uid 65534)" in capsys.readouterr().err
