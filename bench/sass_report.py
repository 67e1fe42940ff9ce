#!/usr/bin/env python3
"""Static SASS report: pallaskernels' generated kernels next to hand-written CUDA.

    bench/sass_report.py [--build-dir build] [--arch sm_90a] [--all] [--json FILE]

For every PTX the codegen wrote (BUILD/generated/ptx/<instance>.<arch>.ptx) the
report assembles a cubin the way the codegen does (`ptxas -arch=<arch> -O3 -v`;
the codegen keeps its cubins in memory only), and it takes the reference
kernels' cubin (bench/reference/, from BUILD/bench/reference/ when the build
made it, else compiled here with nvcc). It disassembles each with nvdisasm
(scripts/find-nvdisasm.sh says where it looks; scripts/install-deps.sh installs
it) and prints per kernel:

  regs         registers per thread (ptxas -v)
  spill        spill stores + spill loads in bytes (ptxas -v); `+nL` counts the
               LDL/STL instructions in the SASS (spills or stack arrays)
  smem         static shared memory in bytes (ptxas -v)
  bar          BAR.SYNC instructions: in the region (below) / in the kernel
  LDG, STG     global loads and stores in the whole kernel by width in bytes,
               16/8/4/2/1 (LDG.E.128 is 16, .64 8, none 4, .U16 2, .U8 1)
  region at    how instr/elem was measured (loop or path, below) and the SASS
               addresses of the region
  path LDG STG the main path's global loads and stores by width
  instr, elems the region's instructions and elements moved, per thread
  instr/elem   their ratio

--all adds every reference kernel and the rule check (--check) to the
listing; --json FILE writes every row with the same fields. Cubins and
listings are cached by hash in BUILD/sass_report.

The main path, statically
-------------------------
A kernel's SASS is split into basic blocks (leaders: labels, branch targets,
the instruction after a branch or EXIT) and a control-flow graph (BRA, and the
CALL.REL.NOINC to a local label that sm_80 code uses to leave loops; calls to
subroutines such as a division's slow path are not followed). A branch to an
address at or before itself is a loop's back edge; the loop is the address
range from its target to the branch (ptxas lays loops out contiguously).

pallaskernels' row kernels choose a path at run time from the row length
(`when(cols <= 2048) {...}`: a tile of short rows, a row held in registers,
a chunk loop, rows split across programs), one after another in the code, so
a single path through the graph would run through all of them. The
alternatives are found as guarded sections: block ranges skipped by a forward
branch that load from global memory, communicate across threads (SHFL, REDUX
or BAR.SYNC) and store to global memory, and hold no smaller such range. The
masked fallback of a 16-byte access, or a per-vector `if` of a hand-written
kernel, has no cross-thread operation and is not one. Candidates: every
guarded section, and the rest of the kernel with the sections skipped.

In each candidate, the heaviest path from its first block to its end (or to
an EXIT) over forward edges is taken (address order is a topological order;
a back edge continues to where the loop's head exits, so a loop is one trip
through its body). Its weight, in this order: more bytes moved by 16-byte
global accesses, fewer by narrower ones (so a 16-byte run is preferred to its
masked fallback), more instructions (a branch around compute, such as a
hand-written kernel's `if (in_row[i])` around vector i's arithmetic, is taken
by every thread of a full row); where no path has a 16-byte access, more
bytes moved. The main path is the candidate path that moves the most bytes
with 16-byte accesses; ties go to one with a loop, then to fewer
instructions. For the norms and softmax that is the 4096-element row held in
registers; for the row reductions, the chunk loop.

Instructions per element (instr/elem) is measured on a region of the main
path:
  loop   if the path enters loops that hold global accesses: the innermost
         such loop with the most 16-byte bytes (then the most bytes); the
         region is the path's blocks inside it, i.e. one trip through its body
         as the path takes it (loop control included);
  path   otherwise: the path from its first global access to its last, i.e.
         the loads, the statistics and reductions (shuffles, barriers), the
         arithmetic and the stores of one row or tile.
instr/elem = instructions in the region (every issued instruction, predicated
or not; NOPs excluded) / elements moved in the region per thread, where
elements moved = (bytes loaded + bytes stored by LDG/STG in the region) /
element size of the instance's dtype (the first one in its name, e.g. 2 for
bf16; approximate for cast, whose sides differ). A softmax of a row held in
registers moves each element twice (load, store), a norm three times (x, w,
y): compare ours with the reference for the same op, not ops with each other.
It is a static count of one pass through the region, not a measurement; the
masked tails and the other row shapes are not counted.

Rules (--check, used by tests/sass): no spill (ptxas -v) in any kernel on any
arch; and in every elementwise, row and whole-array reduction kernel the main
path loads with LDG.*.128, and, except in the reductions (row_sum, row_max,
cross_entropy, sum_all, max_all, whose outputs are per-row or per-array
scalars), stores with STG.*.128 when it stores 16 bytes or more per thread.
Exit status: 0 clean, 1 violations, 2 no PTX, 77 (ctest's SKIP_RETURN_CODE)
when ptxas or nvdisasm is missing.

Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SKIP = 77
REPO = Path(__file__).resolve().parent.parent
CUDA_BIN = Path("/usr/local/cuda/bin")

# Instance name prefixes by kind (generated/CMakeLists.txt's PALLAS_OPS).
ELEMENTWISE = ["add", "mul", "axpy", "gelu", "silu", "bias_gelu", "cast"]
ROW = ["rms_norm", "rms_norm_residual", "layer_norm", "layer_norm_residual", "softmax",
       "log_softmax", "row_sum", "row_max", "cross_entropy"]
WHOLE = ["sum_all", "max_all"]
# Ops whose blocks are staged in shared memory by TMA (InShared) in and out: on
# sm_90 their instances (not the `_direct` twins) must copy with UTMALDG and
# UTMASTG; on sm_80 every staged instance must copy with LDGSTS (cp.async). Any other instance with a `_direct` twin stages inputs (a TMA
# pipeline: the rows path of row_sum and row_max, cross_entropy) and must
# have UTMALDG; its global loads are TMA copies, so the 16-byte rule checks
# its direct twin instead.
STAGED = ["transpose"]
STAGED_OUTPUTS = {"transpose"}
# Ops whose programs multiply with tensor cores: every instance, the `_direct`
# twins included, must have HGMMA (wgmma) in its sm_90a SASS and HMMA
# (mma.sync) in its sm_80 SASS.
MATMULS = ["matmul", "matmul_bt", "gemm", "gemm_bt", "linear_bias", "linear_bias_gelu",
           "linear_bias_silu", "linear_residual", "batched_matmul", "batched_matmul_bt",
           "attention", "causal_attention"]
# Of those, the ones whose sm_90a staged instance is a warp-specialized
# pipeline (all of them, B [K, N] too since it is read in place): its producer warpgroup gives up registers (USETMAXREG.DEALLOC, PTX
# setmaxnreg.dec) and the consumer takes them (USETMAXREG.TRY_ALLOC), and its K loop keeps
# one wgmma in flight: HGMMA and WARPGROUP.DEPBAR.LE gsb0, 0x1 on every iteration, no
# WARPGROUP.DEPBAR.LE gsb0, 0x0 (mma_pipelining), except the split-K instances (split_k):
# their step waits for its multiplies once, after the last of them, and releases its stage at
# once (mma_step_waits). Their deep instances (`_decode`, `_splitk_deep`) also meet their
# cluster (UCGABAR_ARV, UCGABAR_WAIT): the splits sum in a thread-block cluster.
WARP_SPECIALIZED = set(MATMULS) - {"attention", "causal_attention"}  # one warpgroup, no producer


def split_k(instance: str) -> bool:
    """Whether a product's instance is split-K's (`_splitk`, `_decode`), which multiplies D^T =
    B A^T (kernel_specs/matmul.cc), each step's multiplies waited for at once."""
    return "_splitk" in instance or "_decode" in instance
