"""T, K and I through the real dashboard: the selected row's process, confirmed, ended; and
``--readonly`` (``readonly = true``): the keys say read-only, and the help says so."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from gpumon.config import Settings
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.signal_dialog import READONLY_NOTICE, SignalDialog
from gpumon.ui.widgets.help import HelpScreen
from gpumon.ui.widgets.process_table import ProcessTable
from tests.sources.host.test_process_signals import Children, assert_alive, ended_by, process_of
from tests.support.ui_helpers import app_for, make_gpu, make_sample, screen_text


@pytest.fixture
def children() -> Iterator[Children]:
    started = Children()
    yield started
    started.close()


def _app(child_processes: tuple[object, ...], *, readonly: bool = False) -> GpumonApp:
    gpu = make_gpu(0)
    sample = make_sample((gpu,), child_processes)  # type: ignore[arg-type]
    app = app_for(sample)
    app.settings = Settings(readonly=readonly)
    return app


async def test_t_on_the_selected_process_asks_then_terminates_it(children: Children) -> None:
    child = children.own()
    process = process_of(child, command="python train.py --lr 3e-4")
    app = _app((process,))
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(make_sample((make_gpu(0),), (process,)))
        await pilot.pause()
        app.query_one(ProcessTable).focus()
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, SignalDialog)
        text = screen_text(app)
        assert f"Send SIGTERM to PID {child.pid}?" in text
        assert "python train.py --lr 3e-4" in text
        assert_alive(child)  # nothing is sent before the user confirms
        await pilot.press("y")
        await pilot.pause()
        assert ended_by(child) == signal.SIGTERM


async def test_escape_in_the_dialog_sends_nothing(children: Children) -> None:
    child = children.own()
    process = process_of(child)
    app = _app((process,))
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(make_sample((make_gpu(0),), (process,)))
        await pilot.pause()
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, SignalDialog)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog)
        assert_alive(child)


async def test_readonly_keys_say_read_only_and_send_nothing(children: Children) -> None:
    """--readonly: T, K and I open no dialog and send nothing, but say why in one line
    (a key that does nothing seems lost); the help says so too."""
    child = children.own()
    process = process_of(child)
    app = _app((process,), readonly=True)
    notes: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(make_sample((make_gpu(0),), (process,)))
        await pilot.pause()
        original = app.notify

        def notify(message: str, **kwargs: Any) -> None:
            notes.append(message)
            original(message, **kwargs)

        app.notify = notify  # type: ignore[method-assign]
        for key in ("T", "K", "I"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, SignalDialog)
        assert notes == [READONLY_NOTICE] * 3
        assert_alive(child)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_text = str(app.screen.query_one("#help-text").render())
        assert "Read-only" in help_text and "T, K and I" in help_text
        assert "send SIGTERM" not in help_text


async def test_the_help_lists_the_signal_keys_when_not_readonly() -> None:
    app = _app(())
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        help_text = str(app.screen.query_one("#help-text").render())
        assert "send SIGTERM to the selected process" in help_text
        assert "Read-only" not in help_text
