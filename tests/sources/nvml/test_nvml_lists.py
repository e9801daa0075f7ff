"""NVML's process lists and per-process samples in one call each.

nvidia-ml-py asks NVML twice per list (the count, then the entries); gpumon keeps a buffer per
GPU and list and asks once, growing the buffer when NVML answers INSUFFICIENT_SIZE. These
tests drive :class:`~gpumon.sources.nvml.lists.ListReader` through real C function pointers
(ctypes callbacks with NVML's signatures), as the driver's library is called, and check what a
user would see: the same processes, memory and SM readings, in fewer calls.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from gpumon.sources.nvml.lists import VALUE_NOT_AVAILABLE, ListReader
from tests.sources.nvml.test_nvml_source import make_source
from tests.support.fake_nvml import FakeNvml, ProcessInfo, make_gpu

SUCCESS, INSUFFICIENT_SIZE, NOT_FOUND = 0, 7, 6
INFO = pynvml.c_nvmlProcessInfo_v3_t
SAMPLE = pynvml.c_nvmlProcessUtilizationSample_t
ProcessesFn = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(INFO)
)
SamplesFn = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.py_object,  # the handle (the fake binding's are Python objects)
    ctypes.POINTER(SAMPLE),
    ctypes.POINTER(ctypes.c_uint),
    ctypes.c_ulonglong,
)


class Library:
    """A driver's library: the processes and samples it lists, and every call it took."""

    def __init__(self) -> None:
        self.processes: list[tuple[int, int]] = []  # (pid, used memory)
        self.samples: list[tuple[int, int, int]] = []  # (pid, timestamp, sm %)
        self.calls: list[str] = []

        def processes(handle: Any, count: Any, infos: Any) -> int:
            self.calls.append("processes")
            needed = len(self.processes)
            if not infos or count[0] < needed:
                count[0] = needed
                return SUCCESS if needed == 0 else INSUFFICIENT_SIZE
            for i, (pid, memory) in enumerate(self.processes):
                infos[i].pid, infos[i].usedGpuMemory = pid, memory
                infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF
            count[0] = needed
            return SUCCESS

        def samples(handle: Any, out: Any, count: Any, seen: int) -> int:
            self.calls.append("samples")
            new = [s for s in self.samples if s[1] > seen]
            if not new:
                return NOT_FOUND
            if not out or count[0] < len(new):
                count[0] = len(new)
                return INSUFFICIENT_SIZE
            for i, (pid, stamp, sm) in enumerate(new):
                out[i].pid, out[i].timeStamp, out[i].smUtil = pid, stamp, sm
            count[0] = len(new)
            return SUCCESS

        self._keep: dict[str, Any] = {
            "nvmlDeviceGetComputeRunningProcesses_v3": ProcessesFn(processes),
            "nvmlDeviceGetGraphicsRunningProcesses_v3": ProcessesFn(lambda h, c, i: _none(c)),
            "nvmlDeviceGetProcessUtilization": SamplesFn(samples),
        }

    def function(self, name: str) -> Callable[..., int]:
        if name not in self._keep:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._keep[name]


def _none(count: Any) -> int:
    count[0] = 0
    return SUCCESS


def binding(library: Library) -> FakeNvml:
    """A fake binding with the real one's library handle and structures: the one-call path."""
    fake = FakeNvml([make_gpu(0)])
    fake._nvmlGetFunctionPointer = library.function  # type: ignore[attr-defined]
    fake.c_nvmlProcessInfo_v3_t = INFO  # type: ignore[attr-defined]
    fake.c_nvmlProcessInfo_v2_t = pynvml.c_nvmlProcessInfo_v2_t  # type: ignore[attr-defined]
    fake.c_nvmlProcessUtilizationSample_t = SAMPLE  # type: ignore[attr-defined]
    return fake


def test_a_list_that_fits_its_buffer_takes_one_call_and_a_longer_one_grows_it() -> None:
    library = Library()
    reader = ListReader(binding(library))  # type: ignore[arg-type]
    compute = reader.processes("nvmlDeviceGetComputeRunningProcesses_v3")
    assert compute is not None
    library.processes = [(100 + n, n * 1024**2) for n in range(3)]

    assert compute(None) == [(100 + n, n * 1024**2, 0xFFFFFFFF, 0xFFFFFFFF) for n in range(3)]
    assert library.calls == ["processes"]  # nvidia-ml-py: two

    library.processes = [(200 + n, 1024**3) for n in range(40)]  # more than the 16 it holds
    library.calls.clear()
    assert [pid for pid, *_ in compute(None)] == [200 + n for n in range(40)]
    assert library.calls == ["processes", "processes"]  # too small: told the count, grown

    library.calls.clear()
    assert len(compute(None)) == 40
    assert library.calls == ["processes"]  # the grown buffer is kept


def test_memory_nvml_cannot_tell_reads_none_not_a_huge_number() -> None:
    library = Library()
    reader = ListReader(binding(library))  # type: ignore[arg-type]
    library.processes = [(4242, VALUE_NOT_AVAILABLE)]
    compute = reader.processes("nvmlDeviceGetComputeRunningProcesses_v3")
    assert compute is not None and compute(None) == [(4242, None, 0xFFFFFFFF, 0xFFFFFFFF)]


def test_sm_samples_in_one_call_and_none_newer_is_nvmls_not_found() -> None:
    library = Library()
    reader = ListReader(binding(library))  # type: ignore[arg-type]
    library.samples = [(100, 5_000, 40), (101, 6_000, 120)]
    assert reader.sm_samples()(None, 0) == [(100, 5_000, 40), (101, 6_000, 120)]
    assert library.calls == ["samples"]
    with pytest.raises(pynvml.NVMLError) as raised:
        reader.sm_samples()(None, 6_000)
    assert raised.value.value == NOT_FOUND


def test_the_source_lists_the_same_processes_through_the_one_call_path() -> None:
    """A whole sample through the library handle: the processes, their memory and SM %,
    one call per list; a driver without the _v3 call is asked its _v2 one."""
    library = Library()
    fake = binding(library)
    library.processes = [(4242, 2 * 1024**3)]
    library.samples = [(4242, 10_000, 55)]
    sample = make_source(fake).sample()
    assert [(p.pid, p.gpu_memory_bytes, p.sm_utilization_pct) for p in sample.processes] == [
        (4242, 2 * 1024**3, 55)
    ]
    assert library.calls == ["processes", "samples"]


def test_a_driver_without_the_v3_list_is_asked_the_v2_one() -> None:
    library = Library()
    library._keep["nvmlDeviceGetComputeRunningProcesses_v2"] = library._keep.pop(
        "nvmlDeviceGetComputeRunningProcesses_v3"
    )
    library.processes = [(4242, 1024**3)]
    sample = make_source(binding(library)).sample()
    assert [p.pid for p in sample.processes] == [4242]


def test_a_binding_without_the_library_handle_reads_through_its_functions() -> None:
    fake = FakeNvml([make_gpu(0, compute_processes=[ProcessInfo(4242, 1024**3)])])
    sample = make_source(fake).sample()
    assert [(p.pid, p.gpu_memory_bytes) for p in sample.processes] == [(4242, 1024**3)]
    assert fake.count("nvmlDeviceGetComputeRunningProcesses", 0) == 1