# Ops whose outputs are per-row or per-array scalars: no 16-byte store rule.
REDUCTIONS = {"row_sum", "row_max", "cross_entropy", "sum_all", "max_all"}
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}

# The reference kernel each op is compared with (bench/reference/
# reference_kernels.cu), by a fragment of its mangled name: the shape of our
# main path (a 4096-element row held in registers by a CTA of 128 threads; the
# chunk loop for the reductions).
REFERENCE_FOR = {
    "softmax": ("12softmax_heldILi128ELi4ELb0E", "softmax_held<128,4,false>"),
    "log_softmax": ("12softmax_heldILi128ELi4ELb1E", "softmax_held<128,4,true>"),
    "rms_norm": ("9norm_heldILi128ELi4ELb0E", "norm_held<128,4,false>"),
    "layer_norm": ("9norm_heldILi128ELi4ELb1E", "norm_held<128,4,true>"),
    "row_sum": ("7row_sumILi128EE", "row_sum<128>"),
    "cross_entropy": ("13cross_entropyILi128EE", "cross_entropy<128>"),
}
# Paths of ours with a reference of their own shape: a 2048-element row held
# by 128 threads (two 16-byte vectors per thread instead of four).
REFERENCE_FOR_PATH = {
    ("softmax", "row2048"): ("12softmax_heldILi128ELi2ELb0E", "softmax_held<128,2,false>"),
    ("log_softmax", "row2048"): ("12softmax_heldILi128ELi2ELb1E", "softmax_held<128,2,true>"),
    ("rms_norm", "row2048"): ("9norm_heldILi128ELi2ELb0E", "norm_held<128,2,false>"),
    ("layer_norm", "row2048"): ("9norm_heldILi128ELi2ELb1E", "norm_held<128,2,true>"),
}


def reference_for(op: str, instance: str) -> tuple[str, str] | None:
    """(mangled-name fragment, short name) of the reference for our instance."""
    path = instance.rsplit("_", 1)[-1]
    return REFERENCE_FOR_PATH.get((op, path), REFERENCE_FOR.get(op))


class ToolMissing(Exception):
    pass


#===------------------------------------------------------------------------===#
# Tools
#===------------------------------------------------------------------------===#

