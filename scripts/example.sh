#!/usr/bin/env bash
# Installs the dependencies, builds dgt, and trains the digits example on 4 local workers with the
# embedded rendezvous and store: dgt-run --standalone --nproc-per-node=4 examples/train_digits.py
# Builds only dgt-run (and the libraries it links), not the tests: scripts/build.sh builds all.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
DGT_BUILD_TARGETS=dgt-run scripts/build.sh
source scripts/python-env.sh
exec build/bin/dgt-run --standalone --nproc-per-node=4 examples/train_digits.py
