#!/usr/bin/env bash
# Installs dgt into a temporary prefix, builds examples/store_client against it twice (CMake
# find_package(dgt) and pkg-config dgt-store), and runs it as two ranks against the installed
# `dgt store serve`. Usage: store_example_test.sh SOURCE_DIR BUILD_DIR
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
test -f "$tmp/prefix/include/dgt/store/client.h"
test -f "$tmp/prefix/lib/cmake/dgt/dgtConfig.cmake"
test -f "$tmp/prefix/lib/pkgconfig/dgt-store.pc"
# Public headers only: nothing private (store/wire.h, common/...) is installed or included.
if grep -rhE '#include "(store|common)/' "$tmp/prefix/include"; then
  echo "FAIL: an installed header includes a private one" >&2; exit 1
fi

cmake -S "$src/examples/store_client" -B "$tmp/example" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log"
cmake --build "$tmp/example" > "$tmp/build.log"

export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
c++ -o "$tmp/store_client_pc" "$src/examples/store_client/main.cc" \
  $(pkg-config --cflags --libs dgt-store)

start_store_server

"$tmp/store_client_pc" 127.0.0.1 "$port" 1 2 > "$tmp/rank1.out" &
rank1=$!
out=$(timeout 30 "$tmp/example/store_client" 127.0.0.1 "$port" 0 2)
wait "$rank1"
expected=$'rank 0 at 10.0.0.1\nrank 1 at 10.0.0.2'
if [[ $out != "$expected" ]]; then
  echo "FAIL: got:"; echo "$out"; exit 1
fi
joined=$(timeout 10 "$tmp/prefix/bin/dgt" store get example/joined --endpoint "127.0.0.1:$port")
[[ $joined == 2 ]] || { echo "FAIL: joined=$joined" >&2; exit 1; }
echo "PASS: installed example (CMake and pkg-config builds) ran as 2 ranks"