def find_nvdisasm(explicit: str | None = None) -> str | None:
    """nvdisasm: --nvdisasm, $PALLAS_NVDISASM, PATH, the CUDA toolkit, then the
    pip wheel (nvidia-cuda-nvdisasm) where scripts/install-deps.sh puts it, or
    in a Python site directory."""
    cands = [explicit, os.environ.get("PALLAS_NVDISASM"), shutil.which("nvdisasm"),
             str(CUDA_BIN / "nvdisasm")]
    roots = [Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pallaskernels" /
             "nvdisasm"]
    try:
        import site
        roots += [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    except Exception:
        pass
    for r in roots:
        cands += sorted(glob.glob(str(r / "nvidia" / "cu*" / "bin" / "nvdisasm")), reverse=True)
        cands += sorted(glob.glob(str(r / "nvidia" / "cuda_nvdisasm" / "bin" / "nvdisasm")))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def find_tool(name: str, explicit: str | None = None) -> str | None:
    for c in [explicit, str(CUDA_BIN / name), shutil.which(name)]:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def write_atomic(path: Path, data: bytes) -> None:
    """Tests may run concurrently over one cache: never leave a partial file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


#===------------------------------------------------------------------------===#
# ptxas -v
#===------------------------------------------------------------------------===#

@dataclass
class Resources:
    regs: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    smem: int = 0

    @property
    def spill(self) -> int:
        return self.spill_stores + self.spill_loads


def parse_ptxas_log(log: str) -> dict[str, Resources]:
    """Per function, from `ptxas -v` (also through nvcc -Xptxas -v)."""
    out: dict[str, Resources] = {}
    cur = None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([^' ]+)'?", line)
        if m:
            cur = out.setdefault(m.group(1), Resources())
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            cur.stack, cur.spill_stores, cur.spill_loads = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur.regs = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            cur.smem = int(m2.group(1)) if m2 else 0
    return out


def assemble(ptx: Path, arch: str, ptxas: str, cache: Path) -> tuple[Path, dict[str, Resources]]:
    """cubin and ptxas -v report of one PTX, as the codegen makes them; cached
    in `cache` by the PTX's hash."""
    data = ptx.read_bytes()
    key = hashlib.sha256(data + arch.encode() + ptxas.encode()).hexdigest()[:16]
    stem = ptx.name[: -len(".ptx")]
    cubin, log = cache / f"{stem}.{key}.cubin", cache / f"{stem}.{key}.ptxas.txt"
    if not (cubin.exists() and log.exists()):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "k.cubin"
            r = run([ptxas, f"-arch={arch}", "-O3", "-v", str(ptx), "-o", str(out)])
            if r.returncode != 0:
                raise RuntimeError(f"ptxas failed on {ptx}:\n{r.stdout}")
            old = re.compile(re.escape(stem) + r"\.[0-9a-f]{16}\.(cubin|ptxas\.txt)$")
            for f in cache.glob(f"{stem}.*"):  # earlier versions of this PTX
                if old.match(f.name):
                    f.unlink(missing_ok=True)
            write_atomic(log, r.stdout.encode())
            write_atomic(cubin, out.read_bytes())
    return cubin, parse_ptxas_log(log.read_text())


#===------------------------------------------------------------------------===#
# SASS
#===------------------------------------------------------------------------===#

@dataclass
class Instr:
    addr: int
    pred: str | None
    op: str          # full opcode with modifiers, e.g. LDG.E.128.CONSTANT
    text: str
    target: str | None = None

    @property
    def base(self) -> str:
        return self.op.split(".")[0]


def access_width(op: str) -> int:
    """Bytes per thread of an LDG/STG/LDL/... opcode."""
    mods = op.split(".")[1:]
    if "128" in mods:
        return 16
    if "64" in mods:
        return 8
    if "U16" in mods or "S16" in mods:
        return 2
    if "U8" in mods or "S8" in mods:
        return 1
    return 4


def global_access(ins: Instr) -> tuple[str, int] | None:
    """('ld' | 'st', bytes) for a global data load or store, else None."""
    if ins.base == "LDG":
        return "ld", access_width(ins.op)
    if ins.base == "STG":
        return "st", access_width(ins.op)
    return None


_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;?\s*$")
_LABEL = re.compile(r"^\s*(\.L_x_\d+|\$[\w$.]+|[A-Za-z_][\w$.]*):\s*$")
_TARGET = re.compile(r"`\(([^)]+)\)")
_FUNC = re.compile(r"^//-+ \.text\.(\S+)\s+-+")


def disassemble(nvdisasm: str, cubin: Path, cache: Path | None = None
                ) -> dict[str, tuple[list[Instr], dict[str, int]]]:
    """{function: (instructions, label -> address)} of a cubin; the listing is
    cached in cache/sass/ by the cubin's hash."""
    text = None
    if cache:
        key = hashlib.sha256(cubin.read_bytes() + nvdisasm.encode()).hexdigest()[:20]
        saved = cache / "sass" / f"{key}.sass"
        if saved.exists():
            text = saved.read_text()
    if text is None:
        r = run([nvdisasm, "-c", str(cubin)])
        if r.returncode != 0:
            raise RuntimeError(f"nvdisasm failed on {cubin}:\n{r.stdout}")
        text = r.stdout
        if cache:
            saved.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(saved, text.encode())
    funcs: dict[str, tuple[list[Instr], dict[str, int]]] = {}
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            instrs, labels, pending = [], {}, []
            funcs[m.group(1)] = (instrs, labels)
            continue
        m = _INSTR.match(line)
        if m:
            addr = int(m.group(1), 16)
            body = m.group(2).strip()
            pred = None
            pm = re.match(r"^(@!?U?P[T0-9]+)\s+(.*)$", body)
            if pm:
                pred, body = pm.group(1), pm.group(2)
            op = body.split()[0].rstrip(";") if body else ""
            tm = _TARGET.search(body)
            for lab in pending:
                labels[lab] = addr
            pending = []
            instrs.append(Instr(addr, pred, op, body, tm.group(1) if tm else None))
            continue
        m = _LABEL.match(line)
        if m and not line.lstrip().startswith("."):
            pending.append(m.group(1))
        elif m and m.group(1).startswith(".L_x_"):
            pending.append(m.group(1))
    return funcs


@dataclass
class Block:
    start: int            # index of the first instruction
    end: int              # one past the last
    succ: list[int] = field(default_factory=list)  # block indices


def is_jump(ins: Instr) -> bool:
    """A direct jump to a label: BRA, or a CALL.REL.NOINC to a local label,
    which ptxas uses on sm_80 to leave a loop (it never returns)."""
    return ins.base == "BRA" or (ins.base == "CALL" and (ins.target or "").startswith(".L_x_"))


def is_branch(ins: Instr) -> bool:
    return is_jump(ins) or ins.base in ("BRX", "JMX", "JMP", "RET", "EXIT", "BPT", "KILL")


def build_cfg(instrs: list[Instr], labels: dict[str, int]) -> list[Block]:
    addr_index = {ins.addr: i for i, ins in enumerate(instrs)}
    leaders = {0}
    for a in labels.values():
        if a in addr_index:
            leaders.add(addr_index[a])
    for i, ins in enumerate(instrs):
        if is_branch(ins) and i + 1 < len(instrs):
            leaders.add(i + 1)
        if ins.target in labels and labels[ins.target] in addr_index and is_jump(ins):
            leaders.add(addr_index[labels[ins.target]])
    starts = sorted(leaders)
    blocks = [Block(s, e) for s, e in zip(starts, starts[1:] + [len(instrs)])]
    block_of = {b.start: k for k, b in enumerate(blocks)}
    for k, b in enumerate(blocks):
        last = instrs[b.end - 1]
        falls = True
        if is_jump(last):
            t = labels.get(last.target or "")
            if t is not None and t in addr_index:
                b.succ.append(block_of[addr_index[t]])
            falls = last.pred is not None or ".DIV" in last.op or ".CONV" in last.op
        elif last.base in ("EXIT", "RET", "BRX", "JMX", "JMP", "BPT", "KILL"):
            falls = last.pred is not None and last.base == "EXIT"
        if falls and k + 1 < len(blocks):
            b.succ.append(k + 1)
    return blocks


@dataclass
class PathStats:
    instrs: int = 0
    bytes16: int = 0          # global bytes moved by 16-byte accesses
    bytes_all: int = 0        # global bytes moved, any width
    ld: dict = field(default_factory=dict)   # width -> count
    st: dict = field(default_factory=dict)
    bars: int = 0


def block_stats(instrs: list[Instr], b: Block) -> PathStats:
    s = PathStats()
    for ins in instrs[b.start:b.end]:
        if ins.op.startswith("NOP"):
            continue
        s.instrs += 1
        acc = global_access(ins)
        if acc:
            kind, w = acc
            d = s.ld if kind == "ld" else s.st
            d[w] = d.get(w, 0) + 1
            s.bytes_all += w
            if w == 16:
                s.bytes16 += w
        if ins.base == "BAR" and ".SYNC" in ins.op:
            s.bars += 1
    return s


def add_stats(acc: PathStats, s: PathStats) -> None:
    acc.instrs += s.instrs
    acc.bytes16 += s.bytes16
    acc.bytes_all += s.bytes_all
    acc.bars += s.bars
    for dst, src in ((acc.ld, s.ld), (acc.st, s.st)):
        for w, n in src.items():
            dst[w] = dst.get(w, 0) + n


@dataclass
class Analysis:
    name: str
    instrs: int
    ld: dict
    st: dict
    bars: int
    local: int               # LDL/STL instructions
    loops: int
    sections: int            # guarded sections (alternatives)
    section: tuple[int, int] # addresses of the chosen section (or the whole kernel)
    path: PathStats          # the main path
    method: str              # 'loop', 'path' or 'none'
    region: PathStats
    region_range: tuple[int, int]
    # opcodes present anywhere, base (UTMALDG, HGMMA, ...) and full (UTMALDG.2D.MULTICAST)
    opcodes: frozenset = frozenset()
    # wgmma pipelining (see mma_pipelining): whether some loop keeps a multiply in flight
    # on every iteration, and the addresses of waits for every multiply that such a loop
    # runs on every iteration.
    mma_in_flight: bool = False
    mma_serial_waits: tuple = ()
    # Swapped split-K (see mma_step_waits): whether a loop waits for its step's multiplies
    # on every iteration, and the addresses of waits between a step's HGMMAs.
    mma_step_wait: bool = False
    mma_early_waits: tuple = ()


def every_iteration(blocks: list[Block], head: int, latch: int) -> set[int]:
    """Blocks of the loop head..latch that every iteration runs: those that no
    forward edge inside the loop jumps over (an `if` body, an `else` body)."""
    skipped: set[int] = set()
    for a in range(head, latch + 1):
        for t in blocks[a].succ:
            if a + 1 < t <= latch:  # (an edge past the latch leaves the loop)
                skipped.update(range(a + 1, t))
    return {b for b in range(head, latch + 1) if b not in skipped}


def mma_pipelining(instrs: list[Instr], blocks: list[Block],
                   loops: list[tuple[int, int]]) -> tuple[bool, tuple]:
    """A pipelined wgmma K loop issues HGMMAs (on one path or another: a first
    step's scale-d 0 batch is a branch of its own) and waits with
    `WARPGROUP.DEPBAR.LE gsb0, 0x1` (wgmma.wait_group 1) on every iteration, so one multiply stays in
    flight while the next step's tiles are awaited. A `WARPGROUP.DEPBAR.LE gsb0,
    0x0` on every iteration of that loop (ptxas injects one, info C7517, where
    code reads accumulator registers a multiply may still write) serializes the
    multiplies; one in a conditional block (the last step's epilogue) does not.
    Returns (some loop keeps a multiply in flight, addresses of such serial waits)."""
    def ops(b: int) -> list[Instr]:
        return instrs[blocks[b].start:blocks[b].end]

    def is_wait(ins: Instr, n: str) -> bool:
        return ins.op.startswith("WARPGROUP.DEPBAR") and ins.text.rstrip(" ;").endswith(", " + n)

    bodies, issuing = {}, {}
    for h, l in loops:
        body = [ins for b in sorted(every_iteration(blocks, h, l)) for ins in ops(b)]
        # The blocks that issue HGMMAs count as every step's too: the two arms
        # of a scale-d branch (a tile's first step, the others) issue them.
        arms = [ins for b in range(h, l + 1) if any(i.base == "HGMMA" for i in ops(b))
                for ins in ops(b)]
        if arms and any(is_wait(i, "0x1") for i in body):
            bodies[(h, l)] = body
            issuing[(h, l)] = arms
    # The K loops: the smallest of those, each with no smaller one among its
    # blocks (an mbarrier wait's out-of-line retry branch back into the loop
    # makes a "loop" from there over everything laid out after it).
    k_loops: list[tuple[int, int]] = []
    for h, l in sorted(bodies, key=lambda loop: loop[1] - loop[0]):
        if not any(h <= l2 and h2 <= l for h2, l2 in k_loops):
            k_loops.append((h, l))
    serial = [i.addr for loop in k_loops for i in bodies[loop] + issuing[loop]
              if is_wait(i, "0x0")]
    return bool(k_loops), tuple(sorted(set(serial)))


def mma_step_waits(instrs: list[Instr], blocks: list[Block],
                   loops: list[tuple[int, int]]) -> tuple[bool, tuple]:
    """The K loop of a split-K instance (split_k) issues its step's HGMMAs
    (on either arm of the scale-d branch) and then waits for all of them, once
    (`WARPGROUP.DEPBAR.LE gsb0, 0x0` on every iteration), before it releases the stage. A
    wait before a step's last HGMMA (in the same block) would run its multiplies one at a
    time. Returns (some loop with HGMMAs waits on every iteration, addresses of such early
    waits)."""
    def ops(b: int) -> list[Instr]:
        return instrs[blocks[b].start:blocks[b].end]

    def is_wait(ins: Instr) -> bool:
        return ins.op.startswith("WARPGROUP.DEPBAR")

    found, early = False, set()
    for h, l in loops:
        arms = [b for b in range(h, l + 1) if any(i.base == "HGMMA" for i in ops(b))]
        body = [ins for b in sorted(every_iteration(blocks, h, l)) for ins in ops(b)]
        if not arms or not any(is_wait(i) and i.text.rstrip(" ;").endswith(", 0x0")
                               for i in body):
            continue
        found = True
        for b in arms:
            seq = ops(b)
            last = max(k for k, i in enumerate(seq) if i.base == "HGMMA")
            early.update(i.addr for i in seq[:last] if is_wait(i))
    return found, tuple(sorted(early))


def find_loops(instrs: list[Instr], blocks: list[Block]) -> list[tuple[int, int]]:
    """(head, latch) block indices of every back edge."""
    loops = []
    for k, b in enumerate(blocks):
        for t in b.succ:
            if t <= k:
                body = instrs[blocks[t].start:b.end]
                if len(body) == 1 and body[0].base == "BRA":
                    continue  # the `BRA self` after the last EXIT
                loops.append((t, k))
    return loops


def guarded_sections(instrs: list[Instr], blocks: list[Block]) -> list[tuple[int, int]]:
    """Guarded sections that are whole alternatives: block ranges skipped by a
    forward branch (an `if` body, or an `else` body skipped by the `then`
    body's closing BRA) that load from global memory, communicate across
    threads (SHFL, REDUX, BAR) and store to global memory, and hold no smaller
    such range. pallaskernels' row kernels pick a path per row shape this way
    (`when(cols <= ...) { load; reduce; store }`); the masked fallback of a
    16-byte access, or a reference kernel's per-vector `if`, has no
    cross-thread operation and is not one."""
    def has(lo, hi):
        ld = st = xt = False
        for ins in instrs[blocks[lo].start:blocks[hi].end]:
            ld |= ins.base == "LDG"
            st |= ins.base == "STG"
            xt |= ins.base in ("SHFL", "REDUX") or (ins.base == "BAR" and ".SYNC" in ins.op)
        return ld and st and xt

    ranges = set()
    for k, b in enumerate(blocks):
        for t in b.succ:
            if t > k + 1 and is_jump(instrs[b.end - 1]) and has(k + 1, t - 1):
                ranges.add((k + 1, t - 1))
    return sorted(r for r in ranges
                  if not any(o != r and r[0] <= o[0] and o[1] <= r[1] for o in ranges))


def heaviest_path(blocks: list[Block], stats: list[PathStats], instrs: list[Instr], first: int,
                  last: int, removed: set[int] = frozenset()) -> list[int]:
    """The heaviest path through blocks [first, last] (less `removed`) over
    forward edges, from `first` to `last`, or to an EXIT on the way, or to the
    last block reached. Weight, in this order: more bytes moved by 16-byte
    global accesses, fewer bytes moved by narrower ones (a 16-byte run is
    preferred to its masked fallback), more instructions (a branch around
    compute, such as a hand-written kernel's `if (in_row[i])` around the exp
    of vector i, is taken by every thread with a full row: skipping it is the
    exception, not the main path); for a kernel with no 16-byte access on any
    path, more bytes moved, then more instructions."""
    path = _heaviest(blocks, stats, instrs, first, last, removed,
                     lambda s: s.bytes16 * 10**12 - (s.bytes_all - s.bytes16) * 10**6 + s.instrs)
    if not any(stats[x].bytes16 for x in path):  # no 16-byte access on any path: the busiest
        path = _heaviest(blocks, stats, instrs, first, last, removed,
                         lambda s: s.bytes_all * 10**6 + s.instrs)
    return path


def _heaviest(blocks, stats, instrs, first, last, removed, w) -> list[int]:
    best = {first: w(stats[first])}
    prev = {first: -1}
    for k in range(first, last + 1):
        if k not in best:
            continue
        succ = list(blocks[k].succ)
        for h in blocks[k].succ:
            if h <= k:  # a back edge: go on to where the loop's head exits to
                succ += [t for t in blocks[h].succ if t > k]
        for t in succ:
            if k < t <= last and t not in removed:
                c = best[k] + w(stats[t])
                if t not in best or c > best[t]:
                    best[t], prev[t] = c, k
    ends = [k for k in best if instrs[blocks[k].end - 1].base in ("EXIT", "RET")]
    ends.append(max(best))
    end = max(ends, key=lambda k: best[k])
    path = []
    while end != -1:
        path.append(end)
        end = prev[end]
    return path[::-1]


def analyze(name: str, instrs: list[Instr], labels: dict[str, int]) -> Analysis:
    blocks = build_cfg(instrs, labels)
    stats = [block_stats(instrs, b) for b in blocks]
    whole = PathStats()
    for s in stats:
        add_stats(whole, s)
    local = sum(1 for i in instrs if i.base in ("LDL", "STL"))
    loops = find_loops(instrs, blocks)
    sections = guarded_sections(instrs, blocks)

    # Candidates: each guarded section, and the rest of the kernel (its path
    # through the entry, skipping every section).
    inside = {x for lo, hi in sections for x in range(lo, hi + 1)}
    cands = [(lo, hi, heaviest_path(blocks, stats, instrs, lo, hi)) for lo, hi in sections]
    cands.append((0, len(blocks) - 1, heaviest_path(blocks, stats, instrs, 0, len(blocks) - 1,
                                                    inside)))
    scored = []
    for first, last, path in cands:
        ps = PathStats()
        for x in path:
            add_stats(ps, stats[x])
        if not ps.bytes_all:
            continue
        on_path = set(path)
        # The region: the hottest innermost loop on the path, else the path
        # from its first global access to its last.
        inner = [(h, l) for h, l in loops if first <= h and l <= last and not any(
            h <= h2 and l2 <= l and (h2, l2) != (h, l) and any(x in on_path for x in range(h2, l2 + 1))
            for h2, l2 in loops)]
        loop_regions = []
        for h, l in inner:
            rs = PathStats()
            for x in path:
                if h <= x <= l:
                    add_stats(rs, stats[x])
            if rs.bytes_all:
                loop_regions.append((rs.bytes16, rs.bytes_all, h, l, rs))
        if loop_regions:
            _, _, h, l, region = max(loop_regions, key=lambda c: (c[0], c[1]))
            method = "loop"
            rng = (instrs[blocks[h].start].addr, instrs[blocks[l].end - 1].addr)
        else:
            seq = [ins for x in path for ins in instrs[blocks[x].start:blocks[x].end]
                   if not ins.op.startswith("NOP")]
            idx = [i for i, ins in enumerate(seq) if global_access(ins)]
            sub = seq[idx[0]:idx[-1] + 1]
            region = block_stats(sub, Block(0, len(sub)))
            method, rng = "path", (sub[0].addr, sub[-1].addr)
        prange = (instrs[blocks[first].start].addr, instrs[blocks[last].end - 1].addr)
        scored.append(((ps.bytes16, method == "loop", -region.instrs), ps, method, region, rng,
                       prange))
    if scored:
        _, path, method, region, rng, prange = max(scored, key=lambda c: c[0])
    else:
        path, method, region, rng, prange = PathStats(), "none", PathStats(), (0, 0), (0, 0)
    in_flight, serial_waits = mma_pipelining(instrs, blocks, loops)
    step_wait, early_waits = mma_step_waits(instrs, blocks, loops)
    return Analysis(name, whole.instrs, whole.ld, whole.st, whole.bars, local, len(loops),
                    len(sections), prange, path, method, region, rng,
                    frozenset(i.base for i in instrs) | frozenset(i.op for i in instrs),
                    in_flight, serial_waits, step_wait, early_waits)


#===------------------------------------------------------------------------===#
# Kernels
#===------------------------------------------------------------------------===#

@dataclass
class Kernel:
    label: str               # what the table shows
    source: str              # 'ours' or 'ref'
    instance: str            # our instance name, or the reference's mangled name
    arch: str
    op: str | None
    kind: str                # elementwise | row | whole | reference | other
    dtype: str | None
    res: Resources
    sass: Analysis | None = None
    staged: bool = False     # a TMA instance (blocks staged in shared memory)

    def elem_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype or "bf16", 2)

    def region_elems(self) -> float:
        if not self.sass:
            return 0.0
        return self.sass.region.bytes_all / self.elem_bytes()

    def ipe(self) -> float | None:
        e = self.region_elems()
        return self.sass.region.instrs / e if self.sass and e else None


