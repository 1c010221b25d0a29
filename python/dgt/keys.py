"""The store keys of dgt's in-place recovery protocol, as the agent and the C++ worker runtime use
them (worker_runtime/recovery_keys.cc, docs/RECOVERY.md "Store keys").

Mirrors common/store_keys.h, the one C++ header that defines every dgt key: generation_key,
open_key, failed_key, alive_key and member_key are keys::RecoveryGenerationKey, RecoveryOpenKey,
RecoveryFailedKey, RecoveryAliveKey and RecoveryMemberKey; COMM_PREFIX is keys::CommPrefix's
"dgt/comm". A torch client puts '/' in front of each key on the wire; the agent publishes a
failure under both spellings (agent/coord/failure_publisher.h).

Every function takes a torch.distributed Store client (TCPStore connected to the job's store, or
any object with the same get/set/check/compare_set/append/wait methods) and returns or raises what
that store does. The keys are bit-for-bit the C++ ones, so Python and C++ trainers and the agent
(which publishes rank failures into them) understand each other.
"""
from __future__ import annotations

from datetime import timedelta

COMM_PREFIX = "dgt/comm"


def _base(group: str) -> str:
    return f"dgt/recovery/{group}/"


def generation_key(group: str) -> str:
    """The current generation, ASCII decimal (missing = 0); moves only by COMPARE_SET g -> g+1."""
    return _base(group) + "generation"


def open_key(group: str, generation: int) -> str:
    """Set once `generation` is open (value: why); members of the one before watch it."""
    return f"{_base(group)}g{generation}/open"


def failed_key(group: str, generation: int) -> str:
    """Ranks reported failed when `generation` opened, appended as "<rank>," each."""
    return f"{_base(group)}g{generation}/failed"


def alive_key(group: str, generation: int, rank: int) -> str:
    """Written by each member joining `generation` (shrink mode's fallback when no report)."""
    return f"{_base(group)}g{generation}/alive/{rank}"


def member_key(group: str, rank: int) -> str:
    """The last generation `rank` joined; a replacement reads its predecessor's value."""
    return f"{_base(group)}member/{rank}"


def comm_prefix(group: str, generation: int) -> str:
    """Where generation `generation`'s process group bootstraps (its own keys, so nothing of an
    older generation can disturb it)."""
    return f"{COMM_PREFIX}/{group}/g{generation}"


def _as_int(store, key: str, value) -> int:
    text = value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
    try:
        return int(text)
    except ValueError:
        raise RuntimeError(f"store key {key} holds {text!r}, not a generation number") from None


# Never written by anyone: the expected value of exists()'s COMPARE_SET.
_ABSENT = "\x00dgt-absent\x00"


def exists(store, keys_) -> bool:
    """True when every key of `keys_` (a list of str) exists. Uses the store's CHECK where the
    client has it (torch >= 2.0); torch 1.13's TCPStore binding has no check(), so there each key
    is probed with COMPARE_SET(key, sentinel, sentinel), which never creates a key and answers
    the sentinel when the key is missing (c10d TCPStore compareSet semantics, which the dgt store
    implements) and the key's value otherwise."""
    check = getattr(store, "check", None)
    if check is not None:
        return bool(check(list(keys_)))
    for key in keys_:
        value = store.compare_set(key, _ABSENT, _ABSENT)
        text = value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else value
        if text == _ABSENT:
            return False
    return True


def read_int(store, key: str, default: int = 0) -> int:
    """The integer under `key`, or `default` when the key does not exist."""
    if not exists(store, [key]):
        return default
    return _as_int(store, key, store.get(key))


def open_next_generation(store, group: str, start: int, reason: str) -> int:
    """Opens the generation after `start` (COMPARE_SET start -> start+1, as the C++
    OpenNextGeneration) and marks it open with `reason`. Returns the generation now current when
    someone moved beyond start+1, else start+1; callers racing from the same `start` all get
    start+1."""
    key = generation_key(group)
    store.compare_set(key, "", "0")  # Make sure the counter exists, so the next CAS compares.
    current = _as_int(store, key, store.compare_set(key, str(start), str(start + 1)))
    target = max(current, start + 1)
    store.set(open_key(group, target), reason)
    return target


def publish_rank_failure(store, group: str, rank: int, reason: str) -> int:
    """What the agent does when a worker of `rank` died (C++ PublishRankFailure): opens the
    generation after the one `rank` last joined and lists `rank` in its failed key. Returns that
    generation. Tests use it to play the agent."""
    start = read_int(store, member_key(group, rank))
    key = generation_key(group)
    store.compare_set(key, "", "0")
    current = _as_int(store, key, store.compare_set(key, str(start), str(start + 1)))
    target = max(current, start + 1)
    # The failed list first, so a survivor that sees the opening finds the report with it.
    store.append(failed_key(group, target), f"{rank},")
    store.set(open_key(group, target), reason)
    return target


def parse_failed(value) -> set:
    """{rank} from a failed key's value ("2,3,")."""
    text = value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
    return {int(p) for p in text.split(",") if p.strip().lstrip("-").isdigit()}


def wait_key(store, key: str, timeout_s: float) -> bool:
    """True once `key` exists, False when `timeout_s` seconds passed first. A store that is
    unreachable raises (torch's DistError / RuntimeError)."""
    if exists(store, [key]):
        return True
    try:
        store.wait([key], timedelta(seconds=timeout_s))
        return True
    except Exception as e:  # torch 2.x DistStoreError, torch 1.13 RuntimeError.
        if "timeout" in str(e).lower() or "timed out" in str(e).lower():
            return False
        raise
