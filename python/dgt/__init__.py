"""dgt's Python side: helpers for PyTorch trainers launched by dgt-run (docs/RECOVERY.md)."""

from . import progress_channel

__version__ = "0.1.0"

# dgt.progress(): one progress report for dgt-run's hang detection (dgt/progress_channel.py).
progress = progress_channel.progress

# A hung worker's stacks, when dgt-run asks for them (--hang-timeout).
progress_channel.install_stack_dump()
