"""A small LAN of network namespaces for the tests that partition processes: one namespace per
member, each with one address on a bridge that lives in a hub namespace of its own, and a veth
from the host to the bridge, so the test process reaches every member directly. Nothing is
routed or bridged through the host's own tables.

A member is cut from some addresses by DROP rules in its own namespace (INPUT and OUTPUT), and
healed by flushing them: the other members and the host keep reaching it. close() removes the
namespaces (with every process still in them) and the host's veth; should the test process die
first (any signal, SIGKILL included), a sweeper shell blocked on a pipe that only this process
holds does the same. Needs root, iproute2 and iptables (`available()`).
"""
import os
import shutil
import subprocess


def available():
    """Whether this process can build a Lan: root, `ip` and `iptables`."""
    return os.geteuid() == 0 and bool(shutil.which("ip")) and bool(shutil.which("iptables"))


def _run(*args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")


class Lan:
    """Namespaces `{tag}{name}` for each name in `names`, on 10.{net}.{subnet}.0/24: the host is
    .1, the i-th name .(10 + i). `tag` keeps the names apart from other tests' (at most 8
    characters, so that interface names stay within 15)."""

    def __init__(self, tag, names, net=236):
        assert len(tag) <= 8 and all(len(n) <= 5 for n in names)
        self.subnet = os.getpid() % 200 + 20
        self.prefix = f"10.{net}.{self.subnet}"
        self.host_ip = f"{self.prefix}.1"
        self.hub = f"{tag}hub"
        self.host_if = f"{tag}{self.subnet}"
        self.ns = {n: f"{tag}{n}" for n in names}
        self.ip = {n: f"{self.prefix}.{10 + i}" for i, n in enumerate(names)}
        every = [self.hub, *self.ns.values()]
        self._remove_all = ("exec >/dev/null 2>&1; cat; "
                            + "; ".join(f"ip netns pids {s} | xargs -r kill -9; ip netns del {s}"
                                        for s in every)
                            + f"; ip link del {self.host_if}")
        # Leftovers of a run that died before its sweeper could act (same pid, same names).
        subprocess.run(["/bin/sh", "-c", self._remove_all], stdin=subprocess.DEVNULL, timeout=60)
        self.sweeper = subprocess.Popen(["/bin/sh", "-c", self._remove_all],
                                        stdin=subprocess.PIPE, start_new_session=True)
        try:
            _run("ip", "netns", "add", self.hub)
            _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.hub, "link", "set", "br0", "up")
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "host0",
                 "netns", self.hub)
            self._plug("host0")
            _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
            for i, name in enumerate(names):
                ns = self.ns[name]
                _run("ip", "netns", "add", ns)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", self.hub, "link", "add", f"p{i}", "type", "veth", "peer",
                     "name", "eth0", "netns", ns)
                self._plug(f"p{i}")
                _run("ip", "-n", ns, "addr", "add", f"{self.ip[name]}/24", "dev", "eth0")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise

    def _plug(self, port):
        _run("ip", "-n", self.hub, "link", "set", port, "master", "br0")
        _run("ip", "-n", self.hub, "link", "set", port, "up")

    def wrap(self, name, args):
        """`args` run inside member `name`'s namespace (`ip netns exec` execs, so the process
        keeps the pid that Popen returns)."""
        return ["ip", "netns", "exec", self.ns[name], *[str(a) for a in args]]

    def cut(self, name, others):
        """Drops every packet between member `name` and the members `others`, both ways."""
        for other in others:
            for rule in (["OUTPUT", "-d", self.ip[other]], ["INPUT", "-s", self.ip[other]]):
                _run(*self.wrap(name, ["iptables", "-A", *rule, "-j", "DROP"]))

    def heal(self, name):
        _run(*self.wrap(name, ["iptables", "-F"]))

    def close(self):
        """Kills what still runs in the namespaces and removes them and the host's veth."""
        if self.sweeper.poll() is None:
            self.sweeper.stdin.close()  # The sweeper removes everything and exits.
            self.sweeper.wait(timeout=60)
