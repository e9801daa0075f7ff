"""gpumon: a terminal dashboard for live NVIDIA GPU monitoring."""

__version__ = "0.1.0"
