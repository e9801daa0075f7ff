"""The command line: options, bad input, and what it prints."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from gpumon import __version__
from gpumon.cli import build_parser, main
from gpumon.config import load_settings
from gpumon.config.flags import settings_flags


def run_gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_version() -> None:
    result = run_gpumon("--version")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"gpumon {__version__}", f"Textual {version('textual')}"]
    assert len(lines) == 7  # and one per replacement of Textual's code (test_textual_source)


def test_help_lists_options_and_modes() -> None:
    result = run_gpumon("--help")
    assert result.returncode == 0
    for option in ("--interval", "--demo", "--demo-gpus", "--probe-python", "--readonly"):
        assert option in result.stdout
    for mode in ("once", "status", "export", "probe", "pick"):
        assert mode in result.stdout


@pytest.mark.parametrize("value", ["0.1", "0", "-1", "abc", "nan"])
def test_interval_below_the_floor_is_one_clear_line(value: str) -> None:
    result = run_gpumon("--interval", value)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gpumon: error: --interval: expected seconds from 0.25 to 60")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("argv", [["--readonly"], ["--readonly", "once"], ["once", "--demo"]])
def test_readonly_flag_lands_in_settings(argv: list[str], tmp_path: Path) -> None:
    args = build_parser().parse_args(argv)
    settings = load_settings(settings_flags(args), environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert settings.readonly is ("--readonly" in argv)
    if settings.readonly:
        assert settings.origins["readonly"] == "--readonly"


def test_readonly_in_the_config_file_lands_in_settings(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("readonly = true\n")
    args = build_parser().parse_args(["--config", str(config)])
    settings = load_settings(settings_flags(args), environ={}, config=args.config)
    assert settings.readonly is True
    assert settings.origins["readonly"] == str(config)


def test_print_config_shows_readonly(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("readonly = true\n")
    assert main(["--config", str(config), "--print-config"]) == 0
    assert f"readonly = true  # {config}" in capsys.readouterr().out


def test_interval_at_the_floor_is_accepted() -> None:
    args = build_parser().parse_args(["--interval", "0.25"])
    assert load_settings(settings_flags(args), environ={}).interval_s == 0.25


def test_demo_gpus_must_be_positive() -> None:
    result = run_gpumon("--demo", "--demo-gpus", "0")
    assert result.returncode == 2
    assert "--demo-gpus" in result.stderr and "from 1 to 64" in result.stderr


def test_demo_options_work_before_or_after_a_subcommand() -> None:
    parser = build_parser()
    before = parser.parse_args(["--demo", "--demo-gpus", "8", "once"])
    after = parser.parse_args(["once", "--demo", "--demo-gpus", "8"])
    for args in (before, after):
        settings = load_settings(settings_flags(args), environ={})
        assert settings.demo and settings.demo_gpus == 8


def test_dashboard_without_a_terminal_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--demo"]) == 2
    assert "gpumon once" in capsys.readouterr().err


@pytest.mark.parametrize("mode", [["once"], ["once", "--json"], ["status"]])
def test_a_closed_pipe_stops_quietly(mode: list[str]) -> None:
    """`gpumon once | head -1`: no traceback when the reader goes away."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpumon",
            *mode,
            "--demo",
            "--demo-gpus",
            "64",
            "--demo-processes",
            "2000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.read(10)
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.wait(timeout=60)
    assert "Traceback" not in stderr and "Exception" not in stderr, stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_is_one_clear_line() -> None:
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "gpumon", "once", "--json", "--demo"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == "gpumon: error: cannot write output: No space left on device"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "61"], "--interval: expected seconds from 0.25 to 60, got 61"),
        (["--demo-gpus", "65"], "--demo-gpus: expected a number of GPUs from 1 to 64, got 65"),
        (["--demo-processes", "100000"], "expected a number of processes from 1 to 4096"),
        (["--demo-gpus", "abc"], "--demo-gpus: expected a number of GPUs from 1 to 64, got 'abc'"),
        # What int() and float() accept but a person does not mean.
        (["--interval", "1_0"], "--interval: expected seconds from 0.25 to 60, got '1_0'"),
        (["--interval", "1e1"], "got '1e1'"),
        (["--interval", "\u0663"], "got '\u0663'"),  # an Arabic-Indic 3
        (["--demo-gpus", "1_0"], "got '1_0'"),
        (["--demo-gpus", "\u0663"], "got '\u0663'"),
        (["probe", "--size", "2_56"], "not a whole number of MiB"),
        (["probe", "--device", "cuda:\u0663"], "expected cuda:N"),
        (["probe", "--timeout", "1e3"], "not a number of seconds"),
    ],
)
def test_out_of_range_values_are_one_clear_line(args: list[str], message: str) -> None:
    result = run_gpumon(*args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


@pytest.mark.parametrize("argv", [[], ["once"], ["status"], ["export"], ["probe"], ["pick"]])
def test_every_help_page_prints(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse %-formats help texts: a literal % (status's default format) must not crash."""
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "usage: gpumon" in capsys.readouterr().out


def test_help_before_a_subcommand_still_lists_every_subcommand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A subcommand's parse leaves the other subcommands out (a status bar's start-up), but
    not when the top level's help is asked for before it."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--help", "status"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(f"    {name} " in out for name in ("once", "status", "export", "probe", "pick"))


def test_the_help_is_as_wide_as_columns_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 60
    monkeypatch.setenv("COLUMNS", "160")
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) > 100


# --- the cluster's options -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--prometheus", "http://p:9090", "--prometheus-ca-file", "/ca.pem", "once"],
        ["once", "--prometheus", "http://p:9090", "--prometheus-ca-file", "/ca.pem"],
        ["--prometheus", "http://p:9090", "pick", "--prometheus-ca-file", "/ca.pem"],
    ],
)
def test_prometheus_options_work_before_or_after_once_and_pick(
    argv: list[str], tmp_path: Path
) -> None:
    args = build_parser().parse_args([*argv, "--prometheus-timeout", "2.5"])
    settings = load_settings(settings_flags(args), environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert settings.prometheus_url == "http://p:9090"
    assert settings.prometheus_ca_file == "/ca.pem"
    assert settings.prometheus_timeout_s == 2.5
    assert settings.origins["prometheus_url"] == "--prometheus"


def test_prometheus_headers_repeat_and_add_up_across_the_subcommand(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            *("--prometheus-header", "A: 1", "--prometheus-header", "B: 2"),
            *("once", "--prometheus-header", "C:3"),
        ]
    )
    settings = load_settings(settings_flags(args), environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert settings.prometheus_headers == ("A: 1", "B: 2", "C: 3")


@pytest.mark.parametrize("mode", ["status", "export", "probe"])
def test_modes_about_this_machine_take_no_prometheus_option(mode: str) -> None:
    result = run_gpumon(mode, "--prometheus", "http://p:9090")
    assert result.returncode == 2
    assert "unrecognized arguments: --prometheus" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prometheus-timeout", "0.1", "once"], "--prometheus-timeout: expected seconds from"),
        (
            ["--prometheus-timeout", "1e3", "once"],
            "timeout: expected seconds from 0.5 to 120, got '1e3'",
        ),
        (["--prometheus", "gopher://p", "pick"], "--prometheus: expected an http:// or https://"),
    ],
)
def test_bad_prometheus_options_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run_gpumon(*args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_help_lists_the_prometheus_options() -> None:
    for argv in ([], ["once"], ["pick"]):
        out = run_gpumon(*argv, "--help").stdout
        for option in ("--prometheus URL", "--prometheus-header", "--prometheus-ca-file"):
            assert option in out, (argv, option)
    assert "--cluster" in run_gpumon("pick", "--help").stdout


def test_the_dashboard_opens_the_node_list_where_a_prometheus_server_is_set(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from gpumon.cli import _dashboard_app
    from gpumon.ui.cluster.app import ClusterApp
    from gpumon.ui.dashboard.app import GpumonApp

    environ = {"XDG_CONFIG_HOME": str(tmp_path), "GPUMON_PROMETHEUS_URL": "http://p:9090"}
    cluster = _dashboard_app(load_settings({}, environ))
    assert isinstance(cluster, ClusterApp)
    # --demo is one simulated machine, even with a configured server.
    assert isinstance(_dashboard_app(load_settings({"demo": True}, environ)), GpumonApp)
    missing = str(tmp_path / "nope.pem")
    settings = load_settings({"prometheus_ca_file": missing}, environ)
    assert _dashboard_app(settings) is None
    assert capsys.readouterr().err == (
        f"gpumon: error: --prometheus-ca-file: {missing}: no such file\n"
    )


def test_sharing_options_land_in_settings_from_flag_environment_and_file(
    tmp_path: Path,
) -> None:
    """free_threshold_mib, claim_seconds, claims_dir and the idle rule: a config key, a
    GPUMON_ variable and a flag each; idle_after_minutes takes fractions (0.1 = 6 s)."""
    config = tmp_path / "config.toml"
    config.write_text("claim_seconds = 300\nidle_below_pct = 2\n")
    config.chmod(0o600)
    environ = {"GPUMON_IDLE_AFTER_MINUTES": "0.5", "GPUMON_FREE_THRESHOLD_MIB": "2048"}
    argv = ["--config", str(config), "--idle-min-memory", "512", "--claims-dir", "/tmp/c"]
    args = build_parser().parse_args(argv)
    settings = load_settings(settings_flags(args), environ=environ, config=args.config)
    assert settings.claim_seconds == 300 and settings.origins["claim_seconds"] == str(config)
    assert settings.idle_below_pct == 2
    assert settings.idle_after_minutes == 0.5
    assert settings.origins["idle_after_minutes"] == "GPUMON_IDLE_AFTER_MINUTES"
    assert settings.free_threshold_mib == 2048
    assert settings.idle_min_memory_mib == 512
    assert settings.origins["idle_min_memory_mib"] == "--idle-min-memory"
    assert settings.claims_dir == "/tmp/c"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--only", "0,;rm"], "expected NVML indices"),
        (["--user", "a b"], "--user: expected a user name, got 'a b'"),
    ],
)
def test_bad_filter_options_are_one_line_and_exit_2(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "once", "--demo"]) == 2
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("claim_seconds", 601, "whole seconds from 1 to 600"),
        ("idle_after_minutes", 0.001, "minutes from 0.01 to 10080 (0.1 is 6 s)"),
        ("idle_below_pct", 101, "a whole percentage from 0 to 100"),
        ("prometheus_timeout_s", 0.25, "seconds from 0.5 to 120"),
    ],
)
def test_a_bad_value_is_refused_in_the_same_words_from_a_flag_a_variable_or_the_file(
    key: str,
    value: float,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One check per setting: its bounds are said once, whichever way the value came."""
    from gpumon.config.settings import BY_KEY

    flag, variable = BY_KEY[key].flag, BY_KEY[key].env
    assert flag and variable
    config = tmp_path / "config.toml"
    config.write_text(f"{key} = {value}\n")
    assert main([flag, str(value), "--print-config"]) == 2
    from_flag = capsys.readouterr().err
    assert main(["--config", str(config), "--print-config"]) == 2
    from_file = capsys.readouterr().err
    monkeypatch.setenv(variable, str(value))
    assert main(["--print-config"]) == 2
    from_variable = capsys.readouterr().err
    reason = f": expected {expected}, got {value}\n"
    assert from_flag == f"gpumon: error: {flag}{reason}"
    assert from_file == f"gpumon: error: {config}: {key}{reason}"
    assert from_variable == f"gpumon: error: {variable}{reason}"


def test_start_up_filters_land_in_settings_before_or_after_once(tmp_path: Path) -> None:
    for argv in (["--only", "0,3", "--user", "alice", "once"], ["once", "--only", "0,3"]):
        args = build_parser().parse_args(argv)
        settings = load_settings(settings_flags(args), environ={"XDG_CONFIG_HOME": str(tmp_path)})
        assert settings.only_gpus == ("0", "3")
    args = build_parser().parse_args(["--only-visible"])
    settings = load_settings(settings_flags(args), environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert settings.only_visible and settings.user_filter is None


def test_a_file_the_command_cannot_use_is_named_not_taken_for_the_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OSError about a file (a directory where a file was expected) names that file: it
    is not the output that failed."""
    import gpumon.commands.once as once

    def run(*args: object, **kwargs: object) -> int:
        raise IsADirectoryError(21, "Is a directory", "/tmp/some-dir")

    monkeypatch.setattr(once, "run", run)
    assert main(["once", "--demo"]) == 1
    assert capsys.readouterr().err == "gpumon: error: /tmp/some-dir: Is a directory\n"


@pytest.mark.parametrize(
    ("command", "offered", "not_offered"),
    [
        ("pick", ["--claims-dir", "--claim-seconds", "--free-threshold"], ["--db", "--idle-after"]),
        ("report", ["--db", "--idle-min-memory"], ["--claims-dir", "--claim-seconds", "--demo"]),
        ("status", ["--demo", "--free-threshold"], ["--claims-dir", "--db", "--history-days"]),
        (
            "record",
            ["--db", "--history-days", "--idle-after"],
            ["--claims-dir", "--free-threshold"],
        ),
        ("probe", ["--demo"], ["--free-threshold", "--claims-dir", "--db", "--idle-below"]),
    ],
)
def test_a_subcommands_help_offers_only_the_shared_options_it_uses(
    command: str,
    offered: list[str],
    not_offered: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out.split()
    assert all(option in shown for option in offered)
    assert not [option for option in not_offered if option in shown]


def test_a_shared_option_after_a_command_that_does_not_use_it_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--claim-seconds", "5"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --claim-seconds 5" in capsys.readouterr().err


def test_a_config_file_setting_a_command_does_not_use_is_ignored_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("claim_seconds = 5\nidle_after_minutes = 1\n")
    missing = str(tmp_path / "none.db")
    assert main(["--config", str(config), "report", "--db", missing]) == 1
    assert "no history" in capsys.readouterr().err.lower()


def test_a_shared_option_before_a_command_that_does_not_use_it_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--claim-seconds", "5", "report"]) == 2
    err = capsys.readouterr().err
    assert err == "gpumon: error: --claim-seconds: gpumon report does not use it " + (
        "(see `gpumon report --help`)\n"
    )
    assert main(["--user", "alice", "pick"]) == 2
    assert capsys.readouterr().err.startswith("gpumon: error: --user: gpumon pick does not use")


def test_the_man_page_lists_each_commands_shared_options_as_its_help_does() -> None:
    page = run_gpumon("--print-man").stdout.replace("\\-", "-")
    report = page.split('.SS "gpumon report"')[1].split(".SS")[0]
    pick = page.split('.SS "gpumon pick"')[1].split(".SS")[0]
    assert "--db" in report and "--claims-dir" not in report and "--demo" not in report
    assert "--claims-dir" in pick and "--claim-seconds" in pick


@pytest.mark.parametrize("command", [(), ("once",)])
def test_a_user_this_machine_does_not_know_is_one_line_and_exit_2(command: tuple[str, ...]) -> None:
    """`--user nosuchuser` (a typo) says so, instead of an empty table."""
    result = run_gpumon(*command, "--user", "nosuchuser-gpumon")
    assert result.returncode == 2
    assert (
        result.stderr == "gpumon: error: --user nosuchuser-gpumon: no such user on this machine\n"
    )
    assert result.stdout == ""


def test_the_demo_and_a_bare_uid_are_not_looked_up() -> None:
    """The demo's users exist only in the demo; a process without a user name shows its uid."""
    assert run_gpumon("once", "--demo", "--user", "alice").returncode == 0
    assert "no such user" not in run_gpumon("once", "--user", "4242").stderr
