#!/usr/bin/env python3
"""Wall time of gpumon's one-shot commands, side by side with ``nvitop -1`` (a benchmark).

Every timed run is a fresh process, as a user, a script or a tmux status bar starts it, so
interpreter start-up and imports are counted.

What runs gpumon (``--install``):

``wheel`` (the default): gpumon as a user installs it (``pipx install``/``pip install``
    install a wheel). A wheel of the working tree (uncommitted changes included) is built
    with ``python -m pip wheel --no-deps -w DIR .``, in a snapshot of the tree under
    ``$TMPDIR/gpumon-bench/`` (tracked and untracked, not ignored files: an in-tree build
    would leave ``build/`` in the repository and could pack stale modules), and installed
    into the throw-away venv ``$TMPDIR/gpumon-bench/venv-gpumon-wheel``. The first run
    creates that venv and installs the wheel with gpumon's runtime dependencies; later runs
    reuse it and only reinstall the fresh wheel (``--no-deps --force-reinstall``; the
    dependencies again only when ``pip check`` finds them unmet), so a run costs seconds of
    set-up. Both monitors run through their console scripts: ``<venv>/bin/gpumon ...`` and
    ``<nvitop venv>/bin/nvitop -1``.
``current``: today's interpreter (or ``--python PATH``, which implies it) runs ``python -m
    gpumon ...`` from the repository root, i.e. the working tree as that interpreter imports
    it. With a development (editable) install, every start also pays the editable install's
    import hook (about 10-20 ms) that a user's install does not have; useful to measure a
    change without building. nvitop then runs alike: ``<nvitop venv>/bin/python -m nvitop
    -1``.

The header names gpumon's version and commit (``git rev-parse --short HEAD``, plus
"+ uncommitted changes" when ``git status`` shows any), where it is installed and how both
monitors are started. For the comparison, nvitop is a pinned nvitop (1.7.2) installed
normally (not editable) into a throw-away venv, created with pip under
``$TMPDIR/gpumon-bench/`` on the first run and reused later (``bench_env``). Every command
gets the same environment: ``COLUMNS=120 LINES=40``, stdin from /dev/null, stdout and stderr
to pipes (so no colour and no terminal), and PYTHONDONTWRITEBYTECODE removed, so that the
warm-up runs leave up-to-date ``.pyc`` files as an installed package has (pip compiles them
at install time; else a sandbox that sets it compiles every changed module on every run).
Not collected by pytest.

Two scenarios (``--scenario both``, the default, runs demo then real):

``demo``
    gpumon only, on its simulated server (``--demo --demo-gpus 8``, 64 processes):
    ``once --json``, ``once``, ``once --no-processes``, ``status``. Absolute targets:
    ``once --json`` and ``once`` at most 0.25 s, ``status`` at most 0.15 s.

``real``
    NVML through ``--nvml-lib``: by default the fake ``libnvidia-ml.so.1`` of
    ``../shared/fakenvml`` (built if needed, in a copy under $TMPDIR when that directory is
    read-only) with ``--gpus`` x ``--per-gpu`` (8 x 8) *real* idle job processes started by
    its ``spawn_procs.py`` and always stopped at the end (also on an error or Ctrl+C), so
    that the per-PID host reads cost what they cost on a server. ``--nvml-lib system`` uses
    the installed driver (no LD_LIBRARY_PATH override, no jobs); ``--nvml-lib DIR`` puts DIR
    (holding libnvidia-ml.so.1) first on LD_LIBRARY_PATH. Commands: gpumon ``once --json``,
    ``once``, ``once --no-processes``, ``status`` and ``nvitop -1`` (``--compare none``
    leaves nvitop out). Goal: ``gpumon status`` and ``gpumon once
    --no-processes`` take at most half of ``nvitop -1``'s median wall time on the same
    machine (ratio <= 0.5x); the other ratios are printed without a goal.

Method: one untimed warm-up run of each command (its output is checked: non-empty, exit
status 0; gpumon's real-scenario output must not say DEMO, and with the fake library every
command must show every fake GPU, and gpumon's ``once``/``once --json`` every job PID),
then ``--runs`` rounds, each running every command once, round-robin with the starting
command rotated per round, so that machine noise is spread over all commands alike. Every
timed run must exit 0 with non-empty output. Printed per command: min, median and max wall
seconds, and in the real scenario each median as a ratio of nvitop's median.

Usage (from the repository root)::

    python tests/benchmarks/bench_once.py                      # both scenarios, 15 rounds
    python tests/benchmarks/bench_once.py --runs 30 --scenario real
    python tests/benchmarks/bench_once.py --scenario real --gpus 8 --per-gpu 64
    python tests/benchmarks/bench_once.py --scenario real --nvml-lib system   # GPU server
    python tests/benchmarks/bench_once.py --scenario demo --compare none
    python tests/benchmarks/bench_once.py --install current     # this interpreter, -m gpumon
    python tests/benchmarks/bench_once.py --python /usr/bin/python3.12   # -m gpumon there

Exit status: 0 when every target and goal is met, 1 when one is missed, 2 on an error
(a failed set-up, a command that fails or prints the wrong thing, Ctrl+C). Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import (
    FakeJobs,
    SetupError,
    build_fake_library,
    build_wheel,
    ensure_nvitop,
    ensure_wheel_venv,
    is_fake_library,
    log,
    system_cpu,
    work_dir,
)

ROOT = Path(__file__).resolve().parents[2]
NVITOP_VERSION = "1.7.2"
COLUMNS, LINES = 120, 40
DEMO = ["--demo", "--demo-gpus", "8"]
DEMO_PROCESSES = ["--demo-processes", "64"]
# The goal: these gpumon commands take at most this fraction of nvitop -1's wall time.
NVITOP_RATIO_GOALS = {"gpumon once --no-processes": 0.5, "gpumon status": 0.5}

# A check gets a warm-up run's stdout and returns what is wrong with it ("" when nothing).
Check = Callable[[str], str]


@dataclass
class Gpumon:
    """How gpumon is started: ``argv`` is the command line before gpumon's own arguments."""

    argv: list[str]
    python: str  # the interpreter that runs it
    console_script: bool  # True: <venv>/bin/gpumon (nvitop alike); False: python -m (alike)
    description: str  # what is measured, for the header


