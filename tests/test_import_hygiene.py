"""Layer rules, enforced: who may import pynvml, torch and textual."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpumon"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules_importing(name: str) -> set[str]:
    return {
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if name in imported_modules(path)
    }


def test_only_the_nvml_source_imports_pynvml() -> None:
    assert modules_importing("pynvml") == {"gpumon/sources/nvml/source.py"}


def test_only_the_probe_child_imports_torch() -> None:
    assert modules_importing("torch") <= {"gpumon/probe/child.py"}


def test_textual_is_imported_only_by_the_ui() -> None:
    outside = {path for path in modules_importing("textual") if not path.startswith("gpumon/ui/")}
    assert outside == set()


def test_starting_the_dashboard_never_imports_torch() -> None:
    """Start the real app (demo data), take samples, press keys: torch must stay out."""
    script = textwrap.dedent(
        """
        import asyncio, sys
        from gpumon.ui.dashboard.app import create_app

        async def main():
            app = create_app(demo=True, demo_gpus=2, interval_s=0.25, ascii_only=False)
            async with app.run_test(size=(120, 40)) as pilot:
                for _ in range(100):
                    await pilot.pause(0.02)
                    if app.samples_received >= 2:
                        break
                assert app.samples_received >= 2, app.samples_received
                await pilot.press("s", "question_mark", "escape")
            assert "torch" not in sys.modules, "torch was imported"
            print("ok")

        asyncio.run(main())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def gpumon_imports(path: Path) -> set[str]:
    """The gpumon modules ``path`` imports (absolute imports), at any depth of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("gpumon"))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith("gpumon")
        ):
            names.add(node.module)
    return names


def test_layers_are_one_way() -> None:
    """Nothing below the UI imports it; nothing but the entry points imports the CLI (settings
    come down as a Settings object, never an argparse namespace)."""
    for path in PACKAGE.rglob("*.py"):
        name = str(path.relative_to(PACKAGE.parent))
        imports = gpumon_imports(path)
        entry_point = name in ("gpumon/__main__.py", "gpumon/cli.py")
        if not name.startswith("gpumon/ui/") and not entry_point:
            assert not {m for m in imports if m.startswith("gpumon.ui")}, name
        if not entry_point:
            assert "gpumon.cli" not in imports, name
    for module in ("store", "settings", "model", "format"):
        path = PACKAGE / f"{module}.py"
        if path.exists():
            assert not {m for m in gpumon_imports(path) if m.startswith("gpumon.sources")}, module
