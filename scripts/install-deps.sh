#!/usr/bin/env bash
# Installs the Debian packages pallaskernels builds with (idempotent). The CUDA
# toolkit (12.8 or newer) is expected in /usr/local/cuda.
set -euo pipefail
packages=(cmake ninja-build g++ llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
          libgtest-dev libgmock-dev libbenchmark-dev libboost-context-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
if [ ! -x /usr/local/cuda/bin/ptxas ]; then
  echo "error: the CUDA toolkit (12.8+) is not in /usr/local/cuda" >&2
  exit 1
fi
