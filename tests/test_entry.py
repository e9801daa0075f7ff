"""The entry point (the ``gpumon`` console script, ``python -m gpumon``): a one-shot command
ends without the interpreter's teardown, yet its whole output and its exit status arrive;
every other mode gets the garbage collector back, which start-up runs without."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpumon.__main__ as entry

ROOT = Path(__file__).resolve().parent.parent
DEMO = ["--demo", "--demo-gpus", "2"]


class Exited(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


@pytest.fixture
def collector() -> Iterator[None]:
    """The test process's collector as it was, whatever the entry point did to it."""
    yield
    gc.unfreeze()
    gc.enable()


def python_m_gpumon(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def test_python_m_gpumon_imports_no_module_from_the_working_directory(tmp_path: Path) -> None:
    """Started from /tmp, a json.py another user left there must not run as this user."""
    mark = tmp_path / "planted-module-ran"
    for name in ("json", "sqlite3", "unicodedata"):  # imported only when first needed
        (tmp_path / f"{name}.py").write_text(f"open({str(mark)!r}, 'a').write({name!r})\n")
    once = python_m_gpumon("once", "--json", *DEMO, cwd=tmp_path)
    assert not mark.exists(), mark.read_text()
    assert once.returncode == 0 and json.loads(once.stdout)["simulated"] is True, once.stderr


def test_a_one_shot_command_prints_everything_and_keeps_its_exit_status() -> None:
    status = python_m_gpumon("status", *DEMO)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("DEMO GPU 0:") and status.stdout.endswith("\n")
    # A long document through a pipe: all of it, not what fitted in a buffer.
    many = ["--demo", "--demo-gpus", "8", "--demo-processes", "512"]
    once = python_m_gpumon("once", "--json", *many)
    assert once.returncode == 0, once.stderr
    document = json.loads(once.stdout)
    assert document["simulated"] is True and len(document["gpus"]) == 8
    bad = python_m_gpumon("status", *DEMO, "--format", "{nope}")
    assert bad.returncode == 2
    assert "bad --format" in bad.stderr


def test_a_one_shot_command_ends_at_once_once_flushed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], collector: None
) -> None:
    def exit_now(status: int) -> None:
        raise Exited(status)

    monkeypatch.setattr(entry.os, "_exit", exit_now)
    monkeypatch.setattr(sys, "argv", ["gpumon", "status", *DEMO])
    with pytest.raises(Exited) as ended:
        entry.run()
    assert ended.value.status == 0
    assert capsys.readouterr().out.startswith("DEMO GPU 0:")
    assert not gc.isenabled()  # its short life runs without collections


def test_every_other_mode_exits_the_usual_way_with_the_collector_back_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], collector: None
) -> None:
    monkeypatch.setattr(entry.os, "_exit", lambda status: pytest.fail("no fast exit here"))
    monkeypatch.setattr(sys, "argv", ["gpumon", "pick", *DEMO])
    with pytest.raises(SystemExit) as ended:
        entry.run()
    assert ended.value.code in (0, 1)
    assert gc.isenabled()
    capsys.readouterr()


def test_a_subcommands_name_as_an_abbreviated_options_value_is_no_one_shot(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], collector: None
) -> None:
    """``gpumon --conf status`` is the dashboard with the config file ``status`` (argparse
    takes ``--conf`` for ``--config``): it ends the usual way, so that the atexit hook that
    ends a probe child still running runs."""
    monkeypatch.setattr(entry.os, "_exit", lambda status: pytest.fail("no fast exit here"))
    monkeypatch.setattr(sys, "argv", ["gpumon", "--conf", "status"])
    with pytest.raises(SystemExit) as ended:
        entry.run()
    assert ended.value.code == 2  # no config file named "status" here
    assert "status" in capsys.readouterr().err


def test_help_and_usage_errors_take_the_usual_way_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], collector: None
) -> None:
    monkeypatch.setattr(entry.os, "_exit", lambda status: pytest.fail("no fast exit here"))
    monkeypatch.setattr(sys, "argv", ["gpumon", "status", "--no-such-option"])
    with pytest.raises(SystemExit) as ended:
        entry.run()
    assert ended.value.code == 2
    assert "--no-such-option" in capsys.readouterr().err


async def test_the_dashboard_turns_the_collector_back_on_once_its_first_sample_is_drawn(
    collector: None,
) -> None:
    from tests.support.ui_helpers import app_for, make_gpu, make_sample, screen_text

    sample = make_sample((make_gpu(0, name="NVIDIA Test Board"),))
    app = app_for(sample)
    gc.disable()  # as the entry point starts it
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not gc.isenabled()  # no sample yet: still starting
        app.receive_sample(sample)
        await pilot.pause()
        await pilot.pause()
        assert "NVIDIA Test Board" in screen_text(app)
        assert gc.isenabled()


async def test_a_first_sample_that_never_comes_does_not_leave_the_collector_off(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpumon.ui.dashboard import app as dashboard_app
    from tests.support.ui_helpers import app_for, make_gpu, make_sample

    monkeypatch.setattr(dashboard_app, "SETTLED_AT_LATEST_S", 0.2)
    app = app_for(make_sample((make_gpu(0),)))  # the sample is never handed to it
    gc.disable()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not gc.isenabled()
        await pilot.pause(0.4)
        assert gc.isenabled()


async def test_the_cluster_list_turns_the_collector_back_on_once_drawn(collector: None) -> None:
    from tests.ui.cluster.test_cluster_ui import cluster_app

    app = cluster_app()
    gc.disable()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert gc.isenabled()


@pytest.mark.parametrize(
    "args",
    [["once"], ["once", "--json"], ["status"], ["pick"], ["report", "--db", "/nonexistent.db"],
     ["--version"]],
    ids=lambda args: " ".join(args),
)  # fmt: skip
def test_a_closed_stdout_is_one_line_and_a_failure_not_a_traceback(args: list[str]) -> None:
    """``gpumon once >&-``: nowhere to write the output; it says so and fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = subprocess.run(
        [sys.executable, "-m", "gpumon", *args, *(DEMO if args[0] != "--version" else [])],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        timeout=60,
        preexec_fn=lambda: os.close(1),  # the shell's >&-
    )
    assert ran.returncode != 0
    assert ran.stderr == "gpumon: error: cannot write output: standard output is closed\n"
