"""torchrun's RendezvousHandler over dgt-rendezvous (`torchrun --rdzv-backend=dgt`), the contract of
torch/distributed/elastic/rendezvous/api.py (torch >= 2.4). docs/TORCHRUN_BACKEND.md describes the
use; the mapping in short:

- next_rendezvous: the first call joins the run; a later call takes the round the service already
  started (a scale-up, a lost node, another node's restart), or, when there is none, reports this
  node's failed workers for the current round (torchrun calls it again only to restart after a
  failure or for a waiting node) and waits for the restart round.
- The store: node rank 0's agent hosts each round's store (a fresh torch TCPStore per round, as
  dgt-run's agents do), so workers use it directly (use_agent_store) and the service stays out of
  the data path. Each agent has its own namespace in it, "torchelastic/dgt/<round>/<node rank>/".
- num_nodes_waiting: >= 1 once the service started a round this node has not taken, stopped the
  workers, or ended the run; torchrun then stops its workers and calls next_rendezvous.
- shutdown: reports the node's outcome (success when torchrun's agent returned without an error)
  and ends the session.

Thread-compatible: torchrun calls it from its agent thread; the session has its own thread."""
import json
import logging
import os
import socket
import sys
import time
from datetime import timedelta

from torch.distributed import PrefixStore, TCPStore
# torchrun's own key names, so that the preset namespace matches what its agent reads.
from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID, _RoleInstanceInfo
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousStoreInfo,
    RendezvousTimeoutError,
)
from torch.distributed.elastic.utils.store import _NUM_MEMBERS

from dgt.rendezvous.v1 import rendezvous_pb2 as pb
from dgt.torchrun.config import ConfigError, settings_from, torchrun_args_from_argv
from dgt.torchrun.session import Session, SessionError

log = logging.getLogger("dgt.torchrun")

BACKEND = "dgt"
# How long a store client waits for node rank 0's store, seconds (torch's default is 300).
STORE_TIMEOUT_S = 300
# How long shutdown waits for the run's outcome after reporting this node's.
SHUTDOWN_WAIT_S = 5


class DgtRendezvousError(RendezvousError):
    """Marks the dgt backend's errors, which torchrun prints as one line (install_excepthook)."""


class DgtConnectionError(DgtRendezvousError, RendezvousConnectionError):
    pass


class DgtClosedError(DgtRendezvousError, RendezvousClosedError):
    pass


class DgtTimeoutError(DgtRendezvousError, RendezvousTimeoutError):
    pass


def _route_address(endpoint):
    """The local address that routes to `endpoint` ("host:port"): what other nodes reach."""
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        infos = socket.getaddrinfo(host, 9, family, socket.SOCK_DGRAM)
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(infos[0][4])
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


