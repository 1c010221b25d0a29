#!/usr/bin/env bash
# Installs everything dgt builds, tests and benchmarks with, from Debian's archive.
# Idempotent and non-interactive; run as root (or with sudo available).
set -euo pipefail

packages=(
  # Toolchain
  build-essential cmake ninja-build ccache pkg-config git clang clang-format clang-tidy
  # Libraries
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libgrpc-dev
  libabsl-dev libboost-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libibverbs-dev libgloo-dev
  # Tests
  libgtest-dev libgmock-dev python3 python3-pytest python3-torch python3-sklearn python3-numpy
  iproute2 iptables procps psmisc openssl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
