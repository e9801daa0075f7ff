"""The cluster dashboard (``gpumon --prometheus URL``): its app, the node list, one node's
screen and one GPU's last hour.

May import: :mod:`gpumon.ui.widgets`, :mod:`gpumon.ui` (the shared app base),
:mod:`gpumon.sampling`, :mod:`gpumon.sources`, :mod:`gpumon.data`; never
the one-machine dashboard (``ui.dashboard``).
"""
