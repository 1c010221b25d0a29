#!/usr/bin/env python3
"""Checks that dgt's libraries follow the layering docs/DESIGN.md describes.

Reads the link graph from the dgt_cc_library / dgt_cc_binary calls (and target_link_libraries)
in each product folder's CMakeLists.txt, and the #include lines of every product .h/.cc file, then
checks four things and fails naming the file, the include or link, and the rule:

1. Include only what you link: a file may include a dgt header only when the header's library is
   its own, or one its target reaches through its DEPS / PRIVATE_DEPS and their PUBLIC DEPS (the
   way CMake passes usage requirements); third-party headers likewise (grpcpp/ needs gRPC,
   gloo/ needs gloo, ...).
2. The "may not" rules (RULES below, the table in docs/DESIGN.md): a library or a binary must not
   include or link what its rule names, even if someone adds the DEP to make rule 1 pass.
3. docs/DESIGN.md's edge list (between the `layering:edges` markers) is exactly the dgt-to-dgt
   part of the CMake graph, so the drawing cannot drift from the build.
4. Lint covers every product folder: each top-level folder whose CMakeLists.txt builds a library
   or a binary (tests/, bench/ and examples/ aside) is named in both of scripts/lint.sh's
   patterns, the clang-format one (`pattern=`) and the clang-tidy one (`tidy_pattern=`).

With --bin-dir it also runs `ldd` on the shipped binaries and fails when one loads a library its
rule forbids (dgt-run: no libgloo, no libnccl, no CUDA runtime).

KNOWN_EXCEPTIONS are rule breaks on main that are documented, with their reason, in DESIGN.md:
they are printed, not failed; one that no longer occurs is printed as stale (remove it).

Usage: scripts/check_layering.py [--source-dir DIR] [--bin-dir DIR]. Exit 0: clean; 1: a rule
is broken (each break on its own line); 2: the inputs could not be read. Standard library only.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

# Product folders, in build order; tests/, bench/, examples/ are not product code.
# scripts/lint.sh must name every product folder, these and any new one (rule 4).
PRODUCT_DIRS = ["common", "proto", "replica", "store", "run_status", "server", "rendezvous", "etcd",
                "jobs", "worker_runtime", "agent", "daemon", "cli"]

# A CMake dependency token -> the name this script uses for it.
DEP_ALIASES = {"${DGT_IBVERBS_LIBRARY}": "ibverbs", "${CMAKE_DL_LIBS}": "dl"}

# Headers without a .cc of their own, and folders' default owners.
# server/queued_write_reactor.h: templates for the service streams of dgt-rendezvous (both
# services), in the gRPC plumbing below them.
# agent/health/health_check.h: the interface of the node health checks (agent_health).
HEADER_OWNER = {"rendezvous/keepalive.h": "rendezvous_credentials",
                "agent/health/health_check.h": "agent_health",
                "server/queued_write_reactor.h": "server_rpc"}
DIR_OWNER = {"common": "common", "store": "store", "agent": "agent", "cli": "cli",
             "etcd": "etcd_client", "daemon": "daemon", "replica": "replica"}

# Generated headers (dgt::proto) and third-party include prefixes -> the dependency they need.
GENERATED_PREFIXES = ["dgt/rendezvous/v1/", "dgt/jobs/v1/", "dgt/replica/v1/", "grpc/health/v1/", "etcd/etcdserver/", "etcd/mvcc/",
                      "etcd/auth/", "google/api/"]
THIRD_PARTY = [
    ("grpcpp/", {"gRPC::grpc++"}), ("grpc/", {"gRPC::grpc++"}),
    ("google/protobuf/", {"protobuf::libprotobuf", "gRPC::grpc++"}),
    ("yaml-cpp/", {"yaml-cpp"}), ("gloo/", {"gloo"}), ("infiniband/", {"ibverbs"}), ("boost/", {"Boost::headers"}),
    ("nlohmann/", {"nlohmann_json::nlohmann_json"}), ("CLI/", {"CLI11::CLI11"}),
    ("spdlog/", {"spdlog::spdlog"}), ("fmt/", {"spdlog::spdlog"}),
    ("openssl/", {"OpenSSL::SSL", "OpenSSL::Crypto"}), ("nccl.h", {"@nccl"}),
    ("yaml-cpp/", {"yaml-cpp"}), ("systemd/", {"PkgConfig::LIBSYSTEMD"}),
    ("cuda", {"@nccl"}), ("gtest/", {"@never"}), ("gmock/", {"@never"}),
]

# What each part may NOT include or link (docs/DESIGN.md "What each library may not use").
# - targets: library or binary names; files: fnmatch patterns over repo paths (instead).
# - include: fnmatch patterns over the included name.
# - link: patterns over the link closure. That is every library the target's link line pulls in,
#   PUBLIC and PRIVATE, since the libraries are static.
@dataclass
class Rule:
    name: str
    targets: list = field(default_factory=list)
    files: list = field(default_factory=list)
    include: list = field(default_factory=list)
    link: list = field(default_factory=list)
    allow_files: list = field(default_factory=list)  # files the include patterns do not apply to
    allow_includes: list = field(default_factory=list)  # included names the patterns let through


DGT_PARTS_ABOVE_STORE = ["agent/*", "rendezvous/*", "etcd/*", "cli/*", "dgt/worker/*",
                         "dgt/rendezvous/*"]
RULES = [
    Rule("common is the bottom: no other dgt folder, no RPC, no Asio", targets=["common"],
         include=["store/*", "dgt/store/*", "rendezvous/*", "dgt/rendezvous/*", "agent/*",
                  "dgt/worker/*", "etcd/*", "cli/*", "grpc*", "google/*", "boost/*"],
         link=["proto", "gRPC::*", "protobuf::*", "store", "rendezvous*", "agent", "worker*"]),
    Rule("store knows nothing above it: no agent, rendezvous, worker, etcd, gRPC or protos",
         targets=["store"], include=DGT_PARTS_ABOVE_STORE + ["grpc*", "google/*", "gloo/*"],
         link=["proto", "gRPC::*", "protobuf::*", "rendezvous*", "agent", "worker*",
               "net_discovery", "recovery_keys", "etcd_client", "gloo"]),
    Rule("the store engine and the wire codec are transport-free: no Asio, no sockets",
         files=["store/engine.*", "store/wire.*"],
         include=["boost/*", "sys/socket.h", "netinet/*", "netdb.h", "arpa/*", "poll.h",
                  "common/*", "dgt/store/server.h", "dgt/store/client.h"]),
    Rule("installed store/worker headers include only installed headers",
         files=["store/include/*", "worker_runtime/include/*", "worker_runtime/nccl/include/*"],
         include=["common/*", "store/*", "rendezvous/*", "agent/*", "etcd/*", "gloo/*"]),
    Rule("rendezvous_core is pure: no gRPC, no protos, no sockets, no Asio",
         targets=["rendezvous_core"],
         include=["grpc*", "google/*", "dgt/rendezvous/*", "boost/*", "sys/socket.h",
                  "netinet/*", "common/*", "rendezvous/proto_convert.h", "rendezvous/service.h",
                  "rendezvous/client.h", "rendezvous/credentials.h", "etcd/*"],
         link=["proto", "gRPC::*", "protobuf::*", "Boost::*", "OpenSSL::*", "common",
               "etcd_client", "rendezvous_*", "rendezvous"]),
    Rule("rendezvous_proto converts messages only: no gRPC stubs or channels",
         targets=["rendezvous_proto"],
         include=["grpcpp/*", "*.grpc.pb.h", "rendezvous/service.h", "rendezvous/client.h",
                  "rendezvous/credentials.h"],
         link=["rendezvous", "rendezvous_client", "rendezvous_credentials"]),
    Rule("rendezvous_credentials: no protos, no service, no client",
         targets=["rendezvous_credentials"],
         include=["dgt/rendezvous/*", "rendezvous/service.h", "rendezvous/client.h",
                  "rendezvous/round_state.h"],
         link=["proto", "rendezvous", "rendezvous_client", "rendezvous_core"]),
    Rule("rendezvous_client: no server internals", targets=["rendezvous_client"],
         include=["rendezvous/service.h", "rendezvous/metrics_http.h", "rendezvous/round_state.h",
                  "rendezvous/run_state_backend.h", "boost/*"],
         link=["rendezvous", "Boost::*"]),
    Rule("the rendezvous service knows no agent and no store", targets=["rendezvous",
                                                                       "dgt-rendezvous"],
         include=["agent/*", "dgt/store/*", "store/*", "dgt/worker/*", "gloo/*"],
         link=["agent", "store", "worker*", "net_discovery", "recovery_keys", "gloo", "ibverbs"]),
    Rule("rendezvous/ and jobs/ include nothing of each other (shared types live below both)",
         files=["rendezvous/*"], include=["jobs/*", "dgt/jobs/*"]),
    Rule("jobs/ and rendezvous/ include nothing of each other (shared types live below both)",
         files=["jobs/*"], include=["rendezvous/*", "dgt/rendezvous/*"]),
    Rule("the rendezvous libraries link no jobs code", targets=[
        "rendezvous_core", "rendezvous_codec", "rendezvous_proto", "rendezvous_credentials",
        "rendezvous_client", "rendezvous", "rendezvous_etcd"],
         link=["jobs*", "job_spec"]),
    Rule("the jobs libraries link no rendezvous code", targets=[
        "job_spec", "jobs_core", "jobs_etcd", "jobs_service"],
         link=["rendezvous*"]),
    Rule("dgt-run links no jobs code (nm -C build/bin/dgt-run shows no dgt::jobs)",
         targets=["agent", "dgt-run"], include=["jobs/*"], link=["jobs*", "job_spec", "server"]),
    Rule("the shared run status and the gRPC plumbing know neither service",
         targets=["run_status", "server_rpc"],
         include=["rendezvous/*", "jobs/*", "dgt/rendezvous/*", "dgt/jobs/*", "etcd/*", "agent/*"],
         link=["rendezvous*", "jobs*", "job_spec", "etcd*", "agent", "proto"]),
    Rule("the etcd building blocks know no service", targets=["etcd_leader"],
         include=["rendezvous/*", "jobs/*", "agent/*", "server/*", "dgt/rendezvous/*",
                  "dgt/jobs/*"],
         link=["rendezvous*", "jobs*", "job_spec", "server*", "agent"]),
    Rule("the job spec and the scheduler are pure: no gRPC, no Asio, no etcd, no agent",
         targets=["job_spec", "jobs_core"],
         include=["grpcpp/*", "grpc/*", "*.grpc.pb.h", "boost/*", "etcd/*", "agent/*",
                  "rendezvous/service.h"]),
    Rule("etcd_client is a plain etcd v3 client: no dgt domain", targets=["etcd_client"],
         include=["rendezvous/*", "agent/*", "store/*", "dgt/store/*", "dgt/worker/*",
                  "dgt/rendezvous/*"],
         link=["rendezvous*", "agent", "store", "worker*"]),
    Rule("net_discovery: no Gloo, no communicators, no store", targets=["net_discovery"],
         include=["gloo/*", "nccl.h", "dgt/store/*", "dgt/worker/communicator.h",
                  "dgt/worker/*_communicator.h", "dgt/worker/elastic_group.h"],
         link=["gloo", "worker", "worker_nccl", "store"]),
    Rule("recovery_keys: keys over a Store only; no Gloo, no communicators",
         targets=["recovery_keys"],
         include=["gloo/*", "nccl.h", "dgt/worker/communicator.h", "dgt/worker/*_communicator.h",
                  "infiniband/*"],
         link=["gloo", "worker", "worker_nccl", "ibverbs", "net_discovery"]),
    Rule("the worker runtime knows no agent, no rendezvous, no gRPC",
         targets=["worker", "worker_nccl"],
         include=["agent/*", "rendezvous/*", "dgt/rendezvous/*", "grpc*", "etcd/*"],
         link=["agent", "rendezvous*", "proto", "gRPC::*", "etcd_client"]),
    Rule("NCCL is dlopen()ed: nothing links libnccl or the CUDA runtime",
         targets=["*"], link=["nccl", "*nccl*.so*", "cudart", "CUDA::*"]),
    Rule("the agent: no Gloo, no communicators, no store internals, no etcd",
         targets=["agent", "dgt-run"],
         include=["gloo/*", "nccl.h", "dgt/worker/communicator.h", "dgt/worker/*_communicator.h",
                  "dgt/worker/elastic_group.h", "dgt/worker/context.h", "dgt/worker/nccl_api.h",
                  "store/wire.h", "store/engine.h", "etcd/*"],
         link=["worker", "worker_nccl", "gloo", "etcd_client"]),
    Rule("the agent reaches the rendezvous server only through rendezvous_host",
         files=["agent/*"],
         include=["rendezvous/service.h", "rendezvous/metrics_http.h", "rendezvous/round_state.h",
                  "rendezvous/run_state_backend.h"],
         allow_files=["agent/coord/rendezvous_host.h", "agent/coord/rendezvous_host.cc"]),
    Rule("in the agent only the gRPC edges (rendezvous_session, rendezvous_host) see gRPC/protos",
         files=["agent/*"], include=["grpcpp/*", "grpc/*", "dgt/rendezvous/v1/*"],
         allow_files=["agent/coord/rendezvous_session.*", "agent/coord/rendezvous_host.*"]),
    Rule("the dgt CLI: no agent, no Gloo, no communicators, no rendezvous server",
         targets=["cli", "dgt"],
         include=["agent/*", "gloo/*", "dgt/worker/communicator.h", "dgt/worker/*_communicator.h",
                  "rendezvous/service.h", "rendezvous/round_state.h", "store/wire.h",
                  "store/engine.h"],
         link=["agent", "worker", "worker_nccl", "gloo", "rendezvous"]),
    Rule("the node daemon runs dgt-run as a process: no agent (but its health checks), no store, "
         "no server, no Gloo",
         targets=["daemon", "dgt-agent"],
         include=["agent/*", "store/*", "dgt/store/*", "gloo/*", "nccl.h",
                  "dgt/worker/communicator.h", "dgt/worker/*_communicator.h",
                  "dgt/worker/elastic_group.h", "rendezvous/service.h", "rendezvous/round_state.h",
                  "rendezvous/run_state_backend.h", "rendezvous/metrics_http.h", "etcd/*"],
         allow_includes=["agent/health/*", "agent/flags/health_flags.h"],
         link=["agent", "store", "worker", "worker_nccl", "gloo", "rendezvous", "rendezvous_etcd",
               "etcd_client", "recovery_keys"]),
    Rule("no product file includes test code", targets=["*"],
         include=["tests/*", "gtest/*", "gmock/*"]),
]

# Shipped binaries and the shared libraries ldd may not show for them.
LDD_RULES = {
    "dgt-run": ["libgloo*", "libnccl*", "libcudart*", "libcuda.so*"],
    "dgt-agent": ["libgloo*", "libnccl*", "libcudart*", "libcuda.so*"],
    "dgt": ["libgloo*", "libnccl*", "libcudart*", "libcuda.so*"],
    "dgt-rendezvous": ["libgloo*", "libnccl*", "libcudart*", "libcuda.so*", "libibverbs*"],
}

# Documented rule breaks on main: (rule name prefix, file or target, included/linked, reason).
KNOWN_EXCEPTIONS = [
]


@dataclass
class Target:
    name: str
    kind: str  # "library" or "binary"
    cmake_dir: str  # repo-relative
    srcs: list = field(default_factory=list)
    public: list = field(default_factory=list)
    private: list = field(default_factory=list)
    public_include: str = ""


def strip_cmake_comments(text: str) -> str:
    out = []
    for line in text.splitlines():
        in_str = False
        for i, ch in enumerate(line):
            if ch == '"':
                in_str = not in_str
            elif ch == "#" and not in_str and not line[i:].startswith("#include"):
                line = line[:i]
                break
        out.append(line)
    return "\n".join(out)


def cmake_calls(text: str, command: str):
    """Yields the argument tokens of each `command(...)` call (no nested parentheses needed)."""
    for m in re.finditer(r"\b" + re.escape(command) + r"\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text[m.end():i - 1].split()


def dep_name(token: str) -> str:
    if token.startswith("dgt::"):
        return token[len("dgt::"):]
    return DEP_ALIASES.get(token, token)


def parse_targets(root: str) -> dict:
    targets = {}
    for d in PRODUCT_DIRS:
        path = os.path.join(root, d, "CMakeLists.txt")
        try:
            with open(path, encoding="utf-8") as f:
                text = strip_cmake_comments(f.read())
        except OSError as e:
            raise SystemExit(f"check_layering: cannot read {path}: {e}") from e
        for kind, cmd in (("library", "dgt_cc_library"), ("binary", "dgt_cc_binary")):
            for args in cmake_calls(text, cmd):
                sections, key = {}, None
                for tok in args:
                    if tok in ("NAME", "SRCS", "HDRS", "DEPS", "PRIVATE_DEPS", "PUBLIC_INCLUDE"):
                        key = tok
                        sections.setdefault(key, [])
                    elif key:
                        sections[key].append(tok)
                name = sections["NAME"][0]
                t = Target(name, kind, d)
                t.srcs = [os.path.normpath(os.path.join(d, s)) for s in sections.get("SRCS", [])]
                public = sections.get("DEPS", [])
                t.public = [dep_name(x) for x in public] if kind == "library" else []
                t.private = [dep_name(x) for x in
                             (sections.get("PRIVATE_DEPS", []) if kind == "library" else public)]
                inc = sections.get("PUBLIC_INCLUDE", [""])[0]
                t.public_include = os.path.normpath(
                    inc.replace("${CMAKE_CURRENT_SOURCE_DIR}", d)) if inc else ""
                targets[name] = t
        # Targets made by hand (dgt::proto): target_link_libraries(dgt_X PUBLIC ...); and links
        # added to a target after its definition (dgt-rendezvous gains dgt::rendezvous_etcd
        # when DGT_WITH_ETCD is on: the check reads the graph with every option on).
        for args in cmake_calls(text, "target_link_libraries"):
            name = args[0][len("dgt_"):] if args[0].startswith("dgt_") else args[0]
            if name in targets:
                t = targets[name]
            elif args[0].startswith("dgt_"):
                t = Target(name, "library", d)
            else:
                continue
            key = None
            for tok in args[1:]:
                if tok in ("PUBLIC", "PRIVATE", "INTERFACE"):
                    key = tok
                elif key == "PUBLIC":
                    t.public.append(dep_name(tok))
                elif key == "PRIVATE":
                    t.private.append(dep_name(tok))
            targets[name] = t
    return targets


def link_closure(targets: dict, name: str) -> set:
    """Every library `name`'s link line pulls in (static libraries: PUBLIC and PRIVATE)."""
    seen, stack = set(), list(targets[name].public + targets[name].private)
    while stack:
        dep = stack.pop()
        if dep in seen:
            continue
        seen.add(dep)
        if dep in targets:
            stack.extend(targets[dep].public + targets[dep].private)
    return seen


