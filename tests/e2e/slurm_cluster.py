"""A real Slurm cluster on this machine for tests/e2e/test_slurm.py: munged with its own key and
socket, one slurmctld and two slurmd (Debian's slurm-wlm), each daemon in its own network and UTS
namespace with its own hostname, and an /etc/hosts of the cluster's names bind-mounted in its
own mount namespace. The namespaces are joined by a bridge in the controller's namespace (10.233.N
.0/24); nothing is sent outside them. Slurm runs without cgroups (proctrack/linuxproc,
task/none): `ip netns exec` would hide /sys/fs/cgroup, so the daemons enter their namespace with
nsenter instead.
"""
import os
import shutil
import subprocess
import time

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "nsenter", "unshare",
           "ip")


def missing():
    """The programs the cluster needs that are not installed (empty when it can run)."""
    return [d for d in DAEMONS if shutil.which(d) is None and
            not os.access(f"/usr/sbin/{d}", os.X_OK)]


def _sh(*args):
    subprocess.run([str(a) for a in args], check=True, capture_output=True, timeout=30)


class Cluster:
    """Call start(), then run client commands with client(); stop() removes everything."""

    def __init__(self, root):
        self.root = root
        n = os.getpid() % 200 + 20
        self.n = n
        self.hub = f"dgtSlHub{n}"
        self.nodes = [f"dgtSlN{n}a", f"dgtSlN{n}b"]
        self.names = ["node1", "node2"]
        self.subnet = f"10.233.{n}"
        self.conf = root / "slurm.conf"
        self.hosts = root / "hosts"
        self.procs = []
        self.munge_socket = root / "munge" / "sock"

    def _in_ns(self, ns, hostname, args):
        script = f'mount --bind {self.hosts} /etc/hosts && hostname {hostname} && exec "$@"'
        return ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount", "sh", "-c",
                script, "sh", *[str(a) for a in args]]

    def _spawn(self, name, args):
        out = open(self.root / f"{name}.out", "wb")
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def start(self):
        for ns in [self.hub, *self.nodes]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.hub, "addr", "add", f"{self.subnet}.1/24", "dev", "br0")
        _sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.nodes):
            port = f"sl{self.n}p{i}"
            _sh("ip", "link", "add", port, "netns", self.hub, "type", "veth", "peer", "name",
                "eth0", "netns", ns)
            _sh("ip", "-n", self.hub, "link", "set", port, "master", "br0")
            _sh("ip", "-n", self.hub, "link", "set", port, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.subnet}.{i + 2}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        self.hosts.write_text(f"127.0.0.1 localhost\n{self.subnet}.1 slctl\n"
                              f"{self.subnet}.2 node1\n{self.subnet}.3 node2\n")

        munge = self.root / "munge"
        munge.mkdir(mode=0o700)
        with open(munge / "munge.key", "wb") as f:
            f.write(os.urandom(128))
        os.chmod(munge / "munge.key", 0o400)
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={munge}/munge.key", f"--pid-file={munge}/pid",
                               f"--log-file={munge}/log", f"--seed-file={munge}/seed"])
        for d in ("state", "node1", "node2"):
            (self.root / d).mkdir()
        r = self.root
        nodes = "".join(
            f"NodeName={name} NodeHostname={name} NodeAddr={self.subnet}.{i + 2} CPUs=2 Boards=1 "
            f"SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 State=UNKNOWN\n"
            for i, name in enumerate(self.names))
        self.conf.write_text(
            f"ClusterName=dgttest\nSlurmctldHost=slctl({self.subnet}.1)\nSlurmUser=root\n"
            f"SlurmdUser=root\nAuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
            f"CredType=cred/munge\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            f"JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
            f"SelectType=select/linear\nMpiDefault=none\nReturnToService=2\n"
            f"SchedulerType=sched/builtin\nKillWait=10\nInactiveLimit=0\nMinJobAge=300\n"
            f"MailProg=/bin/true\n"
            f"StateSaveLocation={r}/state\nSlurmdSpoolDir={r}/%n\n"
            f"SlurmctldPidFile={r}/slurmctld.pid\nSlurmdPidFile={r}/%n/slurmd.pid\n"
            f"SlurmctldLogFile={r}/slurmctld.log\nSlurmdLogFile={r}/%n.log\n"
            f"SlurmctldDebug=info\nSlurmdDebug=info\n{nodes}"
            f"PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP\n")
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            assert time.monotonic() < deadline, (self.root / "munged.out").read_text()
            time.sleep(0.1)
        self._spawn("slurmctld", self._in_ns(self.hub, "slctl",
                                             ["slurmctld", "-D", "-i", "-f", self.conf]))
        for ns, name in zip(self.nodes, self.names):
            self._spawn(name, self._in_ns(ns, name, ["slurmd", "-D", "-f", self.conf, "-N", name]))
        deadline = time.monotonic() + 40
        while True:
            r = self.client(["sinfo", "-h", "-N", "-o", "%N %T"], check=False)
            if r.stdout.split() == ["node1", "idle", "node2", "idle"]:
                return
            assert time.monotonic() < deadline, (
                f"Slurm not idle within 40 s: {r.stdout} {r.stderr}\n" + self.logs())
            time.sleep(0.5)

    def env(self, **extra):
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def client(self, args, env=None, timeout=60, check=True):
        """Runs a Slurm client command (srun, sbatch, scontrol...) in the controller's namespace."""
        r = subprocess.run(self._in_ns(self.hub, "slctl", args), capture_output=True, text=True,
                           env=env or self.env(), timeout=timeout, cwd=self.root)
        if check:
            assert r.returncode == 0, f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def spawn_client(self, name, args, env=None):
        """A Slurm client command left running (srun of a long job); output in <root>/<name>.out."""
        out = open(self.root / f"{name}.out", "wb")
        p = subprocess.Popen(self._in_ns(self.hub, "slctl", args), stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env or self.env(), cwd=self.root, start_new_session=True)
        self.procs.append(p)
        return p

    def job(self, job_id):
        """`scontrol show job` as a dict of its KEY=VALUE fields."""
        out = self.client(["scontrol", "show", "job", "-o", str(job_id)]).stdout
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    def logs(self):
        text = []
        for name in ("slurmctld.log", "node1.log", "node2.log", "munged.out"):
            path = self.root / name
            if path.exists():
                text.append(f"== {name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(text)

    def stop(self):
        for ns in [self.hub, *self.nodes]:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in [self.hub, *self.nodes]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
