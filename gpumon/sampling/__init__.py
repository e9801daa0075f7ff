"""Sampling: one sampler feeds one store.

What lives here: :mod:`~gpumon.sampling.poller` (``source.sample()`` off the event loop, one
poll at a time), :mod:`~gpumon.sampling.store` (the latest sample and a bounded history),
:mod:`~gpumon.sampling.idle` (which processes hold GPU memory idle: a tracker fed every sample),
:mod:`~gpumon.sampling.history` (the history database: the recorder's writer and the read
API), :mod:`~gpumon.sampling.usage_history` (the history database as report, once and the
dashboard read it)
and :mod:`~gpumon.sampling.snapshot` (one sample for the headless modes, and as JSON-able
data).

May import: :mod:`gpumon.sources`, :mod:`gpumon.data`, :mod:`gpumon.config`; never textual
or rich.
"""
