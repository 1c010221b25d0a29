# Sourced by the scripts: points DGT_PYTHON at a Python that can import torch (Debian's
# /usr/bin/python3 with python3-torch, torch 1.13), unless the caller already chose one, and
# DGT_PYTHON2 at the test peers' venv python (torch 2.13; scripts/install-deps.sh makes it at
# $DGT_PEERS_VENV, default /opt/dgt/peers-venv).
if [ -z "${DGT_PYTHON:-}" ]; then
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch' 2>/dev/null; then
      DGT_PYTHON=$(command -v "$candidate")
      break
    fi
  done
  export DGT_PYTHON=${DGT_PYTHON:-/usr/bin/python3}
fi
export DGT_PYTHON2=${DGT_PYTHON2:-${DGT_PEERS_VENV:-/opt/dgt/peers-venv}/bin/python}
