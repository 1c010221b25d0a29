"""E2E helper: torch 1.13's own TCPStore server on a free loopback port, as the reference.

Prints "torch store listening on port N" and serves until killed.
"""
import sys
import time
from datetime import timedelta

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30))
print(f"torch store listening on port {store.port}", flush=True)
while True:
    time.sleep(3600)
