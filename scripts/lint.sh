#!/usr/bin/env bash
# Lints dgt's C++ sources: clang-format (check only) over every tracked file (product code, tests,
# benchmarks, examples), and clang-tidy over the product code's .cc files changed by the last
# commit (HEAD~1..HEAD), or over all of them with --all. Tests and benchmarks are formatted but not
# held to clang-tidy's performance checks (loops over a handful of test threads are not hot paths).
# Usage: scripts/lint.sh [--all] [BUILD_DIR]   (BUILD_DIR, default build, has compile_commands.json)
# Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
if [ "${1:-}" = "--all" ]; then all=1; shift; fi
BUILD=${1:-build}
pattern='^(agent|cli|common|rendezvous|store|worker_runtime|bench|examples|tests)/.*\.(cc|h)$'
mapfile -t format_files < <(git ls-files | grep -E "$pattern" || true)
status=0
echo "lint: clang-format on ${#format_files[@]} file(s)"
if [ ${#format_files[@]} -gt 0 ] && ! clang-format --dry-run -Werror "${format_files[@]}"; then
  status=1
fi
tidy_pattern='^(agent|cli|common|rendezvous|store|worker_runtime)/.*\.cc$'
if [ $all -eq 1 ]; then
  mapfile -t changed < <(git ls-files | grep -E "$tidy_pattern" || true)
elif git rev-parse --verify -q HEAD~1 >/dev/null; then
  mapfile -t changed < <(git diff --name-only --diff-filter=d HEAD~1 HEAD | grep -E "$tidy_pattern" || true)
else
  changed=()
fi
tidy_files=()
for f in "${changed[@]}"; do
  case "$f" in
    *.cc) grep -q "\"file\": \"$(pwd)/$f\"" "$BUILD/compile_commands.json" 2>/dev/null && tidy_files+=("$f") ;;
  esac
done
if [ ${#tidy_files[@]} -gt 0 ]; then
  echo "lint: clang-tidy on ${#tidy_files[@]} file(s): ${tidy_files[*]}"
  if ! clang-tidy -p "$BUILD" --quiet "${tidy_files[@]}" 2>/dev/null; then status=1; fi
else
  echo "lint: no changed .cc file for clang-tidy"
fi
[ $status -eq 0 ] && echo "lint: clean"
exit $status
