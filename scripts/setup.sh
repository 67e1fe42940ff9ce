#!/usr/bin/env bash
# Fresh machine: install dependencies, build everything, run the quickstart.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
./build/examples/quickstart
