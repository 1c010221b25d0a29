#!/usr/bin/env bash
# The linearizability check of the etcd backends (tests/e2e/test_etcd_linearizability.py) for a
# given number of minutes: two dgt-rendezvous replicas on a three-member etcd, each in a network
# namespace (as root), four clients submitting, cancelling and reading jobs, two joining nodes to
# runs, a random fault 2-5 s after the last one healed (kill -9, SIGSTOP or a partition of a
# replica or an etcd member). Prints the seed, the ops and faults counted, and fails with the
# first violations found (docs/RELIABILITY.md).
# Usage: etcd.sh --minutes N [--seed S] [BUILD_DIR]   (BUILD_DIR defaults to ./build)
#   e.g. nice -n 10 bench/chaos/etcd.sh --minutes 30
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
minutes=""
seed=""
build=$src/build
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=${2:-}; shift 2 ;;
    --seed) seed=${2:-}; shift 2 ;;
    -*) echo "etcd.sh: unknown flag '$1'" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
case "$minutes" in
  '' | *[!0-9]* | 0) echo "etcd.sh: --minutes must be a whole number of minutes above 0," \
    "got '$minutes'" >&2; exit 2 ;;
esac
case "$seed" in *[!0-9]*) echo "etcd.sh: --seed must be a number, got '$seed'" >&2; exit 2 ;; esac
[ -x "$build/bin/dgt-rendezvous" ] || { echo "etcd.sh: no $build/bin/dgt-rendezvous" \
  "(build first, or pass BUILD_DIR)" >&2; exit 2; }
python=${DGT_PYTHON:-python3}
export DGT_BIN_DIR=$build/bin DGT_CHAOS_SECONDS=$((minutes * 60))
[ -n "$seed" ] && export DGT_CHAOS_SEED=$seed
exec "$python" -m pytest -q -s -p no:cacheprovider \
  "$src/tests/e2e/test_etcd_linearizability.py"
