"""Imported by the Python bench scripts: re-executes the running script in a fresh network
namespace that has only loopback (`unshare -n`, root only), like bench/netns.sh (which says why:
torch 2.13's libuv TCPStore server resolves the name of every peer it accepts, and this machine's
resolver is slow and drops queries). DGT_BENCH_NETNS=0 runs in the current namespace.
"""
import os
import subprocess
import sys


def enter():
    """Call first thing in main(): does not return when it re-executes the script."""
    if os.environ.get("DGT_BENCH_NETNS", "1") == "1" and not os.environ.get("DGT_BENCH_IN_NETNS"):
        if subprocess.run(["unshare", "-n", "true"], stderr=subprocess.DEVNULL).returncode == 0:
            os.environ["DGT_BENCH_IN_NETNS"] = "1"
            argv = [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
            os.execvp("unshare", ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"',
                                  "sh", *argv])
        print("bench: cannot create a network namespace (unshare -n); running in the current one",
              file=sys.stderr)
    if os.environ.get("DGT_BENCH_IN_NETNS"):
        print("bench: in a loopback-only network namespace (DGT_BENCH_NETNS=0 to run without)",
              file=sys.stderr, flush=True)
