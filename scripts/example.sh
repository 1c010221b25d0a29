#!/usr/bin/env bash
# Installs the dependencies, builds dgt, and trains the digits example on 4 local workers with the
# embedded rendezvous and store: dgt-run --standalone --nproc-per-node=4 examples/train_digits.py
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
source scripts/python-env.sh
exec build/bin/dgt-run --standalone --nproc-per-node=4 examples/train_digits.py
