"""Progress reports to dgt-run's hang detection (docs/RECOVERY.md "Hang detection").

With `dgt-run --hang-timeout S` (and/or `--first-progress-timeout S`), a worker that reports no
progress for S seconds is hung: dgt-run writes its threads' stacks, kills it, and its restart
policy applies. A report is one store into a shared-memory slot that the agent reads on its own
loop (common/progress_channel.h): no system call, no store round-trip.

    import dgt
    for step in range(steps):
        train_step(step)
        dgt.progress()

`dgt.recovery.Trainer` reports after every step by itself. `waiting()` marks time blocked on the
peers (a collective, a recovery), which is not silence: a rank blocked on a hung peer is released
when the peer is killed, and its own collective timeout bounds the wait. Without dgt-run's
variables (DGT_PROGRESS_FILE, DGT_PROGRESS_SLOT) every function here is a no-op.

Stacks: when dgt-run asks for them (DGT_STACKS_SIGNAL, DGT_STACKS_FILE), `import dgt` registers
faulthandler on that real-time signal, so that every thread's Python stack goes to the file when
the agent finds the worker hung. A stopped (SIGSTOP) process cannot run it; dgt-run says so.

Thread-safety: progress() is for the training thread; waiting() may be entered and left from any
thread (DDP's communication hook leaves it on a communication thread).
"""
from __future__ import annotations

import faulthandler
import mmap
import os
import threading

# Mirrors common/progress_channel.h (tests/python/test_dgt_progress.py pins them).
FILE_ENV = "DGT_PROGRESS_FILE"
SLOT_ENV = "DGT_PROGRESS_SLOT"
STACKS_SIGNAL_ENV = "DGT_STACKS_SIGNAL"
STACKS_FILE_ENV = "DGT_STACKS_FILE"
SLOT_BYTES = 64
COUNTER_WORD = 0   # offset 0
WAITING_WORD = 1   # offset 8
STACKS_WORD = 2    # offset 16

_words = None      # The slot as 8 unsigned 64-bit words; False once found unconfigured.
_count = 0
_depth = 0
_lock = threading.Lock()
_stacks_file = None  # Kept open for faulthandler.


def _open(environ=None):
    """Maps this worker's slot from the environment; False when dgt-run set no channel."""
    global _words
    environ = os.environ if environ is None else environ
    path, slot = environ.get(FILE_ENV), environ.get(SLOT_ENV)
    words = False
    if path and slot is not None:
        try:
            slot = int(slot)
            fd = os.open(path, os.O_RDWR)
            try:
                m = mmap.mmap(fd, 0)
            finally:
                os.close(fd)
            if 0 <= slot and (slot + 1) * SLOT_BYTES <= len(m):
                words = memoryview(m)[slot * SLOT_BYTES:(slot + 1) * SLOT_BYTES].cast("Q")
        except (OSError, ValueError):
            words = False  # Reports are best effort: the job must not fail for them.
    _words = words
    return words


def _reset():
    """Forgets the slot (a standby that became a rank maps its own on the next report)."""
    global _words, _count, _depth
    _words, _count, _depth = None, 0, 0


def enabled() -> bool:
    """Whether dgt-run gave this process a progress slot."""
    w = _words if _words is not None else _open()
    return w is not False


def progress():
    """One progress report (the step went on). About 0.1 µs; a no-op without dgt-run's slot."""
    global _count
    w = _words if _words is not None else _open()
    if w is not False:
        _count += 1
        w[COUNTER_WORD] = _count


def _wait_add(delta: int):
    global _depth
    w = _words if _words is not None else _open()
    if w is False:
        return
    with _lock:
        _depth = max(0, _depth + delta)
        w[WAITING_WORD] = _depth


class waiting:
    """`with dgt.progress_channel.waiting(): ...` marks a wait on the peers (nested uses count)."""

    def __enter__(self):
        _wait_add(1)
        return self

    def __exit__(self, *exc):
        _wait_add(-1)
        return False


def wait_begin():
    _wait_add(1)


def wait_end():
    _wait_add(-1)


def install_stack_dump(environ=None) -> bool:
    """Registers faulthandler on dgt-run's stacks signal, writing every thread's stack to its
    file, and tells the agent through the slot. Returns whether it did (the variables are set)."""
    global _stacks_file
    environ = os.environ if environ is None else environ
    sig, path = environ.get(STACKS_SIGNAL_ENV), environ.get(STACKS_FILE_ENV)
    if not sig or not path:
        return False
    try:
        f = open(path, "w")
        faulthandler.register(int(sig), file=f, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        return False
    if _stacks_file is not None and _stacks_file is not f:
        _stacks_file.close()
    _stacks_file = f
    w = _words if _words is not None else _open(environ)
    if w is not False:
        w[STACKS_WORD] = os.getpid()  # The agent signals this process (it has the handler).
    return True
