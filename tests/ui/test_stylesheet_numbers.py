"""The stylesheet lays out: the Python that shares a screen's room between widgets holds no
size, it reads them off the widgets' styles; no widget's size is set from Python."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import gpumon.ui

UI = Path(gpumon.ui.__file__).parent
#: The modules that share a screen's room between widgets.
LAYOUT_MODULES = ("dashboard/screen.py", "cluster/node_screen.py", "widgets/gpu_view.py")
#: Textual turns these into the classes the stylesheet selects on: the one place for them.
BREAKPOINTS = {"HORIZONTAL_BREAKPOINTS", "VERTICAL_BREAKPOINTS"}


def numbers(source: str) -> list[tuple[int, float]]:
    """(line, number) of every number in ``source`` but 0, 1 and 2 (an index, a neighbour, a
    half) and those of the breakpoint lists."""
    tree = ast.parse(source)
    skipped = {
        id(node)
        for statement in ast.walk(tree)
        if isinstance(statement, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in BREAKPOINTS for t in statement.targets)
        for node in ast.walk(statement.value)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and type(node.value) in (int, float)
        and node.value not in (0, 1, 2)
        and id(node) not in skipped
    ]


@pytest.mark.parametrize("name", LAYOUT_MODULES)
def test_a_layout_module_holds_no_size(name: str) -> None:
    assert numbers((UI / name).read_text()) == [], "read sizes off the styles, never copy them"


def test_the_check_finds_a_copied_size() -> None:
    copied = "def lay_out(height):\n    return height - (height - 1) * 55 // 100, max(4, height)\n"
    assert sorted(numbers(copied)) == [(2, 4), (2, 55), (2, 100)]
    allowed = "class S:\n    VERTICAL_BREAKPOINTS = [(0, '-low'), (10, '-high')]\n"
    assert numbers(allowed) == []


def test_the_stylesheet_declares_the_shares() -> None:
    """What the Python used to compute: the probe panel's 55 % under the dashboard, its width
    beside it, the GPU panel's share of the view and the table's minimum."""
    from gpumon.ui.widgets.gpu_view import GpuView

    app_css = (UI / "app.tcss").read_text()
    assert re.search(r"#probe \{[^}]*height: 55%", app_css)
    assert re.search(r"-wide #probe \{[^}]*width: 84", app_css)
    assert re.search(r"GpuPanel \{[^}]*max-height: \d+%", GpuView.DEFAULT_CSS)
    assert re.search(r"ProcessTable \{[^}]*min-height: \d+", GpuView.DEFAULT_CSS)


def test_no_widget_size_is_set_from_python() -> None:
    """A size set from Python (every refresh) lays the screen out again and hides the rule
    from the stylesheet."""
    offenders = []
    for path in UI.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                text = ast.unparse(target)
                if re.search(r"\.styles\.(min_|max_)?(height|width)$", text):
                    offenders.append(f"{path.relative_to(UI)}:{node.lineno}: {text}")
    assert offenders == []
