"""dgt's Python side: helpers for PyTorch trainers launched by dgt-run (docs/RECOVERY.md)."""

__version__ = "0.1.0"