def usage_closure(targets: dict, name: str) -> set:
    """What `name`'s own files may include: its direct deps and their PUBLIC deps, transitively."""
    seen, stack = set(), list(targets[name].public + targets[name].private)
    while stack:
        dep = stack.pop()
        if dep in seen:
            continue
        seen.add(dep)
        if dep in targets:
            stack.extend(targets[dep].public)
    return seen


INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def product_files(root: str) -> list:
    files = []
    for d in PRODUCT_DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for n in names:
                if n.endswith((".h", ".cc")):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(files)


def header_owners(root: str, targets: dict, files: list) -> dict:
    """Repo path of each product header -> the library that owns it."""
    owners, stem_owner = {}, {}
    for t in targets.values():
        for s in t.srcs:
            stem_owner[os.path.splitext(s)[0]] = t.name
            base = os.path.splitext(os.path.basename(s))[0]
            if t.public_include:
                for dirpath, _, names in os.walk(os.path.join(root, t.public_include)):
                    if base + ".h" in names:
                        owners[os.path.relpath(os.path.join(dirpath, base + ".h"), root)] = t.name
    for f in files:
        if not f.endswith(".h") or f in owners:
            continue
        stem = os.path.splitext(f)[0]
        if f in HEADER_OWNER:
            owners[f] = HEADER_OWNER[f]
        elif stem in stem_owner:
            owners[f] = stem_owner[stem]
        else:
            top = f.split("/")[0]
            inc_owner = [t.name for t in targets.values()
                         if t.public_include and f.startswith(t.public_include + "/")
                         and t.name not in ("net_discovery", "recovery_keys")]
            owners[f] = DIR_OWNER.get(top) or (inc_owner[0] if inc_owner else None)
    return owners