@dataclass
class Command:
    label: str
    argv: list[str]
    check: Check
    target_s: float | None = None  # absolute target (demo scenario)
    times: list[float] = field(default_factory=list)


@dataclass
class Scenario:
    name: str
    description: str
    commands: list[Command]
    env: dict[str, str]
    jobs: FakeJobs | None = None
    notes: list[str] = field(default_factory=list)


def child_environment() -> dict[str, str]:
    """This process's environment with a fixed terminal size and no colour overrides."""
    env = dict(os.environ)
    for name in ("COLORTERM", "NO_COLOR", "FORCE_COLOR", "TEXTUAL", "TMUX"):
        env.pop(name, None)
    # The warm-up runs write the bytecode caches that an installed package has (pip compiles
    # at install time); without them, a module without an up-to-date .pyc is compiled anew
    # on every run, which is not what a user's start-up costs.
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):
        env.pop(name, None)
    env.update(COLUMNS=str(COLUMNS), LINES=str(LINES))
    return env


def gpumon(
    runner: Gpumon, label: str, args: list[str], check: Check, target: float | None = None
) -> Command:
    return Command(f"gpumon {label}", [*runner.argv, *args], check, target)


# --- output checks ---------------------------------------------------------------------------


def nonempty(out: str) -> str:
    return "" if out.strip() else "no output"


def says_demo(out: str) -> str:
    return nonempty(out) or ("" if "DEMO" in out else "no DEMO label in --demo output")


def demo_json(out: str) -> str:
    try:
        data = json.loads(out)
    except ValueError as error:
        return f"not JSON: {error}"
    return "" if data.get("simulated") is True else '"simulated" is not true with --demo'


def missing(pids: Sequence[int], out: str) -> list[int]:
    shown = {int(word) for word in re.findall(r"\b\d+\b", out)}
    return [pid for pid in pids if pid not in shown]


