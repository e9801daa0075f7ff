"""A healthy child that takes its time: every step passes, 0.15 s apart (--delay S), and it
holds 256 MiB on cuda:0 until the parent says continue."""

import os
import sys
import time

from _fake import hello, send, step, wait_for_continue

delay = float(sys.argv[sys.argv.index("--delay") + 1]) if "--delay" in sys.argv else 0.15
hello()
values = {
    1: "Python 3.11.0 (/usr/bin/python3), torch 2.13.0",
    2: "CUDA 12.4 build; driver supports CUDA 12.4",
    3: "is_available()=True, device_count()=2",
    4: "GPU 0 is cuda:0 in this environment",
    5: "randn on cuda:0, .to(device), get_device()==0, matmul matches the CPU; holding 256 MiB",
    7: "cuda:0 + cuda:1 raised RuntimeError: Expected all tensors to be on the same device",
    8: "H2D 24.1 GB/s, D2H 25.3 GB/s, matmul 4096x4096 fp32 48.2 TFLOP/s",
    9: "freed 256 MiB, cache emptied; the child exits",
}
for number in (1, 2, 3, 4, 5, 7, 8, 9):
    step(number, "running")
    time.sleep(delay)
    step(number, "pass", values[number], duration_ms=delay * 1000)
    if number == 5:
        send(
            event="holding",
            pid=os.getpid(),
            cuda_index=0,
            gpu_uuid="GPU-00000000-0000-0000-0000-000000000000",
            allocated_bytes=256 * 2**20,
            reserved_bytes=256 * 2**20,
        )
        wait_for_continue()
send(event="done", ok=True, summary="every step passed")
