"""The fork server of `dgt-run --restart-policy rank` (docs/RECOVERY.md, "Fork server").

The agent runs `<the workers' python and its options> -m dgt.forkserver` once per node, with the
workers' environment minus the rank's variables, plus DGT_FORKSERVER_FD: one end of a Unix
stream socketpair. The server imports torch and what DDP's constructor imports (the slow part of
a replacement's start; DGT_FORKSERVER_IMPORTS replaces the list), writes "ready\\n", and then
forks one child per request. The protocol, one line each way:

- agent -> server: {"env": {...}, "argv": [...]} (entries whose bytes are not UTF-8 in
  "env_b64": [[base64 key, base64 value], ...], as dgt.standby), sent with two descriptors
  (SCM_RIGHTS): the rank's stdout and stderr. "argv" is what follows the interpreter's options
  in the rank's command: the script and its arguments, "-m module args...", or "-c code args...".
- server -> agent: "pid N\\n" at once, or "error MESSAGE\\n" for a request it cannot run; later
  "exit N STATUS\\n" when child N ended (STATUS as waitpid(2) gives it).

A child leads a new session, dies with the server (PR_SET_PDEATHSIG SIGKILL), gets the rank's
environment, argv and output descriptors, and runs the script as __main__ after the server's
loop has returned, so that SystemExit, uncaught exceptions, atexit and the flush of stdio behave
as in `python script.py`. On EOF on the channel (the agent stopped it, or is gone) the server
SIGKILLs every child's process group and exits 0; the agent's death kills it (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import types
from typing import Dict, List, Optional, Tuple

from dgt.standby import decode_env

# What the server imports before it reports ready; a trailing "?" makes a name optional
# (torch 1.x has no torch._dynamo). DDP's constructor imports torch._dynamo in torch 2.x: as long
# as `import torch` itself.
DEFAULT_IMPORTS = "torch,torch.distributed,torch.nn.parallel,torch._dynamo?"

# The most the server buffers of one request line (the rank's environment, JSON-escaped).
MAX_REQUEST_BYTES = 16 << 20

PR_SET_PDEATHSIG = 1


class ForkServerError(RuntimeError):
    """A request the server cannot run; the message names what is wrong."""


def parse_imports(text: str) -> List[Tuple[str, bool]]:
    """(module, optional) pairs from DGT_FORKSERVER_IMPORTS' comma-separated list."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        optional = item.endswith("?")
        out.append((item.rstrip("?"), optional))
    return out


