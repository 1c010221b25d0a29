#!/usr/bin/env bash
# Installs everything dgt builds, tests and benchmarks with: Debian's packages, then the test
# peers' virtual environment (torch 2.13 beside Debian's torch 1.13) from the pinned
# scripts/peers-requirements.txt, at $DGT_PEERS_VENV (default /opt/dgt/peers-venv, outside the
# repository so that every clone and CI run on this machine reuses it).
# Idempotent and non-interactive; quick when everything is there (the venv keeps a stamp with
# the requirements' hash and is rebuilt only when they change). Run as root (or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # Toolchain
  build-essential cmake ninja-build ccache pkg-config git clang clang-format clang-tidy
  libclang-rt-14-dev  # sanitizer runtimes and headers for the asan and tsan presets
  # Libraries
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libgrpc-dev
  libabsl-dev libboost-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libibverbs-dev libgloo-dev
  # dgt-agent: its config file (/etc/dgt/agent.yaml) and sd_notify (Type=notify, WATCHDOG)
  libyaml-cpp-dev libsystemd-dev
  # Tests
  libgtest-dev libgmock-dev python3 python3-pytest python3-torch python3-sklearn python3-numpy
  iproute2 iptables procps psmisc openssl python3-venv
  curl  # bench/rendezvous reads etcd's /metrics
  liburing-dev  # bench/store/floor_server's io_uring loop
  # Packaging: man pages (help2man), the .deb (cpack needs file and dpkg-shlibdeps), its test
  # (systemd-analyze, systemd-sysusers, systemd-tmpfiles; readelf)
  help2man file dpkg-dev systemd binutils
  # etcd v3 (docs/ETCD.md): the server and etcdctl the tests start and query, and the v3 .proto
  # files the client is generated from (golang-etcd-server-dev; it pulls in the gogo and
  # googleapis protos they import: golang-github-gogo-protobuf-dev,
  # golang-github-grpc-ecosystem-grpc-gateway-dev)
  etcd-server etcd-client golang-etcd-server-dev
  # Schedulers (docs/SCHEDULERS.md): a real resolver for the DNS-wait test (dnsmasq-base: the
  # binary, no system service), and Slurm with munge for the Slurm e2e test
  dnsmasq-base slurm-wlm munge
)

install_debian_packages() {
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages already installed"
    return
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The peers' venv, built from Debian's python3 (the interpreter the CPU torch wheel is for).
install_peers_venv() {
  local venv=${DGT_PEERS_VENV:-/opt/dgt/peers-venv}
  local req=scripts/peers-requirements.txt
  local hash stamp
  hash=$(sha256sum "$req" | cut -d' ' -f1)
  stamp="$venv/.dgt-requirements.sha256"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ] && [ -x "$venv/bin/python" ]; then
    echo "install-deps: peers venv $venv up to date"
    return
  fi
  if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "install-deps: $venv exists and is not a virtual environment; set DGT_PEERS_VENV" >&2
    exit 1
  fi
  echo "install-deps: creating peers venv $venv from $req"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
  # Wheels first; then deepspeed's source distribution, whose setup imports the torch just
  # installed (so no build isolation) and builds no C++/CUDA ops (DS_BUILD_OPS=0).
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps \
    -r <(grep -v '^deepspeed==' "$req")
  DS_BUILD_OPS=0 "$venv/bin/pip" install -q --disable-pip-version-check --no-deps \
    --no-build-isolation "$(grep '^deepspeed==' "$req")"
  "$venv/bin/python" -c 'import numpy, torch, torch.distributed as d; assert d.is_available()'
  "$venv/bin/python" -c 'import deepspeed, tensorflow, torchft, nvidia_resiliency_ext' \
    >/dev/null 2>&1 || {
    echo "install-deps: peers venv $venv: deepspeed/tensorflow/torchft/nvidia_resiliency_ext" \
      "do not import" >&2
    exit 1
  }
  echo "$hash" >"$stamp"
  echo "install-deps: peers venv ready: $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)')"
}

install_debian_packages
install_peers_venv
