#!/usr/bin/env bash
# Lints dgt's C++ sources: clang-format (check only) over every tracked file (product code, tests,
# benchmarks, examples), and clang-tidy over every product .cc file that the build compiles, in
# parallel (one clang-tidy per core; CI's lint stage), skipping files unchanged since a clean run
# (scripts/clang_tidy_cached.py). --changed limits clang-tidy to the .cc files the last commit
# changed (HEAD~1..HEAD), for a quick local check. Tests and benchmarks are formatted but not held
# to clang-tidy's performance checks (loops over a handful of test threads are not hot paths).
# --record runs every file and rewrites scripts/clang-tidy-clean.txt, the committed keys of clean
# runs that let a fresh clone (CI) skip the files that have not changed: run it before a commit
# that changes C++ code (a stale list only costs CI time).
# Usage: scripts/lint.sh [--changed | --record] [BUILD_DIR]   (BUILD_DIR, default build, has
#        compile_commands.json). DGT_LINT_JOBS sets the parallelism (default: nproc).
# Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
changed_only=0
record=()
if [ "${1:-}" = "--changed" ]; then changed_only=1; shift; fi
if [ "${1:-}" = "--record" ]; then record=(--record); shift; fi
# --all names the full run, the default.
if [ "${1:-}" = "--all" ]; then shift; fi
BUILD=${1:-build}
JOBS=${DGT_LINT_JOBS:-$(nproc)}
# Every product folder (a top-level folder whose CMakeLists.txt builds a library or a binary) is
# in both patterns: scripts/check_layering.py (ctest layering_check) fails when one is missing.
pattern='^(agent|cli|common|daemon|etcd|jobs|proto|replica|rendezvous|run_status|server|store|worker_runtime|bench|examples|tests)/.*\.(cc|h)$'
mapfile -t format_files < <(git ls-files | grep -E "$pattern" || true)
status=0
echo "lint: clang-format on ${#format_files[@]} file(s)"
if [ ${#format_files[@]} -gt 0 ] && ! clang-format --dry-run -Werror "${format_files[@]}"; then
  status=1
fi
tidy_pattern='^(agent|cli|common|daemon|etcd|jobs|proto|replica|rendezvous|run_status|server|store|worker_runtime)/.*\.cc$'
if [ $changed_only -eq 0 ]; then
  mapfile -t candidates < <(git ls-files | grep -E "$tidy_pattern" || true)
elif git rev-parse --verify -q HEAD~1 >/dev/null; then
  mapfile -t candidates < <(git diff --name-only --diff-filter=d HEAD~1 HEAD |
    grep -E "$tidy_pattern" || true)
else
  candidates=()
fi
# Only what this build compiles (e.g. worker_runtime/nccl/ needs NCCL's headers).
tidy_files=()
for f in "${candidates[@]}"; do
  grep -q "\"file\": \"$(pwd)/$f\"" "$BUILD/compile_commands.json" 2>/dev/null && tidy_files+=("$f")
done
if [ ${#tidy_files[@]} -gt 0 ]; then
  echo "lint: clang-tidy on ${#tidy_files[@]} file(s), $JOBS at a time"
  start=$(date +%s)
  # Each file's findings are printed together; a file unchanged since a clean run is skipped
  # (scripts/clang_tidy_cached.py; DGT_TIDY_CACHE=off runs every file).
  if ! python3 scripts/clang_tidy_cached.py "${record[@]}" "$BUILD" "$JOBS" "${tidy_files[@]}"; then status=1; fi
  echo "lint: clang-tidy took $(( $(date +%s) - start )) s"
else
  echo "lint: no .cc file for clang-tidy"
fi
[ $status -eq 0 ] && echo "lint: clean"
exit $status
