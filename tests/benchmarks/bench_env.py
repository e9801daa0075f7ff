"""What ``bench_dashboard.py`` sets up around the monitors it measures.

* the fake NVML library of ``../shared/fakenvml`` (built with its Makefile, in a copy under the
  temporary directory when the source directory is read-only),
* real idle "GPU job" processes started and stopped with its ``spawn_procs.py`` (run as a
  subprocess: nothing is imported from outside the repository),
* a throw-away virtual environment with a pinned nvitop, for the side-by-side comparison,
* a wheel of gpumon's working tree installed into a throw-away virtual environment, so that
  gpumon is measured as a user installs it (``bench_once.py``),
* machine-wide CPU counters (busy and steal) as a noise indicator.

Stdlib only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

LIBRARY = "libnvidia-ml.so.1"


class SetupError(RuntimeError):
    """The benchmark cannot run: a build, an install or the job processes failed."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def work_dir() -> Path:
    """``$TMPDIR`` (or the system default) / gpumon-bench: caches that later runs reuse."""
    path = Path(tempfile.gettempdir()) / "gpumon-bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def is_fake_library(directory: Path) -> bool:
    """True if ``directory/libnvidia-ml.so.1`` is the fake library (it reads FAKENVML_CONFIG)."""
    try:
        return b"FAKENVML_CONFIG" in (directory / LIBRARY).read_bytes()
    except OSError:
        return False


def _run(command: list[str], what: str, timeout: float, **kwargs: object) -> str:
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,  # type: ignore[arg-type]
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SetupError(f"{what}: {error}") from error
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SetupError(f"{what} failed (exit status {done.returncode}):\n{tail}")
    return done.stdout


def build_fake_library(source: Path) -> Path:
    """The directory holding a built fake ``libnvidia-ml.so.1`` for ``source`` (the fakenvml
    directory): its own ``build/`` when up to date, else ``make`` there when it is writable,
    else ``make`` in a copy under the temporary directory (kept, keyed by the sources' hash)
    when the directory is read-only."""
    c_file, makefile = source / "fakenvml.c", source / "Makefile"
    if not c_file.is_file() or not makefile.is_file():
        raise SetupError(f"{source} has no fakenvml.c and Makefile (see --fakenvml)")
    built = source / "build"
    if (built / LIBRARY).is_file() and (built / LIBRARY).stat().st_mtime >= max(
        c_file.stat().st_mtime, makefile.stat().st_mtime
    ):
        return built
    # The mode bits, not only access(): root may write anywhere, but a directory marked
    # read-only (r-x, as ../shared is) is left alone.
    if source.stat().st_mode & stat.S_IWUSR and os.access(source, os.W_OK):
        log(f"building the fake NVML library: make -C {source}")
        _run(["make", "-C", str(source)], "make", timeout=300)
        return built
    digest = hashlib.sha1(c_file.read_bytes() + makefile.read_bytes()).hexdigest()[:12]
    copy = work_dir() / f"fakenvml-{digest}"
    if not (copy / "build" / LIBRARY).is_file():
        log(f"{source} is read-only: building the fake NVML library in {copy}")
        copy.mkdir(parents=True, exist_ok=True)
        shutil.copy2(c_file, copy / "fakenvml.c")
        shutil.copy2(makefile, copy / "Makefile")
        _run(["make", "-C", str(copy)], "make", timeout=300)
    return copy / "build"


