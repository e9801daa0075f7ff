"""The probe's JSON-lines protocol: round trips, malformed lines, and the documented examples."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpumon.probe import steps as S
from gpumon.probe.protocol import (
    PROTOCOL_VERSION,
    Done,
    Hello,
    Holding,
    ProtocolError,
    Request,
    StepEvent,
    decode,
    decode_request,
    encode,
    encode_continue,
    is_continue,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "probe-protocol.md"

EVENTS = [
    Hello(pid=4242, python="/opt/envs/train/bin/python", python_version="3.8.18"),
    StepEvent(1, S.RUNNING),
    StepEvent(4, S.PASS, "GPU 2 is cuda:1", 3.25, "cuda:0 = GPU 0\ncuda:1 = GPU 2"),
    StepEvent(7, S.PASS, "cuda:0 + cuda:1 raised RuntimeError: Expected all tensors…", 12.0),
    StepEvent(9, S.SKIP, "skipped: CUDA is not available"),
    StepEvent(2, S.FAIL, "CPU-only build (torch.version.cuda is None)", 0.5),
    Holding(pid=4242, cuda_index=1, gpu_uuid="GPU-5f0c", allocated_bytes=1, reserved_bytes=2),
    Done(ok=False, summary="step 2 failed"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda event: type(event).__name__)
def test_every_event_survives_a_round_trip(event: object) -> None:
    line = encode(event)  # type: ignore[arg-type]
    assert "\n" not in line
    assert decode(line) == event
    assert decode(line.encode("utf-8")) == event


HOSTILE = "a\x1b]52;c;cm0gLXJmIH4K\x07\u202eb"  # OSC 52 (write the clipboard), a bidi override
SHOWN = "a?]52;c;cm0gLXJmIH4K?\\u202eb"


@pytest.mark.parametrize(
    ("event", "read"),
    [
        (
            Hello(pid=1, python=HOSTILE, python_version=HOSTILE),
            lambda e: [e.python, e.python_version],
        ),
        (StepEvent(1, S.FAIL, HOSTILE, 1.0, HOSTILE), lambda e: [e.value, e.detail]),
        (Holding(1, 0, HOSTILE, 1, 2), lambda e: [e.gpu_uuid]),
        (Done(ok=False, summary=HOSTILE), lambda e: [e.summary]),
    ],
    ids=["hello", "step", "holding", "done"],
)
def test_every_text_from_the_child_is_made_safe_to_show(event: object, read: Any) -> None:
    assert read(decode(encode(event))) == [SHOWN] * len(read(event))  # type: ignore[arg-type]


def test_a_detail_keeps_its_lines() -> None:
    event = decode(encode(StepEvent(4, S.PASS, "x", 1.0, f"cuda:0 = GPU 0\n{HOSTILE}\n")))
    assert isinstance(event, StepEvent)
    assert event.detail == f"cuda:0 = GPU 0\n{SHOWN}\n"


def test_step_lines_carry_version_name_and_title_for_readers() -> None:
    payload = json.loads(encode(StepEvent(4, S.PASS, "x", 1.0)))
    assert payload["v"] == PROTOCOL_VERSION
    assert (payload["name"], payload["title"]) == ("mapping", "cuda:N of the selected GPU")


def test_request_round_trip() -> None:
    request = Request(
        gpu_uuid="GPU-abc",
        gpu_index=2,
        gpus=((0, "GPU-def"), (2, "GPU-abc")),
        size_mib=64,
        hold_timeout_s=5.0,
    )
    assert decode_request(encode(request)) == request
    assert decode_request(encode(Request(cuda_index=3))) == Request(cuda_index=3)


def test_continue_command() -> None:
    assert is_continue(encode_continue())
    assert is_continue(encode_continue().encode() + b"\n")
    assert not is_continue('{"v": 1, "command": "stop"}')
    assert not is_continue("continue")
    assert not is_continue(b"\xff\xfe")


def test_unknown_extra_keys_are_ignored() -> None:
    line = json.dumps({"v": 1, "event": "done", "ok": True, "summary": "", "new_field": [1]})
    assert decode(line) == Done(True, "")


GOOD_STEP = {"v": 1, "event": "step", "step": 3, "status": "pass", "value": "", "duration_ms": 1}


def _step(**changes: object) -> str:
    payload = {**GOOD_STEP, **changes}
    return json.dumps({key: value for key, value in payload.items() if value is not ...})


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("", id="empty"),
        pytest.param("Segmentation fault (core dumped)", id="not-json"),
        pytest.param('{"v": 1, "event": "done", "ok": true', id="truncated"),
        pytest.param("[1, 2]", id="array"),
        pytest.param('"hello"', id="string"),
        pytest.param(b"\xff\xfe{}", id="not-utf8"),
        pytest.param('{"event": "done", "ok": true, "summary": ""}', id="no-version"),
        pytest.param('{"v": 2, "event": "done", "ok": true, "summary": ""}', id="version-2"),
        pytest.param('{"v": true, "event": "done", "ok": true, "summary": ""}', id="version-bool"),
        pytest.param('{"v": 1, "event": "bye"}', id="unknown-event"),
        pytest.param('{"v": 1, "command": "continue"}', id="a-command-is-not-an-event"),
        pytest.param(_step(step=0), id="step-0"),
        pytest.param(_step(step=10), id="step-10"),
        pytest.param(_step(step="3"), id="step-as-string"),
        pytest.param(_step(step=True), id="step-as-bool"),
        pytest.param(_step(status="ok"), id="unknown-status"),
        pytest.param(_step(value=...), id="missing-value"),
        pytest.param(_step(value=3), id="value-not-string"),
        pytest.param(_step(duration_ms=-1), id="negative-duration"),
        pytest.param(_step(duration_ms="5"), id="duration-as-string"),
        pytest.param(_step().replace('"duration_ms": 1', '"duration_ms": NaN'), id="nan"),
        pytest.param(_step().replace('"duration_ms": 1', '"duration_ms": Infinity'), id="inf"),
        pytest.param(_step(detail=["a"]), id="detail-not-string"),
        pytest.param(
            '{"v": 1, "event": "hello", "pid": -1, "python": "p", '
            '"python_version": "3", "protocol": 1}',
            id="negative-pid",
        ),
        pytest.param(
            '{"v": 1, "event": "holding", "pid": 1, "cuda_index": 0, '
            '"gpu_uuid": "GPU-1", "allocated_bytes": 1.5, "reserved_bytes": 2}',
            id="fractional-bytes",
        ),
        pytest.param('{"v": 1, "event": "done", "ok": 1, "summary": ""}', id="ok-not-bool"),
    ],
)
def test_malformed_lines_are_rejected(line: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(line)


@pytest.mark.parametrize(
    "change",
    [
        {"gpus": [[0]]},
        {"gpus": [["0", "GPU-1"]]},
        {"gpus": [[True, "GPU-1"]]},
        {"gpus": "GPU-1"},
        {"size_mib": 0},
        {"max_free_fraction": 0},
        {"max_free_fraction": 1.5},
        {"hold_timeout_s": -1},
        {"request": "other"},
        {"gpu_index": "2"},
    ],
)
def test_malformed_requests_are_rejected(change: dict[str, object]) -> None:
    payload = json.loads(encode(Request(cuda_index=0)))
    payload.update(change)
    with pytest.raises(ProtocolError):
        decode_request(json.dumps(payload))


def _documented_lines() -> list[str]:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_every_example_in_the_protocol_doc_is_valid() -> None:
    lines = _documented_lines()
    kinds = set()
    for line in lines:
        payload = json.loads(line)
        if "request" in payload:
            decode_request(line)
            kinds.add("request")
        elif "command" in payload:
            assert is_continue(line)
            kinds.add("command")
        else:
            kinds.add(type(decode(line)).__name__)
    assert kinds == {"request", "command", "Hello", "StepEvent", "Holding", "Done"}


def test_the_doc_describes_every_step() -> None:
    text = DOC.read_text(encoding="utf-8")
    for step in S.STEPS:
        assert re.search(rf"^\| {step.id} \| `{step.name}` \|", text, re.MULTILINE), step


CHILD_SIDE = [
    "gpumon/__init__.py",
    "gpumon/probe/__init__.py",
    "gpumon/probe/protocol.py",
    "gpumon/probe/steps.py",
    "gpumon/probe/child_io.py",
    "gpumon/probe/child.py",
]


@pytest.mark.parametrize("path", CHILD_SIDE)
def test_child_side_modules_parse_as_python_3_8(path: str) -> None:
    """The child runs in the user's interpreter, which may be older than gpumon's own."""
    source = (ROOT / path).read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dataclass":
            assert not any(k.arg in ("slots", "kw_only") for k in node.keywords), path
        if isinstance(node, ast.Attribute):
            assert node.attr not in ("removeprefix", "removesuffix"), path  # 3.9+


@pytest.mark.parametrize("path", CHILD_SIDE)
def test_child_side_modules_import_only_the_standard_library_at_top_level(path: str) -> None:
    allowed = {"__future__", "argparse", "dataclasses", "json", "math", "os", "sys", "threading",
               "time", "traceback", "typing", "collections"}  # fmt: skip
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            assert name.split(".")[0] in allowed or name.startswith("gpumon.probe"), (path, name)
