#!/usr/bin/env bash
# Packs what bench/run_on_device.sh runs into one archive the `device` tool can carry
# (its carry is at most 64 MiB in all; the programs are ~70 MiB as built, ~18 MiB packed):
#
#   ninja -C build && bench/pack_for_device.sh
#   run(command="bench/run_on_device.sh", carry=["build/device"])
#
# run_on_device.sh unpacks build/device/bundle.tar.gz in place before it starts.
#
#   bench/pack_for_device.sh --keep-previous
#
# first keeps the matmul bench of the bundle it replaces (build/device/previous-bench.gz,
# ~8 MiB), so that bench/ab_on_device.sh can time the previous build against this one on
# the same rows in one device call.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--keep-previous" ]; then
  [ -f build/device/bundle.tar.gz ] || { echo "pack_for_device: no previous bundle" >&2; exit 1; }
  previous=$(mktemp -d)
  tar -xzf build/device/bundle.tar.gz -C "$previous" build/bench/pallas_matmul_bench
  gzip -c "$previous/build/bench/pallas_matmul_bench" > build/device/previous-bench.gz
  rm -rf "$previous"
  echo "build/device/previous-bench.gz: the previous bundle's pallas_matmul_bench"
fi
programs=(build/bench/pallas_bench build/bench/pallas_matmul_bench build/tests/ops/ops_test
          build/tests/kernels/features_test build/tests/runtime/runtime_cuda_test)
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "pack_for_device: $p is missing; build first (ninja -C build)" >&2; exit 1; }
  mkdir -p "$staging/$(dirname "$p")"
  strip -o "$staging/$p" "$p"
done
mkdir -p build/device
tar -C "$staging" -czf build/device/bundle.tar.gz build
bytes=$(stat -c %s build/device/bundle.tar.gz)
limit=$((64 * 1024 * 1024))
echo "build/device/bundle.tar.gz: $((bytes / 1048576)) MiB (the carry limit is 64 MiB)"
if [ "$bytes" -ge "$limit" ]; then
  echo "pack_for_device: the archive is over the device tool's 64 MiB carry" >&2
  exit 1
fi