class FakeJobs:
    """Idle job processes with real PIDs, started and stopped by ``spawn_procs.py``.

    ``stop()`` is safe to call more than once and after a failed or interrupted ``start()``
    (it waits for the supervisor to publish the PIDs it started, then stops exactly those).

    With ``keep_dir`` the jobs live in that directory and outlive the benchmark: ``start()``
    reuses the jobs already running there (when all of them are alive) instead of starting
    new ones, and ``stop()`` leaves them running (they exit after ``ttl_s``); this is how
    jobs older than ten minutes are had without waiting ten minutes per benchmark.
    """

    def __init__(
        self,
        fakenvml: Path,
        python: str,
        gpus: int,
        per_gpu: int,
        keep_dir: Path | None = None,
        ttl_s: float | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        """``extra``: config lines for every GPU (``spawn_procs.py --extra``), e.g.
        ``call_cost_us 100``."""
        self.extra = list(extra)
        self.script = fakenvml / "spawn_procs.py"
        if not self.script.is_file():
            raise SetupError(f"{self.script} not found (see --fakenvml)")
        self.python = python
        self.gpus, self.per_gpu = gpus, per_gpu
        self.keep = keep_dir is not None
        self.ttl_s = ttl_s
        if keep_dir is not None:
            keep_dir.mkdir(parents=True, exist_ok=True)
            self.dir = keep_dir
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="jobs-", dir=work_dir()))
        self.started = False
        self.stopped = False

    @property
    def config(self) -> Path:
        return self.dir / "fakenvml.cfg"

    def pids(self) -> list[int]:
        pids = []
        try:
            lines = (self.dir / "pids").read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            parts = line.split()
            if parts and parts[0].isdigit():
                pids.append(int(parts[0]))
        return pids

    def ages(self) -> tuple[float, float] | None:
        """(the youngest, the oldest) job's age in seconds, from /proc; None when a job is gone."""
        return job_ages(self.pids())

    def _reusable(self) -> bool:
        pids = self.pids()
        return len(pids) == self.gpus * self.per_gpu and job_ages(pids) is not None

    def start(self, idle_timeout_s: float = 120.0) -> None:
        count = self.gpus * self.per_gpu
        self.started = True
        if self.keep and self._reusable():
            young, old = self.ages() or (0.0, 0.0)
            log(f"reusing {count} job processes in {self.dir} ({young:.0f}-{old:.0f} s old)")
            return
        if self.keep and (self.dir / "pids").exists():
            self._stop_jobs()  # what is left of an earlier set (some jobs gone, or a wrong size)
        log(f"starting {count} idle job processes ({self.gpus} GPUs x {self.per_gpu}) ...")
        ttl = ["--ttl", f"{self.ttl_s:g}"] if self.ttl_s is not None else []
        out = _run(
            [
                self.python,
                str(self.script),
                "start",
                "--dir",
                str(self.dir),
                "--gpus",
                str(self.gpus),
                "--per-gpu",
                str(self.per_gpu),
                *ttl,
                *(f"--extra={line}" for line in self.extra),
            ],
            "spawn_procs.py start",
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        log(out.strip())
        # Python start-up of hundreds of jobs keeps the CPUs busy for seconds: wait until
        # every job sleeps, so that the first monitor does not pay for it.
        deadline = time.monotonic() + idle_timeout_s
        pids = self.pids()
        if len(pids) != count:
            raise SetupError(f"spawn_procs.py recorded {len(pids)} jobs, expected {count}")
        while time.monotonic() < deadline:
            busy = [pid for pid in pids if _state(pid) not in ("S", None)]
            if not busy:
                break
            time.sleep(0.2)
        else:
            log(f"warning: {len(busy)} jobs still not idle after {idle_timeout_s:.0f} s")
        gone = [pid for pid in pids if _state(pid) is None]
        if gone:
            raise SetupError(f"{len(gone)} of {count} job processes exited right after start")

    def restart(self) -> None:
        """Stop the jobs and start new ones (new PIDs, the same config path): young jobs."""
        if self.started:
            self._stop_jobs()
        self.start()

    def stop(self) -> None:
        if not self.started or self.stopped:
            return
        self.stopped = True
        if self.keep:
            log(
                f"left the jobs in {self.dir} running for later runs (they exit by themselves; "
                f"now: {self.python} {self.script} stop --dir {self.dir})"
            )
            return
        if self._stop_jobs():
            shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_jobs(self) -> bool:
        # An interrupted start: the detached supervisor may still be starting jobs.
        deadline = time.monotonic() + 60
        while not (self.dir / "pids").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            out = _run(
                [self.python, str(self.script), "stop", "--dir", str(self.dir)],
                "spawn_procs.py stop",
                timeout=120,
                stdin=subprocess.DEVNULL,
            )
            log(out.strip())
        except SetupError as error:
            log(f"warning: {error}; job PIDs are in {self.dir / 'pids'}")
            return False
        return True


def job_ages(pids: list[int]) -> tuple[float, float] | None:
    """(youngest, oldest) age in seconds of ``pids`` (their start time in /proc against
    /proc/uptime); None when there are none or one is gone."""
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        starts = []
        for pid in pids:
            data = Path(f"/proc/{pid}/stat").read_bytes()
            starts.append(int(data[data.rindex(b")") + 2 :].split()[19]) / ticks)
    except (OSError, ValueError, IndexError):
        return None
    if not starts:
        return None
    return uptime - max(starts), uptime - min(starts)


def _state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from /proc, None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()[0].decode()


def ensure_nvitop(version: str, python: str) -> tuple[Path, dict[str, str]]:
    """nvitop ``version`` ("latest" for unpinned) in ``$TMPDIR/gpumon-bench/nvitop-VERSION``,
    created with ``python -m venv`` (the same interpreter as gpumon's when ``python`` is
    gpumon's) and reused by later runs. Returns the nvitop executable and package versions."""
    venv = work_dir() / f"venv-nvitop-{version}"
    exe = venv / "bin" / "nvitop"
    vpython = venv / "bin" / "python"
    if not exe.is_file():
        spec = "nvitop" if version == "latest" else f"nvitop=={version}"
        log(f"installing {spec} into {venv} (once; reused by later runs) ...")
        _run([python, "-m", "venv", "--clear", str(venv)], "python -m venv", timeout=300)
        _run(
            [str(vpython), "-m", "pip", "install", "--disable-pip-version-check", "-q", spec],
            f"pip install {spec}",
            timeout=600,
        )
    probe = (
        "import sys, importlib.metadata as m; print(sys.version.split()[0]); "
        "[print(m.version(p)) for p in ('nvitop', 'nvidia-ml-py', 'psutil')]"
    )
    found = _run([str(vpython), "-c", probe], "nvitop version check", timeout=60).split()
    versions = dict(zip(("python", "nvitop", "nvidia-ml-py", "psutil"), found, strict=False))
    if version != "latest" and versions.get("nvitop") != version:
        raise SetupError(f"{venv} holds nvitop {versions.get('nvitop')}, not {version}")
    return exe, versions


def snapshot_tree(root: Path, dest: Path) -> None:
    """Copy the working tree of the git repository ``root`` into a fresh ``dest``: tracked
    files as they are on disk (uncommitted changes included) and untracked files that git
    does not ignore, so no ``build/``, ``*.egg-info`` or caches of earlier builds."""
    listed = _run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        "git ls-files",
        timeout=60,
        cwd=root,
    )
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in filter(None, listed.split("\0")):
        source = root / name
        if not source.is_file():  # deleted in the working tree, or a submodule
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / name)


