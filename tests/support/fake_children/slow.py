"""A healthy child that takes its time: every step passes, 0.15 s apart, and it holds 256 MiB
on cuda:0 until the parent says continue.

Options: ``--delay S`` between steps; ``--stop-after N``: after step N, start the next step
and hang; ``--fixed-pid P``: report PID P instead of its own (for deterministic snapshots).
"""

import os
import sys
import time

from _fake import hello, send, sleep_forever, step, wait_for_continue


def option(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


delay = option("--delay", 0.15)
stop_after = option("--stop-after", 0)
pid = option("--fixed-pid", 0) or os.getpid()

hello(pid)
values = {
    1: "Python 3.11.0 (/opt/envs/train/bin/python), torch 2.13.0",
    2: "CUDA 12.4 build; driver supports CUDA 12.4",
    3: "is_available()=True, device_count()=2; CUDA_VISIBLE_DEVICES=(unset), "
    "CUDA_DEVICE_ORDER=(unset)",
    4: "GPU 0 is cuda:0 in this environment",
    5: "randn on cuda:0, .to(device), get_device()==0, matmul matches the CPU; holding 256 MiB",
    7: "cuda:0 + cuda:1 raised RuntimeError: Expected all tensors to be on the same device",
    8: "H2D 24.1 GB/s, D2H 25.3 GB/s, matmul 4096x4096 fp32 48.2 TFLOP/s",
    9: "freed 256 MiB, cache emptied; the child exits",
}
details = {4: "cuda:0 = GPU 0 (GPU-00000000-0000-0000-0000-000000000000)\ncuda:1 = GPU 1"}
for number in (1, 2, 3, 4, 5, 7, 8, 9):
    step(number, "running")
    if number == stop_after + 1 and stop_after:
        sleep_forever()
    time.sleep(delay)
    step(number, "pass", values[number], duration_ms=delay * 1000, detail=details.get(number, ""))
    if number == 5:
        send(
            event="holding",
            pid=pid,
            cuda_index=0,
            gpu_uuid="GPU-00000000-0000-0000-0000-000000000000",
            allocated_bytes=256 * 2**20,
            reserved_bytes=256 * 2**20,
        )
        wait_for_continue()
send(event="done", ok=True, summary="every step passed")
