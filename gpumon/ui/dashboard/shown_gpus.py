"""``--only`` and ``--only-visible`` on the dashboard: every sample is cut to the chosen GPUs
before the store sees it, so the cards, the process table, the details, the per-user summary
and the watches all agree, and ``gpumon once`` cuts the same way
(:func:`gpumon.data.selection.select_gpus`).

The header says a filter is on (``GPUs 0,3 of 8``); what cannot be matched (``--only 9`` on
a 4-GPU machine) or is worth knowing about ``CUDA_VISIBLE_DEVICES`` (``-1``: no GPU visible;
an order CUDA may not share with NVML) is said once, as a notification. A filter that lets no
GPU through says so in the process table too, never "No processes on any GPU.".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpumon.data.model import Sample
from gpumon.data.selection import Selected, select_gpus, selection_from

if TYPE_CHECKING:
    from gpumon.ui.dashboard.app import GpumonApp

#: How long a line about the filter stays on screen.
NOTICE_S = 15.0


class ShownGpus:
    """The GPUs the start-up filters let through, sample by sample."""

    def __init__(self, app: GpumonApp, environ: Mapping[str, str] = os.environ) -> None:
        self._app = app
        settings = app.settings
        self.selection = selection_from(settings.only_gpus, settings.only_visible, environ)
        #: The latest sample's cut (``None`` before the first, or without a filter).
        self.last: Selected | None = None
        self._said: set[str] = set()

    def select(self, sample: Sample) -> Sample:
        """``sample`` with only the chosen GPUs and their processes."""
        if not self.selection.active or (sample.unavailable is not None and not sample.gpus):
            return sample  # no filter, or no GPU data at all: nothing to choose from
        self.last = select_gpus(sample, self.selection)
        if self._app.is_running:
            for line in (*self.last.missing, *self.last.notes):
                if line not in self._said:
                    self._said.add(line)
                    self._app.notify(line, severity="warning", timeout=NOTICE_S, markup=False)
        return self.last.sample

    @property
    def header_text(self) -> str:
        """``GPUs 0,3 of 8`` while a filter is on, else ``""``."""
        return self.last.describe() if self.last is not None else ""

    @property
    def nothing_shown(self) -> str | None:
        """What the process table says while the filters let no GPU through (``--only 12``
        on a 4-GPU machine), else ``None``."""
        if self.last is None or self.last.sample.gpus:
            return None
        why = "; ".join(self.last.missing) or f"the start-up filters leave {self.last.describe()}"
        return f"No GPU shown: {why}."
