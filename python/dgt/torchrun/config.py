"""The torchrun handler's settings: --rdzv-endpoint and the --rdzv-conf keys it takes, checked with
errors that name the key and the value (docs/TORCHRUN_BACKEND.md). Pure: no torch, no gRPC."""
import contextlib
import io
import math
import os
import re
import socket
from dataclasses import dataclass, field

DEFAULT_PORT = 29400

# The longest --rdzv-conf timeout, in seconds: a year, as dgt-run's flags (common/flag_parse.h
# kMaxFlagDuration). Beyond it a deadline is a typo; inf and nan are refused.
MAX_SECONDS = 31536000
# The longest keepalive_time_ms and keepalive_timeout_ms: an hour, as dgt-rendezvous's
# --keepalive-time-ms. gRPC takes them as a C int of milliseconds (2147483648 and more raise
# OverflowError in grpc.insecure_channel).
MAX_KEEPALIVE_MS = 3600000
# The most --rdzv-conf nproc_per_node, as dgt-run's --nproc-per-node.
MAX_NPROC_PER_NODE = 4096
# The most --rdzv-conf max_restarts: JoinRequest.max_restarts is an int32.
MAX_RESTARTS = 2**31 - 1

_DIGITS = re.compile(r"[0-9]+")
_INTEGER = re.compile(r"[+-]?[0-9]+")

# --rdzv-conf keys, with their meaning (docs/TORCHRUN_BACKEND.md has the table).
KNOWN_KEYS = {
    "connect_timeout", "read_timeout", "join_timeout", "last_call_timeout", "timeout",
    "node_id", "nproc_per_node", "max_restarts", "tls_ca", "tls_cert", "tls_key", "token_file",
    "keepalive_time_ms", "keepalive_timeout_ms", "exit_timeout", "role",
}


class ConfigError(ValueError):
    """A bad --rdzv-endpoint or --rdzv-conf value; the message names the key and the value."""


def _parse_endpoint(item, where):
    """One --rdzv-endpoint item -> "host:port", as dgt-run parses it (common/host_port.h): "host",
    "host:port", "[v6]" or "[v6]:port"; the port 1..65535, 29400 when left out. Raises ConfigError
    naming the item and `where`."""
    def bad(why):
        return ConfigError(f"--rdzv-endpoint: {why}, got '{item}' {where}")

    if "://" in item:
        raise bad("a URL scheme is not taken, write host:port")
    if item.startswith("["):
        close = item.find("]")
        if close < 0:
            raise bad("missing ']' after IPv6 address")
        host, rest = item[1:close], item[close + 1:]
        if rest and not rest.startswith(":"):
            raise bad("expected ':' after ']'")
        port_text = rest[1:] if rest else None
    elif item.count(":") > 1:
        raise bad("IPv6 addresses must be written as [addr]:port")
    else:
        host, colon, port_text = item.partition(":")
        port_text = port_text if colon else None
    if port_text == "":
        raise bad("empty port")
    if not host:
        raise ConfigError(f"--rdzv-endpoint: empty host in '{item}' {where}")
    if port_text is None:
        port = DEFAULT_PORT
    else:
        if not _DIGITS.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise bad("port must be 1..65535")
        port = int(port_text)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_endpoints(text):
    """--rdzv-endpoint "HOST[:PORT][,HOST[:PORT]...]" -> ["host:port", ...] (default port 29400,
    IPv6 as [addr]:port; as dgt-run's --rdzv-endpoint, common/host_port.h). Raises ConfigError
    naming the item and the whole value: a URL scheme, an IPv6 address without brackets, an
    empty host or port, a port outside 1..65535, an item listed twice."""
    if text is None or not str(text).strip():
        raise ConfigError("--rdzv-endpoint is required with --rdzv-backend=dgt, got ''")
    items = str(text).split(",")
    out = []
    for i, raw in enumerate(items, 1):
        item = raw.strip()
        where = f"(item {i} of '{text}')"
        if not item:
            raise ConfigError(f"--rdzv-endpoint: empty item {where}")
        endpoint = _parse_endpoint(item, where)
        if endpoint.lower() in (seen.lower() for seen in out):
            raise ConfigError(f"--rdzv-endpoint: '{item}' is listed twice in '{text}'")
        out.append(endpoint)
    return out


def _format_seconds(seconds):
    """A bound as dgt-run's flag errors print it (common/flag_parse.h FormatFlagSeconds)."""
    if seconds == MAX_SECONDS:
        return f"{MAX_SECONDS} (a year)"
    return f"{seconds:.9g}"


def _seconds(conf, key, default, minimum=0.0):
    """A --rdzv-conf duration in seconds, a finite number from `minimum` to MAX_SECONDS (both
    inclusive); `default` when the key is absent or empty. Raises ConfigError, in dgt-run's
    words (common/flag_parse.h ParseDuration)."""
    value = conf.get(key)
    if value is None or value == "":
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and minimum <= seconds <= MAX_SECONDS):
        raise ConfigError(f"--rdzv-conf {key} must be a number of seconds from "
                          f"{_format_seconds(minimum)} to {_format_seconds(MAX_SECONDS)}, "
                          f"got '{value}'")
    return seconds


