#!/usr/bin/env bash
# Installs the dependencies, then builds and tests dgt in every configuration CI checks:
#   release  full suite: unit tests, then end-to-end tests (real processes, Debian's PyTorch),
#            then the .deb's checks (ctest -L install)
#   asan     unit and integration tests under AddressSanitizer + UBSan + LeakSanitizer (clang),
#            then the libFuzzer smokes (ctest -L fuzz) with the fuzzers this build made
#   tsan     unit and integration tests under ThreadSanitizer, with -Wthread-safety (clang)
#   lint     clang-format over every tracked C++ file, clang-tidy over every product .cc file
#            (scripts/lint.sh build; results cached per file)
# DGT_TEST_STAGES="release asan" runs a subset. Prints how long each stage took.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=${DGT_TEST_STAGES:-"release asan tsan lint"}
start=$(date +%s)
stage_start=$start
summary=()
done_stage() {
  local now
  now=$(date +%s)
  summary+=("$1: $((now - stage_start)) s")
  echo "test: stage $1 done in $((now - stage_start)) s"
  stage_start=$now
}

scripts/install-deps.sh
source scripts/python-env.sh
done_stage install-deps

for stage in $stages; do
  case "$stage" in
    release)
      scripts/build.sh
      (cd build && ctest --output-on-failure -j "$(nproc)" -L unit)
      # The end-to-end tests one at a time (timing bounds); the fuzz smokes run in the asan stage.
      (cd build && ctest --output-on-failure -L e2e -LE fuzz)
      (cd build && ctest --output-on-failure -L install)
      ;;
    asan|tsan)
      [ -f "build-$stage/build.ninja" ] || cmake --preset "$stage" >/dev/null
      cmake --build --preset "$stage" -j "$(nproc)"
      ctest --preset "$stage" -j "$(nproc)"
      if [ "$stage" = asan ]; then
        (cd build-asan && ctest --output-on-failure -j "$(nproc)" -L fuzz)
      fi
      ;;
    lint)
      [ -f build/compile_commands.json ] || scripts/build.sh
      scripts/lint.sh build
      ;;
    *)
      echo "test: unknown stage '$stage'" >&2
      exit 2
      ;;
  esac
  done_stage "$stage"
done
echo "test: all stages passed in $(( $(date +%s) - start )) s (${summary[*]})"
