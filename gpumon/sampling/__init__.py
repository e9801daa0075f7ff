"""Sampling: the poller (``source.sample()`` off the event loop, one poll at a time), the
headless steps a sample goes through (:mod:`~gpumon.sampling.pipeline`: selection, store,
idle, watches, claims), the history database and the snapshots the headless modes print.

May import :mod:`gpumon.sources`, :mod:`gpumon.data`, :mod:`gpumon.config`; never textual
or rich.
"""
