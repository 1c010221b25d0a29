"""One agent's Session stream with dgt-rendezvous (proto/dgt/rendezvous/v1/rendezvous.proto), as
dgt-run's agents hold it: join, assignments, reports, store ports, keepalive, and the replicas.

A background thread owns the stream. It connects to the replicas in the given order (a refused
connection or a standby's UNAVAILABLE with a NotLeader detail moves to the next one; after a full
pass it pauses 50..100 ms, then 100..200 ms), reads every ServiceMessage, and when the stream
breaks after the service took it, reconnects the same way for up to read_timeout seconds and
rejoins with the current assignment (JoinRequest.rejoin), so that the workers keep running.

The torchrun handler (handler.py) calls in from torchrun's thread: the lock below guards every
field both threads touch. Every wait has a deadline. No torch here: the node rank 0 store is the
handler's, reached through the `new_store_port` callback."""
import logging
import queue
import random
import threading
import time

import grpc

from dgt.replica.v1 import leadership_pb2
from dgt.rendezvous.v1 import rendezvous_pb2 as pb
from dgt.rendezvous.v1 import rendezvous_pb2_grpc

log = logging.getLogger("dgt.torchrun")

STATUS_DETAILS_KEY = "grpc-status-details-bin"
# Seconds one endpoint may take to accept a TCP (and TLS) connection before the next is tried.
CONNECT_ATTEMPT_S = 2.0


class SessionError(Exception):
    """The session cannot go on. `kind`: "unreachable" (no replica took the first session),
    "lost" (the service did not come back within read_timeout), "refused" (the service sent an
    Error: its code and message are in the text), "finished" (the run ended), "closed" (the
    handler was closed)."""

    def __init__(self, kind, message, code=None):
        super().__init__(message)
        self.kind = kind
        self.code = code