def classify(instance: str) -> tuple[str | None, str, str | None]:
    """(op, kind, first dtype) of an instance name like softmax_bf16."""
    for kind, ops in (("row", ROW), ("elementwise", ELEMENTWISE), ("whole", WHOLE),
                      ("staged", STAGED), ("matmul", MATMULS)):
        for op in sorted(ops, key=len, reverse=True):
            m = re.match(rf"^{op}_(f32|f16|bf16|i32)(?:_|$)", instance)
            if m:
                if kind == "staged" and instance.endswith("_direct"):
                    return op, "other", m.group(1)
                return op, kind, m.group(1)
    m = re.search(r"_(f32|f16|bf16)(?:_|$)", instance)
    return None, "other", m.group(1) if m else None


def embedded_cubins(generated: Path) -> set[str] | None:
    """The cubins the library embeds, pallas_cubin_<instance>_<arch>, named in the generated
    sources beside the PTX (BUILD/generated/*.cc); None where there are none (a directory of
    planted PTX)."""
    sources = list(generated.glob("*.cc"))
    if not sources:
        return None
    return {m.group(1) for f in sources
            for m in re.finditer(r"\bpallas_cubin_(\w+?_sm_\w+?)\[", f.read_text())}


def our_ptx(ptx_dir: Path, arch: str | None) -> list[tuple[str, str, Path]]:
    """[(instance, arch, path)] of <instance>.<arch>.ptx in ptx_dir, those of a build directory
    only if the library embeds them: a reused build directory keeps the PTX of instances a spec
    no longer declares, which are not checked."""
    embedded = embedded_cubins(ptx_dir.parent)
    out = []
    for p in sorted(ptx_dir.glob("*.ptx")):
        m = re.match(r"^(.+)\.(sm_\w+)\.ptx$", p.name)
        if not m or (arch is not None and m.group(2) != arch):
            continue
        if embedded is not None and f"{m.group(1)}_{m.group(2)}" not in embedded:
            continue
        out.append((m.group(1), m.group(2), p))
    return out


