#!/usr/bin/env bash
# Builds one libFuzzer target with Debian's clang++ (libFuzzer + ASan + UBSan) straight from the
# sources, so a gcc build can run the fuzzers too. The product sources a target tests are compiled
# into it, so libFuzzer sees their coverage. Exits 77 (skipped) when clang++ is missing.
# Usage: build_fuzzer.sh TARGET OUTPUT
#   TARGET: wire_parser_fuzzer | store_fuzzer | round_state_fuzzer | scheduler_fuzzer |
#           lifecycle_fuzzer
# Env: DGT_FUZZ_CXX (default clang++), DGT_FUZZ_OPT (default -O1), DGT_FUZZ_SANITIZE (default
# address,undefined; "undefined" builds without ASan for long throughput runs, bench/fuzz/run.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
target=${1:?usage: build_fuzzer.sh TARGET OUTPUT}
output=${2:?usage: build_fuzzer.sh TARGET OUTPUT}
cxx=${DGT_FUZZ_CXX:-clang++}
command -v "$cxx" > /dev/null || { echo "build_fuzzer: $cxx not found, skipping"; exit 77; }
extra=()
libs=()
absl=(absl_strings absl_str_format absl_status absl_statusor absl_raw_hash_set absl_hash
      absl_time)
case "$target" in
  wire_parser_fuzzer)
    sources=(store/wire.cc) ;;
  store_fuzzer)
    sources=(store/engine.cc store/wire.cc) ;;
  round_state_fuzzer)
    sources=(rendezvous/types.cc rendezvous/round_state.cc rendezvous/run_state_backend.cc
             run_status/run_status.cc) ;;
  scheduler_fuzzer)
    # jobs.proto's C++ is generated here, so the fuzzer needs no CMake build.
    gen=$(mktemp -d)
    trap 'rm -rf "$gen"' EXIT
    protoc -I"$src/proto" --cpp_out="$gen" "$src/proto/dgt/jobs/v1/jobs.proto"
    # Generated code is not ours to explore: compiled without coverage (libFuzzer's comparison
    # tracing in its copy constructors was most of the run time), with the same sanitizers.
    "${DGT_FUZZ_CXX:-clang++}" -std=c++20 ${DGT_FUZZ_OPT:--O1} -g \
      -fsanitize="${DGT_FUZZ_SANITIZE:-address,undefined}" -I"$gen" -c \
      "$gen/dgt/jobs/v1/jobs.pb.cc" -o "$gen/jobs.pb.o"
    extra=(-I"$gen" "$gen/jobs.pb.o")
    libs=(-lyaml-cpp $(pkg-config --libs protobuf))
    sources=(jobs/scheduler.cc jobs/job_spec.cc jobs/job_state.cc run_status/run_status.cc
             common/read_file.cc common/utf8.cc) ;;
  lifecycle_fuzzer)
    sources=(agent/lifecycle/node_lifecycle.cc agent/lifecycle/node_lifecycle_marks.cc
             agent/lifecycle/node_lifecycle_service.cc agent/lifecycle/node_lifecycle_workers.cc
             agent/lifecycle/restart_policy.cc agent/workers/worker_exit.cc
             common/signal_name.cc) ;;
  *)
    echo "build_fuzzer: unknown target '$target'" >&2
    exit 2 ;;
esac
sources=("${sources[@]/#/$src/}")
# shellcheck disable=SC2046
"$cxx" -std=c++20 ${DGT_FUZZ_OPT:--O1} -g -fsanitize=fuzzer,"${DGT_FUZZ_SANITIZE:-address,undefined}" \
  -fno-sanitize-recover=undefined -I"$src" "${extra[@]}" "$here/$target.cc" "${sources[@]}" \
  -o "$output" "${libs[@]}" $(pkg-config --libs "${absl[@]}")
