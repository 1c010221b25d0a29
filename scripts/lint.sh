#!/usr/bin/env bash
# Runs clang-format (check only) and clang-tidy over dgt's C++ sources.
# Usage: scripts/lint.sh [--all] [BUILD_DIR]
#   By default only files changed against origin/main (or HEAD~1 when there is no remote) are
#   checked; --all checks the whole tree. BUILD_DIR (default build) supplies
#   compile_commands.json for clang-tidy. Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
if [ "${1:-}" = "--all" ]; then all=1; shift; fi
BUILD=${1:-build}
dirs=(agent cli common rendezvous store worker_runtime bench examples tests)
if [ $all -eq 1 ]; then
  mapfile -t files < <(git ls-files "${dirs[@]/%//*.cc}" "${dirs[@]/%//*.h}" 2>/dev/null)
else
  base=$(git rev-parse --verify -q origin/main || git rev-parse --verify -q HEAD~1 || true)
  if [ -n "$base" ]; then
    mapfile -t files < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.h' | grep -E "^($(IFS='|'; echo "${dirs[*]}"))/" || true)
  else
    files=()
  fi
fi
if [ ${#files[@]} -eq 0 ]; then echo "lint: no C++ files to check"; exit 0; fi
status=0
echo "lint: clang-format on ${#files[@]} file(s)"
if ! clang-format --dry-run -Werror "${files[@]}"; then status=1; fi
tidy_files=()
for f in "${files[@]}"; do
  case "$f" in
    *.cc) grep -q "\"file\": \"$(pwd)/$f\"" "$BUILD/compile_commands.json" 2>/dev/null && tidy_files+=("$f") ;;
  esac
done
if [ ${#tidy_files[@]} -gt 0 ]; then
  echo "lint: clang-tidy on ${#tidy_files[@]} file(s)"
  if ! clang-tidy -p "$BUILD" --quiet "${tidy_files[@]}" 2>/dev/null; then status=1; fi
fi
[ $status -eq 0 ] && echo "lint: clean"
exit $status