def load_ours(ptx_dir: Path, arch: str | None, ptxas: str, nvdisasm: str | None, cache: Path,
              jobs: int, exclude_arch: str | None = None) -> list[Kernel]:
    items = [i for i in our_ptx(ptx_dir, arch) if i[1] != exclude_arch]
    cache.mkdir(parents=True, exist_ok=True)
    names = {inst for inst, _, _ in our_ptx(ptx_dir, None)}
    # The staged instances pallas-codegen lists (<op>.staged.txt): a variant sharing another
    # variant's direct twin has no <instance>_direct of its own.
    listed = {line.strip() for f in ptx_dir.glob("*.staged.txt")
              for line in f.read_text().splitlines() if line.strip()}

    def one(item):
        inst, a, p = item
        cubin, res = assemble(p, a, ptxas, cache)
        op, kind, dtype = classify(inst)
        r = next(iter(res.values()), Resources()) if len(res) == 1 else res.get(inst, Resources())
        k = Kernel(inst, "ours", inst, a, op, kind, dtype, r)
        k.staged = kind == "staged" or inst in listed or f"{inst}_direct" in names
        if nvdisasm:
            funcs = disassemble(nvdisasm, cubin, cache)
            if inst in funcs:
                k.sass = analyze(inst, *funcs[inst])
            elif len(funcs) == 1:
                (fname, (ins, labs)), = funcs.items()
                k.sass = analyze(fname, ins, labs)
        return k

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        return list(ex.map(one, items))


