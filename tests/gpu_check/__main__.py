"""Real-GPU truth in one command: ``python3 -m tests.gpu_check --out DIR``.

Sections, in order (each prints as it ends; exit status 1 when any fails, 0 otherwise):

1. environment: Python, gpumon, nvidia-smi, and each package, or what its absence skips;
2. fields: every field of the field table (and the GPU's identity) against nvidia-smi
   ``--query-gpu`` / ``-q`` read around it, as a table (:mod:`tests.gpu_check.fields_check`);
   the properties nvidia-smi has that gpumon does not read are listed;
3. processes: a torch job in ``once --json`` and ``--query-compute-apps``; the dashboard
   screenshot is taken while it holds its memory (:mod:`tests.gpu_check.jobs`);
4. screenshot: ``real-<GPU>-120x36.svg`` into screenshots/ and DIR;
5. probe: ``gpumon probe --device cuda:0``, every step with its figures;
6. exporter: ``/metrics`` against nvidia-smi (:mod:`tests.gpu_check.exporter_check`);
7. pytest: ``pytest -m gpu``, each test's outcome and skip reason.

``--fake`` needs no GPU, nvidia-smi or torch: NVML and nvidia-smi are faked from the same
readings (:mod:`tests.gpu_check.fake`), the fields and exporter sections check the script's own
table logic, the others say they were skipped. ``--fake-disagree KEY`` changes one field's
nvidia-smi answer (the check must then fail), ``--fake-reject NAME`` makes nvidia-smi refuse a
property. The whole run keeps to ``--budget`` seconds (a section that no longer fits is
skipped, saying so).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.gpu_check import children, exporter_check, fields_check, jobs, pytest_check
from tests.gpu_check.report import Report, Section, skipped
from tests.gpu_check.smi import NvidiaSmi, run_command

if TYPE_CHECKING:
    from gpumon.sources.nvml.source import NvmlSource

SECTIONS = ("fields", "processes", "screenshot", "probe", "exporter", "pytest")
#: (module, distribution, what needs it)
PACKAGES = (
    ("pynvml", "nvidia-ml-py", "every section"),
    ("psutil", "psutil", "processes, probe, exporter, screenshot"),
    ("prometheus_client", "prometheus-client", "exporter"),
    ("textual", "textual", "screenshot"),
    ("torch", "torch", "processes, probe"),
    ("pytest", "pytest", "pytest"),
    ("pytest_asyncio", "pytest-asyncio", "the async tests of pytest -m gpu"),
)
NEEDS = {
    "fields": ("pynvml",),
    "processes": ("pynvml", "psutil", "torch"),
    "screenshot": ("pynvml", "psutil", "textual"),
    "probe": ("pynvml", "psutil", "torch"),
    "exporter": ("pynvml", "psutil", "prometheus_client"),
    "pytest": ("pynvml", "pytest"),
}
#: The least time each section needs; with less left it is skipped.
MIN_S = {"fields": 20, "processes": 60, "screenshot": 20, "probe": 60, "exporter": 20,
         "pytest": 60}  # fmt: skip
_CARRY = "not installed here: build/gpu-site carries it (README: Development)"
#: What to do about a missing module.
INSTALL = {
    "pynvml": "pip install nvidia-ml-py",
    "psutil": "pip install psutil",
    "prometheus_client": "pip install prometheus-client",
    "textual": _CARRY,
    "pytest": _CARRY,
    "torch": "a CUDA build of torch (pip install torch)",
}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 -m tests.gpu_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, help="write the report, JSON, logs and SVG here")
    parser.add_argument("--json", type=Path, help="also write the JSON report to this file")
    parser.add_argument("--fake", action="store_true", help="no GPU: faked NVML and nvidia-smi")
    parser.add_argument(
        "--fake-disagree",
        action="append",
        default=[],
        metavar="KEY",
        help="--fake: change this field's nvidia-smi answer (a field key)",
    )
    parser.add_argument(
        "--fake-reject",
        action="append",
        default=[],
        metavar="PROPERTY",
        help="--fake: nvidia-smi refuses this --query-gpu property",
    )
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only these")
    parser.add_argument("--rounds", type=int, default=3, help="readings per field (default 3)")
    parser.add_argument("--job-mib", type=int, default=4096, help="the torch job's MiB")
    parser.add_argument("--budget", type=float, default=280, help="seconds for the whole run")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the children")
    parser.add_argument(
        "--no-screenshots-dir",
        action="store_true",
        help="leave screenshots/ alone (the SVG goes to --out only)",
    )
    return parser.parse_args()  # fmt: skip


def missing(*modules: str) -> list[str]:
    return [module for module in modules if importlib.util.find_spec(module) is None]


def environment(args: argparse.Namespace, smi_path: str | None) -> Section:
    section = Section("environment", "Environment")
    section.lines.append(f"python {platform.python_version()} ({sys.executable}), "
                         f"{platform.machine()}, children run {args.python}")  # fmt: skip
    section.lines.append(f"gpumon {_version('gpumon')} from {children.ROOT} ({_commit()})")
    if args.fake:
        section.lines.append("--fake: NVML and nvidia-smi are faked; GPU sections are skipped")
    elif smi_path is None:
        section.lines.append("nvidia-smi: not on PATH")
    else:
        status, output = run_command([smi_path, "--version"], 30)
        first = output.strip().splitlines()[:2] if status == 0 else [f"status {status}"]
        section.lines.append(f"nvidia-smi {smi_path}: {'; '.join(first)}")
    for module, distribution, needed_by in PACKAGES:
        if importlib.util.find_spec(module) is None:
            section.lines.append(f"{distribution}: missing (skips {needed_by})")
        else:
            section.lines.append(f"{distribution}: {_version(distribution)}")
    return section


def _version(distribution: str) -> str:
    if distribution == "gpumon":
        from gpumon import __version__

        return __version__
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "installed (no metadata)"


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=children.ROOT,
                              capture_output=True, text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "no git"
    return done.stdout.strip() or "no git"


class Run:
    """The sections of one run, the time left, and why a section cannot run."""

    def __init__(self, args: argparse.Namespace, report: Report) -> None:
        self.args = args
        self.report = report
        self.started = time.monotonic()
        self.out_dir = args.out or Path(children.ROOT / "build" / "gpu-check")
        self.smi_path = None if args.fake else shutil.which("nvidia-smi")
        self.screenshot_taken = False
        self._nvml: Any = None

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.started)

    def blocked(self, name: str) -> str | None:
        """Why section ``name`` is skipped, or ``None`` when it runs."""
        if self.args.only and name not in self.args.only:
            return "not asked for (--only)"
        if self.args.fake and name in ("processes", "probe", "pytest"):
            return "needs nvidia-smi/torch (--fake)"
        if self.args.fake and name == "screenshot" and self.args.out is None:
            return "--fake without --out"
        if not self.args.fake and self.smi_path is None:
            return "needs nvidia-smi (not on PATH)"
        lacking = missing(*NEEDS[name])
        if lacking:
            return "; ".join(f"needs {module}: {INSTALL[module]}" for module in lacking)
        if self.left() < MIN_S[name]:
            return f"out of time ({self.left():.0f} s left of the {self.args.budget:.0f} s budget)"
        return None

    def section(self, name: str, title: str, make: Callable[[], Section]) -> Section:
        """Run ``make`` unless blocked; a crash fails the section, never the run."""
        reason = self.blocked(name)
        if reason is not None:
            return self.report.add(skipped(name, title, reason))
        started = time.monotonic()
        try:
            section = make()
        except Exception as error:  # the report must still come out
            section = Section(name, title)
            section.fail(f"crashed: {type(error).__name__}: {error}")
            section.lines += traceback.format_exc().strip().splitlines()[-12:]
        section.lines.append(f"({time.monotonic() - started:.1f} s)")
        return self.report.add(section)

    # -- the sections ---------------------------------------------------------------------

    def smi(self) -> NvidiaSmi:
        if not self.args.fake:
            assert self.smi_path is not None
            return NvidiaSmi(run_command, command=self.smi_path)
        from tests.gpu_check.fake import FakeSmi, field_names

        disagree = field_names(self.args.fake_disagree)
        return NvidiaSmi(FakeSmi(self.nvml(), disagree=disagree, reject=self.args.fake_reject))

    def nvml(self) -> Any:
        """The faked NVML both sides of --fake read (a FakeNvml, passed as the module)."""
        if self._nvml is None:
            from tests.gpu_check.fake import fake_nvml

            self._nvml = fake_nvml()
        return self._nvml

    def source(self, *, processes: bool) -> NvmlSource:
        """gpumon's own NVML source (on the faked NVML with --fake). Its clock steps past the
        PCIe refresh period at every read, so that each sample reads PCIe afresh."""
        from gpumon.sources.nvml.device import PCIE_REFRESH_S
        from gpumon.sources.nvml.source import NvmlSource

        ticks = iter(range(1_000_000))
        return NvmlSource(
            nvml=self.nvml() if self.args.fake else None,
            read_processes=processes,
            monotonic=lambda: next(ticks) * (PCIE_REFRESH_S + 1),
        )

    def fields(self) -> Section:
        source = self.source(processes=False)
        try:
            return fields_check.check_fields(source, self.smi(), rounds=self.args.rounds)
        finally:
            source.close()

    def processes(self) -> Section:
        def shoot() -> None:
            self.screenshot_taken = True
            self.section("screenshot", SCREENSHOT_TITLE, self.screenshot)

        return jobs.check_processes(
            self.args.python,
            self.smi(),
            job_mib=self.args.job_mib,
            start_timeout_s=min(120, self.left() - 30),
            while_holding=None if self.blocked("screenshot") else shoot,
        )

    def screenshot(self) -> Section:
        section = Section("screenshot", SCREENSHOT_TITLE)
        directories = [self.out_dir]
        if not (self.args.fake or self.args.no_screenshots_dir):
            directories.append(children.ROOT / "screenshots")
        argv = [self.args.python, "-m", "tests.gpu_check.screenshot"]
        argv += [option for d in directories for option in ("--dir", str(d))]
        status, out, err = children.run(argv + (["--fake"] if self.args.fake else []), 90)
        if status != 0 or not out.strip():
            section.fail(f"status {status}: {err.strip()[-400:]}")
            return section
        shot = json.loads(out.strip().splitlines()[-1])
        section.data.update(shot)
        section.lines += [f"wrote {path}" for path in shot["files"]]
        jobs_shown = ", ".join(
            f"PID {p['pid']} {p['user']} {p['memory']}" for p in shot["processes"]
        )
        section.lines.append(
            f"{shot['gpu']}, driver {shot['driver']}; processes: {jobs_shown or 'none'}"
        )
        section.summary = Path(shot["files"][0]).name
        return section

    def probe(self) -> Section:
        return jobs.check_probe(self.args.python, self.smi(), timeout_s=min(150, self.left() - 20))

    def exporter(self) -> Section:
        if not self.args.fake:
            return exporter_check.serve(self.args.python, self.smi(), rounds=self.args.rounds)
        from gpumon.commands.export.collector import build_families
        from gpumon.commands.export.exposition import render

        source = self.source(processes=True)

        def page() -> str:
            families = build_families(source.sample())
            return b"".join(text for _, text in render(families)).decode()

        try:
            section = exporter_check.check_metrics(page, self.smi(), rounds=self.args.rounds)
        finally:
            source.close()
        section.lines.insert(0, "--fake: the page is rendered in-process from the faked sample")
        return section

    def pytest(self) -> Section:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return pytest_check.check_pytest(
            self.args.python, self.out_dir, timeout_s=min(200, self.left() - 10)
        )


SCREENSHOT_TITLE = "Screenshot: the dashboard on this GPU, 120x36"


def main() -> int:
    args = arguments()
    children.end_on_sigterm()
    mode = " (--fake: no GPU)" if args.fake else ""
    header = [
        f"gpumon real-GPU check{mode}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"host {platform.node()}; budget {args.budget:.0f} s",
        f"$ python3 -m tests.gpu_check {' '.join(sys.argv[1:])}",
    ]
    report = Report(header, out_dir=args.out, json_file=args.json)
    run = Run(args, report)
    try:
        report.add(environment(args, run.smi_path))
        run.section("fields", "Fields: gpumon against nvidia-smi", run.fields)
        run.section("processes", "Processes: a torch job on cuda:0", run.processes)
        if not run.screenshot_taken:
            run.section("screenshot", SCREENSHOT_TITLE, run.screenshot)
        run.section("probe", "Probe: gpumon probe --device cuda:0", run.probe)
        run.section("exporter", "Exporter: /metrics against nvidia-smi", run.exporter)
        run.section("pytest", "pytest -m gpu", run.pytest)
    except KeyboardInterrupt as interrupt:
        stopped = Section("interrupted", "Interrupted")
        stopped.fail(f"stopped ({interrupt or 'Ctrl+C'}): every child process was ended")
        report.add(stopped)
    finally:
        children.stop_all()
    print(f"\n{report.verdict()}", flush=True)
    if args.out is not None:
        print(f"report: {args.out}", flush=True)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
