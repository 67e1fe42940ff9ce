//===- Passes.td - pallas lowering passes ------------------*- tablegen -*-===//

#ifndef PALLAS_TRANSFORMS_PASSES_TD
#define PALLAS_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PallasSinkBroadcasts : Pass<"pallas-sink-broadcasts", "ModuleOp"> {
  let summary = "Fold broadcasts of loaded blocks into the loads";
  let description = [{
    Moves `vector.broadcast` of a block value towards its leaves, through
    elementwise ops, until it meets a `pallas.load` (which then loads the
    broadcast shape directly) or a scalar. Afterwards every block value in a
    kernel is computed in the shape it is used in, which is what the GPU
    thread layout needs: each thread computes exactly the elements it owns.

    Before:
    ```mlir
    %b = pallas.load %bias[0][256] : !pallas.ref<256xf32> -> vector<256xf32>
    %e = math.exp %b : vector<256xf32>
    %B = vector.broadcast %e : vector<256xf32> to vector<8x256xf32>
    ```
    After:
    ```mlir
    %b = pallas.load %bias[0][256] : !pallas.ref<256xf32> -> vector<8x256xf32>
    %B = math.exp %b : vector<8x256xf32>
    ```
  }];
  let dependentDialects = ["::mlir::vector::VectorDialect"];
}

def PallasExpandWgmma : Pass<"pallas-expand-wgmma", "ModuleOp"> {
  let summary = "Run pallas.wgmma synchronously, for targets without asynchronous MMAs";
  let description = [{
    On the host and on sm_80 a multiply completes when it is issued, so
    Pallas' `wgmma(acc, a, b)` is `acc = dot(a, b, acc)` on the spot and
    `wgmma_wait` has nothing to wait for:

    Before:
    ```mlir
    pallas.wgmma %acc, %a, %b {transpose_b}
        : !pallas.ref<128x64xf32>, !pallas.ref<128x64xbf16>, !pallas.ref<64x64xbf16>
    pallas.wgmma_wait 1
    ```
    After:
    ```mlir
    %va = pallas.load %a[0, 0][128, 64] : !pallas.ref<128x64xbf16> -> vector<128x64xbf16>
    %vb = pallas.load %b[0, 0][64, 64] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
    %vc = pallas.load %acc[0, 0][128, 64] : !pallas.ref<128x64xf32> -> vector<128x64xf32>
    %d = pallas.dot %va, %vb, %vc {transpose_b} : ... -> vector<128x64xf32>
    pallas.store %d, %acc[0, 0] : vector<128x64xf32>, !pallas.ref<128x64xf32>
    ```
  }];
}

