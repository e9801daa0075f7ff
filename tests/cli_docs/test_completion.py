"""Shell completions (`gpumon --print-completion bash|zsh|fish`) and the man page
(`gpumon --print-man`), both generated from the argparse parser: every subcommand and option
is in them, and the shells and groff take what is generated."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from gpumon import cli
from gpumon.cli_docs import completion
from gpumon.cli_docs.man_page import RELEASE_DATE, man_page
from gpumon.cli_docs.model import read_parser, short_help
from gpumon.config import SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def every_command_and_flag() -> dict[str, set[str]]:
    """Subcommand ("" for the program) -> its option strings, read off argparse directly."""
    parser = cli.build_parser()
    found = {"": set[str]()}
    for action in parser._actions:  # argparse keeps no public list
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = {flag for option in sub._actions for flag in option.option_strings}
        else:
            found[""].update(action.option_strings)
    return found


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_every_subcommand_and_option_is_completed(shell: str) -> None:
    result = gpumon("--print-completion", shell)
    assert result.returncode == 0, result.stderr
    script = result.stdout
    for command, flags in every_command_and_flag().items():
        assert not command or command in script
        for flag in flags:
            spelled = flag.lstrip("-") if shell == "fish" else flag
            assert spelled in script, f"{shell}: {command or 'gpumon'} {flag}"


def test_an_option_added_to_the_parser_is_completed_at_once() -> None:
    """Nothing is written by hand: a new option reaches every shell and the man page."""
    parser = cli.build_parser()
    parser.add_argument("--frobnicate-level", metavar="PATH", help="a brand new option")
    program = read_parser(parser)
    for shell in completion.SHELLS:
        assert "frobnicate-level" in completion.script(shell, program)
    assert "\\-\\-frobnicate\\-level" in man_page(program, "1.2.3")


def test_cli_knows_the_same_shells_as_the_generator() -> None:
    assert cli.COMPLETION_SHELLS == completion.SHELLS


def test_an_unknown_shell_is_one_line_and_exit_2() -> None:
    result = gpumon("--print-completion", "tcsh")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "invalid choice: 'tcsh'" in result.stderr


def bash_complete(script: Path, *words: str) -> list[str]:
    """What bash offers for ``words`` (the last one is being typed)."""
    quoted = " ".join(f"'{word}'" for word in words)
    driver = (
        f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD=$(({len(words)} - 1)); "
        'COMPREPLY=(); _gpumon; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_bash_completes_subcommands_options_choices_and_paths(tmp_path: Path) -> None:
    script = tmp_path / "gpumon.bash"
    script.write_text(gpumon("--print-completion", "bash").stdout)
    assert bash_complete(script, "gpumon", "o") == ["once"]
    # Only the shared options once uses: not pick's --claims-dir.
    assert bash_complete(script, "gpumon", "once", "--c") == ["--color", "--cluster"]
    assert bash_complete(script, "gpumon", "pick", "--claim") == ["--claims-dir", "--claim-seconds"]
    assert bash_complete(script, "gpumon", "once", "--color", "") == ["auto", "always", "never"]
    # A subcommand's name as an option's value is not the subcommand.
    assert "once" in bash_complete(script, "gpumon", "--config", "status", "")
    assert bash_complete(script, "gpumon", "--interval", "") == []
    (tmp_path / "conf.toml").touch()
    (tmp_path / "conf.d").mkdir()
    assert bash_complete(script, "gpumon", "--config", f"{tmp_path}/conf") == [
        f"{tmp_path}/conf.d",
        f"{tmp_path}/conf.toml",
    ]
    assert bash_complete(script, "gpumon", "--claims-dir", f"{tmp_path}/conf") == [
        f"{tmp_path}/conf.d"
    ]
    # After a subcommand, only what argparse takes there: not the program's --theme.
    assert bash_complete(script, "gpumon", "status", "--th") == []


def test_bash_completes_the_value_after_an_equals_sign(tmp_path: Path) -> None:
    """`--by=<TAB>` offers the groupings, whether bash splits the word at '=' (its default
    COMP_WORDBREAKS) or keeps it whole (then each answer keeps the `--by=` in front)."""
    script = tmp_path / "gpumon.bash"
    script.write_text(gpumon("--print-completion", "bash").stdout)
    groupings = ["user", "job", "container", "gpu"]
    assert bash_complete(script, "gpumon", "report", "--by", "=") == groupings
    assert bash_complete(script, "gpumon", "report", "--by", "=", "c") == ["container"]
    assert bash_complete(script, "gpumon", "once", "--color", "=", "n") == ["never"]
    assert bash_complete(script, "gpumon", "report", "--by=") == [f"--by={g}" for g in groupings]
    assert bash_complete(script, "gpumon", "once", "--color=al") == ["--color=always"]
    (tmp_path / "conf.toml").touch()
    assert bash_complete(script, "gpumon", "--config", "=", f"{tmp_path}/co") == [
        f"{tmp_path}/conf.toml"
    ]
    # A subcommand's name as an option's value after '=' is not the subcommand.
    assert "once" in bash_complete(script, "gpumon", "--config", "=", "status", "")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_reads_the_script(tmp_path: Path) -> None:
    script = tmp_path / "_gpumon"
    script.write_text(gpumon("--print-completion", "zsh").stdout)
    done = subprocess.run(["zsh", "-n", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert script.read_text().startswith("#compdef gpumon\n")


def zsh_complete(directory: Path, line: str) -> set[str]:
    """What zsh offers after ``line`` and TAB (matches and description lines), with the
    script ``_gpumon`` in ``directory``."""
    out = directory / f"offered-{len(list(directory.glob('offered-*')))}"
    subprocess.run(
        ["zsh", "-f", ROOT / "tests/support/zsh_complete.zsh", directory, out, line],
        check=True,
        timeout=60,
    )
    assert Path(f"{out}.done").exists(), "zsh never finished completing"
    return set(out.read_text().splitlines()) if out.exists() else set()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_values_after_an_equals_sign_with_their_meaning(tmp_path: Path) -> None:
    (tmp_path / "_gpumon").write_text(gpumon("--print-completion", "zsh").stdout)
    groupings = {"user", "job", "container", "gpu"}
    assert groupings <= zsh_complete(tmp_path, "gpumon report --by=")
    assert groupings <= zsh_complete(tmp_path, "gpumon report --by ")
    offered = zsh_complete(tmp_path, "gpumon pick --format=")
    assert "index  -- nvidia-smi's numbers" in offered
    assert "uuid   -- GPU-... / MIG-... UUIDs, always right" in offered
    assert {"auto", "always", "never"} <= zsh_complete(tmp_path, "gpumon once --color=")


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_subcommands_options_and_choices(tmp_path: Path) -> None:
    script = tmp_path / "gpumon.fish"
    script.write_text(gpumon("--print-completion", "fish").stdout)

    def offered(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {script}; complete -C '{line}'"],
            capture_output=True,
            text=True,
            check=True,
        )
        return [entry.split("\t")[0] for entry in done.stdout.splitlines()]

    assert "once" in offered("gpumon ")
    assert offered("gpumon once --co") == ["--color"]
    assert sorted(offered("gpumon pick --format ")) == ["auto", "index", "uuid"]
    assert "once" not in offered("gpumon once ")


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_describes_each_choice_on_its_own(tmp_path: Path) -> None:
    """`--by <TAB>` tells what a row of each grouping is, not the option's help four times."""
    script = tmp_path / "gpumon.fish"
    script.write_text(gpumon("--print-completion", "fish").stdout)

    def described(line: str) -> dict[str, str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {script}; complete -C '{line}'"],
            capture_output=True,
            text=True,
            check=True,
        )
        return dict(entry.split("\t", 1) for entry in done.stdout.splitlines())

    assert described("gpumon report --by ") == {
        "user": "one row per user",
        "job": "one row per Slurm job",
        "container": "one row per container",
        "gpu": "one row per GPU",
    }
    assert described("gpumon pick --format ")["index"] == "nvidia-smi's numbers"
    assert described("gpumon once --color ")["never"] == "no colour codes at all"
    assert described("gpumon report --by=")["--by=gpu"] == "one row per GPU"
    # The option's own line names every grouping, its aside "(default)" left out.
    assert described("gpumon report --b")["--by"] == "one row per user, Slurm job, container or GPU"


