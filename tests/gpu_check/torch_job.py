"""A small torch job for the processes check: ``python -m tests.gpu_check.torch_job --mib N``.

Allocates N MiB on ``cuda:0``, prints one JSON line (its PID, what torch allocated and
reserved, the GPU's UUID as torch reports it), then holds the memory until a line arrives on
stdin (or stdin closes). The check always kills it at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

MIB = 1024**2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=4096)
    size = parser.parse_args().mib * MIB
    import torch  # only here: the test suite never runs this module

    tensor = torch.ones(size, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    properties = torch.cuda.get_device_properties(0)
    report = {
        "pid": os.getpid(),
        "allocated_bytes": int(torch.cuda.memory_allocated(0)),
        "reserved_bytes": int(torch.cuda.memory_reserved(0)),
        "uuid": str(getattr(properties, "uuid", "")),
        "torch": torch.__version__,
    }
    print(json.dumps(report), flush=True)
    sys.stdin.readline()
    del tensor


if __name__ == "__main__":
    main()
