"""A GPU's video encoder and decoder utilisation, read through its :class:`Device`'s choke
point: every sample while either is busy, every :data:`CODECS_IDLE_REFRESH_S` while both
read 0 (most compute GPUs never encode), so a video job shows within that time. Never imports
``pynvml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpumon.sources.nvml.device import Device

#: While the encoder and decoder both read 0 %, they are read at most once per this many
#: seconds per GPU; a video job that starts shows within this time.
CODECS_IDLE_REFRESH_S = 5.0


class Codecs:
    """One GPU's encoder and decoder utilisation, as last read."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._read_at: float | None = None
        self._reading: tuple[int | None, int | None] = (None, None)

    def skip(self) -> tuple[None, None]:
        """Not read this sample (nothing shows them): the next :meth:`read` asks NVML."""
        self._read_at = None
        return (None, None)

    def read(self) -> tuple[int | None, int | None]:
        """(encoder %, decoder %), ``None`` for N/A. Raises
        :class:`~gpumon.sources.nvml.errors.GpuLost`."""
        device = self.device
        now = device.monotonic()
        idle = all(value in (0, None) for value in self._reading) and not (
            "encoder" in device.errors or "decoder" in device.errors
        )
        if idle and self._read_at is not None and 0 <= now - self._read_at < CODECS_IDLE_REFRESH_S:
            return self._reading
        nvml = device.nvml
        # Both answer (utilisation, sampling period in microseconds).
        encoder = device.read("encoder", nvml.nvmlDeviceGetEncoderUtilization)
        decoder = device.read("decoder", nvml.nvmlDeviceGetDecoderUtilization)
        self._reading = (
            None if encoder is None else int(encoder[0]),
            None if decoder is None else int(decoder[0]),
        )
        self._read_at = now
        return self._reading