def real_checks(gpus: int | None, pids: Sequence[int]) -> dict[str, Check]:
    """Checks for the real scenario; ``gpus`` None: not the fake library (GPUs unknown)."""

    def not_demo(out: str) -> str:
        if not out.strip():
            return "no output"
        return "says DEMO: gpumon is not reading the NVML library" if "DEMO" in out else ""

    def as_json(out: str) -> str:
        try:
            data = json.loads(out)
        except ValueError as error:
            return f"not JSON: {error}"
        if data.get("simulated") is not False:
            return '"simulated" is not false: gpumon is not reading the NVML library'
        if data.get("error"):
            return f"error: {data['error']}"
        found = data.get("gpus") or []
        if gpus is not None and len(found) != gpus:
            return f"{len(found)} GPUs, expected {gpus}"
        listed = [p.get("pid") for g in found for p in (g.get("processes") or [])]
        lost = sorted(set(pids) - set(listed))
        return f"{len(lost)} of {len(pids)} job PIDs missing" if lost else ""

    def table(out: str) -> str:
        problem = not_demo(out)
        rows = re.findall(r"^\[\d+\] ", out, re.MULTILINE)
        if not problem and gpus is not None and len(rows) != gpus:
            problem = f"{len(rows)} GPU rows, expected {gpus}"
        return problem

    def with_processes(out: str) -> str:
        lost = missing(pids, out)
        return table(out) or (f"{len(lost)} of {len(pids)} job PIDs missing" if lost else "")

    def status(out: str) -> str:
        problem = not_demo(out)
        shown = re.findall(r"(?:^|\s)\d+:", out)  # GPU 0:87/26% 1:0/1% ...
        if not problem and gpus is not None and len(shown) != gpus:
            problem = f"{len(shown)} GPUs on the status line, expected {gpus}"
        return problem

    def nvitop(out: str) -> str:
        if "NVITOP" not in out:
            return "no NVITOP header"
        bus_ids = re.findall(r"\b[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d\b", out)
        if not bus_ids:
            return "no GPU rows"
        if gpus is not None and len(bus_ids) != gpus:
            return f"{len(bus_ids)} GPU rows, expected {gpus}"
        if pids and len(missing(pids, out)) == len(pids):
            return "none of the job PIDs shown"
        return ""

    return {
        "json": as_json,
        "table": with_processes,
        "gpus": table,
        "status": status,
        "nvitop": nvitop,
    }


# --- scenarios -------------------------------------------------------------------------------


def demo_scenario(runner: Gpumon) -> Scenario:
    commands = [
        gpumon(runner, "once --json", ["once", "--json", *DEMO, *DEMO_PROCESSES], demo_json, 0.25),
        gpumon(runner, "once", ["once", *DEMO, *DEMO_PROCESSES], says_demo, 0.25),
        gpumon(runner, "once --no-processes", ["once", "--no-processes", *DEMO], says_demo),
        gpumon(runner, "status", ["status", *DEMO], says_demo, 0.15),
    ]
    return Scenario(
        "demo",
        "demo: gpumon --demo, 8 simulated GPUs x 64 simulated processes (absolute targets)",
        commands,
        child_environment(),
    )


def real_scenario(args: argparse.Namespace, runner: Gpumon) -> Scenario:
    """The real scenario's commands and environment; its jobs are not started yet."""
    # The checks need the jobs' PIDs: bind_real_checks() sets them once the jobs run.
    commands = [
        gpumon(runner, "once --json", ["once", "--json"], nonempty),
        gpumon(runner, "once", ["once"], nonempty),
        gpumon(runner, "once --no-processes", ["once", "--no-processes"], nonempty),
        gpumon(runner, "status", ["status"], nonempty),
    ]
    notes = []
    if args.compare == "nvitop":
        exe, versions = ensure_nvitop(args.nvitop_version, runner.python)
        # Started the way gpumon is: its console script, or its venv's python -m nvitop.
        argv = [str(exe)] if runner.console_script else [str(exe.parent / "python"), "-m", "nvitop"]
        commands.append(Command("nvitop -1", [*argv, "-1"], nonempty))
        notes.append(
            "nvitop: "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f" (run as: {' '.join(argv)} -1)"
        )
    env = child_environment()
    if args.nvml_lib == "system":
        env.pop("FAKENVML_CONFIG", None)
        description = "real: the system's NVML library (no LD_LIBRARY_PATH override)"
        return Scenario("real", description, commands, env, None, notes)
    if args.nvml_lib == "fake":
        libdir = build_fake_library(args.fakenvml)
    else:
        libdir = Path(args.nvml_lib).resolve()
        if not (libdir / "libnvidia-ml.so.1").is_file():
            raise SetupError(f"{libdir} holds no libnvidia-ml.so.1 (see --nvml-lib)")
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(libdir) + (f":{old}" if old else "")
    if not is_fake_library(libdir):
        env.pop("FAKENVML_CONFIG", None)
        description = f"real: NVML libnvidia-ml.so.1 in {libdir}"
        return Scenario("real", description, commands, env, None, notes)
    jobs = FakeJobs(args.fakenvml, sys.executable, args.gpus, args.per_gpu)
    env["FAKENVML_CONFIG"] = str(jobs.config)
    description = (
        f"real PIDs: {args.gpus} fake GPUs x {args.per_gpu} idle job processes "
        f"({args.gpus * args.per_gpu}), fake libnvidia-ml.so.1 in {libdir}"
    )
    return Scenario("real", description, commands, env, jobs, notes)


