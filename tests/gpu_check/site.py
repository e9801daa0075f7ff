"""Build what a GPU machine's Python lacks for the check: ``python -m tests.gpu_check.site``.

The lent machines have torch, nvidia-ml-py, psutil, prometheus-client and pytest, but not
textual (the screenshot) nor pytest-asyncio (the async tests of ``pytest -m gpu``), and reach
no package registry. This copies those distributions, every requirement they have on Python
3.12 (the machine's; markers are judged for it), and the pytest this environment tests with,
from this environment into one folder (default ``build/gpu-site``, ignored by git) to name in
the device tool's ``carry`` and put first on ``PYTHONPATH`` there. Only pure-Python files are
copied, no bytecode, so that it works whatever the machine's Python; a distribution with
compiled code stops the build (carry that one as a wheel instead). Prints the folder's size:
the carried tree must stay well under 64 MiB.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from importlib import metadata
from pathlib import Path

from tests.gpu_check.children import ROOT

DISTRIBUTIONS = ("textual", "pytest-asyncio", "pytest")
TARGET_PYTHON = "3.12"
DEFAULT_DIR = ROOT / "build" / "gpu-site"
MIB = 1024**2
LIMIT_BYTES = 40 * MIB
_COMPILED = {".so", ".pyd", ".dylib"}


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def requirements(distribution: metadata.Distribution) -> list[str]:
    """The names it requires on the target Python, extras left out."""
    from packaging.requirements import Requirement

    environment = {
        "python_version": TARGET_PYTHON,
        "python_full_version": f"{TARGET_PYTHON}.0",
        "extra": "",
    }
    names = []
    for text in distribution.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate(environment):
            names.append(_canonical(requirement.name))
    return names


def closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The distributions named and all they require, each once."""
    found: dict[str, metadata.Distribution] = {}
    pending = [_canonical(name) for name in names]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        distribution = metadata.distribution(name)
        found[name] = distribution
        pending += requirements(distribution)
    return [found[name] for name in sorted(found)]


def copy(distribution: metadata.Distribution, target: Path) -> int:
    """Its files (package and .dist-info) into ``target``; the bytes copied."""
    copied = 0
    for path in distribution.files or []:
        if path.parts[0] == ".." or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue  # console scripts outside site-packages; bytecode
        if path.suffix in _COMPILED:
            raise SystemExit(f"{distribution.metadata['Name']} has compiled code ({path}):"
                             " carry it as a wheel (see the device README)")  # fmt: skip
        source = Path(str(distribution.locate_file(path)))
        destination = target / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
        copied += source.stat().st_size
    return copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIR)
    target: Path = parser.parse_args().directory
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    total = 0
    for distribution in closure(DISTRIBUTIONS):
        size = copy(distribution, target)
        total += size
        print(f"{distribution.metadata['Name']} {distribution.version}: {size / MIB:.1f} MiB")
    print(f"{target}: {total / MIB:.1f} MiB in all")
    if total > LIMIT_BYTES:
        sys.exit(f"over {LIMIT_BYTES // MIB} MiB: the device tool carries 64 MiB with the tree")


if __name__ == "__main__":
    main()
