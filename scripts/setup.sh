#!/usr/bin/env bash
# Fresh machine: install dependencies, build the library and the quickstart, run it.
# (scripts/test.sh builds the rest: tests, benchmarks, other examples.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target quickstart
./build/examples/quickstart
