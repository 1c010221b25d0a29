"""`dgt doctor` against the real rdma-core library (this machine has no RDMA devices) and the
kernel's route to loopback; `dgt recovery fail` argument errors."""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DGT_BIN_DIR", REPO / "build" / "bin"))


def run(*args, env=None):
    return subprocess.run([str(BIN / "dgt"), *args], capture_output=True, text=True, timeout=30,
                          env=env)


def test_doctor_without_rdma_devices_disables_ib_and_names_the_interface():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    p = run("doctor", "--master-addr", "127.0.0.1", env=env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "RDMA devices: 0"
    assert "MASTER_ADDR 127.0.0.1 via interface: lo" in lines
    assert "  InfiniBand: no RDMA devices found" in lines
    assert "  NCCL_IB_DISABLE=1: no usable InfiniBand port" in lines
    env_part = lines[lines.index("Environment dgt exports to workers:") + 1:]
    assert env_part == ["  NCCL_IB_DISABLE=1", "  NCCL_SOCKET_IFNAME==lo"]


def test_doctor_keeps_user_variables():
    env = dict(os.environ, NCCL_SOCKET_IFNAME="eth9", NCCL_IB_DISABLE="0")
    p = run("doctor", "--master-addr", "127.0.0.1", env=env)
    assert p.returncode == 0, p.stderr
    assert "  NCCL_SOCKET_IFNAME kept as the user set it: eth9" in p.stdout
    assert "  NCCL_IB_DISABLE kept as the user set it: 0" in p.stdout
    assert p.stdout.rstrip().endswith("Environment dgt exports to workers:\n  (nothing)")


def test_recovery_fail_needs_a_rank_and_a_store():
    assert run("recovery", "fail").returncode != 0
    p = run("recovery", "fail", "--endpoint", "127.0.0.1:1", "--rank", "0", "--timeout", "0.5")
    assert p.returncode == 1
    assert p.stderr.startswith("dgt recovery fail: ")
