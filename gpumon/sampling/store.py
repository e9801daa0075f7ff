"""The latest sample, a bounded history of every numeric reading, and "wait for the next one".

Whatever samples pushes each new :class:`Sample` into a :class:`Store`; views read from it. Per
GPU (by NVML index) and per process (by :attr:`GpuProcess.key`), one ring buffer per numeric
field (found from the model's annotations), plus the timestamps; N/A, lost and missing are
gaps, read back as ``None``. Memory is bounded whatever the uptime (:data:`MAX_POINTS`; only
the latest sample's processes keep a history). One writer thread; other threads read only
:attr:`Store.latest`, replaced whole by each push. How and why: docs/sampling.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import threading
import typing
from array import array
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

from gpumon.data.model import GpuProcess, GpuStats, Sample

#: History kept at any interval, at least (at the default interval of 1 s: 600 points).
HISTORY_S = 600.0
#: At slow intervals, at least this many points: enough for a sparkline across a wide pane.
MIN_POINTS = 300
#: Never more points per buffer: 10 minutes at the fastest interval (0.25 s).
MAX_POINTS = 2400

_GAP = math.nan  # N/A in a buffer; read back as None
#: Readings that a 4-byte float would round off where it shows (see the module docstring).
_NEEDS_DOUBLE = frozenset({"energy_j"})


def history_points(interval_s: float, history_s: float = HISTORY_S) -> int:
    """Points per buffer at ``interval_s``: ``history_s`` (10 minutes) worth, within
    [300, 2400]."""
    return min(MAX_POINTS, max(MIN_POINTS, math.ceil(history_s / max(interval_s, 1e-9))))


#: A process's history keeps one record per this many seconds at most (per sample at longer
#: intervals): the maximum of each field over the samples in it, so a spike stays. 512
#: processes at 0.25 s kept 14.7 MB of history per sample before this limit; the process screen
#: draws ten minutes in at most a couple of hundred columns, a few seconds each.
PROCESS_POINT_S = 4.0


def process_stride(interval_s: float) -> int:
    """Samples per record of a process's history at ``interval_s``."""
    return max(1, round(PROCESS_POINT_S / max(interval_s, 1e-9)))


def numeric_fields(cls: type, exclude: Iterable[str] = ()) -> tuple[str, ...]:
    """The fields of dataclass ``cls`` annotated ``int`` or ``float`` (or ``... | None``)."""
    hints = typing.get_type_hints(cls)
    found = []
    for field in dataclasses.fields(cls):
        kinds = set(typing.get_args(hints[field.name])) or {hints[field.name]}
        kinds.discard(type(None))
        # bool is its own annotation ({bool}), so flags and modes are left out.
        if field.name not in exclude and kinds and kinds <= {int, float}:
            found.append(field.name)
    return tuple(found)


#: What has a history. The keys (GPU index, process's GPU index and PID) are left out, and a
#: process's age (it only grows: the timestamps tell it).
GPU_FIELDS = numeric_fields(GpuStats, exclude={"index"})
PROCESS_FIELDS = numeric_fields(
    GpuProcess,
    exclude={
        "gpu_index",
        "pid",
        "elapsed_s",
        "create_time_s",
        "gpu_instance_id",
        "compute_instance_id",
    },
)


