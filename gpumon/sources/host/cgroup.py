"""Which Slurm job and which container a process runs in, from ``/proc/PID/cgroup``.

Only the layouts Slurm and the container engines make are read (cgroup v1 and v2), anchored
at the hierarchy's root; nothing at or below a subtree a user may name is read, so no process
can pose as another job or container. What comes out is digits or hex only. Layouts:
docs/sources.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: What ``docker ps`` shows of a container id.
CONTAINER_ID_CHARS = 12
#: ``/proc/PID/cgroup`` is well under 4 KiB; a bound in case a path is huge.
_MAX_BYTES = 64 * 1024

_HEX64 = "[0-9a-f]{64}"
# Digits are spelled [0-9] (re.ASCII besides): \d would match other scripts ("job_١٢٣").
_BARE_ID = re.compile(f"({_HEX64})", re.ASCII)
_SYSTEMD_SCOPE = re.compile(rf"(?:docker|nerdctl|cri-containerd)-({_HEX64})\.scope", re.ASCII)
_PODMAN_SCOPE = re.compile(rf"libpod-({_HEX64})\.scope", re.ASCII)
_PODMAN_CGROUPFS = re.compile(rf"libpod-({_HEX64})", re.ASCII)
_KUBE_POD_V1 = re.compile(r"pod[0-9a-f-]{1,64}", re.ASCII)
_KUBE_POD_V2 = re.compile(r"kubepods(?:-[a-z]+)?-pod[0-9a-f_]{1,64}\.slice", re.ASCII)
_KUBE_SCOPE = re.compile(rf"(?:cri-containerd|crio|docker)-({_HEX64})\.scope", re.ASCII)
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_SLURM_V1_ROOT = re.compile(r"slurm(?:_[^/]+)?", re.ASCII)
_SLURM_V2_SCOPE = re.compile(r"(?:[^/]+_)?slurmstepd\.scope", re.ASCII)
_SLURM_UID = re.compile(r"uid_[0-9]+", re.ASCII)
_SLURM_STEP = re.compile(r"step_[A-Za-z0-9_]{1,32}", re.ASCII)
# Slurm job ids are 32-bit; 20 digits bounds the width whatever a future Slurm does.
_SLURM_JOB = re.compile(r"job_([0-9]{1,20})", re.ASCII)
# A systemd user manager: everything below it is the user's to name.
_USER_MANAGER = re.compile(r"user@[0-9]+\.service", re.ASCII)


@dataclass(frozen=True, slots=True)
class CgroupIds:
    """The Slurm job id (digits) and the container id (12 hex digits); ``None``: in none."""

    job_id: str | None = None
    container_id: str | None = None


NO_IDS = CgroupIds()


def parse_cgroup(text: str) -> CgroupIds:
    """The ids in a ``/proc/PID/cgroup`` text (v1, v2 or both): the first line with one wins."""
    job_id: str | None = None
    container_id: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        # Cheap test first: most lines of a v1 file name neither.
        if "job_" not in path and len(path) < 64:
            continue
        components = _trusted(path)
        if job_id is None:
            job_id = _slurm_job(components)
        if container_id is None:
            container_id = _container(components)
        if job_id is not None and container_id is not None:
            break
    return CgroupIds(job_id, container_id)


def _trusted(path: str) -> list[str]:
    """The path's components from the root down to (not including) the first a user may have
    named; leading ``..`` (outside gpumon's cgroup namespace) are skipped.
    """
    components = path.split("/")
    start = 1 if components and components[0] == "" else 0
    while start < len(components) and components[start] == "..":
        start += 1
    trusted: list[str] = []
    for index in range(start, len(components)):
        component = components[index]
        if _USER_MANAGER.fullmatch(component):
            break
        # A Slurm step's "user" child is where the job's user may create cgroups (v2).
        if component == "user" and trusted and _SLURM_STEP.fullmatch(trusted[-1]):
            break
        trusted.append(component)
    return trusted


def _at(components: list[str], index: int) -> str:
    return components[index] if index < len(components) else ""


def _slurm_job(components: list[str]) -> str | None:
    """The job of ``/slurm[_<node>]/uid_U/job_J`` (v1) or
    ``[/system.slice]/[<node>_]slurmstepd.scope/job_J`` (v2), anchored at the root."""
    first = _at(components, 0)
    v1 = _SLURM_V1_ROOT.fullmatch(first) and _SLURM_UID.fullmatch(_at(components, 1))
    v2 = first == "system.slice" and _SLURM_V2_SCOPE.fullmatch(_at(components, 1))
    if v1 or v2:
        job = _at(components, 2)
    elif _SLURM_V2_SCOPE.fullmatch(first):
        job = _at(components, 1)
    else:
        return None
    match = _SLURM_JOB.fullmatch(job)
    return match.group(1) if match else None


def _container(components: list[str]) -> str | None:
    """The 12-digit id of a container in one of the layouts above, or None."""
    full = _container_id(components)
    return full[:CONTAINER_ID_CHARS] if full else None


def _container_id(components: list[str]) -> str | None:
    first, second = _at(components, 0), _at(components, 1)
    if first == "system.slice":
        return _match(_SYSTEMD_SCOPE, second)
    if first == "machine.slice":
        return _match(_PODMAN_SCOPE, second)
    if first == "libpod_parent":
        return _match(_PODMAN_CGROUPFS, second)
    if first == "kubepods":  # v1: /kubepods[/<qos>]/pod<uid>/<id>
        for index in (1, 2):
            if _KUBE_POD_V1.fullmatch(_at(components, index)):
                return _match(_BARE_ID, _at(components, index + 1))
        return None
    if first == "kubepods.slice":  # v2: .../kubepods-<qos>-pod<uid>.slice/<engine>-<id>.scope
        for index in (1, 2):
            if _KUBE_POD_V2.fullmatch(_at(components, index)):
                return _match(_KUBE_SCOPE, _at(components, index + 1))
        return None
    if _slurm_job(components) is not None:
        # docker run --cgroup-parent=<the job's step>: .../job_J/step_S/<id>
        step = 2 if _SLURM_V2_SCOPE.fullmatch(first) else 3
        if _SLURM_STEP.fullmatch(_at(components, step)):
            return _match(_BARE_ID, _at(components, step + 1))
        return None
    # /docker/<id> and containerd's /<namespace>/<id>: a cgroup at the root is root's.
    if len(components) == 2 and _NAMESPACE.fullmatch(first) and first != "user.slice":
        return _match(_BARE_ID, second)
    return None


def _match(pattern: re.Pattern[str], component: str) -> str | None:
    match = pattern.fullmatch(component)
    return match.group(1) if match else None


def read_cgroup_ids(pid: int, proc: str = "/proc") -> CgroupIds:
    """The ids of process ``pid``; :data:`NO_IDS` when it is gone, not visible in this PID
    namespace or its file cannot be read. Never raises. One small read: call it once per
    process, not every tick (a process's cgroup rarely changes)."""
    try:
        fd = os.open(f"{proc}/{pid}/cgroup", os.O_RDONLY)
    except OSError:
        return NO_IDS
    chunks: list[bytes] = []
    size = 0
    try:
        while size < _MAX_BYTES:
            chunk = os.read(fd, _MAX_BYTES - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return NO_IDS
    finally:
        os.close(fd)
    # Only ASCII can match: undecodable bytes may become anything but an id.
    return parse_cgroup(b"".join(chunks).decode("utf-8", "replace"))