def parse_request(line: bytes) -> Tuple[Dict[str, str], List[str]]:
    """(env, argv) from the agent's request line. Raises ForkServerError naming what is wrong."""
    try:
        msg = json.loads(line.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is one.
        raise ForkServerError(f"the request is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ForkServerError("the request is not a JSON object")
    env = decode_env(msg, ForkServerError, "the request", "the request's")
    argv = msg.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ForkServerError("the request has no 'argv' list of strings")
    plan(argv)  # Checked here, so that a bad one is answered, not forked.
    return env, argv


def plan(argv: List[str]) -> Tuple[str, str, List[str]]:
    """How a child runs `argv` (what follows the interpreter's options), as python would:
    ("path", script, sys.argv), ("module", name, sys.argv) or ("code", source, sys.argv).
    Raises ForkServerError for an empty argv, a bare -m or -c, or an interpreter option."""
    if argv[:1] == ["--"]:  # Python's end of options: what follows is the script.
        if len(argv) < 2:
            raise ForkServerError("'argv' has no script after '--'")
        return "path", argv[1], argv[1:]
    if not argv:
        raise ForkServerError("'argv' is empty")
    if argv[0] in ("-m", "-c"):
        if len(argv) < 2:
            raise ForkServerError(f"'argv' has no argument after {argv[0]}")
        if argv[0] == "-m":
            return "module", argv[1], [argv[1]] + argv[2:]
        return "code", argv[1], ["-c"] + argv[2:]
    if argv[0].startswith("-") and argv[0] != "-":
        raise ForkServerError(f"'argv' starts with the interpreter option {argv[0]!r} (options "
                              "belong to the server's command)")
    if argv[0] == "-":
        raise ForkServerError("'argv' reads the script from stdin ('-'), which a child has not")
    return "path", argv[0], list(argv)


class Child:
    """What a forked child runs once the server's loop has returned."""

    def __init__(self, env: Dict[str, str], argv: List[str]):
        self.env = env
        self.argv = argv


class Server:
    """The loop: requests on `sock`, SIGCHLD through a wakeup pipe. Single-threaded."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.children: set = set()
        self.buf = b""
        self.fds: List[int] = []
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.saved_sigchld = signal.getsignal(signal.SIGCHLD)

    def serve(self) -> Optional[Child]:
        """Runs until EOF (returns None in the server) or until a request forked this process
        (returns the Child, in the child)."""
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w)
        self.sel.register(self.sock, selectors.EVENT_READ, "sock")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.sock.sendall(b"ready\n")
        while True:
            for key, _ in self.sel.select():
                if key.data == "wake":
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                    continue
                try:
                    data, ancdata, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16 * 4))
                except ConnectionResetError:
                    data, ancdata = b"", []
                for level, kind, payload in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        n = len(payload) - len(payload) % 4
                        self.fds.extend(int.from_bytes(payload[i:i + 4], sys.byteorder)
                                        for i in range(0, n, 4))
                if not data:
                    self.stop()
                    return None
                self.buf += data
                while b"\n" in self.buf:
                    line, self.buf = self.buf.split(b"\n", 1)
                    child = self.handle(line)
                    if child is not None:
                        return child
                if len(self.buf) > MAX_REQUEST_BYTES:
                    print(f"dgt forkserver: a request is longer than {MAX_REQUEST_BYTES} bytes; "
                          "exiting", file=sys.stderr)
                    self.stop()
                    sys.exit(2)

    def handle(self, line: bytes) -> Optional[Child]:
        fds, self.fds = self.fds[:2], self.fds[2:]
        try:
            if len(fds) < 2:
                raise ForkServerError(f"the request came with {len(fds)} descriptors, not 2")
            env, argv = parse_request(line)
        except ForkServerError as e:
            for fd in fds:
                os.close(fd)
            self.sock.sendall(f"error {e}\n".replace("\n", " ").rstrip().encode() + b"\n")
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            self.enter_child(server_pid, fds)
            return Child(env, argv)
        for fd in fds:
            os.close(fd)
        self.children.add(pid)
        self.sock.sendall(f"pid {pid}\n".encode())
        return None

    def enter_child(self, server_pid: int, fds: List[int]) -> None:
        # Its own session and process group (as the agent's launcher starts workers): the agent
        # signals and kills it by group, and its CPU share is its own (autogroup).
        os.setsid()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != server_pid:  # The server died before prctl took effect.
            os._exit(126)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, self.saved_sigchld)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds + self.fds + [self.wake_r, self.wake_w]:
            os.close(fd)
        self.sel.close()
        self.sock.close()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.children:
                self.children.discard(pid)
                self.sock.sendall(f"exit {pid} {status}\n".encode())

    def stop(self) -> None:
        for pid in self.children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def warm_up(imports: List[Tuple[str, bool]]) -> None:
    """Imports `imports` (an optional one's ImportError ignored), then checks that no CUDA context
    exists (a forked child could not use CUDA) and warns when Python threads were started (a
    child has only the forking one)."""
    # torch.cuda.is_available() through NVML: no CUDA context in the server.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    for name, optional in imports:
        try:
            importlib.import_module(name)
        except ImportError:
            if not optional:
                raise
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        print("dgt forkserver: CUDA was initialized while importing; a forked child could not "
              "use it", file=sys.stderr)
        sys.exit(3)
    # A forked child has only the forking thread. Python threads would be lost with their state;
    # native pools (OpenBLAS's, which numpy and torch load unless OMP_NUM_THREADS=1) re-create
    # theirs in the child (pthread_atfork), so only Python's are worth a warning.
    threads = threading.active_count()
    if threads > 1:
        print(f"dgt forkserver: warning: {threads} Python threads after the imports; a forked "
              "child has only the forking one", file=sys.stderr)
    # The imported objects stay out of the collector's reach: a child's collections do not write
    # to (and so copy) the pages it shares with the server.
    gc.freeze()


def run_child(child: Child) -> None:
    """Runs the child's script as __main__, as `python <argv>` would."""
    os.environ.clear()
    os.environ.update(child.env)
    kind, target, argv = plan(child.argv)
    sys.argv = argv
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()  # A fresh process seeds it from the OS; children would share one state.
    try:
        if kind == "path":
            sys.path[0] = os.path.dirname(os.path.realpath(target))
            runpy.run_path(target, run_name="__main__")
        elif kind == "module":
            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)  # pylint: disable=exec-used
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:  # pylint: disable=broad-except
        # As python prints it: from the script's first frame, without the server's and runpy's.
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None and (
                tb.tb_frame.f_globals is globals() or
                tb.tb_frame.f_globals.get("__name__") == "runpy"):
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)  # Python prints e.__traceback__.
        sys.exit(1)


def main() -> None:
    fd_text = os.environ.pop("DGT_FORKSERVER_FD", "")
    try:
        sock = socket.socket(fileno=int(fd_text))
    except (ValueError, OSError) as e:
        print(f"dgt forkserver: DGT_FORKSERVER_FD={fd_text!r} is not the agent's channel: {e}",
              file=sys.stderr)
        sys.exit(2)
    warm_up(parse_imports(os.environ.pop("DGT_FORKSERVER_IMPORTS", DEFAULT_IMPORTS)))
    child = Server(sock).serve()
    if child is None:
        sys.exit(0)
    run_child(child)  # In the child, outside the server's loop: its frames are gone.


if __name__ == "__main__":
    main()