def demangle(names: list[str]) -> dict[str, str]:
    filt = shutil.which("c++filt")
    if not filt or not names:
        return {n: n for n in names}
    r = subprocess.run([filt], input="\n".join(names), stdout=subprocess.PIPE, text=True)
    out = r.stdout.splitlines()
    if len(out) != len(names):
        return {n: n for n in names}
    return {n: re.sub(r"^(void )?pallas_ref::kernels::", "", d.split("(")[0]).replace(" ", "")
            for n, d in zip(names, out)}


def reference_cubin(build: Path, arch: str, nvcc: str | None, cache: Path) -> tuple[Path, str]:
    """The reference kernels' cubin and ptxas -v log for `arch`: the build's
    (bench/CMakeLists.txt), else compiled here."""
    built = build / "bench" / "reference" / f"reference_kernels.{arch}.cubin"
    log = built.with_suffix(".ptxas.txt")
    src = REPO / "bench" / "reference" / "reference_kernels.cu"
    if built.exists() and log.exists() and built.stat().st_mtime >= src.stat().st_mtime:
        return built, log.read_text()
    if not nvcc:
        raise ToolMissing("nvcc (for the reference kernels)")
    key = hashlib.sha256(src.read_bytes() + (src.parent / "reference_kernels.h").read_bytes() +
                         arch.encode()).hexdigest()[:16]
    cubin, clog = cache / f"reference_kernels.{arch}.{key}.cubin", cache / f"reference.{arch}.{key}.txt"
    if not (cubin.exists() and clog.exists()):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.cubin"
            r = run([nvcc, "-std=c++20", "-O3", f"-arch={arch}", "-cubin", "-Xptxas", "-v",
                     str(src), "-o", str(out)])
            if r.returncode != 0:
                raise RuntimeError(f"nvcc failed on {src}:\n{r.stdout}")
            write_atomic(clog, r.stdout.encode())
            write_atomic(cubin, out.read_bytes())
    return cubin, clog.read_text()


def load_reference(build: Path, arch: str, nvcc: str | None, nvdisasm: str, cache: Path
                   ) -> list[Kernel]:
    cubin, log = reference_cubin(build, arch, nvcc, cache)
    res = parse_ptxas_log(log)
    funcs = disassemble(nvdisasm, cubin, cache)
    names = demangle(sorted(funcs))
    out = []
    for mangled in sorted(funcs, key=lambda n: names[n]):
        ins, labs = funcs[mangled]
        out.append(Kernel(names[mangled], "ref", mangled, arch, None, "reference", "bf16",
                          res.get(mangled, Resources()), analyze(mangled, ins, labs)))
    return out


