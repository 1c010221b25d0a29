#!/usr/bin/env python3
"""Runs clang-tidy over C++ files in parallel, skipping files whose last run was clean and whose
input has not changed since (as ccache does for compiles).

A file's input is its preprocessed text with comments kept (so a NOLINT counts), made by the
compile command of the build's compile_commands.json, together with clang-tidy's version, the
.clang-tidy configuration and the compile command itself. The build directory and the project
root are replaced by fixed placeholders in what is hashed, so a clone in another folder (CI)
hits the same entries. Only clean results are remembered: a file with findings runs again next
time. The cache lives in $DGT_TIDY_CACHE (default
~/.cache/dgt-clang-tidy); DGT_TIDY_CACHE=off turns it off (and the list below).

scripts/clang-tidy-clean.txt, committed, lists the keys of the clean runs behind the tracked
files ("key path" lines), so that a fresh clone on a machine with the same packages (CI) runs
clang-tidy only on what changed since the list was written. Any change to a file, a header it
includes (ours or a system one), the flags or clang-tidy's version changes the key, and the file
runs again. --record rewrites the list with the keys of this run's clean files.

Usage: clang_tidy_cached.py [--record] BUILD_DIR JOBS FILE...   (FILE relative to the root)
Prints each file's findings together; exits 1 when any file has findings, 2 on a usage error.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

CLANG_TIDY = os.environ.get("CLANG_TIDY", "clang-tidy")


def preprocess_command(entry):
    """The compile command with -E -C instead of -c/-o: the preprocessed text, comments kept."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    return out + ["-E", "-C"]


def without_paths(data, places):
    """`data` (bytes) with each (absolute path, placeholder) of `places` replaced, in order.

    A path counts only as a whole: followed by "/", a quote, whitespace or the end (so that
    /src/dgt does not match in /src/dgt2)."""
    for path, placeholder in places:
        data = re.sub(re.escape(path.encode()) + rb'(?=[/"\s]|$)', placeholder.encode(), data)
    return data


def placeholders(build, root):
    """The (absolute path, placeholder) pairs that without_paths() replaces, in order.

    The build directory first: it may lie inside the root or outside it. Each path as written
    and with symbolic links resolved (the compiler may print either)."""
    return [(form, placeholder)
            for path, placeholder in ((build, "@DGT_BUILD@"), (root, "@DGT_ROOT@"))
            for form in sorted({os.path.abspath(path), os.path.realpath(path)}, reverse=True)]


def cache_key(entry, config, places):
    pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
    if pre.returncode != 0:
        return None  # Let clang-tidy report what is wrong.
    h = hashlib.sha256()
    h.update(config)
    command = entry.get("command", " ".join(entry.get("arguments", []))).encode()
    h.update(without_paths(command, places))
    h.update(without_paths(pre.stdout, places))
    return h.hexdigest()


KNOWN_CLEAN = os.path.join("scripts", "clang-tidy-clean.txt")


def read_known(root):
    """The keys scripts/clang-tidy-clean.txt lists (an empty set when it is missing)."""
    try:
        with open(os.path.join(root, KNOWN_CLEAN), encoding="utf-8") as f:
            return {line.split()[0] for line in f if line.strip() and not line.startswith("#")}
    except FileNotFoundError:
        return set()


def lint(path, entry, build, config, cache_dir, places, known):
    """Returns (path, clean, findings, hit, key): hit when a clean run of the same input is known."""
    key = cache_key(entry, config, places) if cache_dir else None
    if key and (key in known or os.path.exists(os.path.join(cache_dir, key))):
        return path, True, "", True, key
    run = subprocess.run([CLANG_TIDY, "-p", build, "--quiet", path], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=False)
    clean = run.returncode == 0
    if clean and key:
        with open(os.path.join(cache_dir, key), "w", encoding="utf-8") as f:
            f.write(path + "\n")
    return path, clean, run.stdout, False, key


def main():
    args = sys.argv[1:]
    record = bool(args) and args[0] == "--record"
    if record:
        args = args[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    build, jobs, files = args[0], int(args[1]), args[2:]
    root = os.getcwd()
    places = placeholders(build, root)
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        entries = {e["file"]: e for e in json.load(f)}
    version = subprocess.run([CLANG_TIDY, "--version"], stdout=subprocess.PIPE, check=True).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        config = version + f.read()
    cache_dir = os.environ.get("DGT_TIDY_CACHE",
                               os.path.join(os.path.expanduser("~"), ".cache", "dgt-clang-tidy"))
    if cache_dir == "off":
        cache_dir = None
    else:
        os.makedirs(cache_dir, exist_ok=True)
    missing = [p for p in files if os.path.join(root, p) not in entries]
    if missing:
        print(f"clang-tidy: not in {build}/compile_commands.json: {' '.join(missing)}",
              file=sys.stderr)
        return 2
    known = read_known(root) if cache_dir else set()
    failed = cached = 0
    clean_keys = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(lint, p, entries[os.path.join(root, p)], build, config, cache_dir,
                               places, known)
                   for p in files]
        for fut in concurrent.futures.as_completed(futures):
            path, clean, output, hit, key = fut.result()
            cached += hit
            if clean and key:
                clean_keys.append((path, key))
            if not clean:
                failed += 1
                print(f"clang-tidy: {path}:\n{output}", flush=True)
    if record:
        with open(os.path.join(root, KNOWN_CLEAN), "w", encoding="utf-8") as f:
            f.write("# Keys of clean clang-tidy runs (scripts/clang_tidy_cached.py --record).\n")
            for path, key in sorted(clean_keys):
                f.write(f"{key} {path}\n")
        print(f"clang-tidy: {len(clean_keys)} clean key(s) written to {KNOWN_CLEAN}")
    print(f"clang-tidy: {len(files)} file(s), {cached} unchanged since a clean run, "
          f"{failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
