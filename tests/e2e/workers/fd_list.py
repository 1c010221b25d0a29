"""E2E worker: prints the file descriptors it was started with, as "fds 0 1 2"."""
import os

fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
# os.listdir's own directory descriptor is listed too; it is closed again by now.
print("fds " + " ".join(str(fd) for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")),
      flush=True)
