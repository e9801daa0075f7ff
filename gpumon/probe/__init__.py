"""The torch probe: a child process that checks torch on one GPU.

What lives here: :mod:`~gpumon.probe.protocol` and :mod:`~gpumon.probe.steps` (the JSON-lines
protocol and the nine steps, shared by both sides), :mod:`~gpumon.probe.runner`,
:mod:`~gpumon.probe.child_process` and :mod:`~gpumon.probe.confirm` (the parent: starts the
child, reads its lines, checks what NVML says), :mod:`~gpumon.probe.cli` (``gpumon probe``),
and :mod:`~gpumon.probe.child` with :mod:`~gpumon.probe.child_io` (the child).

May import: the parent side, :mod:`gpumon.sampling`, :mod:`gpumon.sources`, :mod:`gpumon.data`;
never textual or rich. The child runs in the user's interpreter without gpumon's
dependencies: it imports only the standard library, the probe's protocol and steps, and
torch. It is the only module of gpumon that imports torch, and nothing of the monitor imports
it (the import contracts in pyproject.toml say so).
"""
