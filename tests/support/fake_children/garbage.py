"""Says hello, then prints something that is not the protocol, then hangs."""

from _fake import hello, sleep_forever, step

hello()
step(1, "running")
print("Segmentation fault (core dumped) -- not JSON at all", flush=True)
sleep_forever()