def resolve(root: str, targets: dict, included: str):
    """Repo path of a dgt header named in an #include, or None for a system/third-party one."""
    if os.path.isfile(os.path.join(root, included)) and included.split("/")[0] in PRODUCT_DIRS:
        return included
    for t in targets.values():
        if t.public_include and os.path.isfile(os.path.join(root, t.public_include, included)):
            return os.path.join(t.public_include, included)
    return None


def matches(value: str, patterns: list) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


# Top-level folders that build but are not product code (rule 4 does not ask lint.sh for them).
NOT_PRODUCT_DIRS = {"tests", "bench", "examples"}
BUILDS_RE = re.compile(r"\b(dgt_cc_library|dgt_cc_binary|add_library|add_executable)\s*\(")
LINT_PATTERN_RE = re.compile(r"^\s*(pattern|tidy_pattern)='\^\(([^)]*)\)/", re.M)


def lint_coverage(root: str) -> list:
    """Rule 4: the product folders scripts/lint.sh's patterns leave out, one error line each."""
    lint = os.path.join(root, "scripts", "lint.sh")
    try:
        with open(lint, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SystemExit(f"check_layering: cannot read {lint}: {e}") from e
    patterns = {m.group(1): set(m.group(2).split("|")) for m in LINT_PATTERN_RE.finditer(text)}
    errors = [f"scripts/lint.sh: no {name}='^(folder|...)/...' line to check [lint covers every "
              "product folder]" for name in ("pattern", "tidy_pattern") if name not in patterns]
    for d in sorted(os.listdir(root)):
        cmake = os.path.join(root, d, "CMakeLists.txt")
        if d in NOT_PRODUCT_DIRS or d.startswith(".") or not os.path.isfile(cmake):
            continue
        with open(cmake, encoding="utf-8") as f:
            if not BUILDS_RE.search(strip_cmake_comments(f.read())):
                continue
        for name in sorted(patterns):
            if d not in patterns[name]:
                errors.append(f"scripts/lint.sh: {name} does not name {d}/, a product folder "
                              f"({d}/CMakeLists.txt builds a target) [lint covers every product "
                              "folder]")
    return errors


def check(root: str, bin_dir: str | None) -> int:
    targets = parse_targets(root)
    files = product_files(root)
    owners = header_owners(root, targets, files)
    file_target = {}
    for t in targets.values():
        for s in t.srcs:
            file_target[s] = t.name
    for f, o in owners.items():
        file_target.setdefault(f, o)

    errors, excepted, used_exceptions = [], [], set()

    def report(rule: str, where: str, what: str, line: str):
        for i, (r, w, x, reason) in enumerate(KNOWN_EXCEPTIONS):
            if rule.startswith(r) and where == w and what == x:
                used_exceptions.add(i)
                excepted.append(f"known exception: {line} ({reason})")
                return
        errors.append(line)

    # Rule 3 (first, it is the cheapest to read): the DESIGN.md edge list.
    design = os.path.join(root, "docs", "DESIGN.md")
    try:
        with open(design, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SystemExit(f"check_layering: cannot read {design}: {e}") from e
    m = re.search(r"<!-- layering:edges -->\s*```\n(.*?)```", text, re.S)
    if not m:
        errors.append("docs/DESIGN.md: no edge list between <!-- layering:edges --> and a "
                      "``` block")
    else:
        documented = {}
        for line in m.group(1).splitlines():
            if "->" in line:
                lhs, rhs = line.split("->", 1)
                documented[lhs.strip()] = set(rhs.split())
        actual = {t.name: {d for d in t.public + t.private if d in targets}
                  for t in targets.values()}
        for name in sorted(set(actual) | set(documented)):
            if name not in actual:
                errors.append(f"docs/DESIGN.md: edge list names {name}, which CMake does not build")
            elif name not in documented:
                errors.append(f"docs/DESIGN.md: edge list lacks {name} -> "
                              f"{' '.join(sorted(actual[name]))}")
            elif documented[name] != actual[name]:
                errors.append(f"docs/DESIGN.md: edge list says {name} -> "
                              f"{' '.join(sorted(documented[name]))}, CMake says "
                              f"{' '.join(sorted(actual[name])) or '(nothing)'}")

    # Rule 4: lint.sh's patterns name every product folder.
    errors.extend(lint_coverage(root))

    # Rules 1 and 2 over includes.
    for f in files:
        tname = file_target.get(f)
        if f.endswith(".h") and tname is None:
            errors.append(f"{f}: header with no owning library (add a .cc to a target's SRCS, "
                          "or an entry to HEADER_OWNER in scripts/check_layering.py)")
            continue
        if tname is None:
            errors.append(f"{f}: .cc file in no target's SRCS")
            continue
        visible = usage_closure(targets, tname) | {tname}
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            src = fh.read()
        for lineno, (_, inc) in ((src.count("\n", 0, mm.start()) + 1, mm.groups())
                                 for mm in INCLUDE_RE.finditer(src)):
            at = f"{f}:{lineno}"
            path = resolve(root, targets, inc)
            need = None
            if path is not None:
                owner = owners.get(path) or file_target.get(path)
                if owner and owner not in visible:
                    need = {owner}
            elif any(inc.startswith(p) for p in GENERATED_PREFIXES):
                if "proto" not in visible:
                    need = {"proto"}
            else:
                for prefix, deps in THIRD_PARTY:
                    if inc.startswith(prefix):
                        nccl_ok = deps == {"@nccl"} and tname == "worker_nccl"
                        if not deps & visible and not nccl_ok:
                            need = deps
                        break
                if inc.startswith("absl/") and not any(v.startswith("absl::") for v in visible):
                    need = {"absl::*"}
            if need:
                rule = "include only what you link"
                report(rule, f, inc, f"{at}: includes \"{inc}\" but {tname} does not link "
                       f"{' or '.join(sorted(need))} [{rule}]")
            for r in RULES:
                applies = (r.files and matches(f, r.files)) or (
                    r.targets and (tname in r.targets or "*" in r.targets))
                if applies and r.include and matches(inc, r.include) and not matches(
                        f, r.allow_files) and not matches(inc, r.allow_includes):
                    report(r.name, f, inc, f"{at}: includes \"{inc}\" [{r.name}]")

    # Rule 2 over links.
    for t in targets.values():
        closure = link_closure(targets, t.name)
        for r in RULES:
            if r.link and (t.name in r.targets or "*" in r.targets):
                for dep in sorted(closure):
                    if matches(dep, r.link):
                        report(r.name, t.name, dep, f"{t.cmake_dir}/CMakeLists.txt: {t.name} "
                               f"links {dep} [{r.name}]")

    # ldd of the shipped binaries.
    if bin_dir:
        for binary, forbidden in LDD_RULES.items():
            path = os.path.join(bin_dir, binary)
            if not os.path.isfile(path):
                errors.append(f"{path}: not built (build it before this check)")
                continue
            out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                errors.append(f"{path}: ldd failed: {out.stderr.strip()}")
                continue
            libs = [ln.split()[0] for ln in out.stdout.splitlines() if ln.strip()]
            for lib in libs:
                if matches(os.path.basename(lib), forbidden):
                    errors.append(f"{path}: ldd shows {lib} [{binary} may not load "
                                  f"{', '.join(forbidden)}]")
            print(f"ldd {binary}: {len(libs)} libraries; "
                  f"{'libibverbs' if any('libibverbs' in x for x in libs) else 'no libibverbs'}, "
                  f"{'libgloo' if any('libgloo' in x for x in libs) else 'no libgloo'}")

    for line in excepted:
        print(line)
    for i, (r, w, x, _) in enumerate(KNOWN_EXCEPTIONS):
        if i not in used_exceptions:
            print(f"stale known exception (no longer occurs; remove it from "
                  f"scripts/check_layering.py and docs/DESIGN.md): {w} {x} [{r}]")
    for line in errors:
        print(line, file=sys.stderr)
    print(f"check_layering: {len(targets)} targets, {len(files)} files, {len(RULES)} rules: "
          f"{len(errors)} broken, {len(excepted)} known exceptions")
    return 1 if errors else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--bin-dir", help="build/bin: also check `ldd` of the shipped binaries")
    args = ap.parse_args()
    return check(os.path.abspath(args.source_dir), args.bin_dir)


if __name__ == "__main__":
    sys.exit(main())
