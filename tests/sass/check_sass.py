#!/usr/bin/env python3
"""Static checks of the generated kernels' machine code (no GPU needed).

    check_sass.py --rule spills  --build-dir BUILD   # ptxas -v: no spill, any arch
    check_sass.py --rule wide    --build-dir BUILD   # SASS: 16-byte main-path accesses
    check_sass.py --rule tma     --build-dir BUILD   # SASS: staged kernels copy with TMA
    check_sass.py --rule mma     --build-dir BUILD   # SASS: products use tensor cores
    check_sass.py --planted DIR  --build-dir BUILD   # the rules catch the planted PTX

The PTX is BUILD/generated/ptx/<instance>.<arch>.ptx (every arch); each is
assembled as the codegen does (ptxas -arch=<arch> -O3 -v). The rules and the
"main path" are defined in bench/sass_report.py (its docstring):
  spills  no kernel spills registers on any arch;
  wide    in every elementwise, row and whole-array kernel, the main path loads
          with LDG.E.128, and (except for the reductions, whose outputs are
          per-row scalars) stores with STG.E.128 when it stores 16 bytes or
          more per thread;
  tma     every kernel with blocks staged in shared memory (InShared or a TMA
          pipeline; not its `_direct` twin) has UTMALDG in its sm_90a SASS, and
          UTMASTG where its outputs are staged (transpose), and LDGSTS
          (cp.async) in its sm_80 SASS. Such kernels'
          global loads are TMA copies: the wide rule checks their twins. The
          matmul family's sm_90a tiles instances (clusters of two sharing B)
          also have multicast copies (UTMALDG...MULTICAST).
  mma     every matrix-product instance (bench/sass_report.py's MATMULS, the
          `_direct` twins too) has HGMMA (wgmma) in its sm_90a SASS and HMMA
          (mma.sync) in its sm_80 SASS, and the warp-specialized ones
          (WARP_SPECIALIZED, staged instance) USETMAXREG on sm_90a and a K
          loop that keeps one wgmma in flight (WARPGROUP.DEPBAR.LE gsb0, 0x1
          on every step, no DEPBAR 0x0 on every step: sass_report's
          mma_pipelining), except the swapped split-K instances, whose step
          waits once, after its last HGMMA (mma_step_waits); and the deep split-K
          instances (`_decode`, `_splitk_deep`) meet their cluster (UCGABAR_ARV,
          UCGABAR_WAIT: the splits' sum in a cluster).
--planted runs the rules on the PTX in DIR and passes only if each planted
file is rejected by the rule its name says (`_planted_spill`, `_planted_narrow`,
`_planted_notma`, `_planted_nomulticast`, `_planted_nomma`; `_planted_serial` and `_planted_latchwait`:
the mma rule's serialized wgmmas; `_planted_midwait`: a swapped split-K step waiting
between its HGMMAs; `_planted_nocluster`: a deep split-K instance without barrier.cluster):
the checks can fail.

Exit status: 0 pass, 1 fail, 77 skipped (nvdisasm not installed: see
scripts/install-deps.sh; ptxas or the PTX missing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(HERE.parent.parent / "bench"))
import sass_report as sr  # noqa: E402

SKIP = sr.SKIP


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", type=Path, required=True)
    ap.add_argument("--rule", choices=["spills", "wide", "tma", "mma"])
    ap.add_argument("--planted", type=Path, help="directory of planted PTX")
    ap.add_argument("--ptxas")
    ap.add_argument("--nvdisasm")
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    args = ap.parse_args()
    if bool(args.rule) == bool(args.planted):
        ap.error("give one of --rule, --planted")

    ptxas = sr.find_tool("ptxas", args.ptxas)
    if not ptxas:
        print("SKIPPED: ptxas not found")
        return SKIP
    need_sass = args.planted or args.rule in ("wide", "tma", "mma")
    nvdisasm = sr.find_nvdisasm(args.nvdisasm) if need_sass else None
    if need_sass and not nvdisasm:
        print("SKIPPED: nvdisasm not found (scripts/install-deps.sh installs it from PyPI, "
              "nvidia-cuda-nvdisasm; or set PALLAS_NVDISASM)")
        return SKIP
    ptx_dir = args.planted or args.build_dir / "generated" / "ptx"
    if not sr.our_ptx(ptx_dir, None):
        print(f"SKIPPED: no PTX in {ptx_dir} (build the library first)")
        return SKIP
    cache = args.cache_dir or args.build_dir / "sass_report"
    kernels = sr.load_ours(ptx_dir, None, ptxas, nvdisasm, cache, args.jobs)

    for k in kernels:
        if k.kind == "other":
            print(f"note: {k.instance} is not an op listed in bench/sass_report.py "
                  "(ELEMENTWISE/ROW/WHOLE); only the spill rule applies to it")

    if args.planted:
        found = sr.violations(kernels)
        for _, line in found:
            print("  caught: " + line)
        missed = []
        for k in kernels:
            mine = {rule for rule, v in found if v.startswith(f"{k.instance} ({k.arch})")}
            if "_planted_spill" in k.instance and "spill" not in mine:
                missed.append(f"{k.instance} ({k.arch}): the spill was not reported")
            if "_planted_narrow" in k.instance and "wide" not in mine:
                missed.append(f"{k.instance} ({k.arch}): the narrow accesses were not reported")
            if "_planted_notma" in k.instance and "tma" not in mine:
                missed.append(f"{k.instance} ({k.arch}): the missing TMA copies were not reported")
            multicast = [v for rule, v in found if v.startswith(f"{k.instance} ({k.arch})")
                         and "without multicast copies" in v]
            if "_planted_nomulticast" in k.instance and not multicast:
                missed.append(f"{k.instance} ({k.arch}): the missing multicast copies were not "
                              "reported")
            pipelining = [v for rule, v in found if v.startswith(f"{k.instance} ({k.arch})")
                          and ("keeps a wgmma in flight" in v or "waits for every wgmma" in v)]
            if ("_planted_serial" in k.instance or "_planted_latchwait" in k.instance) and \
                    not pipelining:
                missed.append(f"{k.instance} ({k.arch}): the serialized wgmmas were not reported")
            early = [v for rule, v in found if v.startswith(f"{k.instance} ({k.arch})")
                     and "between a step's HGMMAs" in v]
            if "_planted_midwait" in k.instance and not early:
                missed.append(f"{k.instance} ({k.arch}): the wait between a swapped split-K "
                              "step's HGMMAs was not reported")
            nocluster = [v for rule, v in found if v.startswith(f"{k.instance} ({k.arch})")
                         and "without barrier.cluster" in v]
            if "_planted_nocluster" in k.instance and not nocluster:
                missed.append(f"{k.instance} ({k.arch}): the missing cluster sum was not "
                              "reported")
            if "_planted_nomma" in k.instance and "mma" not in mine:
                missed.append(f"{k.instance} ({k.arch}): the missing tensor-core MMAs were not "
                              "reported")
        for m in missed:
            print("FAIL: " + m)
        print(f"{len(kernels)} planted kernels, {len(found)} violations reported, "
              f"{len(missed)} missed")
        return 1 if missed or not kernels else 0

    rule = "spill" if args.rule == "spills" else args.rule
    found = [v for r, v in sr.violations(kernels, check_width=rule == "wide") if r == rule]
    if args.rule == "tma":
        checked = [k for k in kernels if k.staged and k.arch.startswith(("sm_9", "sm_8"))]
        what = ("async copies in staged kernels (sm_90a: UTMALDG, UTMASTG for staged "
                "outputs; sm_80: LDGSTS)")
        if not checked:
            print("FAIL: no staged kernel built for sm_90a")
            return 1
    elif args.rule == "mma":
        checked = [k for k in kernels if k.kind == "matmul" and k.arch.startswith(("sm_9", "sm_8"))]
        what = "tensor-core MMAs in matrix products (sm_90a: HGMMA; sm_80: HMMA)"
        if not checked:
            print("FAIL: no matrix-product kernel found")
            return 1
    elif args.rule == "wide":
        checked = [k for k in kernels
                   if k.kind in ("elementwise", "row", "whole") and not k.staged]
        what = "16-byte main-path global accesses"
    else:
        checked = kernels
        what = "no register spills"
    for v in found:
        print("FAIL: " + v)
    archs = sorted({k.arch for k in checked})
    print(f"{what}: {len(checked)} kernels ({', '.join(archs)}), {len(found)} violations")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