def bind_real_checks(scenario: Scenario, args: argparse.Namespace) -> None:
    fake = scenario.jobs is not None
    pids = scenario.jobs.pids() if scenario.jobs is not None else []
    checks = real_checks(args.gpus if fake else None, pids)
    by_label = {
        "gpumon once --json": "json",
        "gpumon once": "table",
        "gpumon once --no-processes": "gpus",
        "gpumon status": "status",
        "nvitop -1": "nvitop",
    }
    for command in scenario.commands:
        command.check = checks[by_label[command.label]]


# --- timing ----------------------------------------------------------------------------------


def run_command(command: Command, env: dict[str, str]) -> tuple[float, str]:
    """(wall seconds, stdout) of one fresh process; SetupError when it fails or prints nothing."""
    started = time.perf_counter()
    done = subprocess.run(
        command.argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - started
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0 or not out.strip():
        tail = "\n".join((out + done.stderr.decode(errors="replace")).strip().splitlines()[-15:])
        raise SetupError(
            f"{command.label}: exit status {done.returncode}"
            + (", no output" if not out.strip() else "")
            + f":\n{tail}"
        )
    return elapsed, out


def time_interleaved(scenario: Scenario, runs: int) -> tuple[float, float]:
    """One checked warm-up run per command, then ``runs`` round-robin rounds (the first
    command rotated each round). Returns the CPU time the rest of the machine used over the
    timed rounds (all CPUs' busy time less this script's and its commands'), and the steal
    time, each in % of all CPUs: noise indicators."""
    commands = scenario.commands
    for command in commands:
        _, out = run_command(command, scenario.env)
        problem = command.check(out)
        if problem:
            head = "\n".join(out.splitlines()[:8])
            raise SetupError(f"{command.label} (warm-up): {problem}; output begins:\n{head}")
    log(f"{scenario.name}: {runs} rounds of {len(commands)} commands ...")
    busy0, steal0, total0 = system_cpu()
    own0 = os.times()
    for index in range(runs):
        shift = index % len(commands)
        for command in commands[shift:] + commands[:shift]:
            elapsed, _ = run_command(command, scenario.env)
            command.times.append(elapsed)
    own1 = os.times()
    busy1, steal1, total1 = system_cpu()
    tick = os.sysconf("SC_CLK_TCK")
    total_s = max(total1 - total0, 1) / tick
    own_s = sum(own1[:4]) - sum(own0[:4])  # user, system, children's user and system
    others_s = max((busy1 - busy0) / tick - own_s, 0.0)
    return 100 * others_s / total_s, 100 * (steal1 - steal0) / tick / total_s


# --- reporting -------------------------------------------------------------------------------


def report(scenario: Scenario, runs: int, noise: tuple[float, float]) -> bool:
    """Print the scenario's table; True when a target or goal is missed. ``noise``: other
    load and steal, % of all CPUs (see time_interleaved)."""
    reference = next((c for c in scenario.commands if c.label == "nvitop -1"), None)
    nvitop_median = statistics.median(reference.times) if reference else None
    print(f"\n{scenario.description}")
    for note in scenario.notes:
        print(f"  {note}")
    head = f"{'command':<28} {'min':>7} {'median':>7} {'max':>7}"
    if scenario.name == "real":
        print(f"{head} {'vs nvitop -1':>13}  goal")
    else:
        print(f"{head}  target")
    missed = False
    for command in scenario.commands:
        times = command.times
        median = statistics.median(times)
        row = f"{command.label:<28} {min(times):7.3f} {median:7.3f} {max(times):7.3f}"
        if scenario.name == "real":
            ratio = "" if nvitop_median is None else f"{median / nvitop_median:12.2f}x"
            goal = NVITOP_RATIO_GOALS.get(command.label)
            verdict = ""
            if goal is not None and nvitop_median is not None:
                ok = median <= goal * nvitop_median
                missed = missed or not ok
                verdict = f"<= {goal:.2f}x {'ok' if ok else 'MISSED'}"
            elif goal is not None:
                verdict = f"<= {goal:.2f}x (no nvitop: --compare none)"
            print(f"{row} {ratio:>13}  {verdict}".rstrip())
        else:
            verdict = ""
            if command.target_s is not None:
                ok = median <= command.target_s
                missed = missed or not ok
                verdict = f"<= {command.target_s:.2f} s {'ok' if ok else 'OVER'}"
            print(f"{row}  {verdict}".rstrip())
    others, steal = noise
    print(
        f"({runs} interleaved rounds after 1 warm-up each; wall seconds per fresh process; "
        f"during the rounds, other load {others:.0f}% and steal {steal:.1f}% of all CPUs)"
    )
    return missed


def git_head() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


# Prints "DIST VERSION HOW" (the installed distribution that provides the gpumon package;
# HOW: editable, installed or not-installed) and "PYTHON_VERSION FILE" (what is imported with
# argv[1] in place of the current directory on sys.path, as the commands run). Started in a
# directory without metadata: the repository root holds a build's stale gpumon.egg-info.
PROBE = """
import json, sys, importlib.metadata as m
names = m.packages_distributions().get("gpumon", []) + ["gpumon-tui", "gpumon"]
for name in dict.fromkeys(names):
    try:
        d = m.distribution(name)
    except m.PackageNotFoundError:
        continue
    editable = json.loads(d.read_text("direct_url.json") or "{}").get("dir_info", {})
    print(d.metadata["Name"], d.version, "editable" if editable.get("editable") else "installed")
    break
else:
    print("gpumon ? not-installed")
sys.path[0] = sys.argv[1]
import gpumon
print(sys.version.split()[0], gpumon.__file__)
"""


@dataclass
class Probe:
    name: str  # the distribution's name
    version: str  # gpumon's distribution version, "?" when not installed
    how: str  # editable, installed or not-installed
    python_version: str
    file: str  # the gpumon/__init__.py that is imported


def probe_gpumon(python: str, path0: Path) -> Probe:
    """What ``python`` has installed as gpumon, and imports with ``path0`` first on sys.path
    (the current directory for ``python -m``, the script's directory for a console script)."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE, str(path0)],
            cwd=work_dir(),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SetupError(f"{python}: {error}") from error
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != 2:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
        raise SetupError(f"{python} cannot import gpumon:\n{tail}")
    (name, version, how), (python_version, file) = lines[0].split(), lines[1].split(maxsplit=1)
    return Probe(name, version, how, python_version, file)


def prepare_gpumon(args: argparse.Namespace, head: str) -> Gpumon:
    """How gpumon is run (``--install``, ``--python``); builds and installs the wheel."""
    if args.install == "current":
        python = args.python or sys.executable
        probe = probe_gpumon(python, ROOT)
        hook = ": its import hook runs on every start" if probe.how == "editable" else ""
        return Gpumon(
            [python, "-m", "gpumon"],
            python,
            console_script=False,
            description=(
                f"gpumon ({probe.name} {probe.version}) at {head}: the working tree, run by "
                f"{python} (Python {probe.python_version}; {probe.name} {probe.how} there"
                f"{hook}) from the repository root"
            ),
        )
    log("building a wheel of the working tree and installing it into a throw-away venv ...")
    wheel = build_wheel(ROOT, sys.executable)
    venv = ensure_wheel_venv(wheel, sys.executable)
    script = venv / "bin" / "gpumon"
    probe = probe_gpumon(str(venv / "bin" / "python"), script.parent)
    if probe.how != "installed" or not Path(probe.file).resolve().is_relative_to(venv.resolve()):
        raise SetupError(f"{venv}: gpumon is {probe.how}, imported from {probe.file}")
    return Gpumon(
        [str(script)],
        str(venv / "bin" / "python"),
        console_script=True,
        description=(
            f"gpumon ({probe.name} {probe.version}) at {head}: a wheel of the working tree "
            f"({wheel.name}) installed, not editable, in {venv} (Python {probe.python_version})"
        ),
    )


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="See the module docstring (head of this file) for what is measured.",
    )
    parser.add_argument("--runs", type=int, default=15, help="timed rounds (default: 15)")
    parser.add_argument(
        "--install",
        choices=("wheel", "current"),
        help="wheel (default): a wheel of the working tree installed in a throw-away venv, "
        "run as <venv>/bin/gpumon; current: this interpreter (or --python) runs "
        "python -m gpumon from the repository root",
    )
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="measure this interpreter's python -m gpumon (implies --install current)",
    )
    parser.add_argument(
        "--scenario",
        choices=("demo", "real", "both"),
        default="both",
        help="demo: gpumon --demo only; real: NVML with real job processes; both (default)",
    )
    parser.add_argument(
        "--compare",
        choices=("nvitop", "none"),
        default="nvitop",
        help="real scenario: time nvitop -1 alongside and print ratios (default: nvitop)",
    )
    parser.add_argument(
        "--nvitop-version",
        default=NVITOP_VERSION,
        help=f"nvitop version pip installs ('latest' for unpinned; default: {NVITOP_VERSION})",
    )
    parser.add_argument("--gpus", type=int, default=8, help="real, fake NVML: GPUs (default: 8)")
    parser.add_argument(
        "--per-gpu", type=int, default=8, help="real, fake NVML: job processes per GPU (8)"
    )
    parser.add_argument(
        "--nvml-lib",
        default="fake",
        metavar="fake|system|DIR",
        help="real scenario: 'fake' builds and uses --fakenvml's library and starts the jobs "
        "(default); 'system' the installed driver; DIR a directory with libnvidia-ml.so.1",
    )
    parser.add_argument(
        "--fakenvml",
        type=Path,
        default=ROOT.parent / "shared" / "fakenvml",
        help="the fakenvml directory (default: ../shared/fakenvml from the repository root)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    if args.gpus < 1 or args.per_gpu < 1:
        parser.error("--gpus and --per-gpu must be >= 1")
    if args.python is not None and args.install == "wheel":
        parser.error("--python runs python -m gpumon: it goes with --install current only")
    if args.install is None:
        args.install = "current" if args.python is not None else "wheel"
    args.fakenvml = args.fakenvml.resolve()
    return args


def raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Also SIGINT: a shell starts background jobs with it ignored; the jobs must still stop.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, raise_interrupt)
    missed = False
    scenario: Scenario | None = None
    try:
        runner = prepare_gpumon(args, git_head())
        print(f"{runner.description}; {os.cpu_count()} CPUs")
        if runner.console_script:
            style = "console scripts: <venv>/bin/gpumon ... and <nvitop venv>/bin/nvitop -1"
        else:
            style = "python -m: PYTHON -m gpumon ... and <nvitop venv>/bin/python -m nvitop -1"
        print(f"invocation: {style}")
        if args.scenario in ("demo", "both"):
            scenario = demo_scenario(runner)
            missed = report(scenario, args.runs, time_interleaved(scenario, args.runs)) or missed
        if args.scenario in ("real", "both"):
            scenario = real_scenario(args, runner)
            if scenario.jobs is not None:
                scenario.jobs.start()
            bind_real_checks(scenario, args)
            missed = report(scenario, args.runs, time_interleaved(scenario, args.runs)) or missed
    except SetupError as error:
        log(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        log("interrupted")
        return 2
    finally:
        if scenario is not None and scenario.jobs is not None:
            scenario.jobs.stop()
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
