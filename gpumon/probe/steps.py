"""The nine probe steps: ids, short names and titles, in one place.

Shared by the child (which runs steps 1-5 and 7-9), the runner (which runs step 6 itself and
settles steps a dead or hung child never finished), the headless CLI and the panel.

This module is loaded by the probe child inside the user's interpreter, which may be older
than gpumon's own: keep it to Python 3.8 syntax and the standard library.
"""

from __future__ import annotations

from typing import NamedTuple


class Step(NamedTuple):
    """One probe step."""

    id: int
    name: str
    title: str


class Outcome(NamedTuple):
    """A step's result: from the child's step function, or as the parent judged it."""

    status: str
    value: str
    detail: str = ""


PYTHON = Step(1, "python", "Interpreter and torch")
BUILD = Step(2, "build", "CUDA build and driver")
CUDA = Step(3, "cuda", "torch.cuda.is_available()")
MAPPING = Step(4, "mapping", "cuda:N of the selected GPU")
TENSORS = Step(5, "tensors", "Tensors on cuda:N")
NVML = Step(6, "nvml", "NVML sees the probe")
CROSS_DEVICE = Step(7, "cross_device", "Cross-device error")
BANDWIDTH = Step(8, "bandwidth", "Copy bandwidth and matmul")
CLEANUP = Step(9, "cleanup", "Cleanup")

STEPS = (PYTHON, BUILD, CUDA, MAPPING, TENSORS, NVML, CROSS_DEVICE, BANDWIDTH, CLEANUP)
STEP_IDS = tuple(step.id for step in STEPS)
BY_ID = {step.id: step for step in STEPS}

# Step statuses. RUNNING is the only one that is not final.
RUNNING = "running"
PASS = "pass"
FAIL = "fail"
SKIP = "skip"
STATUSES = (RUNNING, PASS, FAIL, SKIP)
FINAL_STATUSES = frozenset({PASS, FAIL, SKIP})

DEFAULT_SIZE_MIB = 256
# The probe never allocates more than this fraction of the free memory torch reports.
MAX_FREE_FRACTION = 0.10
# Below this, a capped allocation proves nothing; the probe refuses instead.
MIN_SIZE_MIB = 16
DEFAULT_TIMEOUT_S = 60.0


def title(step_id: int) -> str:
    """The title of a step, or ``step N`` for an id outside 1-9."""
    step = BY_ID.get(step_id)
    return step.title if step is not None else f"step {step_id}"


def uuid_key(uuid: object) -> str:
    """A GPU UUID as NVML and torch agree on it: lower case, no ``GPU-`` prefix (torch prints it
    on some versions only).
    """
    text = str(uuid).strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


# Shared by the headless output and the panel: ASCII, so any terminal shows them.
STATUS_LABELS = {RUNNING: "....", PASS: "PASS", FAIL: "FAIL", SKIP: "SKIP"}
PENDING_LABEL = "    "


def duration_text(duration_ms: float) -> str:
    """``<1 ms``, ``340 ms``, ``2.1 s``."""
    if duration_ms < 1:
        return "<1 ms"
    if duration_ms < 1000:
        return f"{duration_ms:.0f} ms"
    return f"{duration_ms / 1000:.1f} s"