class DgtRendezvousHandler(RendezvousHandler):
    """A RendezvousHandler whose rounds come from dgt-rendezvous."""

    def __init__(self, run_id, min_nodes, max_nodes, settings, local_addr=None):
        self._run_id = run_id
        self._settings = settings
        self._address = local_addr or _route_address(settings.endpoints[0])
        self._closed = False
        self._stores = {}  # port -> TCPStore server this agent hosts (the next one, the current).
        next_port = self._open_store()
        self._session = Session(settings, run_id, min_nodes, max_nodes, self._address,
                                next_port, self._open_store)
        self._started = False
        self._join_deadline_s = settings.join_timeout or 600.0

    # --- the store --------------------------------------------------------------------------
    def _open_store(self):
        """A fresh TCPStore server on a free port; returns the port. Keeps the three newest."""
        store = TCPStore(host_name=self._address, port=0, is_master=True,
                         wait_for_workers=False, timeout=timedelta(seconds=STORE_TIMEOUT_S))
        self._stores[store.port] = store
        while len(self._stores) > 3:
            del self._stores[next(iter(self._stores))]
        return store.port

    def _store_for(self, a):
        """The agent's store for round `a`: its own namespace in the round's store, holding what
        torchrun's agent would otherwise gather from every other agent (see _preset)."""
        hosted = self._stores.get(a.master_port) if a.node_rank == 0 else None
        base = hosted or TCPStore(host_name=a.master_addr, port=a.master_port, is_master=False,
                                  timeout=timedelta(seconds=STORE_TIMEOUT_S))
        store = PrefixStore(f"torchelastic/dgt/{a.round}/{a.node_rank}/", base)
        self._preset(store, a)
        return store

    def _preset(self, store, a):
        """Writes, in this agent's own namespace, what torchrun's agent reads from the others
        (torch 2.x elastic/agent/server/api.py): every node's role info and this node's assigned
        ranks, computed from the service's Assignment (the service gives every node the same
        --nproc-per-node, so node n's first global rank is n * nproc), and the exit barrier's
        count of the other nodes. So the agent needs no other agent in the store: nodes run by
        dgt-run agents can share the run, and node rank 0 keeps the store until the service
        says the run is over (shutdown), not by torchrun's exit barrier."""
        nproc, role = self._settings.nproc_per_node, self._settings.role
        store.multi_set([f"torchelastic/role_info/{i}" for i in range(a.node_count)],
                        [_RoleInstanceInfo(role, i, nproc).serialize()
                         for i in range(a.node_count)])
        store.set(f"torchelastic/assigned_ranks/{a.node_rank}",
                  json.dumps([a.first_global_rank, a.world_size, a.first_global_rank,
                              a.world_size]))
        store.add(f"{_TERMINAL_STATE_SYNC_ID}{_NUM_MEMBERS}", a.node_count - 1)

    # --- RendezvousHandler ------------------------------------------------------------------
    def get_backend(self):
        return BACKEND

    @property
    def use_agent_store(self):
        """True: workers connect to node rank 0's round store at MASTER_ADDR:MASTER_PORT."""
        return True

    def next_rendezvous(self):
        if self._closed:
            raise DgtClosedError(f"the dgt rendezvous of run '{self._run_id}' is closed")
        report = None
        if not self._started:
            self._started = True
            self._session.start()
        elif self._session.news() == 0 and self._session.current() is not None:
            cur = self._session.current()
            report = pb.NodeReport(
                round=cur.round, succeeded=False,
                message=f"torchrun restarts the workers of node '{self._settings.node_id}' "
                        f"(node rank {cur.node_rank}) after a failure")
        deadline = time.monotonic() + self._join_deadline_s
        try:
            a = self._session.wait_assignment(deadline, report)
        except SessionError as e:
            raise _torchrun_error(e) from None
        except TimeoutError as e:
            raise DgtTimeoutError(str(e)) from None
        store = self._store_for(a)
        log.info("dgt rendezvous: run '%s' round %d (%s): node rank %d of %d, workers connect to "
                 "%s:%d", a.run_id, a.round, a.reason, a.node_rank, a.node_count, a.master_addr,
                 a.master_port)
        return RendezvousInfo(store, a.node_rank, a.node_count,
                              RendezvousStoreInfo(a.master_addr, a.master_port))

    def is_closed(self):
        """Whether the run ended (the service sent RunFinished) or set_closed was called."""
        return self._closed or self._session.finished() is not None

    def set_closed(self):
        """Closes the rendezvous on this node: it leaves the run (the service sees its session
        end, as for a lost node) and later next_rendezvous calls raise RendezvousClosedError."""
        self._closed = True
        self._session.close()

    def num_nodes_waiting(self):
        return self._session.news()

    def get_run_id(self):
        return self._run_id

    def shutdown(self):
        """Reports this node's outcome for its round and ends the session. Success when torchrun's
        agent returned without an exception (launch_agent calls shutdown in a finally clause, so
        a ChildFailedError in flight means this node's workers failed)."""
        exc = sys.exc_info()[1]
        cur = self._session.current()
        report = None
        if cur is not None and not self._closed:
            if exc is None:
                report = pb.NodeReport(round=cur.round, succeeded=True)
            elif type(exc).__name__ == "ChildFailedError":
                report = pb.NodeReport(round=cur.round, succeeded=False,
                                       message=f"node '{self._settings.node_id}': {exc}"[:1000])
        self._closed = True
        # Node rank 0 serves the round's store: it waits for the run's end, as torchrun's exit
        # barrier would, so that no other node's workers lose the store.
        hosting = cur is not None and cur.node_rank == 0 and report is not None and \
            report.succeeded
        self._session.report_and_close(
            report, self._settings.exit_timeout if hosting else SHUTDOWN_WAIT_S)
        return True


def _torchrun_error(e):
    if e.kind in ("finished", "closed"):
        return DgtClosedError(str(e))
    return DgtConnectionError(str(e))


def _excepthook(previous):
    def hook(kind, value, tb):
        if isinstance(value, (DgtRendezvousError, ConfigError)):
            sys.stderr.write(f"torchrun: error: {value}\n")
            sys.stderr.flush()
            return
        previous(kind, value, tb)
    return hook


def install_excepthook():
    """torchrun prints the dgt backend's errors (and bad --rdzv-conf values) as one line, with
    no traceback; the exit status stays 1."""
    if not getattr(sys.excepthook, "_dgt", False):
        hook = _excepthook(sys.excepthook)
        hook._dgt = True
        sys.excepthook = hook


def _setup_logging():
    """The backend's lines go to stderr at torchrun's LOGLEVEL (default WARNING), as torch's own."""
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("[dgt] %(levelname)s %(message)s"))
        log.addHandler(h)
        log.propagate = False
        level = os.environ.get("LOGLEVEL", "WARNING").upper()
        number = logging.getLevelName(level)
        log.setLevel(number if isinstance(number, int) else logging.WARNING)


def create_handler(params):
    """RendezvousHandlerCreator for RendezvousParameters (torch.distributed.elastic)."""
    install_excepthook()
    _setup_logging()
    settings = settings_from(params.endpoint, params.config, torchrun_args_from_argv(sys.argv[1:]))
    if settings.unknown_keys:
        log.warning("dgt rendezvous: ignoring unknown --rdzv-conf keys %s",
                    ", ".join(settings.unknown_keys))
    return DgtRendezvousHandler(params.run_id, params.min_nodes, params.max_nodes, settings,
                                local_addr=params.local_addr)
