"""KeysFooter: the key footer is rebuilt once at start, and again only when its keys change."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from gpumon.ui.textual_source import KEYS_FOOTER, changed
from gpumon.ui.widgets import keys_footer
from gpumon.ui.widgets.keys_footer import KeysFooter
from tests.support.ui_helpers import app_for, make_gpu, make_sample, screen_text

SAMPLE = make_sample(tuple(make_gpu(index) for index in range(2)))


def test_textuals_footer_is_the_one_keys_footer_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    """KeysFooter relies on how Textual's footer composes: when Textual changes one of the
    functions in KEYS_FOOTER, look at the change, carry it over and accept its digest. Until
    then (a user's other Textual 8), the footer does what Textual's does."""
    assert not changed(KEYS_FOOTER), "carry Textual's change over to keys_footer.py"
    assert keys_footer.follows_textual()
    monkeypatch.setitem(
        KEYS_FOOTER.follows, "textual.widgets._footer:Footer.compose", frozenset({"another"})
    )
    assert keys_footer.follows_textual() is False


async def settle(pilot: Pilot[None]) -> None:
    """Let the refreshes and the rebuilds they schedule run (each after a refresh)."""
    for _ in range(3):
        await pilot.pause()


async def test_the_footer_is_built_once_at_start_and_again_only_when_its_keys_change() -> None:
    """The dashboard's start refreshes its bindings three times (focus, the screen stack, an
    idle callback): Textual's footer rebuilt its dozen keys each time (~13 ms of CPU each,
    while the first sample was being taken). A refresh that changes no key rebuilds nothing;
    one that does (a terminal too small turns the dashboard's keys off) still shows."""
    app = app_for(SAMPLE)
    async with app.run_test(size=(160, 40)) as pilot:
        app.receive_sample(SAMPLE)
        await settle(pilot)
        footer = app.dashboard.query_one(KeysFooter)
        assert footer.rebuilds == 1
        assert "Details" in screen_text(app).splitlines()[-1]
        app.dashboard.refresh_bindings()  # nothing changed
        await settle(pilot)
        assert footer.rebuilds == 1
        await pilot.resize_terminal(39, 9)  # too small: the dashboard's keys are off
        await settle(pilot)
        assert footer.rebuilds == 2 and "Details" not in screen_text(app)
        await pilot.resize_terminal(160, 40)
        await settle(pilot)
        assert footer.rebuilds == 3 and "Details" in screen_text(app).splitlines()[-1]


async def test_against_another_textuals_footer_it_rebuilds_as_textuals_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keys_footer, "follows_textual", lambda: False)
    app = app_for(SAMPLE)
    async with app.run_test(size=(160, 40)) as pilot:
        app.receive_sample(SAMPLE)
        await settle(pilot)
        footer = app.dashboard.query_one(KeysFooter)
        before = footer.rebuilds
        assert before >= 2  # one per refresh at start, as Textual's footer
        app.dashboard.refresh_bindings()
        await settle(pilot)
        assert footer.rebuilds == before + 1
        assert "Details" in screen_text(app).splitlines()[-1]
