#!/usr/bin/env bash
# Installs dgt into a temporary prefix, builds examples/allreduce_trainer against it twice (CMake
# find_package(dgt) → dgt::worker, and pkg-config dgt-worker), and runs each build as one rank of
# a 2-rank job against the installed `dgt store serve`, checking the exact total.
# Usage: worker_example_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=tests/install/lib.sh
source "$src/tests/install/lib.sh"

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
test -f "$tmp/prefix/include/dgt/worker/elastic_group.h"
test -f "$tmp/prefix/lib/pkgconfig/dgt-worker.pc"
# The Python package: importable from the prefix (its modules import torch only when used).
PYTHONPATH="$tmp/prefix/lib/python3/dist-packages" python3 -c \
  'import dgt.keys, dgt.recovery; assert dgt.keys.open_key("world", 1) == "dgt/recovery/world/g1/open"'
if grep -rhE '#include "(store|common|worker_runtime)/' "$tmp/prefix/include"; then
  echo "FAIL: an installed header includes a private one" >&2; exit 1
fi

# The in-tree CMakeLists uses dgt's helpers; an outside project links the installed package.
mkdir -p "$tmp/example_src"
cp "$src/examples/allreduce_trainer/main.cc" "$tmp/example_src/"
cat > "$tmp/example_src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(dgt_worker_example LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
find_package(dgt CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
add_executable(allreduce_trainer main.cc)
target_link_libraries(allreduce_trainer PRIVATE dgt::worker CLI11::CLI11)
CMAKE
cmake -S "$tmp/example_src" -B "$tmp/example" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log"
cmake --build "$tmp/example" > "$tmp/build.log"

export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
c++ -o "$tmp/trainer_pc" "$src/examples/allreduce_trainer/main.cc" \
  $(pkg-config --cflags --libs dgt-worker)

start_store_server

run_rank() {  # rank binary
  env RANK="$1" LOCAL_RANK="$1" WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0 GROUP_WORLD_SIZE=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_RESTART_COUNT=0 \
    TORCHELASTIC_RUN_ID=install-test timeout 60 "$2" --steps 5 --step-ms 0 --init-timeout 30
}
run_rank 1 "$tmp/trainer_pc" > "$tmp/rank1.out" 2> "$tmp/rank1.err" &
rank1=$!
run_rank 0 "$tmp/example/allreduce_trainer" > "$tmp/rank0.out" 2> "$tmp/rank0.err" || {
  echo "FAIL: rank 0:" >&2; cat "$tmp/rank0.err" >&2; exit 1; }
wait "$rank1" || { echo "FAIL: rank 1:" >&2; cat "$tmp/rank1.err" >&2; exit 1; }
# sum over 5 steps of (1000 + s) + (2000 + s) = 15020
for r in 0 1; do
  grep -qE "^EVENT done rank=$r .* steps=5 total=15020 members=0,1 " "$tmp/rank$r.out" || {
    echo "FAIL: rank $r:" >&2; cat "$tmp/rank$r.out" "$tmp/rank$r.err" >&2; exit 1; }
done
echo "PASS: installed dgt::worker (CMake and pkg-config builds) ran a 2-rank all-reduce"