def _int(conf, key, default, minimum, maximum):
    """A --rdzv-conf decimal integer from `minimum` to `maximum` (both inclusive); `default` when
    the key is absent or empty. Raises ConfigError, in dgt-run's words (common/flag_parse.h
    ParseInt64)."""
    value = conf.get(key)
    if value is None or value == "":
        return default
    text = str(value).strip()
    number = int(text) if _INTEGER.fullmatch(text) else None
    if number is None or not minimum <= number <= maximum:
        raise ConfigError(
            f"--rdzv-conf {key} must be an integer from {minimum} to {maximum}, got '{value}'")
    return number


def _file(conf, key):
    path = conf.get(key)
    if path is None or path == "":
        return None
    if not os.access(str(path), os.R_OK):
        raise ConfigError(f"--rdzv-conf {key}: cannot read '{path}'")
    return str(path)


@dataclass
class Settings:
    """What the handler needs beyond RendezvousParameters' run id, MIN and MAX."""
    endpoints: list
    node_id: str
    # Seconds to reach a replica that takes the session at the start (then the agent gives up).
    connect_timeout: float = 60.0
    # Seconds a lost service is tried again before the run is left (as dgt-run's read_timeout).
    read_timeout: float = 60.0
    # Sent in JoinRequest; 0 keeps the service's default.
    join_timeout: float = 0.0
    last_call_timeout: float = 0.0
    nproc_per_node: int = 1
    max_restarts: int = 0
    tls_ca: str = None
    tls_cert: str = None
    tls_key: str = None
    token: str = None
    # Seconds node rank 0 keeps the round's store after its workers succeeded, waiting for the
    # run's end (as torchrun's exit barrier, 300 s).
    exit_timeout: float = 300.0
    role: str = "default"
    keepalive_time_ms: int = 1000
    keepalive_timeout_ms: int = 2000
    unknown_keys: list = field(default_factory=list)


def settings_from(endpoint, conf, torchrun_args=None):
    """Settings from --rdzv-endpoint, the --rdzv-conf dict and what torchrun's own command line
    says (torchrun_args: {"nproc_per_node": int, "max_restarts": int, "role": str}, or None).
    --rdzv-conf nproc_per_node, max_restarts and role win over the command line. Raises
    ConfigError."""
    conf = dict(conf or {})
    args = torchrun_args or {}
    s = Settings(endpoints=parse_endpoints(endpoint),
                 node_id=str(conf.get("node_id") or f"{socket.gethostname()}:{os.getpid()}"))
    s.connect_timeout = _seconds(conf, "connect_timeout", 60.0, minimum=0.1)
    s.read_timeout = _seconds(conf, "read_timeout", 60.0, minimum=0.1)
    # torchrun's c10d backend calls the join timeout "join_timeout" (and "timeout" before 1.10).
    s.join_timeout = _seconds(conf, "join_timeout", _seconds(conf, "timeout", 0.0))
    s.last_call_timeout = _seconds(conf, "last_call_timeout", 0.0)
    s.nproc_per_node = _int(conf, "nproc_per_node", int(args.get("nproc_per_node") or 1), 1,
                            MAX_NPROC_PER_NODE)
    s.max_restarts = _int(conf, "max_restarts", int(args.get("max_restarts") or 0), 0,
                          MAX_RESTARTS)
    s.exit_timeout = _seconds(conf, "exit_timeout", 300.0)
    s.role = str(conf.get("role") or args.get("role") or "default")
    s.keepalive_time_ms = _int(conf, "keepalive_time_ms", 1000, 500, MAX_KEEPALIVE_MS)
    s.keepalive_timeout_ms = _int(conf, "keepalive_timeout_ms", 2000, 100,
                                  MAX_KEEPALIVE_MS)
    s.tls_ca, s.tls_cert, s.tls_key = (_file(conf, k) for k in ("tls_ca", "tls_cert", "tls_key"))
    if bool(s.tls_cert) != bool(s.tls_key):
        raise ConfigError("--rdzv-conf tls_cert and tls_key go together, got only "
                          f"{'tls_cert' if s.tls_cert else 'tls_key'}")
    if s.tls_cert and not s.tls_ca:
        raise ConfigError("--rdzv-conf tls_cert needs tls_ca (TLS is on with a CA only)")
    token_file = _file(conf, "token_file")
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            s.token = f.read().strip()
        if not s.token:
            raise ConfigError(f"--rdzv-conf token_file: '{token_file}' is empty")
    if len(s.node_id.encode()) > 256:
        raise ConfigError(f"--rdzv-conf node_id is longer than 256 bytes: '{s.node_id[:40]}...'")
    s.unknown_keys = sorted(k for k in conf if k not in KNOWN_KEYS)
    return s


def torchrun_args_from_argv(argv):
    """nproc_per_node and max_restarts from torchrun's own command line (sys.argv of a torchrun
    or `python -m torch.distributed.run` process), as torchrun parses them; {} when argv is not
    one (the handler then uses --rdzv-conf or the defaults). "auto", "cpu" and "gpu" for
    --nproc-per-node are resolved as torchrun does."""
    try:
        from torch.distributed.run import determine_local_world_size, get_args_parser
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage line, when not torchrun's
            args, _ = get_args_parser().parse_known_args(argv)
        return {"nproc_per_node": determine_local_world_size(args.nproc_per_node),
                "max_restarts": int(args.max_restarts), "role": args.role}
    except (Exception, SystemExit):  # noqa: BLE001 (not torchrun's argv: use the defaults)
        return {}
