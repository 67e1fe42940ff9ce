#!/usr/bin/env bash
# Prints the path of an nvdisasm that runs, or exits 1. Looks at, in order:
# $PALLAS_NVDISASM, PATH, /usr/local/cuda/bin, the pip wheel
# (nvidia-cuda-nvdisasm) where scripts/install-deps.sh puts it
# (${XDG_CACHE_HOME:-~/.cache}/pallaskernels/nvdisasm), and Python's site
# directories. bench/sass_report.py looks in the same places.
set -uo pipefail
cands=("${PALLAS_NVDISASM:-}" "$(command -v nvdisasm 2>/dev/null)" /usr/local/cuda/bin/nvdisasm)
roots=("${XDG_CACHE_HOME:-$HOME/.cache}/pallaskernels/nvdisasm")
if command -v python3 >/dev/null 2>&1; then
  while IFS= read -r d; do roots+=("$d"); done < <(python3 -c \
    'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' \
    2>/dev/null)
fi
for r in "${roots[@]}"; do
  for c in $(ls -1d "$r"/nvidia/cu*/bin/nvdisasm "$r"/nvidia/cuda_nvdisasm/bin/nvdisasm \
             2>/dev/null | sort -r); do
    cands+=("$c")
  done
done
for c in "${cands[@]}"; do
  if [ -n "$c" ] && [ -x "$c" ] && "$c" --version >/dev/null 2>&1; then
    echo "$c"
    exit 0
  fi
done
exit 1
