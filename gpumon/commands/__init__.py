"""The headless modes: ``once``, ``status``, ``pick`` (and their cluster output) and ``export``.

May import: :mod:`gpumon.sampling`, :mod:`gpumon.sources`, :mod:`gpumon.data`,
:mod:`gpumon.settings`, :mod:`gpumon.arguments`. Never textual or rich: ``gpumon status``
runs every few seconds in a status bar and must start light.
"""