def test_a_menu_description_leaves_out_asides_and_stops_at_a_comma_that_fits() -> None:
    assert short_help("the per-user table (USER, GPUS) in place of lines (JSON: all)") == (
        "the per-user table in place of lines"
    )
    assert short_help("print FREE GPUs, one per line; or none", limit=20) == "print FREE GPUs"
    assert short_help("a very long clause without any comma at all", limit=20) == "a very long..."


def test_the_man_page_has_every_option_subcommand_and_variable() -> None:
    result = gpumon("--print-man")
    assert result.returncode == 0, result.stderr
    page = result.stdout
    assert page.startswith('.TH GPUMON 1 "')
    for command, flags in every_command_and_flag().items():
        assert not command or f'.SS "gpumon {command}"' in page
        for flag in flags:
            assert flag.replace("-", "\\-") in page, f"{command or 'gpumon'} {flag}"
    for spec in SETTINGS:
        assert spec.env is None or f"\\fB{spec.env}\\fR" in page
    for variable in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "XDG_CONFIG_DIRS"):
        assert f"\\fB{variable}\\fR" in page


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_groff_formats_the_man_page_without_a_warning(tmp_path: Path) -> None:
    page = tmp_path / "gpumon.1"
    page.write_text(gpumon("--print-man").stdout)
    done = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z", page], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stderr == ""
    shown = subprocess.run(
        ["groff", "-man", "-Tascii", page], capture_output=True, text=True, check=True
    ).stdout
    assert "gpumon - Live NVIDIA GPU dashboard for shared GPU servers" in shown


