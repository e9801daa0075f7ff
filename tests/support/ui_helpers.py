"""Helpers for Pilot tests: known samples and the screen as plain text."""

from __future__ import annotations

import itertools
from typing import Any

from textual.app import App
from textual.pilot import Pilot

from gpumon.data.model import Sample
from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app
from tests.support.samples import (  # noqa: F401  (the Pilot tests import them from here)
    FIXED_TIME,
    GIB,
    MIB,
    make_gpu,
    make_process,
    make_sample,
)


def screen_text(app: App[object]) -> str:
    """What a user sees, without colours: one string, lines joined by newlines."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


class StaticSource:
    """A source that returns the samples it is given, the last one forever."""

    simulated = False

    def __init__(self, *samples: Sample) -> None:
        self.samples = list(samples)
        self.calls = 0

    def sample(self) -> Sample:
        self.calls += 1
        if len(self.samples) > 1:
            return self.samples.pop(0)
        return self.samples[0]

    def close(self) -> None:
        pass


def app_for(*samples: Sample, **options: object) -> GpumonApp:
    """An app over ``samples`` that does not poll by itself: tests hand samples in."""
    options.setdefault("autostart", False)
    options.setdefault("ascii_only", False)
    return create_app(StaticSource(*samples), **options)  # type: ignore[arg-type]


def record_terminal_writes(app: GpumonApp) -> list[str]:
    """From now on, append every partial screen update the app sends to the terminal (the
    bytes a user's terminal receives, as text) to the returned list."""
    from textual._compositor import CompositorUpdate

    written: list[str] = []
    original = app._display

    def capture(screen, renderable):  # type: ignore[no-untyped-def]
        if isinstance(renderable, CompositorUpdate):
            written.append(renderable.render_segments(app.console))
        original(screen, renderable)

    app._display = capture  # type: ignore[method-assign]
    return written


async def screen_after(sample: Sample, size: tuple[int, int] = (120, 40)) -> str:
    """The screen (see :func:`screen_text`) of an app that was handed ``sample``."""
    app = app_for(sample)
    async with app.run_test(size=size) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        return screen_text(app)


def demo_app(gpus: int = 4, ascii_only: bool = False) -> tuple[GpumonApp, DemoSource]:
    """A seeded demo server (seed 0) whose samples are one second apart, and an app for it
    that does not poll: tests hand it samples with :func:`push`."""
    ticks = itertools.count()
    source = DemoSource(gpus, seed=0, current_user="alice", clock=lambda: FIXED_TIME + next(ticks))
    return create_app(source=source, autostart=False, ascii_only=ascii_only), source


async def push(pilot: Pilot[Any], source: DemoSource, count: int) -> Sample:
    """Hand ``count`` new samples to the app, then let it draw; returns the last."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    sample = source.sample()
    app.receive_sample(sample)
    for _ in range(count - 1):
        sample = source.sample()
        app.receive_sample(sample)
    await pilot.pause()
    return sample