def build_wheel(root: Path, python: str, retries: int = 1, retry_wait_s: float = 60) -> Path:
    """A wheel of the working tree of ``root``, built as ``python -m pip wheel --no-deps -w
    DIR .`` (with build isolation, as pip and pipx build it) in a snapshot of the tree under
    ``work_dir()``: an in-tree build would leave ``build/`` in the repository and pack
    modules since deleted that an earlier build left there. A failed build is retried
    ``retries`` times after ``retry_wait_s`` seconds (``pyproject.toml`` may be mid-edit)."""
    source, dist = work_dir() / "gpumon-wheel-src", work_dir() / "gpumon-wheel-dist"
    pip_wheel = [python, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps"]
    for attempt in range(retries + 1):
        snapshot_tree(root, source)
        shutil.rmtree(dist, ignore_errors=True)
        try:
            _run(
                [*pip_wheel, "-w", str(dist), "."],
                "pip wheel (gpumon)",
                timeout=600,
                cwd=source,
                stdin=subprocess.DEVNULL,
            )
            break
        except SetupError as error:
            if attempt == retries:
                raise
            log(f"{error}\nretrying in {retry_wait_s:.0f} s ...")
            time.sleep(retry_wait_s)
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise SetupError(f"pip wheel left {len(wheels)} wheels in {dist}, expected 1")
    return wheels[0]


def ensure_wheel_venv(wheel: Path, python: str, name: str = "venv-gpumon-wheel") -> Path:
    """``wheel`` installed into the virtual environment ``work_dir()/name``, as a user's
    ``pip install`` or ``pipx install`` leaves it (no editable finder, bytecode compiled).
    The first run creates it with ``python -m venv`` and installs the wheel with its
    dependencies; later runs reuse it and reinstall only the wheel (``--no-deps
    --force-reinstall``), installing dependencies again only when ``pip check`` finds one
    missing or out of range (the wheel's requirements changed). Returns the venv."""
    venv = work_dir() / name
    vpython = venv / "bin" / "python"
    pip = [str(vpython), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    reusable = (venv / "bin" / "gpumon").is_file() and (
        subprocess.run(
            [str(vpython), "-c", "pass"], capture_output=True, check=False, timeout=60
        ).returncode
        == 0
    )
    if not reusable:
        log(f"creating {venv} with gpumon's dependencies (once; reused by later runs) ...")
        _run([python, "-m", "venv", "--clear", str(venv)], "python -m venv", timeout=300)
        _run([*pip, str(wheel)], f"pip install {wheel.name}", timeout=600)
        return venv
    _run(
        [*pip, "--no-deps", "--force-reinstall", str(wheel)],
        f"pip install --no-deps --force-reinstall {wheel.name}",
        timeout=300,
    )
    check = subprocess.run(
        [str(vpython), "-m", "pip", "check", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if check.returncode != 0:
        log(f"{venv}: {check.stdout.strip()}; installing the dependencies ...")
        _run([*pip, str(wheel)], f"pip install {wheel.name}", timeout=600)
    return venv


def system_cpu() -> tuple[int, int, int]:
    """(busy, steal, total) clock ticks summed over all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + values[4]
    steal = values[7] if len(values) > 7 else 0
    total = sum(values[:8])
    return total - idle - steal, steal, total
