"""The config file is read only when it is a small regular file that nobody else controls,
and --print-config writes valid, terminal-safe TOML."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tomllib

from gpumon.config import SettingsError, load_settings
from gpumon.config.files import MAX_CONFIG_BYTES, read_config, toml_value

ROOT = Path(__file__).resolve().parents[2]


def gpumon(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def config(tmp_path: Path, text: str = "interval = 2\n", mode: int = 0o600) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_fifo_is_refused_at_once_instead_of_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = gpumon("--config", str(fifo), "once", "--demo", timeout=10)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("not a regular file")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_config_path_is_shown_escaped_in_its_one_line_error(tmp_path: Path) -> None:
    path = str(tmp_path / "x\x1b]0;pwned\x07\x1b[2J\u202eyz.toml")
    result = gpumon("--config", path, "once", "--demo", timeout=10)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("yz.toml: no such file")
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "/"])
def test_a_device_or_a_directory_is_not_a_config_file(path: str) -> None:
    with pytest.raises(SettingsError, match="not a regular file"):
        read_config(path, required=True)


def test_a_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    with path.open("wb") as file:
        file.truncate(200 * 1024 * 1024)  # sparse: 200 MB that cost nothing to make
    path.chmod(0o600)
    with pytest.raises(SettingsError, match="too large"):
        read_config(str(path), required=True)
    assert MAX_CONFIG_BYTES < 1024 * 1024


def test_a_file_others_may_write_is_refused(tmp_path: Path) -> None:
    path = config(tmp_path, mode=0o666)
    with pytest.raises(SettingsError, match="writable by other users"):
        load_settings({}, environ={}, config=str(path))
    path.chmod(0o620)
    with pytest.raises(SettingsError, match="writable by other users"):
        load_settings({}, environ={}, config=str(path))


def test_a_file_in_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    path = config(directory)
    directory.chmod(0o777)
    try:
        with pytest.raises(SettingsError, match=r"its directory .*shared is writable"):
            load_settings({}, environ={}, config=str(path))
    finally:
        directory.chmod(0o700)


def test_a_file_of_mine_in_a_sticky_root_directory_is_read(tmp_path: Path) -> None:
    if os.stat("/tmp").st_uid != 0 or not os.stat("/tmp").st_mode & 0o1000:
        pytest.skip("/tmp is not a sticky directory of root's here")
    path = Path("/tmp") / f"gpumon-test-config-{os.getpid()}.toml"
    path.write_text("interval = 3\n")
    path.chmod(0o600)
    try:
        assert load_settings({}, environ={}, config=str(path)).interval_s == 3
    finally:
        path.unlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_another_user_owns_is_refused_also_for_root(tmp_path: Path) -> None:
    """As ssh does: root running `gpumon probe` must not run a probe_python someone else set."""
    path = config(tmp_path, 'probe_python = "/tmp/evil"\n')
    os.chown(path, 65534, 65534)
    result = gpumon("--config", str(path), "--print-config")
    assert result.returncode == 2
    assert "belongs to another user, nobody (uid 65534)" in result.stderr
    assert "/tmp/evil" not in result.stdout


def test_deeply_nested_values_are_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = config(tmp_path, "interval = " + "[" * 500 + "]" * 500 + "\n")
    result = gpumon("--config", str(path), "once", "--demo")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    path.write_text("theme = " + "{a = " * 500 + "1" + "}" * 500 + "\n")
    result = gpumon("--config", str(path), "once", "--demo")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_print_config_is_valid_toml_whatever_the_values_hold(tmp_path: Path) -> None:
    hostile = 'py\nthon\x1b]0;owned\x07 "x" \\ \u202e\x85'
    path = config(tmp_path, f"probe_python = {toml_value(hostile)}\n")
    result = gpumon("--config", str(path), "--print-config")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "\x85" not in result.stdout and "\x07" not in result.stdout
    parsed = tomllib.loads(result.stdout)
    assert parsed["probe_python"] == os.path.expanduser(hostile)


def test_print_config_round_trips_through_the_parser(tmp_path: Path) -> None:
    path = config(tmp_path, 'interval = 2.5\nreadonly = true\nprobe_python = "/usr/bin/python3"\n')
    result = gpumon("--config", str(path), "--print-config")
    parsed = tomllib.loads(result.stdout)
    assert parsed["interval"] == 2.5 and parsed["readonly"] is True
    assert parsed["probe_python"] == "/usr/bin/python3"
    assert parsed["free_threshold_mib"] == 1024  # defaults are printed too


def test_a_header_value_that_is_not_latin1_is_refused_when_read(tmp_path: Path) -> None:
    path = config(tmp_path, 'prometheus_headers = ["X-Token: caf\u00e9 \u2603"]\n')
    with pytest.raises(SettingsError, match="header X-Token: expected a value of Latin-1"):
        load_settings({}, environ={}, config=str(path))
    assert "\u2603" not in str(SettingsError("x"))


def test_reading_a_config_never_blocks_the_caller(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_config(str(fifo), required=True)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert isinstance(outcome[0], SettingsError)
