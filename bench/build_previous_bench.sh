#!/usr/bin/env bash
# Builds pallas_matmul_bench at an earlier commit, beside this checkout, and keeps it as
# build/device/previous-bench.gz: the "previous" side of bench/ab_on_device.sh, for timing a
# change against the commit before it in one device call without checking that commit out
# here:
#
#   bench/build_previous_bench.sh cdf7210     # a worktree in build/previous-src, ~5 min
#   ninja -C build && bench/pack_for_device.sh
#   run(command="bench/ab_on_device.sh 2 attention,1024,512,64 ...", carry=["build/device"])
#
#   bench/build_previous_bench.sh e5a67ce build/device/e5a67ce-bench.gz   # another name
#
# (pack_for_device.sh --keep-previous does the same from the last bundle packed, when that
# bundle was built from the earlier commit.) Several previous builds, each under its own name,
# can go to the device in one call (ab_on_device.sh's PREVIOUS_BENCH picks one). The worktree
# and its build stay in build/previous-src for the next call; a different REV checks that one
# out there.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/build_previous_bench.sh REV [OUT.gz]}
out=${2:-build/device/previous-bench.gz}
src=build/previous-src
commit=$(git rev-parse --verify "$rev^{commit}")
if [ -f "$src/.git" ]; then  # a worktree of this repository (its .git is a file)
  git -C "$src" checkout -q --detach "$commit"
elif [ -e "$src" ]; then  # git -C would find this checkout's .git above it, and check REV out here
  echo "build_previous_bench: $src exists but is not a worktree; remove it first" >&2
  exit 1
else
  mkdir -p build
  git worktree prune  # a worktree whose build/ was deleted since
  git worktree add -q --detach "$src" "$commit"
fi
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$src/build" -j "$(nproc)" --target pallas_matmul_bench
mkdir -p "$(dirname "$out")"
staging=$(mktemp)
trap 'rm -f "$staging"' EXIT
strip -o "$staging" "$src/build/bench/pallas_matmul_bench"
gzip -c "$staging" > "$out"
echo "$out: pallas_matmul_bench at $(git log -1 --format='%h %s' "$commit" | cut -c1-80)"
