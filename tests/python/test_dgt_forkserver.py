"""Unit tests of the fork server (python/dgt/forkserver.py): its request parsing, and one real
server process (DGT_FORKSERVER_IMPORTS=json, no torch) that the test drives as the agent does,
over a Unix socketpair with the output pipes passed by SCM_RIGHTS. Every wait is bounded.
"""
import array
import base64
import contextlib
import gc
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from dgt import forkserver  # noqa: E402
from dgt.forkserver import ForkServerError  # noqa: E402


def request(env, argv, **extra):
    return (json.dumps({"env": env, "argv": argv, **extra}) + "\n").encode()


class ParseTest(unittest.TestCase):

    def test_a_request_gives_env_and_argv(self):
        env, argv = forkserver.parse_request(request({"RANK": "1"}, ["t.py", "--local_rank=1"]))
        self.assertEqual(env, {"RANK": "1"})
        self.assertEqual(argv, ["t.py", "--local_rank=1"])

    def test_env_b64_gives_the_exact_bytes(self):
        pair = [base64.b64encode(b"K\xff").decode(), base64.b64encode(b"v\xfe").decode()]
        env, _ = forkserver.parse_request(request({"A": "b"}, ["t.py"], env_b64=[pair]))
        self.assertEqual({os.fsencode(k): os.fsencode(v) for k, v in env.items()},
                         {b"A": b"b", b"K\xff": b"v\xfe"})

    def test_bad_requests_are_named(self):
        cases = [
            (b"{not json\n", "the request is not JSON: Expecting property name enclosed in "
                             "double quotes: line 1 column 2 (char 1)"),
            (b"[1]\n", "the request is not a JSON object"),
            (b'{"argv": ["t.py"]}\n', "the request has no 'env' object of strings"),
            (b'{"env": {"A": 1}, "argv": ["t.py"]}\n',
             "the request has no 'env' object of strings"),
            (b'{"env": {}, "argv": "t.py"}\n', "the request has no 'argv' list of strings"),
            (b'{"env": {}, "argv": ["t.py"], "env_b64": {}}\n',
             "the request's 'env_b64' is not a list"),
            (b'{"env": {}, "argv": ["t.py"], "env_b64": [["!!", "AA=="]]}\n',
             "bad 'env_b64' entry ['!!', 'AA==']: Only base64 data is allowed"),
            (b'{"env": {}, "argv": []}\n', "'argv' is empty"),
            (b'{"env": {}, "argv": ["-m"]}\n', "'argv' has no argument after -m"),
            (b'{"env": {}, "argv": ["--"]}\n', "'argv' has no script after '--'"),
            (b'{"env": {}, "argv": ["-u", "t.py"]}\n',
             "'argv' starts with the interpreter option '-u' (options belong to the server's "
             "command)"),
            (b'{"env": {}, "argv": ["-"]}\n',
             "'argv' reads the script from stdin ('-'), which a child has not"),
        ]
        for line, message in cases:
            with self.subTest(line=line):
                with self.assertRaises(ForkServerError) as cm:
                    forkserver.parse_request(line)
                self.assertEqual(str(cm.exception), message)

    def test_plan_runs_argv_as_python_would(self):
        self.assertEqual(forkserver.plan(["t.py", "a"]), ("path", "t.py", ["t.py", "a"]))
        self.assertEqual(forkserver.plan(["--", "-x.py", "a"]), ("path", "-x.py", ["-x.py", "a"]))
        self.assertEqual(forkserver.plan(["-m", "pkg.mod", "a"]),
                         ("module", "pkg.mod", ["pkg.mod", "a"]))
        self.assertEqual(forkserver.plan(["-c", "print(1)", "a"]),
                         ("code", "print(1)", ["-c", "a"]))

    def test_imports_list(self):
        self.assertEqual(forkserver.parse_imports(forkserver.DEFAULT_IMPORTS),
                         [("torch", False), ("torch.distributed", False),
                          ("torch.nn.parallel", False), ("torch._dynamo", True)])
        self.assertEqual(forkserver.parse_imports(" json, ,x? "), [("json", False), ("x", True)])


class WarmUpTest(unittest.TestCase):

    def setUp(self):
        self.addCleanup(gc.unfreeze)
        saved = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
        self.addCleanup(lambda: os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
                        if saved is None else os.environ.update(
                            PYTORCH_NVML_BASED_CUDA_CHECK=saved))

    def test_a_missing_optional_module_is_ignored_a_required_one_raises(self):
        forkserver.warm_up([("json", False), ("no_such_module_here", True)])
        with self.assertRaises(ModuleNotFoundError) as cm:
            forkserver.warm_up([("no_such_module_here", False)])
        self.assertEqual(str(cm.exception), "No module named 'no_such_module_here'")

    def test_python_threads_are_warned_of(self):
        quiet = io.StringIO()
        with contextlib.redirect_stderr(quiet):
            forkserver.warm_up([])
        self.assertEqual(quiet.getvalue(), "")
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        self.addCleanup(t.join)
        self.addCleanup(stop.set)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            forkserver.warm_up([])
        self.assertEqual(err.getvalue(), "dgt forkserver: warning: 2 Python threads after the "
                                         "imports; a forked child has only the forking one\n")


