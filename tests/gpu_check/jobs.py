"""Processes on the GPU: a torch job in ``gpumon once --json``, and ``gpumon probe``.

The job (:mod:`tests.gpu_check.torch_job`) holds a known amount of memory on ``cuda:0``. The
GPU is found by UUID, never by index (``cuda:0`` need not be NVML's GPU 0). While the job runs,
gpumon must list it with its PID, user and memory (within 2 % of nvidia-smi's), and the GPU
must not be FREE; before and after, FREE. The probe must pass its steps, and its child must be
gone from NVML's process list afterwards.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Callable
from typing import Any

from gpumon.probe import steps as S
from tests.gpu_check.children import Child, once_json
from tests.gpu_check.report import Section
from tests.gpu_check.smi import NvidiaSmi, SmiError

MIB = 1024**2
#: A CUDA context costs some hundreds of MiB on top of what torch allocates.
CONTEXT_MAX_BYTES = 2 * 1024**3
MEMORY_TOLERANCE = 0.02
_POLL_S = 0.5


def _gpu_of(snapshot: dict[str, Any], uuid: str) -> dict[str, Any] | None:
    key = S.uuid_key(uuid)
    return next((g for g in snapshot["gpus"] if g["uuid"] and S.uuid_key(g["uuid"]) == key), None)


def _listed(gpu: dict[str, Any] | None, pid: int) -> dict[str, Any] | None:
    processes = (gpu or {}).get("processes") or []
    return next((p for p in processes if p["pid"] == pid), None)


def _apps(smi: NvidiaSmi, uuid: str | None = None) -> dict[int, dict[str, str]]:
    key = S.uuid_key(uuid) if uuid else None
    return {
        int(app["pid"]): app
        for app in smi.compute_apps()
        if app["pid"].isdigit() and (key is None or S.uuid_key(app["gpu_uuid"]) == key)
    }


def _poll(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float) -> Any:
    """Read until ``done`` says so or ``timeout_s`` passes; the last reading either way."""
    deadline = time.monotonic() + timeout_s
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        value = read()
    return value


def check_processes(
    python: str,
    smi: NvidiaSmi,
    *,
    job_mib: int,
    start_timeout_s: float = 120,
    while_holding: Callable[[], None] | None = None,
) -> Section:
    """The processes section; ``while_holding`` runs while the job holds its memory (the
    dashboard screenshot)."""
    section = Section("processes", f"Processes: a torch job holding {job_mib} MiB on cuda:0")
    try:
        before = once_json(python)
        apps_before = _apps(smi)
        with Child([python, "-m", "tests.gpu_check.torch_job", "--mib", str(job_mib)]) as job:
            line = job.line(start_timeout_s)
            if line is None:
                section.fail(f"the torch job printed nothing: {' | '.join(job.stderr_tail())}")
                return section
            info = json.loads(line)
            section.lines.append(f"job: {line}")
            _check_before(section, before, apps_before, info["uuid"])
            _check_holding(section, python, smi, info)
            if while_holding is not None:
                while_holding()
            job.send("done\n")
            status = job.wait(30)
            section.check(status == 0, "the job exited when told", f"status {status}")
        _check_after(section, python, smi, info)
    except (SmiError, RuntimeError, ValueError, KeyError) as error:
        section.fail(f"{type(error).__name__}: {error}")
    if section.status != "fail":
        section.summary = "listed with PID, user and memory; FREE before and after, not during"
    return section


def _check_before(
    section: Section, before: dict[str, Any], apps_before: dict[int, Any], uuid: str
) -> None:
    gpu = _gpu_of(before, uuid)
    if gpu is None:
        section.fail(f"no GPU in once --json has torch's cuda:0 UUID {uuid}")
        return
    section.lines.append(f"cuda:0 is GPU {gpu['index']} ({gpu['uuid']})")
    key = S.uuid_key(uuid)
    busy = sorted(pid for pid, app in apps_before.items() if S.uuid_key(app["gpu_uuid"]) == key)
    section.data["busy_before"] = busy
    if busy:
        section.lines.append(f"note: GPU busy before the job (nvidia-smi lists {busy}):"
                             " FREE before and after not checked")  # fmt: skip
        return
    section.check(gpu["free"] is True, "FREE before the job", f"free={gpu['free']}")


def _check_holding(section: Section, python: str, smi: NvidiaSmi, info: dict[str, Any]) -> None:
    pid, uuid = int(info["pid"]), info["uuid"]
    during = _poll(
        lambda: once_json(python), lambda snap: _listed(_gpu_of(snap, uuid), pid) is not None, 10
    )
    gpu = _gpu_of(during, uuid)
    process = _listed(gpu, pid)
    if not section.check(process is not None, f"once --json lists PID {pid}"):
        return
    assert gpu is not None and process is not None
    user = pwd.getpwuid(os.getuid()).pw_name
    section.check(process["user"] == user, "its user", f"{process['user']} (expected {user})")
    section.check(process["type"] in ("C", "C+G"), "its type", str(process["type"]))
    mine = process["gpu_memory_bytes"]
    reserved = int(info["reserved_bytes"])
    section.check(
        mine is not None and reserved <= mine <= reserved + CONTEXT_MAX_BYTES,
        "its memory holds what torch reserved, plus a CUDA context",
        f"{_mib(mine)} MiB for {_mib(reserved)} MiB reserved",
    )
    section.check(gpu["free"] is False, "the GPU is not FREE while it runs", f"free={gpu['free']}")
    app = _apps(smi, uuid).get(pid)
    if section.check(app is not None, f"nvidia-smi --query-compute-apps lists PID {pid}"):
        assert app is not None
        theirs = float(app["used_memory"]) * MIB
        close = mine is not None and abs(mine - theirs) <= MEMORY_TOLERANCE * theirs
        section.check(
            close,
            "gpumon's memory within 2 % of nvidia-smi's",
            f"{_mib(mine)} MiB against {app['used_memory']} MiB",
        )


def _check_after(section: Section, python: str, smi: NvidiaSmi, info: dict[str, Any]) -> None:
    pid, uuid = int(info["pid"]), info["uuid"]

    def released(snapshot: dict[str, Any]) -> bool:
        gpu = _gpu_of(snapshot, uuid)
        return gpu is not None and gpu["free"] is True and _listed(gpu, pid) is None

    after = _poll(lambda: once_json(python), released, 15)
    gpu = _gpu_of(after, uuid) or {}
    section.check(_listed(gpu, pid) is None, f"PID {pid} gone from once --json after the job")
    if not section.data.get("busy_before"):
        section.check(
            gpu.get("free") is True, "FREE again after the job", f"free={gpu.get('free')}"
        )
    section.check(pid not in _apps(smi), f"PID {pid} gone from nvidia-smi's compute apps")


def _mib(value: float | None) -> str:
    return "N/A" if value is None else f"{value / MIB:.0f}"


def check_probe(python: str, smi: NvidiaSmi, *, timeout_s: float = 150) -> Section:
    """``gpumon probe --device cuda:0 --json``: every step, its figures, and the child gone."""
    section = Section("probe", "Probe: gpumon probe --device cuda:0")
    probe_timeout = max(30, int(timeout_s) - 20)
    argv = [python, "-m", "gpumon", "probe", "--device", "cuda:0", "--json"]
    with Child([*argv, "--timeout", str(probe_timeout)]) as probe:
        lines, ended = probe.all_lines(timeout_s)
        status = probe.wait(5) if ended else None
        stderr = probe.stderr_tail()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    section.data["events"] = events
    steps = {e["step"]: e for e in events if e.get("event") == "step" and e["status"] != S.RUNNING}
    for number in sorted(steps):
        event = steps[number]
        label = S.STATUS_LABELS.get(event["status"], event["status"])
        took = f"  ({S.duration_text(event['duration_ms'])})" if event["status"] != S.SKIP else ""
        section.lines.append(f"[{label}] {number}. {event['title']:<28} {event['value']}{took}")
        section.lines += [f"          {line}" for line in event.get("detail", "").splitlines()]
    done = next((e for e in events if e.get("event") == "done"), None)
    hello = next((e for e in events if e.get("event") == "hello"), None)
    said = f"; stderr: {' | '.join(stderr)}" if stderr else ""
    section.check(status == 0, "gpumon probe's exit status", f"{status}{said}")
    section.check(
        done is not None and done["ok"], "its verdict", done["summary"] if done else "none"
    )
    section.check(set(steps) == set(S.STEP_IDS), "every step reported", f"{sorted(steps)}")
    if hello is not None:
        pid = int(hello["pid"])
        left = _poll(lambda: _apps(smi), lambda apps: pid not in apps, 10)
        section.check(pid not in left, f"the probe child (PID {pid}) gone from NVML's processes")
    else:
        section.fail("the probe child never said hello: no PID to look for")
    if section.status != "fail":
        section.summary = done["summary"] if done else ""
    return section
