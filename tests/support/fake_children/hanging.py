"""Starts step 1, starts a grandchild (its PID is in the running event's value), then hangs,
ignoring stdin: only a kill of its process group ends both."""

import subprocess
import sys

from _fake import hello, sleep_forever, step

hello()
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
step(1, "running", f"grandchild {grandchild.pid}")
sleep_forever()