def test_the_man_page_is_dated_by_the_release_or_source_date_epoch() -> None:
    """Without SOURCE_DATE_EPOCH the release's day; with it (a reproducible build) its day
    in UTC, whatever the time zone."""
    released = gpumon("--print-man").stdout.splitlines()[0]
    assert released.startswith(f'.TH GPUMON 1 "{RELEASE_DATE}" "gpumon ')
    rebuilt = subprocess.run(
        [sys.executable, "-m", "gpumon", "--print-man"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "SOURCE_DATE_EPOCH": "1764288000", "TZ": "America/Los_Angeles"},
    ).stdout
    assert rebuilt.startswith('.TH GPUMON 1 "2025-11-28" "gpumon ')


def test_the_release_date_is_a_day() -> None:
    assert date.fromisoformat(RELEASE_DATE)


def test_man_page_text_lines_fit_80_bytes_and_none_is_blank() -> None:
    """What mandoc -Tlint checks, for machines without it: no blank line (fill mode), no
    text line over 80 bytes but a single long word, no text line taken for a request."""
    page = man_page(read_parser(cli.build_parser()), "1.2.3", environ={})
    lines = page.splitlines()
    assert lines and "" not in lines
    for line in lines:
        assert len(line.encode()) <= 80 or " " not in line or line.startswith("."), line
        assert not line.startswith("'"), line
    assert page.endswith("\n") and not any(line != line.rstrip() for line in lines)


@pytest.mark.skipif(shutil.which("mandoc") is None, reason="mandoc is not installed")
def test_mandoc_lints_the_man_page_without_a_word(tmp_path: Path) -> None:
    page = tmp_path / "gpumon.1"
    page.write_text(gpumon("--print-man").stdout)
    done = subprocess.run(["mandoc", "-Tlint", page], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_closed_pipe_stops_the_man_page_quietly() -> None:
    done = subprocess.run(
        f"{sys.executable} -m gpumon --print-man | head -1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.stdout.startswith(".TH GPUMON 1") and "Traceback" not in done.stderr


def test_the_db_help_and_man_page_say_where_readers_fall_back() -> None:
    """A user's report reads the system's database while their own is missing: --db's help
    (and the man page made from it) says so, not only the README."""
    help_text = " ".join(gpumon("report", "--help").stdout.split())
    assert (
        "$XDG_STATE_HOME/gpumon/history.db, where readers use /var/lib/gpumon/history.db "
        "instead while that one is missing" in help_text
    )
    page = " ".join(gpumon("--print-man").stdout.split())
    assert "readers use /var/lib/gpumon/history.db instead while that one is missing" in page
