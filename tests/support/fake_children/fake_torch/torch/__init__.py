"""A tiny stand-in for torch with simulated CUDA GPUs, so the real probe child can be run
through every step on a machine without a GPU.

Configured through the environment (the real child passes its environment on unchanged):

* ``FAKE_TORCH_GPUS``: JSON list of the physical GPUs' UUIDs, in CUDA's enumeration order,
  as torch prints them (without the ``GPU-`` prefix);
* ``FAKE_TORCH_FREE_MIB``: free memory per GPU (default 8192);
* ``FAKE_TORCH_CROSS_DEVICE_OK``: "1" makes cuda:a + cuda:b succeed (a broken torch);
* ``FAKE_TORCH_CROSS_DEVICE_ERROR``: another error text for cuda:a + cuda:b;
* ``FAKE_TORCH_BUSY``: JSON list of cuda indices that refuse tensors, as a GPU in
  exclusive-process mode held by another process does;
* ``CUDA_VISIBLE_DEVICES``: honoured like CUDA does (indices or UUIDs, up to the first
  invalid entry).

Memory accounting follows the caching allocator closely enough for the probe: live tensors
count as allocated, reserved memory only shrinks on ``cuda.empty_cache()``.
"""

from __future__ import annotations

import json
import os
import time
import types

__version__ = "2.13.0+fake"
version = types.SimpleNamespace(cuda="12.4", hip=None)
float32 = "float32"

_PHYSICAL = json.loads(os.environ.get("FAKE_TORCH_GPUS", "[]"))
_FREE = int(os.environ.get("FAKE_TORCH_FREE_MIB", "8192")) * 2**20
_TOTAL = 16 * 2**30
_allocated: dict[int, int] = {}
_reserved: dict[int, int] = {}


def _visible() -> list[str]:
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    if setting is None:
        return list(_PHYSICAL)
    chosen = []
    for entry in setting.split(","):
        entry = entry.strip()
        if entry.isdigit() and int(entry) < len(_PHYSICAL):
            chosen.append(_PHYSICAL[int(entry)])
        elif entry.lower().startswith("gpu-") and entry[4:].lower() in _PHYSICAL:
            chosen.append(entry[4:].lower())
        else:
            break
    return chosen


class device:  # torch spells it in lower case
    def __init__(self, kind: object, index: int | None = None) -> None:
        if isinstance(kind, device):
            kind, index = kind.type, kind.index
        text = str(kind)
        if ":" in text:
            text, number = text.split(":")
            index = int(number)
        self.type = text
        self.index = (index or 0) if text == "cuda" else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __repr__(self) -> str:
        return f"{self.type}:{self.index}" if self.type == "cuda" else self.type


class Tensor:
    def __init__(self, shape: tuple[int, ...], where: device, owner: bool = True) -> None:
        self.shape = shape
        self.device = where
        self._bytes = 4 * _product(shape) if owner and where.type == "cuda" else 0
        if self._bytes:
            assert where.index is not None and where.index < len(_visible()), "bad device"
            if where.index in json.loads(os.environ.get("FAKE_TORCH_BUSY", "[]")):
                self._bytes = 0
                raise RuntimeError("CUDA error: CUDA-capable device(s) is/are busy or unavailable")
            _allocated[where.index] = _allocated.get(where.index, 0) + self._bytes
            _reserved[where.index] = max(_reserved.get(where.index, 0), _allocated[where.index])

    def __del__(self) -> None:
        if self._bytes:
            _allocated[self.device.index] -= self._bytes

    def get_device(self) -> int:
        return self.device.index if self.device.type == "cuda" else -1

    def to(self, where: object) -> Tensor:
        return Tensor(self.shape, device(where))

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def numel(self) -> int:
        return _product(self.shape)

    def view(self, *shape: int) -> Tensor:
        return Tensor(shape, self.device, owner=False)

    def __getitem__(self, part: slice) -> Tensor:
        return Tensor((len(range(*part.indices(self.numel()))),), self.device, owner=False)

    def _same_device(self, other: Tensor) -> None:
        if self.device != other.device and os.environ.get("FAKE_TORCH_CROSS_DEVICE_OK") != "1":
            if "FAKE_TORCH_CROSS_DEVICE_ERROR" in os.environ:
                raise RuntimeError(os.environ["FAKE_TORCH_CROSS_DEVICE_ERROR"])
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {self.device} and {other.device}!"
            )

    def __add__(self, other: Tensor) -> Tensor:
        self._same_device(other)
        return Tensor(self.shape, self.device)

    def __sub__(self, other: Tensor) -> Tensor:
        return self.__add__(other)

    def __matmul__(self, other: Tensor) -> Tensor:
        self._same_device(other)
        if self.device.type == "cuda":
            # About 40 TFLOP/s, so the probe's step 8 prints believable numbers.
            time.sleep(2 * self.shape[0] * self.shape[-1] * other.shape[-1] / 40e12)
        return Tensor((self.shape[0], other.shape[-1]), self.device)

    def normal_(self) -> Tensor:
        return self

    def fill_(self, value: float) -> Tensor:
        return self

    def copy_(self, source: Tensor) -> Tensor:
        if source.device != self.device:
            time.sleep(self.numel() * 4 / 25e9)  # about PCIe Gen4 x16
        return self


def _product(shape: tuple[int, ...]) -> int:
    result = 1
    for size in shape:
        result *= size
    return result


def randn(*shape: int, device: object = "cpu") -> Tensor:
    return Tensor(shape, _device(device))


def ones(*shape: int, device: object = "cpu") -> Tensor:
    return Tensor(shape, _device(device))


def empty(*shape: int, dtype: object = None, device: object = "cpu", pin_memory: bool = False):
    return Tensor(shape, _device(device))


def matmul(left: Tensor, right: Tensor, out: Tensor | None = None) -> Tensor:
    result = left @ right
    return result if out is None else out


def allclose(left: Tensor, right: Tensor, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    return True


_device = device


class _Properties:
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid
        self.name = "Fake GPU"


class cuda:  # a namespace, as in torch
    @staticmethod
    def is_available() -> bool:
        return bool(_visible())

    @staticmethod
    def device_count() -> int:
        return len(_visible())

    @staticmethod
    def get_device_properties(index: int) -> _Properties:
        return _Properties(_visible()[index])

    @staticmethod
    def mem_get_info(index: int) -> tuple[int, int]:
        return _FREE - _reserved.get(index, 0), _TOTAL

    @staticmethod
    def memory_allocated(index: int) -> int:
        return _allocated.get(index, 0)

    @staticmethod
    def memory_reserved(index: int) -> int:
        return _reserved.get(index, 0)

    @staticmethod
    def synchronize(index: int | None = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        for index, allocated in _allocated.items():
            _reserved[index] = allocated