def PallasPeelLastStep : Pass<"pallas-peel-last-step", "ModuleOp"> {
  let summary = "Move a pipelined loop's last-step epilogue after the loop";
  let description = [{
    A grid's arbitrary axis is a pipelined loop (`pallas.pipeline`) whose
    body often ends with what only the last step does: a matmul's epilogue,
    `when(k == last) d.store(f(acc.load()))`. Left in the loop, that branch
    is on every step's path, and ptxas then completes every wgmma before the
    next step starts (it injects `warpgroup.wait`, info C7517), undoing
    `wgmma_wait(1)`. This pass moves a trailing `scf.if (%iv == %ub - 1)`
    after the loop, guarded by `%lb < %ub`, when everything it uses from the
    loop body is loop-invariant (program ids, constants, unstaged blocks and
    index arithmetic on them); uses of `%iv` become `%ub - 1`.

    Before:
    ```mlir
    scf.for %k = %c0 to %n step %c1 {
      %d = pallas.block %out[%i, %j] ...
      ...
      %last = arith.subi %n, %c1 : index
      %is_last = arith.cmpi eq, %k, %last : index
      scf.if %is_last { E(%d) }
    } {pallas.pipeline}
    ```
    After:
    ```mlir
    scf.for %k = %c0 to %n step %c1 { ... } {pallas.pipeline}
    %ran = arith.cmpi slt, %c0, %n : index
    scf.if %ran { %d' = pallas.block %out[%i, %j] ... ; E(%d') }
    ```
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect"];
}

def PallasAssignLayouts : Pass<"pallas-assign-layouts", "ModuleOp"> {
  let summary = "Give every block value a thread layout; make layout changes explicit";
  let description = [{
    For each kernel (the layouts are in Dialect/PallasLayouts.td):

    1. The strided layout: `threads` per program and `vec`, 16 bytes of the
       narrowest element type the kernel moves (or the kernel's
       `pallas.run_elements`), halved until it divides every block's last dim
       and threads * vec divides every block's size. Written on the kernel as
       `pallas.strided_layout`.
    2. Per-row and replicated values. A kept-dims reduction of the last axis
       of a strided block whose rows lie in one warp is `strided_rows` (each
       row's value stays in that row's lanes), with what is computed from such
       values alone and the loop carries they are yielded to, when every use
       of them is elementwise, a shape cast, a broadcast back over their
       block, a reduction to a scalar, a loop carry, or a store. Other
       kept-dims results, what is computed from them alone, and splats too
       small to spread over the threads (or seeding kept-dims reductions) are
       `replicated`; a loop carry follows its init, or, started from a splat,
       is replicated when what the loop yields for it is. Every other block
       value is strided. Each op
       with vector results gets `pallas.layouts`, one entry per result (loops:
       per carry).
    2b. The WGMMA accumulator layout (`#pallas.tiled`, `wgmmaAccumulator`):
       `pallas.dot` results, loads of accumulators, elementwise ops with such
       an operand (epilogues), the loads and iotas feeding only them (a bias,
       a mask's coordinates: made in that layout), and loop carries started
       from such a value, or from a splat when the loop yields one. Beside
       them, per-row values of accumulators: a kept-dims reduction of the
       last axis of a tiled value, elementwise ops of such values alone,
       shape casts and loop carries are `wgmmaRow` ([R]) or
       `wgmmaRowKeepdims` ([R, 1]), held by the lanes that hold the row, and
       a broadcast of one over an accumulator's columns is tiled; all of them
       or none (any other use keeps them replicated). Worked example,
       attention's loop (kernel_specs/attention.cc, tests/lit/online-softmax.mlir):
       s = dot(q, k^T) is tiled, m' = max(m, max(s, 1, keepdims)) and l are
       wgmmaRowKeepdims carries, exp2(s - broadcast(m')) and acc are tiled,
       and no value of the loop changes layout.
    3. Conversions: a broadcast of a per-row or replicated value over a
       strided block becomes `pallas.convert_layout` (which broadcasts); an
       elementwise operand, a loop init or yield, or a kept-dims reduction's
       accumulator in another layout than its use gets one. Splats never need
       one: they are made again in each use's layout.

    Before (a softmax row tile, 16 rows of 128, f32: a row is 32 runs of 4,
    one warp):
    ```mlir
    %m = vector.multi_reduction <maximumf>, %x, %init [1] : vector<16x128xf32> to vector<16xf32>
    %c = vector.shape_cast %m : vector<16xf32> to vector<16x1xf32>
    %b = vector.broadcast %c : vector<16x1xf32> to vector<16x128xf32>
    %d = arith.subf %x, %b : vector<16x128xf32>
    ```
    After (`#S` is `#pallas.strided<threads = 128, vec = 4>`, `#R` is
    `#pallas.strided_rows<threads = 128, vec = 4, cols = 128>`):
    ```mlir
    %m = vector.multi_reduction ... {pallas.layouts = [#R]}
    %c = vector.shape_cast %m {pallas.layouts = [#R]} ...
    %b = pallas.convert_layout %c {from = #R, to = #S, ...} : vector<16x1xf32> to vector<16x128xf32>
    %d = arith.subf %x, %b {pallas.layouts = [#S]}
    ```
    With 4 rows of 512 (a row spans the whole program) the statistics are
    `#pallas.replicated` and the conversion goes through shared memory.
    A block whose size is not a multiple of the threads is an error naming it.
  }];
  let options = [
    Option<"threads", "threads", "int64_t", /*default=*/"128",
           "Threads per program (CTA) unless the kernel says (pallas.threads); 128 is one warpgroup">,
  ];
  let dependentDialects = ["::mlir::vector::VectorDialect"];
}

def ConvertPallasToGPU : Pass<"convert-pallas-to-gpu", "ModuleOp"> {
  let summary = "Outline pallas kernels into a gpu.module, lowering each op by its layout rule";
  let description = [{
    Every `func.func` marked `pallas.kernel` (with layouts from
    `pallas-assign-layouts`) becomes a `gpu.func` kernel of a
    `gpu.module @pallas_kernels`: one program = one CTA of `threads` threads.
    Each op is lowered by the rule registered for it, one op family per file
    (lib/Transforms/GPU/GpuLowering.h lists them); an op without a rule is an
    error naming it and every registered rule.

    A strided block (`#pallas.strided<threads = 128, vec = 4>` on an 8x256
    f32 block, say) is a per-thread fragment: thread t owns runs t, t+128,
    t+256, t+384, i.e. flat elements [4t, 4t+4) + 512 r, which is row
    2r + t/64, columns [4(t%64), 4(t%64)+4): a vector<16xf32>, loaded with four
    16-byte accesses, each warp touching 512 contiguous bytes. Loads and
    stores of a run use 16-byte vector accesses when the run is inside the
    array and its address is 16-byte aligned, and masked scalar accesses
    otherwise. A strided_rows value is one value per run of its block (the
    run's row's), and a replicated value is a vector<N> in every thread.

    Shared memory (scratch, reduction slots, conversions) is one
    `gpu.dynamic_shared_memory` buffer; every buffer is a `memref.view` at an
    offset planned by liveness (lib/Transforms/GPU/SharedMemoryPlan.h). The
    plan's size is recorded on the module as `pallas.shared_bytes.<kernel>`
    (and its alignment as `pallas.shared_align.<kernel>`); more than 227 KiB
    is an error listing the buffers.

    A `staged` block (the spec's `InShared`) lives in a buffer of that plan,
    copied by TMA (StagingRules.cpp): the gpu.func gets one `!llvm.ptr` TMA
    descriptor parameter per staged array after its own parameters (counted
    by `pallas.tma_params`); an input is copied in with
    `nvvm.cp.async.bulk.tensor.shared.cluster.global` completing on an
    `nvvm.mbarrier` that its loads wait on, an output is copied out with
    `nvvm.cp.async.bulk.tensor.global.shared.cta` when the program ends.

    With `async-copies=cp-async` (the sm_80 form of a staged kernel: Ampere
    has no TMA) every thread copies 16-byte pieces of a staged input block
    with `nvvm.cp.async.shared.global` (zero-filling what lies outside the
    array), into the same swizzled layout, and arrives on the block's mbarrier
    (initialised with one arrival per thread) with
    `nvvm.cp.async.mbarrier.arrive {noinc}`; loads wait with
    `nvvm.mbarrier.test.wait` in a loop. Staged outputs are stored from
    registers as unstaged blocks are. The descriptor parameters stay (unused).

    `pallas.dot` (MatmulRules.cpp) multiplies with `mma=wgmma` (sm_90a):
    `nvvm.wgmma.mma_async` on shared-memory descriptors, into the WGMMA
    accumulator layout; with `mma=mma_sync` (sm_80) each warp loads
    fragments with `nvvm.ldmatrix` (from the stage buffers of staged
    blocks, else from padded shared copies) and multiplies
    with `nvvm.mma.sync` m16n8k16, whose 16 x 8 D fragments are the same
    layout's registers (a warp's 16 rows of a 64-row block).
  }];
  let options = [
    Option<"asyncCopies", "async-copies", "std::string", /*default=*/"\"tma\"",
           "How staged blocks are copied: 'tma' (sm_90) or 'cp-async' (sm_80)">,
    Option<"mma", "mma", "std::string", /*default=*/"\"wgmma\"",
           "How pallas.dot multiplies: 'wgmma' (sm_90a) or 'mma_sync' (sm_80)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect", "::mlir::vector::VectorDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect", "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect"];
}

def PallasMarkTmaDescriptorParams : Pass<"pallas-mark-tma-descriptor-params", "ModuleOp"> {
  let summary = "Pass TMA descriptors by value: byval (and __grid_constant__) kernel parameters";
  let description = [{
    Runs after the GPU kernels are LLVM functions. The last `pallas.tma_params`
    parameters of a kernel are TMA descriptors (CUtensorMap, 128 bytes,
    64-byte aligned), which CUDA passes by value: each becomes
    `!llvm.ptr {llvm.byval = !llvm.array<128 x i8>, llvm.align = 64}`, plus
    `nvvm.grid_constant` with `grid-constant` (the cubin: a
    `.param .align 64 .b8 p[128]` whose address TMA instructions take with
    `cvta.param`, CUDA's `__grid_constant__`). The emulator keeps the byval
    pointer: its argv wrapper passes the descriptor's address.

    ```mlir
    llvm.func @k(..., %d: !llvm.ptr) attributes {nvvm.kernel, pallas.tma_params = 1 : i64}
    // becomes
    llvm.func @k(..., %d: !llvm.ptr {llvm.align = 64 : i64,
                 llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant})
    ```
  }];
  let options = [
    Option<"gridConstant", "grid-constant", "bool", /*default=*/"true",
           "also mark the parameters nvvm.grid_constant (the CUDA form)">,
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect"];
}

def PallasWaitForPrerequisiteGrids
    : Pass<"pallas-wait-for-prerequisite-grids", "ModuleOp"> {
  let summary = "Open every kernel with griddepcontrol: programmatic dependent launch (sm_90)";
  let description = [{
    Runs after the GPU kernels are LLVM functions, on the sm_90 forms only
    (`griddepcontrol` is PTX for sm_90 and up; the driver lowers every kernel
    once per arch group, sm_90 and sm_8x). Each kernel (`nvvm.kernel`)
    starts with

    ```mlir
    nvvm.griddepcontrol wait               // the previous kernel on the stream has
                                           // finished and its writes are visible
    nvvm.griddepcontrol launch_dependents  // the next may be scheduled
    ```

    before any other instruction, so before any access to global memory. A
    kernel launched with programmatic stream serialization (the runtime's
    `Launch::programmatic_dependent_launch`) may then start while the kernel
    before it on the stream is still running: its launch and the scheduling
    of its programs overlap the other's last wave, and it reads and writes
    nothing until that kernel is done. Launched without it, both are no-ops.
    The wait comes first, so that whatever this kernel lets start early has to
    wait for it in turn. The cubin says that it waits
    (`Cubin::waits_for_prerequisite_grids`): the runtime asks for the overlap
    only where the kernel is written for it.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect"];
}

def ConvertPallasToLoops : Pass<"convert-pallas-to-loops", "ModuleOp"> {
  let summary = "Lower pallas kernels to sequential CPU loops over the grid and the blocks";
  let description = [{
    The host backend (Pallas' interpret mode): each kernel becomes a function
    `pallas_host_<name>(operands..., grid0, grid1, grid2)` looping over the
    grid. Every block value is a stack buffer (`memref.alloca`, hoisted to
    the function entry) and every block op a loop nest over it, so code size
    does not grow with the block size.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect"];
}

def ConvertNVVMToEmulator : Pass<"convert-nvvm-to-emulator", "ModuleOp"> {
  let summary = "Rewrite GPU kernels at the NVVM level into host code calling the SIMT runtime";
  let description = [{
    Runs on the output of the GPU pipeline (gpu.modules of llvm.func kernels
    with NVVM ops, exactly what becomes PTX) and makes it host code for the
    emulator's SIMT runtime (emulator/include/pallas/emulator/abi.h):

    - the gpu.modules' functions move to the top-level module; each kernel
      `@k` becomes `@pallas_emu_thread_k`, the code of one thread;
    - `nvvm.read.ptx.sreg.*` -> `pallas_emu_sreg(which)`;
    - `nvvm.barrier0` / `nvvm.barrier` -> `pallas_emu_barrier(id, count)`;
    - `nvvm.shfl.sync` / `nvvm.vote.sync` -> `pallas_emu_shfl` / `pallas_emu_vote`;
    - mbarriers (`nvvm.mbarrier.init`, `.arrive.expect_tx`, `.try_wait.parity`)
      -> `pallas_emu_mbarrier_*`; TMA copies (`nvvm.cp.async.bulk.tensor.*`)
      -> `pallas_emu_tma_load` / `pallas_emu_tma_store` on the emulator's
      descriptor (abi.h: EmuTensorMap); bulk groups -> `pallas_emu_bulk_*`;
    - `nvvm.nanosleep` -> `pallas_emu_yield()` (a spin-wait point), `nvvm.setmaxregister`
      -> `pallas_emu_setmaxnreg` (checks its rules), fences vanish (the
      emulator is sequentially consistent);
    - shared-memory globals (address space 3) -> offsets from
      `pallas_emu_shared_base()`, laid out per kernel; each kernel's total is
      exported as `@pallas_emu_kernel_<kernel>_shared_bytes`;
    - every load, store and atomic is preceded by
      `pallas_emu_access(address, bytes, flags)`; atomic loads (semaphore and
      flag reads) and compare-and-swaps are spin-wait points, preceded by
      `pallas_emu_yield()`;
    - address spaces are flattened to the host's, address space casts vanish;
    - libdevice calls (`__nv_*`) stay; the runtime implements them.

    Any other NVVM operation, and inline PTX, is an error naming it.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

#endif // PALLAS_TRANSFORMS_PASSES_TD
