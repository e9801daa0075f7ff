"""What every NVML module shares, below :class:`~gpumon.sources.nvml.device.Device`: NVML's
return codes, :class:`GpuLost`, the texts of a LOST GPU, error codes, NVML strings and debug
logging. Imports no other module of the NVML source, and never ``pynvml``.
"""

from __future__ import annotations

from typing import Any

from gpumon.data.format import safe_text


def log_debug(message: str, *args: object) -> None:
    """Log at debug level; ``logging`` is imported only when there is something to log
    (it costs a one-shot `gpumon status` milliseconds)."""
    import logging

    logging.getLogger(__name__).debug(message, *args)


# NVML return codes (nvml.h); spelled out so this module works with any binding version.
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


class GpuLost(Exception):
    """Raised inside a device read when NVML says the GPU fell off the bus."""


FELL_OFF_THE_BUS = "fell off the bus (NVML: GPU is lost); check dmesg for Xid 79"


PROCESSES_NOT_SUPPORTED = "not supported: this GPU or driver does not list its processes"


def error_code(error: BaseException) -> int | None:
    """The NVML return code an ``NVMLError`` carries, if any."""
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def nvml_text(value: Any) -> str:
    """A string NVML returned: ``str`` from nvidia-ml-py >= 11.5, ``bytes`` from older ones;
    made safe like any text gpumon shows (a driver is not hostile, but a broken one may say
    anything)."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return safe_text(text, 256)
