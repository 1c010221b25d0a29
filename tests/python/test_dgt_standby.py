"""Unit tests of the warm standby's side (python/dgt/standby.py): the test plays the agent on a
Unix socketpair. One test runs a real standby process through `import dgt.recovery` (with its
torch.distributed warm-up). Every wait is bounded.
"""
import json
import os
import select
import socket
import subprocess
import sys
import threading
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from dgt import standby  # noqa: E402

ACTIVATION = {"env": {"RANK": "3", "LOCAL_RANK": "1", "TORCHELASTIC_RESTART_COUNT": "2",
                      "PATH": "/usr/bin:/bin", "ODD": "a=b\nc"},
              "argv_append": ["--local_rank=1"]}


def recv_line(sock, timeout=60.0):
    """Bytes from `sock` up to and including the first newline (b"" on EOF or timeout)."""
    data = b""
    sock.settimeout(timeout)
    try:
        while not data.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    return data


class InProcessTest(unittest.TestCase):
    def test_not_a_standby_returns_at_once(self):
        env = {"RANK": "0", "DGT_STANDBY_FD": "3"}
        self.assertFalse(standby.wait_if_standby(env, warm_imports=()))
        self.assertEqual(env, {"RANK": "0", "DGT_STANDBY_FD": "3"})
        self.assertFalse(standby.is_standby({"DGT_STANDBY": "0"}))

    def test_activation_replaces_the_environment_and_extends_argv(self):
        ours, theirs = socket.socketpair()
        env = {"DGT_STANDBY": "1", "DGT_STANDBY_FD": str(theirs.detach()), "STALE": "x"}
        got = {}

        def agent():
            got["ready"] = recv_line(ours, 10)
            ours.sendall(json.dumps(ACTIVATION).encode() + b"\n")
            got["eof"] = recv_line(ours, 10)  # The standby closes its end once activated.

        t = threading.Thread(target=agent, daemon=True)
        t.start()
        argv = list(sys.argv)
        try:
            self.assertTrue(standby.wait_if_standby(env, warm_imports=("no_such_module_xyz",)))
            self.assertEqual(sys.argv, argv + ["--local_rank=1"])
        finally:
            sys.argv[:] = argv
        t.join(10)
        self.assertFalse(t.is_alive())
        ours.close()
        self.assertEqual(got["ready"], b"ready\n")
        self.assertEqual(got["eof"], b"")
        self.assertEqual(env, ACTIVATION["env"])  # STALE and the markers are gone.

    def test_a_descriptor_that_is_not_a_channel_is_named(self):
        for fd in ("abc", "99999"):
            with self.assertRaises(standby.StandbyError) as cm:
                standby.wait_if_standby({"DGT_STANDBY": "1", "DGT_STANDBY_FD": fd},
                                        warm_imports=())
            self.assertIn(f"DGT_STANDBY_FD='{fd}'", str(cm.exception))

    def test_malformed_activations_are_refused(self):
        cases = {b"not json\n": "not JSON",
                 b"[1]\n": "no 'env' object",
                 b'{"env": {"RANK": 1}}\n': "no 'env' object",
                 b'{"env": {"RANK": "1"}, "argv_append": "x"}\n': "not a list",
                 b'{"env": {"LOCAL_RANK": "1"}}\n': "no RANK"}
        for line, message in cases.items():
            with self.assertRaises(standby.StandbyError) as cm:
                standby.parse_activation(line)
            self.assertIn(message, str(cm.exception), line)
        env, argv = standby.parse_activation(b'{"env": {"RANK": "0"}}\n')
        self.assertEqual((env, argv), ({"RANK": "0"}, []))

    def test_env_entries_that_are_not_utf8_keep_their_bytes(self):
        # The agent sends them base64-encoded (b"caf\xe9" is Latin-1, not UTF-8).
        line = (b'{"env": {"RANK": "0"}, "env_b64": [["TkFNRQ==", "Y2Fm6Q=="], '
                b'["S+k=", "dg=="]]}\n')
        env, _ = standby.parse_activation(line)
        self.assertEqual({os.fsencode(k): os.fsencode(v) for k, v in env.items()},
                         {b"RANK": b"0", b"NAME": b"caf\xe9", b"K\xe9": b"v"})
        for bad, message in {
                b'{"env": {"RANK": "0"}, "env_b64": [["TkFNRQ==", "%%"]]}\n': "bad 'env_b64'",
                b'{"env": {"RANK": "0"}, "env_b64": [["TkFNRQ=="]]}\n': "bad 'env_b64'",
                b'{"env": {"RANK": "0"}, "env_b64": {}}\n': "'env_b64' is not a list",
                b'{"env": {"RANK": "caf\xe9"}}\n': "not JSON"}.items():
            with self.assertRaises(standby.StandbyError) as cm:
                standby.parse_activation(bad)
            self.assertIn(message, str(cm.exception), bad)


# A trainer's first lines: torch, then dgt.recovery (where a standby waits), then the script.
SCRIPT = r"""
import json, os, sys
import dgt.recovery
print(json.dumps({"rank": os.environ.get("RANK"), "standby": os.environ.get("DGT_STANDBY"),
                  "argv": sys.argv[1:], "torch": "torch.distributed" in sys.modules,
                  "bytes": os.environb.get(b"NAME", b"").hex()}), flush=True)
"""


class ProcessTest(unittest.TestCase):
    """A real standby process: python -c SCRIPT with DGT_STANDBY=1 and its channel at an fd."""

    def start(self):
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": str(REPO / "python"), "DGT_STANDBY": "1",
               "DGT_STANDBY_FD": str(theirs.fileno())}
        env.pop("RANK", None)
        p = subprocess.Popen([sys.executable, "-c", SCRIPT, "--lr=1"], env=env,
                             pass_fds=[theirs.fileno()], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        theirs.close()
        self.addCleanup(lambda: (p.kill(), p.wait(10), p.stdout.close(), p.stderr.close()))
        return ours, p

    def test_waits_in_import_until_activated_then_runs_as_the_rank(self):
        ours, p = self.start()
        with ours:
            self.assertEqual(recv_line(ours, 120), b"ready\n")
            # Blocked in `import dgt.recovery`: nothing of the script ran.
            r, _, _ = select.select([p.stdout], [], [], 0.3)
            self.assertEqual(r, [])
            self.assertIsNone(p.poll())
            # NAME's value is not UTF-8: its exact bytes reach os.environb.
            ours.sendall(json.dumps({**ACTIVATION, "env_b64": [["TkFNRQ==", "Y2Fm6Q=="]]})
                         .encode() + b"\n")
            out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(json.loads(out), {"rank": "3", "standby": None,
                                           "argv": ["--lr=1", "--local_rank=1"], "torch": True,
                                           "bytes": "636166e9"})

    def test_eof_before_activation_exits_without_running_the_script(self):
        ours, p = self.start()
        self.assertEqual(recv_line(ours, 120), b"ready\n")
        ours.close()
        out, err = p.communicate(timeout=60)
        self.assertEqual((p.returncode, out), (0, b""), err)


if __name__ == "__main__":
    unittest.main()
