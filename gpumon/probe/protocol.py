"""The probe's JSON-lines protocol between gpumon (the parent) and the probe child.

One JSON object per line, each with ``"v": PROTOCOL_VERSION`` (docs/probe-protocol.md).
:func:`decode` accepts exactly what :func:`encode` produces, ignoring unknown extra keys,
and raises :class:`ProtocolError` otherwise. Loaded by the child inside the user's
interpreter: Python 3.8 syntax and the standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Union

from gpumon.probe.steps import BY_ID, FINAL_STATUSES, STATUSES, title

PROTOCOL_VERSION = 1
CONTINUE = "continue"


class ProtocolError(ValueError):
    """A line that is not a valid protocol message."""


@dataclass(frozen=True)
class Hello:
    """The child's first line, printed before it tries to import torch."""

    pid: int
    python: str
    python_version: str
    protocol: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class StepEvent:
    """A step started (``running``) or finished (``pass``, ``fail``, ``skip``).

    A later event for the same step replaces an earlier one.
    """

    step: int
    status: str
    value: str = ""
    duration_ms: float = 0.0
    detail: str = ""

    @property
    def name(self) -> str:
        """The step's short name, e.g. ``mapping``."""
        return BY_ID[self.step].name

    @property
    def title(self) -> str:
        """The step's title, e.g. ``cuda:N of the selected GPU``."""
        return title(self.step)

    @property
    def final(self) -> bool:
        """True for pass, fail and skip."""
        return self.status in FINAL_STATUSES


@dataclass(frozen=True)
class Holding:
    """The child holds its tensors on ``cuda:<cuda_index>`` and waits for ``continue``."""

    pid: int
    cuda_index: int
    gpu_uuid: str
    allocated_bytes: int
    reserved_bytes: int


@dataclass(frozen=True)
class Done:
    """The end of a probe. From the child: its own view; from the runner: the verdict."""

    ok: bool
    summary: str


Event = Union[Hello, StepEvent, Holding, Done]  # noqa: UP007  (runs on Python 3.8 too)
_EVENT_NAMES = {Hello: "hello", Holding: "holding", Done: "done"}


@dataclass(frozen=True)
class Request:
    """What the parent asks the child to probe: the GPU by ``gpu_uuid`` (or a unique prefix),
    else ``gpu_index`` (looked up in ``gpus``), else ``cuda_index`` as is.
    """

    gpu_uuid: str | None = None
    gpu_index: int | None = None
    cuda_index: int | None = None
    gpus: tuple[tuple[int, str], ...] = field(default_factory=tuple)
    size_mib: int = 256
    max_free_fraction: float = 0.10
    hold_timeout_s: float = 30.0


def encode(message: Event | Request) -> str:
    """One protocol line (without the newline) for an event or a request."""
    payload: dict[str, Any] = {"v": PROTOCOL_VERSION}
    if isinstance(message, StepEvent):
        payload.update(
            event="step",
            step=message.step,
            name=message.name,
            title=message.title,
            status=message.status,
            value=message.value,
            duration_ms=round(message.duration_ms, 3),
            detail=message.detail,
        )
    elif isinstance(message, Request):
        payload.update(request="probe", **_fields(message))
        payload["gpus"] = [[index, uuid] for index, uuid in message.gpus]
    elif type(message) in _EVENT_NAMES:
        payload.update(event=_EVENT_NAMES[type(message)], **_fields(message))
    else:
        raise TypeError(f"not a protocol message: {message!r}")
    return json.dumps(payload, ensure_ascii=False, allow_nan=False)


def _fields(message: Any) -> dict[str, Any]:
    return {name.name: getattr(message, name.name) for name in fields(message)}


def encode_continue() -> str:
    """The parent's ``continue`` command."""
    return json.dumps({"v": PROTOCOL_VERSION, "command": CONTINUE})


