#!/usr/bin/env bash
# The chaos soak (bench/chaos/soak.py, docs/RELIABILITY.md "The chaos soak"): 3 etcd members,
# 2 dgt-rendezvous replicas and 4 dgt-agents in network namespaces run a stream of `dgt submit`ted
# torch 2.13 DDP jobs while a random fault hits every 5-20 s. Prints the seed, the jobs, the
# faults by kind and the must-be-0 lines; exits 1 when one is not 0, 2 on a bad flag.
# Usage: run.sh --minutes N | --seconds N  [--seed S] [--build DIR]   (DIR defaults to ./build)
#   e.g. nice -n 10 bench/chaos/run.sh --minutes 30
# Needs root. SIGINT, SIGTERM and SIGHUP end it early; it removes its namespaces, iptables rules,
# processes and temporary directory on any exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../scripts/python-env.sh
source "$here/../../scripts/python-env.sh"
exec "$DGT_PYTHON" "$here/soak.py" "$@"
