"""What a user installs: the distribution's name, metadata, sdist and wheel, and the README
as a package page shows it (absolute links that lead somewhere)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
REPOSITORY = PROJECT["urls"]["Repository"]
DISTRIBUTION = "gpumon-tui"


def test_the_distribution_name_is_not_the_taken_one_and_every_hint_uses_it() -> None:
    """`gpumon` on PyPI is an unrelated project (0.0.11): installing it by that name gets
    someone else's code. The command and the import package stay `gpumon`."""
    assert PROJECT["name"] == DISTRIBUTION
    assert PROJECT["scripts"] == {"gpumon": "gpumon.cli:main"}
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "contrib").rglob("*.md")]
    texts += [path for path in (ROOT / "gpumon").rglob("*.py")]
    wrong = re.compile(r"(?:pip|pipx|uvx|uv tool) install[^\n`&|;]*?\bgpumon(?!-tui)\b(?![/.\w-])")
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in texts
        for match in wrong.finditer(path.read_text())
    ]
    assert not found
    assert "pipx install gpumon-tui" in (ROOT / "README.md").read_text()


def test_license_and_urls_are_modern_metadata() -> None:
    assert PROJECT["license"] == "MIT"  # SPDX expression, not a table
    assert PROJECT["license-files"] == ["LICENSE"]
    assert not [c for c in PROJECT.get("classifiers", []) if c.startswith("License ::")]
    assert set(PROJECT["urls"]) >= {"Homepage", "Repository", "Issues"}
    assert "torch" not in " ".join(PROJECT["dependencies"])  # light install; torch is [probe]
    assert set(PROJECT["optional-dependencies"]) >= {"probe", "export"}


README_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_links_are_absolute_and_lead_to_files_in_this_repository() -> None:
    """A package page has no repository around the README: relative links break there."""
    raw = REPOSITORY.replace("https://github.com/", "https://raw.githubusercontent.com/")
    links = README_LINK.findall((ROOT / "README.md").read_text())
    assert links
    for link in links:
        assert link.startswith("https://"), f"relative link in README.md: {link}"
        for prefix in (f"{REPOSITORY}/blob/main/", f"{REPOSITORY}/tree/main/", f"{raw}/main/"):
            if link.startswith(prefix):
                path = link[len(prefix) :].split("#")[0]
                assert (ROOT / path).exists(), f"README.md links to a missing file: {link}"


def _build(tmp_path: Path) -> tuple[Path, Path]:
    if importlib.util.find_spec("build") is None:
        pytest.skip("the `build` package is not installed (it is in the test extra)")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # setuptools warns of what it will stop building (a license table, license classifiers).
    assert "deprecated" not in (done.stdout + done.stderr).lower()
    (sdist,) = tmp_path.glob("*.tar.gz")
    (wheel,) = tmp_path.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _build(tmp_path_factory.mktemp("dist"))


def _package_data() -> set[str]:
    """Every file of the import package that is not Python source."""
    return {
        str(path.relative_to(ROOT))
        for path in (ROOT / "gpumon").rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }


def test_the_sdist_has_the_package_and_its_docs_and_no_half_test_suite(
    built: tuple[Path, Path],
) -> None:
    sdist, _ = built
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"README.md", "LICENSE", "pyproject.toml", "docs/prometheus.md"} <= names
    assert {
        "contrib/grafana/gpumon-dashboard.json",
        "contrib/prometheus/gpumon-alerts.yml",
    } <= names
    assert _package_data() <= names
    # Either every fixture the tests need or none: none (they run from a clone).
    assert not [name for name in names if name.startswith("tests/")]


def test_the_wheel_has_its_data_files_and_metadata(built: tuple[Path, Path]) -> None:
    _, wheel = built
    assert wheel.name.startswith("gpumon_tui-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    assert _package_data() <= names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert "Name: gpumon-tui\n" in text
    assert "License-Expression: MIT\n" in text
    assert f"Project-URL: Repository, {REPOSITORY}\n" in text
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist: ")]
    assert not [line for line in requires if "torch" in line and "extra ==" not in line]


def test_the_installed_wheel_runs(built: tuple[Path, Path], tmp_path: Path) -> None:
    """Installed from the wheel alone (dependencies from this environment): the headless
    modes run and the dashboard's stylesheet and the JSON schema are found."""
    _, wheel = built
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, wheel],
        check=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    where = run("-c", "import gpumon; print(gpumon.__file__)")
    assert where.startswith(str(target))
    assert run("-m", "gpumon", "status", "--demo", "--demo-gpus", "2").startswith("DEMO GPU 0:")
    check = (
        "import json; from importlib.resources import files; from gpumon.sampling import snapshot;"
        "assert files('gpumon.ui').joinpath('app.tcss').read_text();"
        "json.load(open(snapshot.SCHEMA_PATH)); print('ok')"
    )
    assert run("-c", check) == "ok\n"
