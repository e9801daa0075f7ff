"""gpumon: a terminal dashboard for live NVIDIA GPU monitoring.

``gpumon.__version__`` is the installed distribution's version, whose one source is
pyproject.toml. It is read from the package metadata on first use, not at import:
:mod:`importlib.metadata` costs more start-up time than ``gpumon status`` spends on its line.
"""

from __future__ import annotations

#: The distribution's name on the package index (``gpumon`` there is an unrelated project).
DISTRIBUTION = "gpumon-tui"


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'gpumon' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree on sys.path that was never installed
        found = "0+unknown"
    globals()["__version__"] = found  # later reads find it without calling this again
    return found
