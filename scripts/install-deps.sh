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
# nvdisasm, for bench/sass_report.py and the tests/sass checks (they skip
# without it): not in every CUDA install, so it comes from NVIDIA's wheel on
# PyPI (nvidia-cuda-nvdisasm, of the toolkit's major version), unpacked into
# the user's cache, where scripts/find-nvdisasm.sh finds it.
scripts_dir="$(cd "$(dirname "$0")" && pwd)"
if ! "$scripts_dir/find-nvdisasm.sh" >/dev/null; then
  cuda_major="$(/usr/local/cuda/bin/ptxas --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
  target="${XDG_CACHE_HOME:-$HOME/.cache}/pallaskernels/nvdisasm"
  echo "installing nvdisasm (nvidia-cuda-nvdisasm==${cuda_major}.*) into $target"
  if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
         --no-warn-script-location --upgrade --target "$target" \
         "nvidia-cuda-nvdisasm==${cuda_major}.*" ||
     ! "$scripts_dir/find-nvdisasm.sh" >/dev/null; then
    echo "warning: could not install nvdisasm; the SASS checks (tests/sass) will be skipped" >&2
  fi
fi
