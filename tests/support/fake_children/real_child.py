"""Runs the real probe child, optionally with a stand-in torch put first on sys.path.

    real_child.py [--torch fake|hanging] --request JSON

With ``--torch fake`` the driver's CUDA version is reported as 12.4 (there is no libcuda).
"""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
choice = None
if "--torch" in sys.argv:
    position = sys.argv.index("--torch")
    choice = sys.argv[position + 1]
    del sys.argv[position : position + 2]
    sys.path.insert(0, os.path.join(here, f"{choice}_torch"))

from gpumon.probe import child, child_io  # noqa: E402

if choice == "fake":
    child_io.driver_cuda_version = lambda: ("12.4", "")
sys.exit(child.main(sys.argv[1:]))
