"""Which Slurm job and which container a process runs in, from ``/proc/PID/cgroup``.

Every user may read any process's ``/proc/PID/cgroup``. Slurm puts each job's processes in a
cgroup named after the job, container engines each container's in one named after its id,
on cgroup v1 (one ``N:controllers:/path`` line per hierarchy) and v2 (one ``0::/path`` line):

- Slurm v1: ``/slurm/uid_1000/job_12345/step_0/task_0`` (``/slurm_<node>/...`` with several
  slurmd on one host); v2: ``/system.slice/slurmstepd.scope/job_12345/step_batch/user/task_0``
  (``<node>_slurmstepd.scope`` with several slurmd).
- Containers: ``/docker/<id>``, ``docker-<id>.scope``, ``/kubepods/.../pod<uid>/<id>``,
  ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``libpod-<id>.scope``,
  ``nerdctl-<id>.scope``, or a bare ``<id>`` under any parent (``docker --cgroup-parent``,
  containerd's namespaces), where ``<id>`` is 64 lowercase hex digits. ``libpod-conmon-`` and
  ``crio-conmon-`` scopes hold the engine's monitor, not the container, and never match.

Path text comes from whoever named the cgroup: every pattern matches one whole path
component, a job id is ASCII digits only and a container id ``[0-9a-f]{64}`` only, so what
comes out is safe to print anywhere and no other text can pose as an id.
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
_CONTAINER = re.compile(
    rf"(?:(?:docker|cri-containerd|crio|libpod|nerdctl)-)?({_HEX64})(?:\.scope)?", re.ASCII
)
_SLURM_V1_ROOT = re.compile(r"slurm(?:_[^/]+)?", re.ASCII)
_SLURM_V2_ROOT = re.compile(r"(?:[^/]+_)?slurmstepd\.scope", re.ASCII)
_SLURM_UID = re.compile(r"uid_[0-9]+", re.ASCII)
# Slurm job ids are 32-bit; 20 digits bounds the width whatever a future Slurm does.
_SLURM_JOB = re.compile(r"job_([0-9]{1,20})", re.ASCII)


@dataclass(frozen=True, slots=True)
class CgroupIds:
    """The Slurm job id (digits) and the container id (12 hex digits); ``None``: in none."""

    job_id: str | None = None
    container_id: str | None = None


NO_IDS = CgroupIds()


def parse_cgroup(text: str) -> CgroupIds:
    """Read the ids out of the text of a ``/proc/PID/cgroup`` file (v1, v2 or both).

    The first match wins, line by line and outermost component first: on v1 every
    controller's line names the same job and container.
    """
    job_id: str | None = None
    container_id: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        components = path.split("/")
        # Cheap tests first: most lines of a v1 file name neither.
        if job_id is None and "job_" in path:
            job_id = _slurm_job(components)
        if container_id is None and len(path) > 64:
            container_id = _container(components)
        if job_id is not None and container_id is not None:
            break
    return CgroupIds(job_id, container_id)


def _slurm_job(components: list[str]) -> str | None:
    for index, component in enumerate(components):
        if _SLURM_V2_ROOT.fullmatch(component):
            job = _component(components, index + 1)
        elif _SLURM_V1_ROOT.fullmatch(component) and _SLURM_UID.fullmatch(
            _component(components, index + 1)
        ):
            job = _component(components, index + 2)
        else:
            continue
        match = _SLURM_JOB.fullmatch(job)
        if match:
            return match.group(1)
    return None


def _component(components: list[str], index: int) -> str:
    return components[index] if index < len(components) else ""


def _container(components: list[str]) -> str | None:
    for component in components:
        match = _CONTAINER.fullmatch(component)
        if match:
            return match.group(1)[:CONTAINER_ID_CHARS]
    return None


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
