"""Each replaced piece of Textual is used where the functions it relies on are ones it was
tested with, whatever else changed in their files; where it is not, `gpumon --version` and
the help screen say so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from textual.command import CommandPalette

from gpumon.ui import exact_updates, textual_source
from gpumon.ui.app import CommandPaletteTypedAhead
from gpumon.ui.textual_source import REPLACEMENTS, is_on, source_digest
from gpumon.ui.widgets.help import HelpScreen
from tests.support.ui_helpers import app_for, make_gpu, make_sample

ROOT = Path(__file__).resolve().parents[2]

# A change to mouse hit-testing, which exact updates do not rely on, as Textual 8.2.8's one
# change to _compositor.py was: the whole-file check took that for a reason to stop.
HIT_TEST = "        line = widget.render_line(y)\n"
HIT_TEST_CHANGED = "        line = widget.render_line(max(0, y))\n"
# What Textual's `TODO: crop to x extents` would change: the function exact updates replace.
CROP_828 = "strip = strip.crop(0, min(end, x2) - x)"
CROP_FIXED = "strip = strip.crop(max(0, x1 - x), min(end, x2) - x)"


def textual_copy(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """A copy of the installed Textual under ``tmp_path`` with ``edits`` (file: old, new)."""
    source = textual_source.textual_directory()
    assert source is not None
    copy = tmp_path / "textual"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, (old, new) in edits.items():
        path = copy / name
        text = path.read_text()
        assert old in text, f"{name} no longer has the text this test edits"
        path.write_text(text.replace(old, new))
    return copy


def use(monkeypatch: pytest.MonkeyPatch, copy: Path) -> None:
    monkeypatch.setattr(textual_source, "textual_directory", lambda: copy)


def version_of(copy: Path | None = None) -> str:
    """`gpumon --version`, with ``copy`` in place of the installed Textual's source."""
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    if copy is not None:
        path.insert(0, str(copy.parent))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_replacement_is_on_with_the_installed_textual() -> None:
    """CI installs the oldest and the newest Textual gpumon takes: all four are on in each."""
    output = version_of()
    assert [line.split(": ")[1] for line in output.splitlines()[2:]] == ["on"] * 5, output


def test_a_change_elsewhere_in_a_followed_file_leaves_it_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Textual 8.0.2 to 8.2.7 differ from 8.2.8's _compositor.py only in mouse hit-testing;
    their users got Textual's partial updates, 16 times the bytes, with nothing said."""
    copy = textual_copy(tmp_path, {"_compositor.py": (HIT_TEST, HIT_TEST_CHANGED)})
    use(monkeypatch, copy)
    assert all(is_on(replacement) for replacement in REPLACEMENTS)
    assert exact_updates.install()
    assert "exact updates: on" in version_of(copy).splitlines()


def test_a_change_to_a_followed_function_turns_its_replacement_off_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from textual._compositor import ChopsUpdate

    copy = textual_copy(tmp_path, {"_compositor.py": (CROP_828, CROP_FIXED)})
    use(monkeypatch, copy)
    monkeypatch.setattr(ChopsUpdate, "render_segments", ChopsUpdate.render_segments)
    textuals = ChopsUpdate.render_segments
    assert exact_updates.install() is False
    assert ChopsUpdate.render_segments is textuals
    version = textual_source.textual_version()
    assert version_of(copy).splitlines()[1:] == [
        f"Textual {version}",
        f"exact updates: off (Textual {version} changed ChopsUpdate.render_segments)",
        "quiet input driver: on",
        "quiet footer: on",
        "palette type-ahead: on",
        "NO_COLOR without greys: on",
    ]


def test_a_textual_without_a_followed_function_turns_its_replacement_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    copy = textual_copy(tmp_path, {"widgets/_footer.py": ("def bindings_changed(", "def x(")})
    assert "quiet footer: off (Textual" in version_of(copy)
    assert "has no Footer.bindings_changed" in version_of(copy)
    (copy / "widgets" / "_footer.py").unlink()  # installed without its source
    use(monkeypatch, copy)
    assert textual_source.changed(textual_source.KEYS_FOOTER) == [
        "has no Footer.__init__",
        "has no Footer.compose",
        "has no Footer.bindings_changed",
        "has no Footer.on_mount",
    ]


def test_version_reads_textuals_source_without_importing_it() -> None:
    """`gpumon --version` stays light: no Textual, no Rich."""
    body = """
import sys
from gpumon.cli import main
try:
    main(["--version"])
except SystemExit as done:
    assert done.code in (0, None), done.code
loaded = [name for name in sys.modules if name.split(".")[0] in ("textual", "rich")]
assert not loaded, loaded
"""
    done = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "exact updates: on" in done.stdout


SAMPLE = make_sample((make_gpu(0),))


async def test_the_help_says_in_one_line_what_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    app = app_for(SAMPLE)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(SAMPLE)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "Textual" not in str(app.screen.query_one("#help-text").render()).splitlines()[0]
        await pilot.press("escape")
        copy = textual_copy(tmp_path, {"_compositor.py": (CROP_828, CROP_FIXED)})
        use(monkeypatch, copy)
        await pilot.press("question_mark")
        first = str(app.screen.query_one("#help-text").render()).splitlines()[0]
    version = textual_source.textual_version()
    assert first == f"Textual {version}: exact updates off; `gpumon --version` says why"


async def test_the_command_palette_is_textuals_own_where_its_guard_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    app = app_for(SAMPLE)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(SAMPLE)
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPaletteTypedAhead)
        await pilot.press("escape")
        copy = textual_copy(tmp_path, {"command.py": ("command_action()", "command_action(), 1")})
        use(monkeypatch, copy)
        await pilot.press("ctrl+p")
        assert type(app.screen) is CommandPalette


def test_comments_docstrings_blank_lines_and_indentation_do_not_count() -> None:
    module = '''
class Strip:
    @property
    def crop(self, start: int, end: int) -> "Strip":
        """Crop."""
        return self[start:end]  # a slice


class Other:
    def crop(self, start: int, end: int) -> "Strip":
        return self
'''
    reformatted = '''
class Strip:
    # moved
        @property
        def crop(self, start: int, end: int) -> "Strip":
            """Crop a strip,

            in two lines."""

            return self[start:end]
'''
    digest = source_digest(module, "Strip.crop")
    assert digest is not None and len(digest) == 16
    assert source_digest(reformatted, "Strip.crop") == digest
    assert source_digest(module.replace("@property", "@cache"), "Strip.crop") != digest
    assert source_digest(module.replace("[start:end]", "[start:]"), "Strip.crop") != digest
    assert source_digest(module, "Other.crop") not in (None, digest)
    assert source_digest(module, "Strip.extend") is None
    assert source_digest(module, "crop") is None  # a method, not a module's function


def test_a_definition_ends_where_its_body_does() -> None:
    module = """
def tick(
    self,
) -> None:
    if self.due:
        yield "#"  # not a comment: the text goes on
# a comment at the left margin

    return None
TICK = 0.1
"""
    digest = source_digest(module, "tick")
    assert digest == source_digest(module.replace("TICK = 0.1", "TICK = 1.0"), "tick")
    assert digest != source_digest(module.replace('"#"', '"#!"'), "tick")
    assert digest != source_digest(module.replace("return None", "return 1"), "tick")
    assert digest != source_digest(module.replace("    self,", "    self, due,"), "tick")
