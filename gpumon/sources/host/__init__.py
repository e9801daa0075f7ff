"""What the host knows about processes: psutil details, cgroups (Slurm jobs, containers),
the process detail screen's reads and safe signals.

May import: :mod:`gpumon.data`; psutil. Never pynvml.
"""
