"""The help screen is built from the bindings and the field table: nothing to keep in step."""

from __future__ import annotations

import pytest
from textual.binding import Binding

from gpumon.data.fields import FIELDS
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.help import binding_groups, help_text
from gpumon.ui.widgets.help import WIDTH, key_text


@pytest.mark.parametrize("ascii_only", [False, True])
def test_every_key_and_field_is_in_the_help_and_it_fits_80_columns(ascii_only: bool) -> None:
    groups = binding_groups(GpumonApp.BINDINGS)
    text = help_text(groups, ascii_only)
    flat = " ".join(text.split())  # help lines wrap
    for _, bindings in groups:
        for binding in bindings:
            assert isinstance(binding, Binding)
            assert key_text(binding, ascii_only) in text
            assert " ".join((binding.tooltip or binding.description).split()) in flat
    for field in FIELDS:
        assert f"  {field.label} " in text, field.label
        assert " ".join(field.help.split()) in flat, field.key
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    if ascii_only:
        assert text.isascii(), sorted({c for c in text if not c.isascii()})


def test_navigation_keys_are_listed() -> None:
    """`i`, PgUp/PgDn, Home/End, g/G and h/l were missing from the help."""
    text = help_text(binding_groups(GpumonApp.BINDINGS), ascii_only=False)
    for keys in ("i ", "PgUp", "PgDn", "Home / g", "End / G", "← / h", "→ / l", "Tab", "Ctrl+P"):
        assert f"  {keys}" in text, keys


def test_key_names() -> None:
    assert key_text(Binding("up,k", "x", "Up"), ascii_only=False) == "↑ / k"
    assert key_text(Binding("up,k", "x", "Up"), ascii_only=True) == "Up / k"
    assert key_text(Binding("ctrl+c", "x", "Quit"), ascii_only=True) == "Ctrl+C"
    assert key_text(Binding("plus,equals_sign", "x", "Slower", key_display="+"), True) == "+"


def test_no_key_says_the_same_thing_twice_in_either_help() -> None:
    """Ctrl+C read "quit (copies instead ...); quit" in both dashboards."""
    from gpumon.ui.cluster.app import ClusterApp
    from gpumon.ui.widgets.help import keys_section

    for bindings in (GpumonApp.BINDINGS, ClusterApp.BINDINGS):
        text = " ".join(" ".join(keys_section([("Keys", bindings)])).split())
        assert "; quit" not in text
        assert text.count("quit (copies instead") == 1
