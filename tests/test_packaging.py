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
    assert PROJECT["scripts"] == {"gpumon": "gpumon.__main__:run"}
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "contrib").rglob("*.md")]
    texts += [path for path in (ROOT / "gpumon").rglob("*.py")]
    wrong = re.compile(r"(?:pip|pipx|uvx|uv tool) install[^\n`&|;]*?\bgpumon(?!-tui)\b(?![/.\w-])")
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in texts
        for match in wrong.finditer(path.read_text())
    ]
    assert not found


def test_the_install_section_installs_what_exists_and_says_the_name_is_reserved() -> None:
    """Until the first release, nothing is on the package index: the Install section gives
    the repository, a wheel or a clone, never the bare index name."""
    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("## Install\n") : readme.index("## Quick start\n")]
    assert "reserved" in install and "**gpumon-tui**" in install
    commands = [line for line in install.splitlines() if re.match(r"(pipx|uvx|pip) ", line)]
    assert commands
    for command in commands:
        assert f"git+{REPOSITORY}.git" in command or "dist/gpumon_tui-" in command, command
    assert "RELEASING.md" in install and (ROOT / "RELEASING.md").is_file()


def test_license_and_urls_are_modern_metadata() -> None:
    assert PROJECT["license"] == "MIT"  # SPDX expression, not a table
    assert PROJECT["license-files"] == ["LICENSE"]
    assert not [c for c in PROJECT.get("classifiers", []) if c.startswith("License ::")]
    assert set(PROJECT["urls"]) >= {"Homepage", "Repository", "Issues"}
    assert "torch" not in " ".join(PROJECT["dependencies"])  # light install; torch is [probe]
    assert set(PROJECT["optional-dependencies"]) >= {"probe", "export"}


def test_the_version_has_one_source() -> None:
    """pyproject.toml's version is the only one written: gpumon reads it from the installed
    package's metadata, on first use."""
    import gpumon

    assert gpumon.__version__ == PROJECT["version"]
    written = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "gpumon").rglob("*.py")
        if re.search(rf"""["']{re.escape(PROJECT["version"])}["']""", path.read_text())
    ]
    assert not written


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


def _package_data() -> set[str]:
    """Every file of the import package that is not Python source."""
    return {
        str(path.relative_to(ROOT))
        for path in (ROOT / "gpumon").rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }


def _test_files() -> set[str]:
    """Every file of the test suite a checkout holds but the benchmarks (git's list where
    there is one: the sdist itself has none)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "tests"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if listed.returncode != 0 or not listed.stdout:
        pytest.skip("not a git checkout: no list of the test suite's files to compare with")
    return {
        name
        for name in listed.stdout.splitlines()
        if not name.startswith("tests/benchmarks/") and (ROOT / name).is_file()
    }


def _sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as archive:
        return {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}


def test_the_sdist_has_the_package_its_docs_and_the_whole_test_suite(
    distributions: tuple[Path, Path],
) -> None:
    """A packager runs the tests from the sdist: every test file and fixture is in it (the
    benchmarks are not, but for the script a test runs), and no bytecode."""
    names = _sdist_names(distributions[0])
    assert {"README.md", "RELEASING.md", "LICENSE", "pyproject.toml", "docs/prometheus.md"} <= names
    assert {
        "contrib/grafana/gpumon-dashboard.json",
        "contrib/prometheus/gpumon-alerts.yml",
    } <= names
    assert _package_data() <= names
    assert "gpumon/py.typed" in names
    assert _test_files() <= names
    benchmarks = {name for name in names if name.startswith("tests/benchmarks/") and "." in name}
    assert benchmarks == {"tests/benchmarks/bench_exporter_hostile.py"}
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_twine_check_strict_passes(distributions: tuple[Path, Path]) -> None:
    """The package index would take both files and render the README as the package page."""
    if importlib.util.find_spec("twine") is None:
        pytest.skip("twine is not installed (it is in the test extra)")
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, distributions)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


#: The subset of the suite run from the unpacked sdist: the settings, the fixtures that are
#: files (cgroup, a recorded Prometheus server) and one SVG snapshot. The whole suite from
#: the sdist takes minutes (RELEASING.md says to run it before a release).
SDIST_SUBSET = (
    "tests/config/test_load.py",
    "tests/config/test_system_config.py",
    "tests/sources/host/test_cgroup.py",
    "tests/sources/prometheus/test_prometheus_source.py",
    "tests/ui/dashboard/test_snapshots.py::test_one_gpu",
)


@pytest.mark.slow
def test_the_tests_run_from_the_unpacked_sdist(
    distributions: tuple[Path, Path], tmp_path: Path
) -> None:
    """`pytest` in the unpacked sdist collects the whole suite (as many tests as this
    checkout) without an error, and a subset passes there, on the sdist's own gpumon."""
    with tarfile.open(distributions[0]) as archive:
        archive.extractall(tmp_path, filter="data")
    (unpacked,) = tmp_path.iterdir()

    def pytest_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
            capture_output=True,
            text=True,
            cwd=directory,
            timeout=300,
        )

    collected = pytest_in(unpacked, "--collect-only", "-q")
    # Exit 0: every test module imported (an error is exit 2; nothing collected, exit 5).
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    (count,) = re.findall(r"^(\d+) tests collected", collected.stdout, re.MULTILINE)
    assert int(count) > 1000  # the whole suite, not a corner of it
    subset = pytest_in(unpacked, "-q", *SDIST_SUBSET, "-o", "addopts=")
    assert subset.returncode == 0, subset.stdout[-3000:] + subset.stderr[-3000:]
    where = subprocess.run(
        [sys.executable, "-c", "import gpumon; print(gpumon.__file__)"],
        capture_output=True,
        text=True,
        cwd=unpacked,
        check=True,
    )
    assert where.stdout.startswith(str(unpacked))


def test_the_wheel_has_its_data_files_and_metadata(distributions: tuple[Path, Path]) -> None:
    _, wheel = distributions
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
    # Ranges, so that gpumon shares an environment with other Textual programs; the exact
    # pin the snapshots need is the test extra's only.
    runtime = [line for line in requires if "extra ==" not in line]
    assert not [line for line in runtime if "==" in line]
    assert "Requires-Dist: textual<9,>=8.0" in runtime
    assert any(line.startswith("Requires-Dist: rich>=") for line in runtime)
    assert 'Requires-Dist: textual==8.2.8; extra == "test"' in requires
    assert "gpumon/py.typed" in names
    classifiers = {
        line[len("Classifier: ") :] for line in text.splitlines() if "Classifier:" in line
    }
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    lowest = PROJECT["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {lowest}" in classifiers


def test_the_installed_wheel_runs(distributions: tuple[Path, Path], tmp_path: Path) -> None:
    """Installed from the wheel alone (dependencies from this environment): the headless
    modes run and the dashboard's stylesheet and the JSON schema are found."""
    _, wheel = distributions
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, wheel],
        check=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}

    def run(*args: str, program: str | Path = sys.executable) -> str:
        done = subprocess.run(
            [program, *args],
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
    # The console script pip wrote (its entry point: gpumon.__main__:run), output complete.
    once = run("once", "--demo", "--demo-gpus", "2", program=target / "bin" / "gpumon")
    assert "DEMO (simulated data)" in once.splitlines()[0]
    assert "\n[1] " in once and once.endswith("\n")
    check = (
        "import json; from importlib.resources import files; from gpumon.sampling import snapshot;"
        "assert files('gpumon.ui').joinpath('app.tcss').read_text();"
        "json.load(open(snapshot.SCHEMA_PATH)); print('ok')"
    )
    assert run("-c", check) == "ok\n"