def _reader(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """One call reading every field in ``names`` as a tuple (attrgetter is fast)."""
    if len(names) == 1:
        read_one = attrgetter(names[0])
        return lambda item: (read_one(item),)
    return attrgetter(*names) if names else (lambda item: ())


def _kept(fields: Iterable[str] | None, numeric: tuple[str, ...], model: str) -> tuple[str, ...]:
    """``fields`` in the model's order (all of ``numeric`` when ``None``)."""
    if fields is None:
        return numeric
    wanted = set(fields)
    if unknown := wanted - set(numeric):
        raise ValueError(f"no history for {', '.join(sorted(unknown))}: not numeric {model} fields")
    return tuple(name for name in numeric if name in wanted)


def _typecode(fields: tuple[str, ...]) -> str:
    return "d" if _NEEDS_DOUBLE & set(fields) else "f"


class _Series:
    """The newest ``capacity`` records of ``width`` floats each, one record per sample, in
    one array (a field is a strided slice of it); NaN is a gap."""

    __slots__ = ("_capacity", "_oldest", "_type", "_values", "_width", "absent")

    def __init__(self, width: int, capacity: int, gaps: int = 0, *, typecode: str = "d") -> None:
        self._width = width
        self._capacity = capacity
        self._type = typecode
        self._values = array(typecode, [_GAP]) * (width * min(gaps, capacity))
        self._oldest = 0  # the oldest record, once the buffer is full
        self.absent = 0  # samples in a row a GPU was missing from

    def __len__(self) -> int:
        return len(self._values) // self._width

    def append(self, record: tuple[Any, ...]) -> None:
        values = array(self._type, [_GAP if value is None else value for value in record])
        if len(self._values) < self._capacity * self._width:
            self._values.extend(values)
            if len(self._values) == self._capacity * self._width:
                # Full for good: a copy drops the room ``extend`` kept for growth (1/16).
                self._values = self._values[:]
        else:
            start = self._oldest * self._width
            self._values[start : start + self._width] = values
            self._oldest = (self._oldest + 1) % self._capacity

    def _ordered(self) -> array[float]:
        split = self._oldest * self._width
        return self._values[split:] + self._values[:split]

    def column(self, position: int) -> array[float]:
        """Field ``position`` of every record, oldest first."""
        column = self._values[position :: self._width]
        return column[self._oldest :] + column[: self._oldest]

    def read(self, position: int, last: int | None = None) -> list[float | None]:
        """:meth:`column` (its ``last`` newest values only), with gaps as ``None``."""
        column = self.column(position)
        if last is not None:
            column = column[max(0, len(column) - last) :]
        return [None if math.isnan(value) else value for value in column]

    def resize(self, capacity: int) -> None:
        """Keep the newest ``capacity`` records."""
        values = self._ordered()
        self._values = values[max(0, len(values) - capacity * self._width) :]
        self._oldest = 0
        self._capacity = capacity

    def merge_newest(self, record: tuple[Any, ...]) -> None:
        """Fold ``record`` into the newest record: each field the larger of the two (a gap
        only where both are gaps)."""
        count = len(self)
        newest = count - 1 if count < self._capacity else (self._oldest - 1) % self._capacity
        start = newest * self._width
        for offset, value in enumerate(record):
            if value is None or value != value:
                continue
            old = self._values[start + offset]
            if old != old or value > old:
                self._values[start + offset] = value


class _Buckets:
    """A process's history: the newest ``capacity`` samples, ``stride`` samples a record
    (the maximum of each field over them); read back one value per sample, the newest
    exactly as it was read."""

    __slots__ = ("_capacity", "_fill", "_last", "_samples", "_series", "_stride", "created_s")

    def __init__(
        self, width: int, capacity: int, stride: int, typecode: str, created_s: float | None
    ) -> None:
        #: The process's start: a new process on a reused PID is not this one.
        self.created_s = created_s
        self._stride = stride
        self._capacity = capacity
        self._series = _Series(width, -(-capacity // stride) + 1, typecode=typecode)
        self._fill = 0  # samples in the newest record
        self._samples = 0  # samples appended in all
        self._last: tuple[Any, ...] = ()

    def append(self, record: tuple[Any, ...]) -> None:
        if self._fill in (0, self._stride):
            self._series.append(record)
            self._fill = 1
        else:
            self._series.merge_newest(record)
            self._fill += 1
        self._samples += 1
        self._last = record

    def read(self, position: int) -> list[float | None]:
        records = self._series.read(position)
        values: list[float | None] = []
        for number, value in enumerate(records):
            values.extend([value] * (self._fill if number == len(records) - 1 else self._stride))
        values = values[max(0, len(values) - min(self._samples, self._capacity)) :]
        if values:
            values[-1] = self._last[position]
        return values

    def resize(self, capacity: int) -> None:
        """Keep the newest ``capacity`` samples (at this history's own stride)."""
        self._capacity = capacity
        self._series.resize(-(-capacity // self._stride) + 1)


class Store:
    """The latest sample and the history of its readings; see the module docstring.

    Args:
        interval_s: the polling interval, which sets the history's length
            (:func:`history_points`); :meth:`resize` when it changes.
        history: False for modes that need only the latest sample (the exporter, the probe):
            no buffers at all.
        gpu_fields, process_fields: the fields that keep a history (of :data:`GPU_FIELDS`
            and :data:`PROCESS_FIELDS`; all of them when ``None``): a field nobody reads
            costs nothing.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        *,
        history: bool = True,
        history_s: float = HISTORY_S,
        gpu_fields: Iterable[str] | None = None,
        process_fields: Iterable[str] | None = None,
    ) -> None:
        #: The newest sample; ``None`` before the first.
        self.latest: Sample | None = None
        #: Samples pushed so far.
        self.sequence = 0
        self._history_s = history_s
        self._capacity = history_points(interval_s, history_s) if history else 0
        #: The fields with a history, in the model's order.
        self.gpu_fields = _kept(gpu_fields, GPU_FIELDS, "GpuStats")
        self.process_fields = _kept(process_fields, PROCESS_FIELDS, "GpuProcess")
        self._read_gpu = _reader(self.gpu_fields)
        self._read_process = _reader(self.process_fields)
        self._lost = (None,) * len(self.gpu_fields)
        self._gpu_type = _typecode(self.gpu_fields)
        self._process_type = _typecode(self.process_fields)
        self._timestamps = _Series(1, self._capacity)
        self._gpus: dict[int, _Series] = {}
        self._processes: dict[tuple[int, int], _Buckets] = {}
        self._process_stride = process_stride(interval_s)
        self._subscribers: tuple[Callable[[Sample], None], ...] = ()
        self._waiters: list[asyncio.Future[Sample]] = []
        self._waiters_lock = threading.Lock()  # next_sample() may run on another thread

    # -- writing (one writer) ----------------------------------------------------------

    def push(self, sample: Sample) -> None:
        """Record ``sample``, make it :attr:`latest`, wake :meth:`next_sample` waiters, then
        call the subscribers, in the order they subscribed, on this thread."""
        if self._capacity:
            self._record(sample)
        self.latest = sample
        self.sequence += 1
        self._wake_waiters(sample)
        for callback in self._subscribers:
            callback(sample)

    def _record(self, sample: Sample) -> None:
        self._timestamps.append((sample.timestamp_s,))
        self._record_gpus(sample.gpus)
        self._record_processes(sample.processes)

    def _record_gpus(self, gpus: tuple[GpuStats, ...]) -> None:
        seen: set[int] = set()
        for gpu in gpus:
            if gpu.index in seen:
                continue
            seen.add(gpu.index)
            series = self._gpus.get(gpu.index)
            if series is None:  # a GPU that appears: gaps for the samples before it
                gaps = len(self._timestamps) - 1
                series = self._gpus[gpu.index] = _Series(
                    len(self.gpu_fields), self._capacity, gaps, typecode=self._gpu_type
                )
            series.absent = 0
            series.append(self._lost if gpu.lost else self._read_gpu(gpu))
        for index, series in list(self._gpus.items()):
            if index not in seen:  # missing from this sample: a gap, and gone after a window
                series.absent += 1
                series.append(self._lost)
                if series.absent >= self._capacity:
                    del self._gpus[index]

    def _record_processes(self, processes: tuple[GpuProcess, ...]) -> None:
        # Only the processes of this sample keep a history: the rest are dropped here.
        previous, self._processes = self._processes, {}
        for process in processes:
            key = process.key
            if key in self._processes:
                continue  # listed twice: the first entry counts
            found = previous.pop(key, None)
            if found is None or found.created_s != process.create_time_s:  # new, or PID reused
                found = _Buckets(
                    len(self.process_fields),
                    self._capacity,
                    self._process_stride,
                    self._process_type,
                    process.create_time_s,
                )
            found.append(self._read_process(process))
            self._processes[key] = found

    def resize(self, interval_s: float) -> None:
        """The interval changed: keep :func:`history_points` of it (the newest, if fewer)."""
        if not self._capacity:
            return
        self._capacity = history_points(interval_s, self._history_s)
        # A process seen before keeps its stride; processes that appear from now on, the new.
        self._process_stride = process_stride(interval_s)
        for series in (self._timestamps, *self._gpus.values()):
            series.resize(self._capacity)
        for process in self._processes.values():
            process.resize(self._capacity)

    # -- reading history (the writer's thread) -----------------------------------------

    @property
    def capacity(self) -> int:
        """Points each buffer holds at most (0 without history)."""
        return self._capacity

    def timestamps(self) -> list[float]:
        """``timestamp_s`` of the samples in the history, oldest first."""
        return list(self._timestamps.column(0))

    def gpu_indices(self) -> list[int]:
        """NVML indices with a history: in the latest sample, or missing for less than a
        whole history (their readings meanwhile are gaps)."""
        return sorted(self._gpus)

    def gpu_history(self, index: int, field: str, last: int | None = None) -> list[float | None]:
        """``field`` of GPU ``index``, oldest first, one value per entry of
        :meth:`timestamps` (the ``last`` newest only, when given); ``None`` where it was N/A,
        lost or missing (a GPU never seen: all ``None``)."""
        position = _position(self.gpu_fields, GPU_FIELDS, field, "GpuStats")
        series = self._gpus.get(index)
        if series is None:
            count = len(self._timestamps)
            return [None] * (count if last is None else min(last, count))
        return series.read(position, last)

    def process_keys(self) -> list[tuple[int, int]]:
        """``(gpu_index, pid)`` of the processes with a history: those of the latest sample."""
        return list(self._processes)

    def process_history(self, key: tuple[int, int], field: str) -> list[float | None]:
        """``field`` of the process with ``key``, oldest first, since it was last seen to
        appear: one value per sample, the last ``len()`` entries of :meth:`timestamps`; the
        newest as read, the others the maximum over their :data:`PROCESS_POINT_S` record.
        ``[]`` for a process that is not in the latest sample."""
        position = _position(self.process_fields, PROCESS_FIELDS, field, "GpuProcess")
        series = self._processes.get(key)
        return [] if series is None else series.read(position)

    # -- subscribing -------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Sample], None]) -> None:
        """Call ``callback(sample)`` with every sample pushed from now on, on the pushing
        thread (the headless modes; the dashboard runs its steps in order instead)."""
        self._subscribers = (*self._subscribers, callback)

    def next_sample(self) -> asyncio.Future[Sample]:
        """A future of the first sample pushed after this call: never one already here (a
        poll already in flight at the call may be the one that answers).

        Call it with an event loop running in this thread; the future resolves on that loop,
        whichever thread pushes. Cancelling it (a timeout) forgets the waiter.
        """
        future: asyncio.Future[Sample] = asyncio.get_running_loop().create_future()
        with self._waiters_lock:
            self._waiters.append(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: asyncio.Future[Sample]) -> None:
        with self._waiters_lock, contextlib.suppress(ValueError):  # woken: already gone
            self._waiters.remove(future)

    def _wake_waiters(self, sample: Sample) -> None:
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        if not waiters:
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for future in waiters:
            loop = future.get_loop()
            if loop is here:
                _resolve(future, sample)
            else:
                with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
                    loop.call_soon_threadsafe(_resolve, future, sample)


def _resolve(future: asyncio.Future[Sample], sample: Sample) -> None:
    if not future.done():  # cancelled meanwhile (a timeout)
        future.set_result(sample)


def _position(kept: tuple[str, ...], numeric: tuple[str, ...], field: str, model: str) -> int:
    if field in kept:
        return kept.index(field)
    if field in numeric:
        raise ValueError(f"this store keeps no history of {field!r} (it keeps: {', '.join(kept)})")
    raise ValueError(f"{field!r} is not a numeric {model} field (those are: {', '.join(numeric)})")