SCRIPT = r"""
import atexit, os, sys
atexit.register(lambda: print("atexit ran", flush=True))
print("rank", os.environ["RANK"], sys.argv, os.getppid() == int(os.environ["SERVER"]),
      sys.path[0] == os.path.dirname(os.path.realpath(__file__)), flush=True)
mode = sys.argv[1]
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "raise":
    raise ValueError("boom")
if mode == "sleep":
    open(sys.argv[2], "w").close()
    import time
    time.sleep(600)
"""


class ServerTest(unittest.TestCase):
    """A real server: python -m dgt.forkserver with its channel at an fd."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.script = os.path.join(self.tmp.name, "script.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": str(REPO / "python"),
               "DGT_FORKSERVER_FD": str(theirs.fileno()), "DGT_FORKSERVER_IMPORTS": "json"}
        self.server = subprocess.Popen([sys.executable, "-u", "-m", "dgt.forkserver"], env=env,
                                       pass_fds=[theirs.fileno()])
        theirs.close()
        self.sock = ours
        self.sock.settimeout(120)
        self.buf = b""
        self.addCleanup(self.stop)
        self.assertEqual(self.line(), "ready")

    def stop(self):
        self.sock.close()
        if self.server.poll() is None:
            try:
                self.server.wait(60)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(10)

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                return ""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def fork(self, argv, fds=2):
        """Sends a request for `argv`; returns (answer line, stdout+stderr read end)."""
        r, w = os.pipe()
        env = {"RANK": "7", "PATH": os.environ.get("PATH", ""), "SERVER": str(self.server.pid)}
        self.sock.sendmsg([request(env, argv)],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w] * fds))])
        os.close(w)
        return self.line(), r

    @staticmethod
    def read_all(fd):
        out = b""
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                os.close(fd)
                return out.decode()
            out += chunk

    def test_children_exit_as_fresh_processes_would(self):
        cases = [(["exit", "3"], 3 << 8), (["raise"], 1 << 8), (["exit", "0"], 0)]
        for args, status in cases:
            with self.subTest(args=args):
                answer, r = self.fork([self.script] + args)
                self.assertRegex(answer, r"^pid \d+$")
                pid = int(answer.split()[1])
                output = self.read_all(r)
                self.assertEqual(self.line(), f"exit {pid} {status}")
                lines = output.splitlines()
                self.assertEqual(lines[0], f"rank 7 {[self.script] + args} True True")
                self.assertEqual(lines[-1], "atexit ran")
                if args == ["raise"]:
                    # As python prints it: from the script's frame on.
                    self.assertEqual(lines[1:3], ["Traceback (most recent call last):",
                                                  f'  File "{self.script}", line 10, in <module>'])
                    self.assertEqual(lines[-2], "ValueError: boom")

    def test_a_bad_request_is_answered_and_the_server_goes_on(self):
        answer, r = self.fork(["-u", self.script])
        self.assertEqual(answer, "error 'argv' starts with the interpreter option '-u' (options "
                                 "belong to the server's command)")
        self.assertEqual(self.read_all(r), "")  # Its descriptors were closed.
        answer, r = self.fork([self.script, "exit", "0"], fds=1)
        self.assertEqual(answer, "error the request came with 1 descriptors, not 2")
        self.read_all(r)
        answer, r = self.fork(["-c", "import sys; print(sys.argv); sys.exit(5)", "x"])
        pid = int(answer.split()[1])
        self.assertEqual(self.read_all(r), "['-c', 'x']\n")
        self.assertEqual(self.line(), f"exit {pid} {5 << 8}")

    def test_eof_kills_the_children_and_the_server_exits_0(self):
        marker = os.path.join(self.tmp.name, "sleeping")
        answer, r = self.fork([self.script, "sleep", marker])
        pid = int(answer.split()[1])
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertTrue(os.path.exists(marker))
        self.sock.close()
        self.assertEqual(self.server.wait(60), 0)
        # The child is SIGKILLed: its output pipe reaches EOF, and the process is gone.
        os.set_blocking(r, True)
        self.read_all(r)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except FileNotFoundError:
                break
            time.sleep(0.01)
        else:
            self.fail(f"child {pid} still runs")


if __name__ == "__main__":
    unittest.main()
