"""The warm standby's side of `dgt-run --standby-workers N` (docs/RECOVERY.md, "Warm standbys").

dgt-run keeps N extra processes of the job's command per node, started with DGT_STANDBY=1 and
without a rank. `import dgt.recovery` calls wait_if_standby(): in a standby it imports
torch.distributed and what DDP's constructor imports (WARM_IMPORTS: the slow part of a
replacement's start), tells the agent "ready\\n" over the
Unix socket it inherited as descriptor DGT_STANDBY_FD, and blocks until the agent writes one line
of JSON, {"env": {...}, "argv_append": [...]} (entries whose bytes are not UTF-8 in
"env_b64": [[base64 key, base64 value], ...]): the full environment of the rank it replaces
(RANK, LOCAL_RANK, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_ERROR_FILE, ...), which replaces
os.environ, and the arguments the rank has beyond the standby's (`--local_rank=N`). The script
then continues as that rank. In any other process (DGT_STANDBY unset) it returns at once.

The wait has no timeout of its own but always ends: on EOF (the agent stopped the standby or is
gone) the process exits with code 0 without running the rest of the script, and the agent's death
kills it (PR_SET_PDEATHSIG, set by the agent's launcher).
"""
from __future__ import annotations

import base64
import binascii
import importlib
import json
import os
import socket
import sys
from typing import Iterable, MutableMapping, Optional

# What a standby imports before it reports ready: what dgt.recovery's first calls need.
# DistributedDataParallel's constructor imports torch._dynamo in torch 2.x: 3.2 s of a 3.3 s
# DDP() here (torch 2.13, CPU), as long as `import torch` itself; pre-imported, DDP() takes 10 ms.
# (torch 1.x has no torch._dynamo: ImportError, ignored.)
WARM_IMPORTS = ("torch.distributed", "torch.nn.parallel", "torch._dynamo")

# The most a standby reads for its activation line (the agent's environment, JSON-escaped).
MAX_MESSAGE_BYTES = 16 << 20


class StandbyError(RuntimeError):
    """The standby protocol broke: DGT_STANDBY_FD is not a descriptor, or the agent's message is
    not the expected JSON line."""


def is_standby(environ: Optional[MutableMapping[str, str]] = None) -> bool:
    """Whether this process is a standby that has not been activated yet."""
    environ = os.environ if environ is None else environ
    return environ.get("DGT_STANDBY") == "1"


def decode_env(msg: dict, error: type, whole: str, owner: str, prefix: str = "") -> dict:
    """The environment a message of the agent carries: its "env" object of strings, plus the
    entries whose bytes are not UTF-8, "env_b64": [[base64 key, base64 value], ...]. os.fsdecode
    gives the str that os.environ turns back into the same bytes (surrogateescape), as Python
    does for the environment a process starts with. Raises `error`: "<whole> has no 'env' object
    of strings", "<owner> 'env_b64' is not a list", "<prefix>bad 'env_b64' entry ...". Shared by
    the standby's activation and the fork server's request."""
    env = msg.get("env")
    if (not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in env.items())):
        raise error(f"{whole} has no 'env' object of strings")
    env_b64 = msg.get("env_b64", [])
    if not isinstance(env_b64, list):
        raise error(f"{owner} 'env_b64' is not a list")
    env = dict(env)
    for pair in env_b64:
        try:
            key, value = (os.fsdecode(base64.b64decode(p, validate=True)) for p in pair)
        except (TypeError, ValueError, binascii.Error) as e:
            raise error(f"{prefix}bad 'env_b64' entry {pair!r}: {e}") from None
        env[key] = value
    return env


def parse_activation(line: bytes):
    """(env dict, argv_append list) from the agent's line. Raises StandbyError naming what is
    wrong."""
    try:
        msg = json.loads(line.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is one.
        raise StandbyError(f"dgt standby: the agent's activation is not JSON: {e}") from None
    argv = msg.get("argv_append", []) if isinstance(msg, dict) else None
    env = decode_env(msg if isinstance(msg, dict) else {}, StandbyError,
                     "dgt standby: the agent's activation", "dgt standby: the agent's",
                     "dgt standby: ")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise StandbyError("dgt standby: the agent's 'argv_append' is not a list of strings")
    if "RANK" not in env:
        raise StandbyError("dgt standby: the agent's activation has no RANK")
    return env, argv


def wait_if_standby(environ: Optional[MutableMapping[str, str]] = None,
                    warm_imports: Iterable[str] = WARM_IMPORTS) -> bool:
    """In a standby: imports `warm_imports` (ImportError ignored), reports ready, waits for the
    activation and applies it to `environ` (os.environ) and sys.argv. Returns True once activated,
    False at once in any other process. Exits the process (code 0) when the agent closes the
    channel first. Raises StandbyError for a broken channel or message."""
    environ = os.environ if environ is None else environ
    if not is_standby(environ):
        return False
    fd_text = environ.get("DGT_STANDBY_FD", "")
    try:
        fd = int(fd_text)
        sock = socket.socket(fileno=fd)
    except (ValueError, OSError) as e:
        raise StandbyError(f"dgt standby: DGT_STANDBY_FD={fd_text!r} is not the agent's "
                           f"channel: {e}") from None
    for name in warm_imports:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    with sock:
        try:
            sock.sendall(b"ready\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
                if len(data) > MAX_MESSAGE_BYTES:
                    raise StandbyError(f"dgt standby: activation longer than "
                                       f"{MAX_MESSAGE_BYTES} bytes")
        except (BrokenPipeError, ConnectionResetError):
            data = b""
    if not data.endswith(b"\n"):
        # Stopped before activation (or the agent is gone): nothing of the script runs.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    env, argv_append = parse_activation(data)
    environ.clear()
    environ.update(env)
    sys.argv.extend(argv_append)
    return True