def _load(line: str | bytes) -> dict[str, Any]:
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ProtocolError(f"not UTF-8: {error}") from None
    try:
        payload = json.loads(line)
    except ValueError as error:
        raise ProtocolError(f"not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise ProtocolError("not a JSON object")
    version = payload.get("v")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise ProtocolError(f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    return payload


def _get(payload: dict[str, Any], key: str, kind: Any, optional: bool = False) -> Any:
    if key not in payload or payload[key] is None:
        if optional:
            return None
        raise ProtocolError(f"missing {key!r}")
    value = payload[key]
    # bool is an int in Python, never in this protocol.
    if isinstance(value, bool) and kind is not bool:
        raise ProtocolError(f"{key!r} must be {_KIND_NAMES.get(kind, kind)}, got {value!r}")
    if kind is float:
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ProtocolError(f"{key!r} must be a finite number, got {value!r}")
        return float(value)
    if not isinstance(value, kind):
        raise ProtocolError(f"{key!r} must be {_KIND_NAMES.get(kind, kind)}, got {value!r}")
    return value


_KIND_NAMES = {int: "an integer", str: "a string", bool: "true or false", list: "a list"}


def _non_negative(payload: dict[str, Any], key: str, kind: Any) -> Any:
    value = _get(payload, key, kind)
    if value < 0:
        raise ProtocolError(f"{key!r} must not be negative, got {value!r}")
    return value


def _text(payload: dict[str, Any], key: str, optional: bool = False, lines: bool = False) -> str:
    """A string field (of several ``lines``: each line) made safe to show: the child's text
    may hold terminal escapes."""
    # Parent side only, so imported here: the child's interpreter may be too old for it.
    from gpumon.data.format import safe_lines, safe_text

    value = _get(payload, key, str, optional)
    return "" if value is None else (safe_lines if lines else safe_text)(value)


def decode(line: str | bytes) -> Event:
    """Parse one child -> parent line; its text comes back safe to show (a step's detail keeps its
    lines). Raises :class:`ProtocolError` for anything but a valid event of this version.
    """
    payload = _load(line)
    kind = payload.get("event")
    if kind == "hello":
        return Hello(
            pid=_non_negative(payload, "pid", int),
            python=_text(payload, "python"),
            python_version=_text(payload, "python_version"),
            protocol=_get(payload, "protocol", int),
        )
    if kind == "step":
        step = _get(payload, "step", int)
        if step not in BY_ID:
            raise ProtocolError(f"unknown step {step!r}")
        status = _get(payload, "status", str)
        if status not in STATUSES:
            raise ProtocolError(f"unknown status {status!r}")
        return StepEvent(
            step=step,
            status=status,
            value=_text(payload, "value"),
            duration_ms=_non_negative(payload, "duration_ms", float),
            detail=_text(payload, "detail", optional=True, lines=True),
        )
    if kind == "holding":
        return Holding(
            pid=_non_negative(payload, "pid", int),
            cuda_index=_non_negative(payload, "cuda_index", int),
            gpu_uuid=_text(payload, "gpu_uuid"),
            allocated_bytes=_non_negative(payload, "allocated_bytes", int),
            reserved_bytes=_non_negative(payload, "reserved_bytes", int),
        )
    if kind == "done":
        return Done(ok=_get(payload, "ok", bool), summary=_text(payload, "summary"))
    raise ProtocolError(f"unknown event {kind!r}")


def decode_request(text: str | bytes) -> Request:
    """Parse the parent's request (``--request``); raises :class:`ProtocolError`."""
    payload = _load(text)
    if payload.get("request") != "probe":
        raise ProtocolError("not a probe request")
    gpus = []
    for entry in _get(payload, "gpus", list):
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or isinstance(entry[0], bool)
            or not isinstance(entry[0], int)
            or not isinstance(entry[1], str)
        ):
            raise ProtocolError(f"'gpus' entries must be [index, uuid], got {entry!r}")
        gpus.append((entry[0], entry[1]))
    size_mib = _get(payload, "size_mib", int)
    fraction = _get(payload, "max_free_fraction", float)
    if size_mib < 1 or not 0 < fraction <= 1:
        raise ProtocolError("size_mib must be >= 1 and max_free_fraction in (0, 1]")
    return Request(
        gpu_uuid=_get(payload, "gpu_uuid", str, optional=True),
        gpu_index=_get(payload, "gpu_index", int, optional=True),
        cuda_index=_get(payload, "cuda_index", int, optional=True),
        gpus=tuple(gpus),
        size_mib=size_mib,
        max_free_fraction=fraction,
        hold_timeout_s=_non_negative(payload, "hold_timeout_s", float),
    )


def is_continue(line: str | bytes) -> bool:
    """True for the parent's ``continue`` command; False for anything else."""
    try:
        payload = _load(line)
    except ProtocolError:
        return False
    return payload.get("command") == CONTINUE
