"""Unit tests of the progress channel's worker side (python/dgt/progress_channel.py): the test
plays the agent with a file of zeroed slots, as agent/progress/progress_file.cc makes it. One test
runs the DDP communication hook that marks all-reduces as waits, on a one-process Gloo group.
"""
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from dgt import progress_channel as pc  # noqa: E402


def words(path, slot):
    data = Path(path).read_bytes()[slot * 64:(slot + 1) * 64]
    return struct.unpack("<8Q", data)


class ChannelTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "progress")
        Path(self.path).write_bytes(b"\0" * 64 * 3)
        self.saved = dict(os.environ)
        pc._reset()

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)
        pc._reset()
        self.dir.cleanup()

    def test_constants_match_the_cpp_header(self):
        header = (REPO / "common" / "progress_channel.h").read_text()

        def cpp(name):
            return re.search(rf"{name}(?:\[\])? = \"?([^\";]+)\"?;", header).group(1)
        self.assertEqual(cpp("kProgressFileEnv"), pc.FILE_ENV)
        self.assertEqual(cpp("kProgressSlotEnv"), pc.SLOT_ENV)
        self.assertEqual(cpp("kStacksSignalEnv"), pc.STACKS_SIGNAL_ENV)
        self.assertEqual(cpp("kStacksFileEnv"), pc.STACKS_FILE_ENV)
        self.assertEqual(int(cpp("kProgressSlotBytes")), pc.SLOT_BYTES)
        self.assertEqual(int(cpp("kProgressCounterOffset")), 8 * pc.COUNTER_WORD)
        self.assertEqual(int(cpp("kProgressWaitingOffset")), 8 * pc.WAITING_WORD)
        self.assertEqual(int(cpp("kProgressStacksOffset")), 8 * pc.STACKS_WORD)

    def test_without_a_slot_everything_is_a_no_op(self):
        os.environ.pop(pc.FILE_ENV, None)
        os.environ.pop(pc.SLOT_ENV, None)
        self.assertFalse(pc.enabled())
        pc.progress()
        with pc.waiting():
            pass
        self.assertEqual(words(self.path, 0), (0,) * 8)

    def test_reports_and_waits_go_to_this_slot_only(self):
        os.environ[pc.FILE_ENV] = self.path
        os.environ[pc.SLOT_ENV] = "1"
        self.assertTrue(pc.enabled())
        for _ in range(3):
            pc.progress()
        self.assertEqual(words(self.path, 1), (3, 0, 0, 0, 0, 0, 0, 0))
        with pc.waiting():
            self.assertEqual(words(self.path, 1)[1], 1)
            with pc.waiting():
                self.assertEqual(words(self.path, 1)[1], 2)
            self.assertEqual(words(self.path, 1)[1], 1)
        self.assertEqual(words(self.path, 1)[:2], (3, 0))
        pc.wait_end()  # Unbalanced: stays at 0.
        self.assertEqual(words(self.path, 1)[:2], (3, 0))
        self.assertEqual(words(self.path, 0), (0,) * 8)
        self.assertEqual(words(self.path, 2), (0,) * 8)

    def test_a_slot_beyond_the_file_or_a_bad_value_disables_reports(self):
        os.environ[pc.FILE_ENV] = self.path
        for slot in ("3", "-1", "x"):
            pc._reset()
            os.environ[pc.SLOT_ENV] = slot
            self.assertFalse(pc.enabled(), slot)
            pc.progress()
        self.assertEqual(Path(self.path).read_bytes(), b"\0" * 64 * 3)

    def test_stack_dump_on_the_agents_signal_names_the_function(self):
        stacks = os.path.join(self.dir.name, "stacks.txt")
        sig = signal.SIGRTMIN + 6
        script = f"""
import os, signal, sys
sys.path.insert(0, {str(REPO / 'python')!r})
import dgt
def waiting_here():
    os.kill(os.getpid(), {int(sig)})
waiting_here()
print("alive", os.getpid())
"""
        env = dict(os.environ, **{pc.FILE_ENV: self.path, pc.SLOT_ENV: "2",
                                  pc.STACKS_SIGNAL_ENV: str(int(sig)),
                                  pc.STACKS_FILE_ENV: stacks})
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^alive \d+\n$")
        pid = int(r.stdout.split()[1])
        dump = Path(stacks).read_text()
        self.assertIn('line 6 in waiting_here', dump)
        self.assertIn("most recent call first", dump)
        # The agent learns that stacks will come, and which process to signal for them.
        self.assertEqual(words(self.path, 2)[2], pid)

    def test_no_stack_dump_without_the_variables(self):
        os.environ.pop(pc.STACKS_SIGNAL_ENV, None)
        self.assertFalse(pc.install_stack_dump())
        self.assertFalse(pc.install_stack_dump({pc.STACKS_SIGNAL_ENV: "40"}))


class DdpHookTest(unittest.TestCase):
    def test_allreduce_is_a_wait_and_gives_the_builtin_gradients(self):
        script = r"""
import os, struct, sys, tempfile
sys.path.insert(0, sys.argv[1])
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dgt import progress_channel as pc
from dgt import recovery
seen = []
real_begin, real_end = pc.wait_begin, pc.wait_end
def waiting_word():
    with open(sys.argv[2], "rb") as f:
        return struct.unpack("<8Q", f.read(64))[1]
def begin():
    real_begin()
    seen.append(("begin", waiting_word()))
def end():
    real_end()
    seen.append(("end", waiting_word()))
pc.wait_begin, pc.wait_end = begin, end
store = dist.TCPStore("127.0.0.1", 0, 1, True)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
grads = []
for hooked in (False, True):
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    ddp = DDP(m)
    if hooked:
        ddp.register_comm_hook(None, recovery._waiting_allreduce_hook)
    ddp(torch.ones(3, 4)).sum().backward()
    grads.append([p.grad.clone() for p in m.parameters()])
assert all(torch.equal(a, b) for a, b in zip(*grads)), grads
print(seen)
"""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "progress")
            Path(path).write_bytes(b"\0" * 64)
            env = dict(os.environ, **{pc.FILE_ENV: path, pc.SLOT_ENV: "0",
                                      "OMP_NUM_THREADS": "1"})
            r = subprocess.run([sys.executable, "-c", script, str(REPO / "python"), path],
                               env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), "[('begin', 1), ('end', 0)]")
            self.assertEqual(words(path, 0)[1], 0)


if __name__ == "__main__":
    unittest.main()