#===------------------------------------------------------------------------===#
# Rules
#===------------------------------------------------------------------------===#

def violations(kernels: list[Kernel], check_width: bool = True) -> list[tuple[str, str]]:
    """(rule, message) for each broken rule: 'spill', 'wide', 'tma' or 'mma' (see the top)."""
    out = []
    for k in kernels:
        if k.source != "ours":
            continue
        if k.res.spill:
            out.append(("spill", f"{k.instance} ({k.arch}): {k.res.spill_stores} bytes spill "
                                 f"stores, {k.res.spill_loads} bytes spill loads (ptxas -v, "
                                 f"{k.res.regs} registers)"))
        if k.staged and k.sass and k.arch.startswith("sm_9"):
            need = ("UTMALDG", "UTMASTG") if k.op in STAGED_OUTPUTS else ("UTMALDG",)
            missing = [op for op in need if op not in k.sass.opcodes]
            if missing:
                out.append(("tma", f"{k.instance} ({k.arch}): a kernel with staged blocks has "
                                   f"no {' or '.join(missing)} (TMA copies)"))
        # The matmul family's tiles schedule runs clusters of two CTAs that share B's block,
        # each copying half of it into both (kernel_specs/matmul.cc): its sm_90a tiles
        # instances must have multicast TMA copies.
        if (k.op in WARP_SPECIALIZED and k.sass and k.arch.startswith("sm_9")
                and "_tiles" in k.instance and not k.instance.endswith("_direct")
                and not any("MULTICAST" in op for op in k.sass.opcodes)):
            out.append(("tma", f"{k.instance} ({k.arch}): a tiles-schedule product without "
                               "multicast copies (UTMALDG...MULTICAST): its clusters of two do "
                               "not share B's block"))
        # The deep split-K instances (`_decode`, `_splitk_deep`; sm_90 only) sum a tile's splits
        # in a thread-block cluster (kernel_specs/matmul.cc's `finish`): their SASS meets the
        # cluster at barrier.cluster (UCGABAR_ARV, UCGABAR_WAIT).
        if (k.kind == "matmul" and k.sass and k.arch.startswith("sm_9")
                and ("_decode" in k.instance or "_splitk_deep" in k.instance)
                and not k.instance.endswith("_direct")
                and not {"UCGABAR_ARV", "UCGABAR_WAIT"} <= set(k.sass.opcodes)):
            out.append(("mma", f"{k.instance} ({k.arch}): a deep split-K instance without "
                               "barrier.cluster (UCGABAR_ARV, UCGABAR_WAIT): its splits do not "
                               "sum in a cluster"))
        if k.staged and k.sass and k.arch.startswith("sm_8") and "LDGSTS" not in k.sass.opcodes:
            out.append(("tma", f"{k.instance} ({k.arch}): the sm_80 form of a kernel with staged "
                               "blocks has no LDGSTS (cp.async copies)"))
        if k.kind == "matmul" and k.sass:
            need = "HGMMA" if k.arch.startswith("sm_9") else "HMMA"
            if need not in k.sass.opcodes:
                out.append(("mma", f"{k.instance} ({k.arch}): a matrix product without {need} "
                                   f"({'wgmma' if need == 'HGMMA' else 'mma.sync'})"))
            staged_sm90 = (k.op in WARP_SPECIALIZED and k.arch.startswith("sm_9")
                           and not k.instance.endswith("_direct"))
            if staged_sm90 and "USETMAXREG" not in k.sass.opcodes:
                out.append(("mma", f"{k.instance} ({k.arch}): a warp-specialized product without "
                                   "USETMAXREG (the warpgroups' setmaxnreg)"))
            if staged_sm90:
                # The K loop: a split-K (or decode) step waits once, after its last HGMMA
                # (mma_step_waits); the others keep one multiply in flight (mma_pipelining).
                if split_k(k.instance):
                    loop_ok, bad_waits = k.sass.mma_step_wait, k.sass.mma_early_waits
                    no_loop = ("a split-K K loop without its one wait per step "
                               "(WARPGROUP.DEPBAR.LE gsb0, 0x0 after the step's HGMMAs)")
                    bad_wait = ("a wait between a step's HGMMAs (WARPGROUP.DEPBAR at {addr:#06x}): "
                                "its multiplies run one at a time")
                else:
                    loop_ok, bad_waits = k.sass.mma_in_flight, k.sass.mma_serial_waits
                    no_loop = ("no K loop keeps a wgmma in flight (a loop with HGMMA and "
                               "WARPGROUP.DEPBAR.LE gsb0, 0x1 on every iteration)")
                    bad_wait = ("the K loop waits for every wgmma on every step "
                                "(WARPGROUP.DEPBAR.LE gsb0, 0x0 at {addr:#06x}; ptxas info "
                                "C7517?): the multiplies run one at a time")
                if not loop_ok:
                    out.append(("mma", f"{k.instance} ({k.arch}): {no_loop}"))
                for addr in bad_waits:
                    out.append(("mma", f"{k.instance} ({k.arch}): " + bad_wait.format(addr=addr)))
        if (not check_width or k.kind not in ("elementwise", "row", "whole") or not k.sass
                or k.staged):
            continue
        p = k.sass.path
        if not p.ld.get(16):
            widths = ", ".join(f"{n} x {w}B" for w, n in sorted(p.ld.items(), reverse=True))
            out.append(("wide", f"{k.instance} ({k.arch}): main path has no 16-byte global "
                                f"load (LDG.E.128); its loads: {widths or 'none'}"))
        st_bytes = sum(w * n for w, n in p.st.items())
        if k.op not in REDUCTIONS and st_bytes >= 16 and not p.st.get(16):
            widths = ", ".join(f"{n} x {w}B" for w, n in sorted(p.st.items(), reverse=True))
            out.append(("wide", f"{k.instance} ({k.arch}): main path stores {st_bytes} bytes "
                                f"per thread without a 16-byte store (STG.E.128); its stores: "
                                f"{widths}"))
    return out


#===------------------------------------------------------------------------===#
# Output
#===------------------------------------------------------------------------===#

def widths(d: dict) -> str:
    return "/".join(str(d.get(w, 0)) for w in (16, 8, 4, 2, 1))