def standby_answer(error):
    """The NotLeader of a standby replica's UNAVAILABLE (leadership.proto), or None."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    for key, value in error.trailing_metadata() or ():
        if key != STATUS_DETAILS_KEY:
            continue
        details = leadership_pb2.StatusDetails()
        try:
            details.ParseFromString(value)
        except Exception:  # noqa: BLE001 (not ours: no standby answer)
            return None
        for any_detail in details.details:
            not_leader = leadership_pb2.NotLeader()
            if any_detail.Unpack(not_leader):
                return not_leader
    return None


def _describe(error):
    not_leader = standby_answer(error)
    if not_leader is not None:
        return error.details() or f"replica {not_leader.replica_id} is a standby"
    return f"{error.code().name}: {error.details()}"


class Session:
    """The agent's session. Thread-safe: torchrun's thread calls the public methods, the
    session's own thread reads the stream."""

    def __init__(self, settings, run_id, min_nodes, max_nodes, address, first_store_port,
                 new_store_port):
        """`first_store_port`: the port of the store this agent already listens on
        (JoinRequest.store_port). `new_store_port()`: called on the session's thread when this
        node became a round's node rank 0 on that store; returns the port of a fresh store
        (sent as StoreReady)."""
        self._s = settings
        self._run_id = run_id
        self._min = min_nodes
        self._max = max_nodes
        self._address = address
        self._store_port = first_store_port
        self._new_store_port = new_store_port
        self._cv = threading.Condition()
        # Guarded by _cv.
        self._current = None  # Assignment torchrun runs.
        self._pending = None  # A newer Assignment torchrun has not taken yet.
        self._stopped_round = None  # StopWorkers for this round.
        self._finished = None  # RunFinished.
        self._error = None  # SessionError: the session is over.
        self._progress = None
        self._report = None  # The NodeReport for the current round, sent again after a rejoin.
        self._queue = None  # The open stream's outgoing messages.
        self._call = None
        self._closing = False
        self._thread = None
        self.replica = None  # The endpoint that holds the session.
        self._channels = {}
        md = []
        if settings.token:
            md.append(("authorization", f"Bearer {settings.token}"))
        self._metadata = tuple(md)

    # --- torchrun's thread -----------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._run, name="dgt-rendezvous-session",
                                        daemon=True)
        self._thread.start()

    def wait_assignment(self, deadline, report=None):
        """Returns the next Assignment (a later round than the current one) once the service sent
        it, sending `report` (a NodeReport for the current round) first when given. Raises
        SessionError when the session ends, TimeoutError at `deadline` (time.monotonic())."""
        with self._cv:
            if report is not None and self._pending is None and self._error is None:
                self._report = report
                self._send_locked(pb.AgentMessage(report=report))
            while True:
                if self._pending is not None:
                    self._current, self._pending = self._pending, None
                    self._report = None
                    return self._current
                if self._error is not None:
                    raise self._error
                if self._finished is not None:
                    raise SessionError("finished", _finished_text(self._run_id, self._finished))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(self._waiting_text())
                self._cv.wait(min(left, 1.0))

    def news(self):
        """How many nodes wait for a new round from torchrun's point of view: at least 1 when the
        service started a round this node has not taken yet (a scale-up counts the new nodes),
        stopped the workers, or ended the run or the session; else 0."""
        with self._cv:
            if self._pending is not None:
                grown = self._pending.node_count - (self._current.node_count if self._current else 0)
                return max(1, grown)
            if self._error is not None or self._finished is not None:
                return 1
            if self._current is not None and self._stopped_round == self._current.round:
                return 1
            return 0

    def finished(self):
        with self._cv:
            return self._finished

    def current(self):
        with self._cv:
            return self._current

    def report_and_close(self, report, wait_s):
        """Sends `report` for the current round (when the run is not over), waits up to wait_s
        for the run's RunFinished, a new round, or the stream's end, then closes the session."""
        with self._cv:
            if (report is not None and self._current is not None and self._finished is None
                    and self._error is None):
                self._report = report
                self._send_locked(pb.AgentMessage(report=report))
                deadline = time.monotonic() + wait_s
                while (self._finished is None and self._error is None and self._queue is not None
                       and self._pending is None and time.monotonic() < deadline):
                    self._cv.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        self.close()

    def close(self):
        """Ends the session (idempotent); later waits raise SessionError("closed")."""
        with self._cv:
            self._closing = True
            if self._error is None:
                self._error = SessionError("closed", f"the dgt rendezvous of run '{self._run_id}'"
                                                     " was shut down on this node")
            if self._queue is not None:
                self._queue.put(None)
            call = self._call
            self._cv.notify_all()
        if call is not None:
            call.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    # --- the session's thread ----------------------------------------------------------------
    def _send_locked(self, message):
        if self._queue is not None:
            self._queue.put(message)

    def _waiting_text(self):
        p = self._progress
        joined = f"{p.joined_nodes} of {p.min_nodes}:{p.max_nodes} nodes joined" if p else \
            "no answer yet"
        return (f"the dgt rendezvous of run '{self._run_id}' did not complete in time "
                f"({joined}; --rdzv-conf join_timeout)")

    def _join_message(self):
        s = self._s
        join = pb.JoinRequest(run_id=self._run_id, node_id=s.node_id, min_nodes=self._min,
                              max_nodes=self._max, nproc_per_node=s.nproc_per_node,
                              address=self._address, store_port=self._store_port,
                              last_call_timeout_s=s.last_call_timeout,
                              max_restarts=s.max_restarts, join_timeout_s=s.join_timeout)
        rejoin = self._pending or self._current
        if rejoin is not None:
            join.rejoin.CopyFrom(rejoin)
        return pb.AgentMessage(join=join)

    def _channel(self, endpoint):
        channel = self._channels.get(endpoint)
        if channel is None:
            s = self._s
            options = [("grpc.keepalive_time_ms", s.keepalive_time_ms),
                       ("grpc.keepalive_timeout_ms", s.keepalive_timeout_ms),
                       ("grpc.keepalive_permit_without_calls", 1),
                       ("grpc.http2.max_pings_without_data", 0),
                       ("grpc.initial_reconnect_backoff_ms", 100),
                       ("grpc.min_reconnect_backoff_ms", 100),
                       ("grpc.max_reconnect_backoff_ms", 1000),
                       ("grpc.enable_retries", 0)]
            if s.tls_ca:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=_read(s.tls_ca),
                    private_key=_read(s.tls_key) if s.tls_key else None,
                    certificate_chain=_read(s.tls_cert) if s.tls_cert else None)
                channel = grpc.secure_channel(endpoint, creds, options=options)
            else:
                channel = grpc.insecure_channel(endpoint, options=options)
            self._channels[endpoint] = channel
        return channel

    def _run(self):
        s = self._s
        start = time.monotonic()
        connect_deadline = start + s.connect_timeout
        lost_deadline = None  # Set while a service that took the session is away.
        ever_accepted = False
        answers = {}  # endpoint -> why the last attempt there failed.
        passes = 0
        index = 0
        while True:
            with self._cv:
                if self._closing or self._error is not None or self._finished is not None:
                    return
            endpoint = s.endpoints[index % len(s.endpoints)]
            accepted, why, code = self._serve(endpoint, reconnect=ever_accepted)
            if not accepted and code in (grpc.StatusCode.UNAUTHENTICATED,
                                         grpc.StatusCode.PERMISSION_DENIED):
                # Settings that disagree with the service: retrying cannot help.
                self._fail("refused", f"the dgt rendezvous service at {endpoint} refused this "
                                      f"agent: {why} (--rdzv-conf token_file, tls_*)")
                return
            if accepted:
                ever_accepted = True
                answers.clear()
                passes = 0
                with self._cv:
                    if self._closing or self._error is not None or self._finished is not None:
                        return
                lost_deadline = time.monotonic() + s.read_timeout
                log.warning("dgt rendezvous: lost the session at %s (%s); reconnecting for up to "
                            "%gs (--rdzv-conf read_timeout)", endpoint, why, s.read_timeout)
                index += 1
                continue
            answers[endpoint] = why
            index += 1
            now = time.monotonic()
            if lost_deadline is None and now >= connect_deadline:
                self._fail("unreachable", _unreachable_text(s, answers))
                return
            if lost_deadline is not None and now >= lost_deadline:
                self._fail("lost", f"lost the dgt rendezvous service and could not reach it "
                                   f"again at {', '.join(s.endpoints)} within {s.read_timeout:g}s "
                                   f"(--rdzv-conf read_timeout); last answers: "
                                   f"{_answers_text(answers)}")
                return
            if index % len(s.endpoints) == 0:
                passes += 1
                low = 0.05 if passes == 1 else 0.1
                pause = random.uniform(low, 2 * low)
                end = lost_deadline if lost_deadline is not None else connect_deadline
                with self._cv:
                    self._cv.wait(max(0.0, min(pause, end - time.monotonic())))

    def _fail(self, kind, message, code=None):
        with self._cv:
            if self._error is None:
                self._error = SessionError(kind, message, code)
            self._cv.notify_all()

    def _serve(self, endpoint, reconnect):
        """One stream at `endpoint`: join (or rejoin), then read until it ends. Returns
        (accepted, why it ended, its grpc.StatusCode or None)."""
        q = queue.Queue()
        with self._cv:
            if self._closing:
                return False, "closed", None
            q.put(self._join_message())
            rejoined_round = (self._pending or self._current).round if (
                self._pending or self._current) is not None else None
            self._queue = q
        stub = rendezvous_pb2_grpc.RendezvousStub(self._channel(endpoint))
        call = stub.Session(iter(q.get, None), metadata=self._metadata)
        with self._cv:
            self._call = call
        accepted = False
        why = "the stream ended"
        code = None
        # The service answers every join at once (JoinProgress, Assignment or an error); a host
        # that drops packets would hold the stream until gRPC's connect timeout (20 s).
        answered = threading.Event()
        timer = threading.Timer(CONNECT_ATTEMPT_S,
                                lambda: answered.is_set() or call.cancel())
        timer.daemon = True
        timer.start()
        try:
            for message in call:
                if not accepted:
                    accepted = True
                    answered.set()
                    timer.cancel()
                    self.replica = endpoint
                    log.log(logging.WARNING if reconnect else logging.INFO,
                            "dgt rendezvous: %s to %s (run '%s', node id '%s')",
                            "reconnected" if reconnect else "connected", endpoint,
                            self._run_id, self._s.node_id)
                self._handle(message, rejoined_round)
        except grpc.RpcError as e:
            why = _describe(e)
            code = e.code()
            if e.code() == grpc.StatusCode.CANCELLED and not accepted and not self._closing:
                why = f"UNAVAILABLE: no answer within {CONNECT_ATTEMPT_S:g}s"
        finally:
            timer.cancel()
            q.put(None)
            with self._cv:
                if self._queue is q:
                    self._queue = None
                self._call = None
                self._cv.notify_all()
        return accepted, why, code

    def _handle(self, message, rejoined_round):
        kind = message.WhichOneof("kind")
        with self._cv:
            if kind == "progress":
                self._progress = message.progress
            elif kind == "assignment":
                a = message.assignment
                latest = self._pending or self._current
                if latest is not None and a.round <= latest.round:
                    # The answer to a rejoin: the same round goes on; send the report again.
                    if self._report is not None and self._current is not None and \
                            self._report.round == self._current.round:
                        self._send_locked(pb.AgentMessage(report=self._report))
                else:
                    log.info("dgt rendezvous: round %d of run '%s' (%s): node rank %d of %d, "
                             "master %s:%d", a.round, a.run_id, a.reason, a.node_rank,
                             a.node_count, a.master_addr, a.master_port)
                    self._pending = a
                    if a.node_rank == 0 and a.master_port == self._store_port:
                        # Our store serves this round: have the next one ready for a later round.
                        self._store_port = self._new_store_port()
                        self._send_locked(pb.AgentMessage(
                            store_ready=pb.StoreReady(store_port=self._store_port)))
            elif kind == "stop":
                self._stopped_round = message.stop.round
                log.warning("dgt rendezvous: the service stops the workers of round %d: %s",
                            message.stop.round, message.stop.reason)
            elif kind == "finished":
                self._finished = message.finished
            elif kind == "error":
                e = message.error
                self._error = SessionError(
                    "refused", f"the dgt rendezvous service refused node '{self._s.node_id}' of "
                               f"run '{self._run_id}': {e.message} (code {e.code})", e.code)
            self._cv.notify_all()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _answers_text(answers):
    return "; ".join(f"{ep}: {why}" for ep, why in answers.items()) or "none"


def _unreachable_text(s, answers):
    n = len(s.endpoints)
    where = s.endpoints[0] if n == 1 else f"any of the {n} rendezvous replicas at " + \
        ", ".join(s.endpoints)
    return (f"cannot reach {where} within {s.connect_timeout:g}s (--rdzv-conf connect_timeout): "
            f"{_answers_text(answers)}")


def _finished_text(run_id, finished):
    if finished.succeeded:
        return f"run '{run_id}' has finished: every node succeeded"
    return f"run '{run_id}' has failed: {finished.message}"
