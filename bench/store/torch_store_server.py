"""bench/store anchor: torch's own TCPStore server on a free loopback port, run by the interpreter
of the torch release under test (Debian's python3 for 1.13, DGT_PYTHON2 for 2.13).

torch 2.x: the libuv server (`use_libuv=True`, the default since 2.4), the server torchrun 2.x
uses; torch 1.x has only the legacy server. Prints "torch <version> <backend> store listening on
port N" and serves until killed.
"""
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

major = int(torch.__version__.split(".")[0])
if major >= 2:
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), use_libuv=True)
    backend = "libuv" if store.libuvBackend else "legacy"
    if backend != "libuv":
        sys.exit(f"torch {torch.__version__}: asked for the libuv TCPStore server, got {backend}")
else:
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30))
    backend = "legacy"
print(f"torch {torch.__version__} {backend} store listening on port {store.port}", flush=True)
while True:
    time.sleep(3600)
