"""Real-GPU truth in one command: ``python3 -m tests.gpu_check`` (see ``__main__``).

gpumon against nvidia-smi field by field, a torch job in ``once --json``, the probe, the
exporter, ``pytest -m gpu`` and a real dashboard screenshot. ``--fake`` runs the parts that need
no GPU against faked NVML readings and a faked nvidia-smi; the test suite runs it that way
(tests/test_gpu_check.py), so the script cannot rot between the sessions that draw a GPU.
"""
