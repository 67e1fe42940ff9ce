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

def ConvertPallasToGPU : Pass<"convert-pallas-to-gpu", "ModuleOp"> {
  let summary = "Outline pallas kernels into a gpu.module and distribute blocks over threads";
  let description = [{
    Every `func.func` marked `pallas.kernel` becomes a `gpu.func` kernel of a
    `gpu.module @pallas_kernels` (one program = one CTA of `threads` threads).
    Block values of shape S get the warpgroup-strided layout: the block is
    flattened row-major and cut into runs of `vec` contiguous elements; run k
    belongs to thread `k % threads`. A thread's fragment is the vector of its
    runs in order. Worked example, S = 8x256 f32, threads = 128, vec = 4:
    thread t owns runs t, t+128, t+256, t+384, i.e. flat elements
    [4t, 4t+4) + 512 r for r = 0..3, which is row 2r + t/64, columns
    [4(t%64), 4(t%64)+4): a fragment of vector<16xf32>, loaded with four
    16-byte accesses, each warp touching 512 contiguous bytes.
    Loads and stores of a run use one (or several) 16-byte vector accesses
    when the run is inside the array and its address is 16-byte aligned,
    and masked scalar accesses otherwise.
  }];
  let options = [
    Option<"threads", "threads", "int64_t", /*default=*/"128",
           "Threads per program (CTA); 128 is one warpgroup">,
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect", "::mlir::vector::VectorDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect"];
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

def ConvertGPUToThreadLoops : Pass<"convert-gpu-to-thread-loops", "ModuleOp"> {
  let summary = "Run GPU kernels on the CPU, one thread after another (the emulator backend)";
  let description = [{
    Each `gpu.func` kernel of the module's gpu.modules becomes a host function
    `pallas_emu_<name>(args..., grid0, grid1, grid2)` that runs the kernel's
    thread-level code for every program and every thread in sequence:

    ```mlir
    scf.for %bz ... scf.for %by ... scf.for %bx ...   // programs
      scf.for %tid = 0 to <known_block_size x>      // threads
        <gpu.func body: gpu.thread_id x -> %tid, gpu.block_id -> %bx.., ...>
    ```

    Sequential execution is exact for kernels whose threads do not
    communicate; kernels with barriers, shuffles or workgroup memory are
    rejected (they need the fiber-based SIMT runtime).
  }];
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect"];
}

#endif // PALLAS_TRANSFORMS_PASSES_TD