def row(k: Kernel) -> list[str]:
    s = k.sass
    ipe = k.ipe()
    return [
        k.label, str(k.res.regs), str(k.res.spill) + (f"+{s.local}L" if s and s.local else ""),
        str(k.res.smem), f"{s.region.bars}/{s.bars}" if s else "-",
        widths(s.ld) if s else "-", widths(s.st) if s else "-",
        f"{s.method} {s.region_range[0]:x}-{s.region_range[1]:x}" if s and s.method != "none"
        else "-",
        f"{widths(s.path.ld)} {widths(s.path.st)}" if s else "-",
        str(s.region.instrs) if s else "-",
        f"{k.region_elems():g}" if s else "-",
        f"{ipe:.2f}" if ipe else "-",
    ]


HEADER = ["kernel", "regs", "spill", "smem", "bar", "LDG 16/8/4/2/1", "STG 16/8/4/2/1",
          "region at", "path LDG STG", "instr", "elems", "instr/elem"]


def table(rows: list[list[str]], header=HEADER) -> str:
    cols = list(zip(*([header] + rows))) if rows else [[h] for h in header]
    w = [max(len(c) for c in col) for col in cols]
    fmt = lambda r: "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))
    lines = [fmt(header), fmt(["-" * x for x in w])]
    return "\n".join(lines + [fmt(r) for r in rows])


def to_json(k: Kernel) -> dict:
    s = k.sass
    d = {"kernel": k.label, "source": k.source, "symbol": k.instance, "arch": k.arch, "op": k.op,
         "kind": k.kind, "dtype": k.dtype, "registers": k.res.regs,
         "spill_stores": k.res.spill_stores, "spill_loads": k.res.spill_loads,
         "stack": k.res.stack, "smem": k.res.smem}
    if s:
        d.update({
            "instructions": s.instrs, "local_accesses": s.local, "bar_sync": s.bars,
            "ldg_by_width": {str(w): n for w, n in sorted(s.ld.items())},
            "stg_by_width": {str(w): n for w, n in sorted(s.st.items())},
            "main_path": {"instructions": s.path.instrs, "bar_sync": s.path.bars,
                          "ldg_by_width": {str(w): n for w, n in sorted(s.path.ld.items())},
                          "stg_by_width": {str(w): n for w, n in sorted(s.path.st.items())}},
            "region": {"method": s.method, "from": hex(s.region_range[0]),
                       "to": hex(s.region_range[1]), "instructions": s.region.instrs,
                       "bytes": s.region.bytes_all, "elements": k.region_elems(),
                       "instr_per_elem": k.ipe()},
        })
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(REPO / "build"), type=Path)
    ap.add_argument("--ptx-dir", type=Path, help="default: BUILD/generated/ptx")
    ap.add_argument("--arch", default="sm_90a", help="arch of the report (default sm_90a)")
    ap.add_argument("--all", action="store_true",
                    help="also list every reference kernel and every arch's rule check")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    ap.add_argument("--check", action="store_true",
                    help="check the rules (no spills on any arch, 16-byte main-path accesses); "
                         "exit 1 on a violation")
    ap.add_argument("--ptxas")
    ap.add_argument("--nvcc")
    ap.add_argument("--nvdisasm")
    ap.add_argument("--cache-dir", type=Path, help="default: BUILD/sass_report")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    args = ap.parse_args(argv)

    ptx_dir = args.ptx_dir or args.build_dir / "generated" / "ptx"
    cache = args.cache_dir or args.build_dir / "sass_report"
    ptxas = find_tool("ptxas", args.ptxas)
    nvdisasm = find_nvdisasm(args.nvdisasm)
    if not ptxas:
        print("sass_report: ptxas not found", file=sys.stderr)
        return SKIP
    if not nvdisasm:
        print("sass_report: nvdisasm not found (scripts/install-deps.sh installs it; "
              "or pass --nvdisasm)", file=sys.stderr)
        return SKIP
    if not our_ptx(ptx_dir, None):
        print(f"sass_report: no PTX in {ptx_dir} (build first)", file=sys.stderr)
        return 2

    ours = load_ours(ptx_dir, args.arch, ptxas, nvdisasm, cache, args.jobs)
    refs: list[Kernel] = []
    if not args.no_reference:
        try:
            refs = load_reference(args.build_dir, args.arch, find_tool("nvcc", args.nvcc),
                                  nvdisasm, cache)
        except ToolMissing as e:
            print(f"sass_report: no reference kernels: {e} not found", file=sys.stderr)

    ver = run([nvdisasm, "--version"]).stdout.strip().splitlines()
    print(f"SASS report, {args.arch}: {len(ours)} kernels from {ptx_dir}; "
          f"nvdisasm {ver[-1] if ver else '?'}")
    print("Columns: see the docstring of bench/sass_report.py. spill: bytes (+nL: LDL/STL "
          "instructions); bar: BAR.SYNC in the region/in the kernel; LDG/STG: accesses by width "
          "in bytes, in the kernel; path LDG STG: on the main path; region at: loop or path, "
          "SASS addresses; instr, elems: in the region, per thread\n")

    # 1. Ours next to the reference, bf16.
    cmp_rows = []
    for k in ours:
        if k.dtype == "bf16" and k.op in REFERENCE_FOR:
            cmp_rows.append(row(k))
            frag, short = reference_for(k.op, k.instance)
            match = [r for r in refs if frag in r.instance]
            if match:
                rr = row(match[0])
                rr[0] = f"  ref {short}"
                cmp_rows.append(rr)
    if cmp_rows:
        print("Ours (bf16) and the hand-written reference (bench/reference), " + args.arch)
        print(table(cmp_rows))
        print()

    # 2. Every kernel of ours.
    print(f"All generated kernels, {args.arch}")
    print(table([row(k) for k in ours]))
    if args.all and refs:
        print(f"\nEvery reference kernel, {args.arch}")
        print(table([row(r) for r in refs]))

    status = 0
    if args.check or args.all:
        # Spills on every arch; the 16-byte rule on every arch too (SASS of each).
        every = ours + load_ours(ptx_dir, None, ptxas, nvdisasm, cache, args.jobs,
                                 exclude_arch=args.arch)
        v = violations(every)
        print("\nRules (no spills on any arch; 16-byte main-path accesses in elementwise, row "
              "and whole-array kernels): " + ("OK" if not v else f"{len(v)} violations"))
        for _, line in v:
            print("  " + line)
        if v and args.check:
            status = 1
    if args.json:
        args.json.write_text(json.dumps([to_json(k) for k in ours + refs], indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
