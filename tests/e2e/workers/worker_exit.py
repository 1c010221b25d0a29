"""exit_now(code): ends a torch.distributed worker without finalizing the interpreter.

torch 2.x's Gloo process group frees a finished collective (its work object, which holds Python
state) on a worker thread of its own. When that happens while the main thread finalizes the
interpreter after the script's end, the worker thread takes the GIL, is ended by Python, and the
process aborts: SIGABRT, "terminate called without an active exception", after every result was
printed (seen with torch 2.13 under dgt-run and under the Slurm test's srun). The workers end
with os._exit once their output is flushed, so that a test sees the code the script chose.
"""
import os
import sys


def exit_now(code):
    """Flushes stdout and stderr and exits with `code` (None: 0; a string: printed, then 1)."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if code is None else code)
