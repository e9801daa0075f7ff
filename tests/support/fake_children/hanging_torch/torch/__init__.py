"""A torch whose import never finishes: the real child hangs inside step 1."""

import time

while True:
    time.sleep(3600)
