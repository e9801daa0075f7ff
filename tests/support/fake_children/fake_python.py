"""Stands in for a training environment's interpreter that has the stand-in torch with two
simulated GPUs. Called the way the runner calls any interpreter:

    fake_python.py -c <bootstrap> <gpumon dir> --request JSON

It ignores the bootstrap and runs the real child from the gpumon under test.
"""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "fake_torch"))
arguments = sys.argv[sys.argv.index("--request") :] if "--request" in sys.argv else []

from gpumon.probe import child, child_io  # noqa: E402

child_io.driver_cuda_version = lambda: ("12.4", "")
sys.exit(child.main(arguments))
