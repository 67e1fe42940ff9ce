//===- PallasDialect.td - the pallas kernel dialect --------*- tablegen -*-===//
//
// Kernel-level concepts of the Pallas programming model: program ids, block
// references into the operands, and block loads/stores with edge masking.
// Block values themselves are upstream `vector` values; arithmetic on them is
// upstream `arith`/`math`, control flow is `scf`.
//
//===----------------------------------------------------------------------===//

#ifndef PALLAS_DIALECT_TD
#define PALLAS_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Pallas_Dialect : Dialect {
  let name = "pallas";
  let cppNamespace = "::mlir::pallas";
  let summary = "Pallas kernels: a grid of programs operating on blocks";
  let description = [{
    A pallas kernel is a `func.func` carrying the `pallas.kernel` attribute.
    Its arguments are the operand arrays (dynamically shaped memrefs whose
    last dim has unit stride) and the scalar parameters. The body runs once
    per program of the grid; `pallas.block` selects the block of an operand
    that the current program sees, and `pallas.load`/`pallas.store` move
    whole blocks (or static slices of them) between memory and `vector`
    values. Elements of an edge block that fall outside the array are masked:
    loads produce zero there and stores skip them.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::vector::VectorDialect", "::mlir::memref::MemRefDialect"];
}

include "pallas/Dialect/PallasLayouts.td"

class Pallas_Type<string name, string typeMnemonic> : TypeDef<Pallas_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Pallas_RefType : Pallas_Type<"Ref", "ref"> {
  let summary = "a reference to the block of an operand seen by one program";
  let description = [{
    `!pallas.ref<8x128xf32>` is the block an index map selected: its shape is
    the block shape with squeezed dims dropped; a full dim (the array's whole
    run-time extent) is `?`, as in `!pallas.ref<?xf32>`. It is a symbolic handle: the
    array, the block origin and the array extents (for edge masking) come
    from the `pallas.block` op that defines it.
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape, "Type":$elementType);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    int64_t getRank() const { return getShape().size(); }
    int64_t getNumElements() const;
  }];
}

class Pallas_Op<string mnemonic, list<Trait> traits = []> : Op<Pallas_Dialect, mnemonic, traits>;

def Pallas_ProgramIdOp : Pallas_Op<"program_id", [Pure]> {
  let summary = "index of the current program along a grid axis";
  let arguments = (ins I32Attr:$axis);
  let results = (outs Index:$result);
  let assemblyFormat = "$axis attr-dict";
}

def Pallas_NumProgramsOp : Pallas_Op<"num_programs", [Pure]> {
  let summary = "number of programs along a grid axis";
  let arguments = (ins I32Attr:$axis);
  let results = (outs Index:$result);
  let assemblyFormat = "$axis attr-dict";
}

def Pallas_ClusterRankOp : Pallas_Op<"cluster_rank", [Pure]> {
  let summary = "the program's rank in its thread-block cluster";
  let description = [{
    The rank of the program's CTA in its cluster (PTX's %cluster_ctarank):
    0 where programs launch without clusters (the host, sm_80).
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def Pallas_ClusterSizeOp : Pallas_Op<"cluster_size", [Pure]> {
  let summary = "programs per thread-block cluster";
  let description = [{
    CTAs per cluster (PTX's %cluster_nctarank), chosen at launch: a
    persistent grid's programs walk the tiles in clusters of this many
    (KernelSpec::persistent). 1 where programs launch without clusters.
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def Pallas_ClusterBarrierOp : Pallas_Op<"cluster_barrier"> {
  let summary = "every program of the thread-block cluster meets here";
  let description = [{
    Returns once every thread of every program in the cluster that has not
    exited has reached it (PTX's `barrier.cluster.arrive` (release) then
    `barrier.cluster.wait` (acquire)): what a program stored to its scratch
    before it is visible to its peers' `pallas.cluster_peer` loads after it.
    In a cluster of one (the host, sm_80, or a launch without clusters) it is
    the program's own barrier.
  }];
  let assemblyFormat = "attr-dict";
}

def Pallas_ClusterPeerOp : Pallas_Op<"cluster_peer", [Pure, AllTypesMatch<["ref", "result"]>]> {
  let summary = "a scratch block as another program of the cluster holds it";
  let description = [{
    The block `ref` of a scratch operand (shared memory) in the program of
    rank `rank` of this program's thread-block cluster (distributed shared
    memory: PTX's `mapa`, then `ld.shared::cluster`). Read-only: loads
    through it read the peer's buffer, as it stood at the last
    `pallas.cluster_barrier` both passed. `rank` must be below
    `pallas.cluster_size`; in a cluster of one it is 0 and the view is the
    program's own buffer.

    ```mlir
    %p = pallas.cluster_peer %partials, %rank : !pallas.ref<128x72xf32>
    %v = pallas.load %p[0, 0][128, 16] plus(%c0, %r0) : !pallas.ref<128x72xf32> -> vector<128x16xf32>
    ```
  }];
  let arguments = (ins Pallas_RefType:$ref, Index:$rank);
  let results = (outs Pallas_RefType:$result);
  let assemblyFormat = "$ref `,` $rank attr-dict `:` type($ref)";
  let hasVerifier = 1;
}

def Pallas_BlockOp : Pallas_Op<"block", [Pure]> {
  let summary = "the block of an operand selected by block indices";
  let description = [{
    `indices` are the block indices the index map returned, one per array
    dim. For a `Blocked(n)` dim the block starts at element `index * n`; for
    a squeezed dim (block extent 1, dropped from the ref shape) at `index`;
    a full dim (block_shape entry `?`, i.e. ShapedType::kDynamic) is the
    whole dim, starting at 0, and its index is ignored.

    ```mlir
    %r = pallas.block %x[%i, %c0] {block_shape = array<i64: 1, 256>,
                                   squeezed = array<i1: true, false>}
        : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<256xf32>
    ```

    `staged` (the spec's `InShared`) asks the GPU lowering to stage the block
    in shared memory with TMA: an input is copied in before the body reads
    it, an output is copied out when the program ends; `swizzle` (0, 32, 64,
    128) is the byte span of TMA's swizzle pattern in the staged copy. The
    block's elements, and the block semantics of every load and store, are the
    same either way; the host lowering ignores these attributes.

    A staged block defined in the body of an `scf.for` marked
    `pallas.pipeline` (an arbitrary grid axis, or emit_pipeline) is a stage of
    that pipeline: `buffers` (1 to 16) stage buffers in shared memory, each
    with its own mbarrier, so the copies of the next `buffers - 1` steps are
    in flight while the body reads this one (StagingRules.cpp, PipelineRules.cpp).

    `tiling` (Pallas' TilingTransform) is the box of one TMA copy, per array
    dim: the staged buffer holds the block tile after tile (row-major over
    the tiles, row-major inside one), each tile one copy. It must divide the
    block, at most 256 elements a dim, its last dim at most `swizzle` bytes.
    Absent: the block's own extents, cut into boxes of 256 along longer dims.

    `multicast` marks a staged input block that every program of a
    thread-block cluster reads at the same indices (a persistent grid's
    clusters: KernelSpec::persistent). A warp-specialized TMA pipeline loads
    it once per cluster: each CTA issues its share of the copies (copy c by
    rank c % cluster size) with `.multicast::cluster` into the same stage
    buffer of every CTA. Elsewhere, and in clusters of 1, it is an ordinary
    staged block.
  }];
  let arguments = (ins AnyMemRef:$array, Variadic<Index>:$indices,
                       DenseI64ArrayAttr:$block_shape, DenseBoolArrayAttr:$squeezed,
                       UnitAttr:$staged, OptionalAttr<I64Attr>:$swizzle,
                       OptionalAttr<I64Attr>:$buffers,
                       OptionalAttr<DenseI64ArrayAttr>:$tiling, UnitAttr:$multicast);
  let results = (outs Pallas_RefType:$ref);
  let assemblyFormat = "$array `[` $indices `]` attr-dict `:` type($array) `->` type($ref)";
  let hasVerifier = 1;
}

def Pallas_LoadOp : Pallas_Op<"load", [DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "load a block (or a static slice of it), masked at the array edge";
  let description = [{
    Reads the slice `[offsets, offsets + sizes)` of the block, where each
    offset is the static one plus, when `dynamic_offsets` are given (one per
    ref dim), the dynamic one. The result may have a larger shape than the
    slice: the slice is broadcast to it with numpy rules (trailing dims
    aligned, slice dims of extent 1 stretched). Elements outside the array
    read as `padding` (Pallas' `other`), zero when it is absent (slices with
    dynamic offsets are bounded by the array, not the block). A max over a
    row loaded with `padding = -inf` needs no mask: only the GPU's edge runs,
    which it reads element by element anyway, see the padding.

    `inside_last_dim` says the spec knows the slice lies inside the array
    along its last dim (a loop over the full chunks of a row): the GPU then
    tests only alignment and the leading dims per run, not the row end. The
    host lowering keeps its masks and the emulator checks every access, so a
    wrong promise is an out-of-bounds report there, not a silent read.
  }];
  let arguments = (ins Pallas_RefType:$ref, Variadic<Index>:$dynamic_offsets,
                       DenseI64ArrayAttr:$offsets, DenseI64ArrayAttr:$sizes,
                       OptionalAttr<TypedAttrInterface>:$padding,
                       UnitAttr:$inside_last_dim);
  let results = (outs AnyVectorOfNonZeroRank:$result);
  let assemblyFormat = "$ref `[` $offsets `]` `[` $sizes `]` (`plus` `(` $dynamic_offsets^ `)`)? attr-dict `:` type($ref) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// What elements outside the array read as: `padding`, or zero.
    ::mlir::TypedAttr getPaddingOrZero();
  }];
}

def Pallas_StoreOp : Pallas_Op<"store", [DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "store a block value into a slice of a block, masked at the array edge";
  let description = [{
    Writes `value` at `offsets` (plus `dynamic_offsets`, one per ref dim, when
    given); elements outside the array are skipped. A scalar `value` writes
    the one element at `offsets` (on the GPU, thread 0 writes it).
  }];
  let arguments = (ins AnyType:$value, Pallas_RefType:$ref,
                       Variadic<Index>:$dynamic_offsets, DenseI64ArrayAttr:$offsets);
  let assemblyFormat = "$value `,` $ref `[` $offsets `]` (`plus` `(` $dynamic_offsets^ `)`)? attr-dict `:` type($value) `,` type($ref)";
  let hasVerifier = 1;
}

def Pallas_IotaOp : Pallas_Op<"iota", [Pure]> {
  let summary = "a block whose elements are their own coordinate along `dimension`";
  let arguments = (ins I64Attr:$dimension);
  let results = (outs VectorOfAnyRankOf<[AnySignlessInteger]>:$result);
  let assemblyFormat = "$dimension attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Pallas_SemaphoreAddOp : Pallas_Op<"semaphore_add"> {
  let summary = "atomically add to a semaphore once per program; returns its old value";
  let description = [{
    `semaphores` is the kernel's semaphore buffer (int32 counters in global
    memory from the runtime's pool, zero at launch; every kernel must leave
    them at zero). The add is one atomic read-modify-write per program, with
    release semantics for the program's earlier writes and acquire semantics
    for its later reads (a signal, and with a negative `value` a take); every
    thread of the program receives the old value.
  }];
  let arguments = (ins MemRefRankOf<[I32], [1]>:$semaphores, Index:$index, I32:$value);
  let results = (outs I32:$old);
  let assemblyFormat = "$semaphores `[` $index `]` `,` $value attr-dict `:` type($semaphores)";
}

def Pallas_SemaphoreReadOp : Pallas_Op<"semaphore_read"> {
  let summary = "read a semaphore (an acquire load; a spin-wait point)";
  let arguments = (ins MemRefRankOf<[I32], [1]>:$semaphores, Index:$index);
  let results = (outs I32:$value);
  let assemblyFormat = "$semaphores `[` $index `]` attr-dict `:` type($semaphores)";
}

def Pallas_SemaphoreWaitOp : Pallas_Op<"semaphore_wait"> {
  let summary = "wait until a semaphore is at least `value`, then subtract `value`";
  let description = [{
    Once per program: one thread spins until the counter at `index` is at
    least `value` and atomically subtracts `value` (acquire: writes released
    by the signals it consumed are visible to every thread of the program
    afterwards). Pallas' `semaphore_wait`. A wait that no program can satisfy
    never returns on the GPU; the emulator reports it as a deadlock and the
    host backend (programs run one after another) as an error of the launch.
  }];
  let arguments = (ins MemRefRankOf<[I32], [1]>:$semaphores, Index:$index, I32:$value);
  let assemblyFormat = "$semaphores `[` $index `]` `,` $value attr-dict `:` type($semaphores)";
}

def Pallas_CheckOp : Pallas_Op<"check"> {
  let summary = "record a failed run-time check of the kernel (Pallas' checkify.check)";
  let description = [{
    Where `failed` (a scalar, the same in every thread of the program) is
    true, the program records check number `check` and up to three 64-bit
    `values`, each as two i32 halves (low, high), in the kernel's error
    record: int32 `errors[0]` counts the programs that failed a check; the
    first one to fail writes `errors[1] = check + 1` and `values` from
    `errors[2]`. The runtime turns the record into the launch's status
    (host, emulator) or reports it later (CUDA: take_device_errors).

    ```mlir
    pallas.check %errors[0] if %bad, %lo, %hi : memref<8xi32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[I32], [1]>:$errors, I32Attr:$check, I1:$failed,
                   Variadic<I32>:$values);
  let assemblyFormat =
      "$errors `[` $check `]` `if` $failed (`,` $values^)? attr-dict `:` type($errors)";
  let hasVerifier = 1;
}

def Pallas_ScratchOp : Pallas_Op<"scratch"> {
  let summary = "the program's scratch buffer (shared memory on the GPU)";
  let description = [{
    A static buffer private to one program, uninitialised when the program
    starts (Pallas' scratch_shapes). The GPU lowering places it in shared
    memory and fences every store to it with barriers; the host lowering
    places it on the stack. With `accumulator` it is an f32 matrix held in
    registers (the WGMMA accumulator layout on the GPU), zero when the
    program starts.

    ```mlir
    %acc = pallas.scratch : memref<8x128xf32>
    %r = pallas.block %acc[%c0, %c0] {block_shape = array<i64: 8, 128>,
                                      squeezed = array<i1: false, false>}
        : memref<8x128xf32> -> !pallas.ref<8x128xf32>
    ```
  }];
  let arguments = (ins UnitAttr:$accumulator);
  let results = (outs AnyStaticShapeMemRef:$buffer);
  let assemblyFormat = "(`accumulator` $accumulator^)? attr-dict `:` type($buffer)";
}

def Pallas_DotOp : Pallas_Op<"dot", [Pure]> {
  let summary = "matrix product of two blocks, accumulated in f32 (Pallas' dot, wgmma, mma.sync)";
  let description = [{
    `result = acc + a @ b` (`transpose(a)` with `transpose_a`, `transpose(b)`
    with `transpose_b`): `a` is `[M, K]` (`[K, M]` transposed), `b` is `[K, N]`
    (`[N, K]` transposed), both f16 or both bf16; products are summed in f32,
    and `acc` (optional: zero without it) is `[M, N]` f32.

    ```mlir
    %d = pallas.dot %a, %b, %acc {transpose_b}
        : vector<128x64xbf16>, vector<128x64xbf16>, vector<128x128xf32> -> vector<128x128xf32>
    ```

    The GPU lowering reads `a` and `b` from shared memory (in place when they
    are loads of blocks a pipeline staged there, else through a buffer the
    rule fills) and multiplies with `wgmma` on sm_90a; the result is in the
    WGMMA accumulator layout (`#pallas.tiled`, PallasLayouts.td). The host
    lowering is a loop nest.
  }];
  let arguments = (ins AnyVectorOfNonZeroRank:$a, AnyVectorOfNonZeroRank:$b,
                       Optional<AnyVectorOfNonZeroRank>:$acc, UnitAttr:$transpose_a,
                       UnitAttr:$transpose_b);
  let results = (outs AnyVectorOfNonZeroRank:$result);
  let assemblyFormat = [{
    $a `,` $b (`,` $acc^)? attr-dict `:` type($a) `,` type($b) (`,` type($acc)^)? `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getM() { return getA().getType().getShape()[getTransposeA() ? 1 : 0]; }
    int64_t getK() { return getA().getType().getShape()[getTransposeA() ? 0 : 1]; }
    int64_t getN() { return getResult().getType().getShape()[1]; }
  }];
}

def Pallas_WgmmaOp : Pallas_Op<"wgmma"> {
  let summary = "asynchronous acc += a @ b on shared-memory blocks (Pallas' wgmma)";
  let description = [{
    Starts `acc += a @ b` (`transpose(a)` with `transpose_a`, `transpose(b)`
    with `transpose_b`): `acc` is an accumulator ref (`spec.accumulator`,
    `[M, N]` f32), `a` (`[M, K]`, or `[K, M]` transposed) and `b` (`[K, N]`, or
    `[N, K]` transposed) refs of blocks staged in shared memory (InShared),
    both f16 or both bf16; `a` may instead be a block value held in registers
    (Pallas' wgmma with an array `a`: e.g. attention's probabilities, computed
    in the accumulator layout; never transposed). A transposed `a` ([K, M])
    and an untransposed `b` ([K, N]) are read in place MN-major (wgmma's
    imm-trans-a / imm-trans-b = 1), the others K-major. The multiply runs asynchronously:
    `pallas.wgmma_wait` bounds how many are in flight, and the operands must
    not be overwritten before it (the emulator checks). Reading or writing
    the accumulator waits for the multiplies into it (Pallas'
    `wgmma_accumulator_deref` waits for all): groups complete in order, so
    wgmma.wait_group n where n multiplies were started after its last one in
    the same block, none where a wait in the block already completed it,
    else 0 (MatmulRules.cpp, pendingAllowed).

    ```mlir
    pallas.wgmma %acc, %a, %b {transpose_b}
        : !pallas.ref<128x64xf32>, !pallas.ref<128x64xbf16>, !pallas.ref<64x64xbf16>
    pallas.wgmma %acc2, %p, %v : !pallas.ref<64x64xf32>, vector<64x64xbf16>, !pallas.ref<64x64xbf16>
    ```

    sm_90a: `wgmma.mma_async` on descriptors of the stage buffers (a value
    `a`: its WGMMA-layout registers, four 32-bit words per 16 of K), then
    `wgmma.commit_group`. Targets without asynchronous MMAs (the host, sm_80)
    run it synchronously: `pallas-expand-wgmma` rewrites it to loads, a
    `pallas.dot` and a store.
  }];
  let arguments = (ins Pallas_RefType:$acc,
                       AnyTypeOf<[Pallas_RefType, AnyVectorOfNonZeroRank]>:$a,
                       Pallas_RefType:$b, UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let assemblyFormat = [{
    $acc `,` $a `,` $b attr-dict `:` type($acc) `,` type($a) `,` type($b)
  }];
  let hasVerifier = 1;
}

def Pallas_WgmmaWaitOp : Pallas_Op<"wgmma_wait"> {
  let summary = "wait until at most `pending` pallas.wgmma multiplies are in flight";
  let description = [{
    Pallas' `wgmma_wait(n)`: the multiplies started before it, except the
    newest `pending`, are complete, and their operands may be overwritten.
    `wgmma.wait_group` on sm_90a; nothing where multiplies are synchronous.
  }];
  let arguments = (ins I32Attr:$pending);
  let assemblyFormat = "$pending attr-dict";
}

def Pallas_LoadScalarOp : Pallas_Op<"load_scalar",
    [DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "load one element of a block, the same in every thread (0 past the array edge)";
  let arguments = (ins Pallas_RefType:$ref, Variadic<Index>:$indices);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$ref `[` $indices `]` attr-dict `:` type($ref) `->` type($result)";
}

def Pallas_ConvertLayoutOp : Pallas_Op<"convert_layout", [Pure]> {
  let summary = "a block value moved from one thread layout to another (and broadcast)";
  let description = [{
    Inserted by `pallas-assign-layouts` where a value is used in a layout
    other than the one it was made in, so that no lowering rule moves data
    between threads implicitly. The result may be a numpy broadcast of the
    source (a per-row statistic spread over the block it scales). On the GPU
    it goes through shared memory: `replicated` to `strided`, each source
    element is written once and every thread reads the elements of its runs;
    `strided` to `replicated`, every thread writes its runs and reads all.
    On the host it is a broadcast.

    ```mlir
    %d = pallas.convert_layout %rowmax {from = #pallas.replicated,
        to = #pallas.strided<threads = 128, vec = 4>} : vector<16x1xf32> to vector<16x128xf32>
    ```
  }];
  let arguments = (ins AnyVectorOfNonZeroRank:$source, AnyAttr:$from, AnyAttr:$to);
  let results = (outs AnyVectorOfNonZeroRank:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `to` type($result)";
  let hasVerifier = 1;
}


//===----------------------------------------------------------------------===//
// Explicit async copies and barriers (Pallas' copy_gmem_to_smem and friends)
//===----------------------------------------------------------------------===//

def Pallas_BarriersType : Pallas_Type<"Barriers", "barriers"> {
  let summary = "`count` mbarriers in the program's shared memory (Pallas' Barrier scratch)";
  let description = [{
    `!pallas.barriers<2, arrivals = 1>`: two barriers, each completing a phase
    once it has had `arrivals` arrivals and every byte of the copies that
    complete on it in that phase has landed. A `pallas.copy_to_shared` is one
    arrival (the program's) plus its bytes; a `pallas.barrier_arrive` is one
    arrival. The phase each thread waits for is tracked by the lowering.
  }];
  let parameters = (ins "int64_t":$count, "int64_t":$arrivals);
  let assemblyFormat = "`<` $count `,` `arrivals` `=` $arrivals `>`";
}

def Pallas_RunScopedOp : Pallas_Op<"run_scoped", [NoTerminator, SingleBlock]> {
  let summary = "shared-memory buffers and barriers that live only in a region (Pallas' run_scoped)";
  let description = [{
    The region's arguments are the allocations: static memrefs (buffers for
    async copies, in shared memory on the GPU; `swizzles` gives each its TMA
    swizzle in bytes, 0, 32, 64 or 128) followed by `!pallas.barriers`. They
    are uninitialised buffers and freshly initialised barriers (phase 0) each
    time the region runs, and dead after it: the GPU's shared-memory plan
    gives their bytes to others outside it. When the region ends the program
    waits for its copies to global memory to have read their buffers.

    ```mlir
    pallas.run_scoped {swizzles = array<i64: 128>} {
    ^bb0(%buf: memref<64x64xf16>, %bars: !pallas.barriers<1, arrivals = 1>):
      pallas.copy_to_shared %x[%i, %c0], %buf, %bars[%c0] : memref<?x?xf16, strided<[?, 1]>>, memref<64x64xf16>, !pallas.barriers<1, arrivals = 1>
      pallas.barrier_wait %bars[%c0] : !pallas.barriers<1, arrivals = 1>
    }
    ```

    A buffer is read and written through a `pallas.block` over it (its whole
    shape): its elements live in the copy's layout (row-major boxes of at
    most 256 a dim, swizzled), so loads and stores move whole 16-byte runs
    (the strided layout) at static offsets.
  }];
  let arguments = (ins DenseI64ArrayAttr:$swizzles);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The swizzle of `buffer` if it is one of this op's buffers, else nullopt.
    static std::optional<int64_t> swizzleOf(::mlir::Value buffer);
  }];
}

def Pallas_CopyToSharedOp : Pallas_Op<"copy_to_shared"> {
  let summary = "async copy of a slice of an array into a shared buffer (Pallas' copy_gmem_to_smem)";
  let description = [{
    Copies the slice of `array` starting at element `offsets` (one per array
    dim), of the buffer's shape, into `buffer` (a run_scoped buffer), and
    completes on barrier `barrier` of `barriers`: one arrival of the program,
    and the slice's bytes. Elements outside the array read as zero. Issued
    once per program (every thread reaches it; the lowering picks who copies).

    sm_90a: thread 0 arrives with expect-tx of the bytes and issues the TMA
    copies (the array has a TMA descriptor whose box is the buffer's copy
    box). sm_80 (cp-async): every thread copies its 16-byte pieces with
    cp.async and attaches them to the barrier (cp.async.mbarrier.arrive),
    then the program's one arrival. `direct` (the kernel's _direct instance,
    for arrays TMA cannot copy): the threads copy with ordinary loads and
    stores, then the one arrival.
  }];
  let arguments = (ins AnyMemRef:$array, Variadic<Index>:$offsets, AnyStaticShapeMemRef:$buffer,
                       Pallas_BarriersType:$barriers, Index:$barrier, UnitAttr:$direct);
  let assemblyFormat = [{
    $array `[` $offsets `]` `,` $buffer `,` $barriers `[` $barrier `]` attr-dict `:` type($array) `,` type($buffer) `,` type($barriers)
  }];
  let hasVerifier = 1;
}

def Pallas_CopyToGlobalOp : Pallas_Op<"copy_to_global"> {
  let summary = "async copy of a shared buffer to a slice of an array (Pallas' copy_smem_to_gmem)";
  let description = [{
    Writes `buffer` to the slice of `array` at element `offsets`; elements
    outside the array are not written. With `add` the buffer's elements are
    added to the array's (a reduction: f32 and i32). The buffer must have been
    written before, and fenced for the async proxy (`pallas.commit_shared`);
    it must not be written again until a `pallas.wait_copies_to_global` has
    waited for the copy to read it. Unless `uncommitted`, the copy ends a
    bulk group (Pallas' commit_group=True).

    sm_90a: thread 0's TMA stores (cp.reduce.async.bulk.tensor .add for
    `add`). sm_80 and `direct`: every thread stores its 16-byte pieces (adds
    with atomics), synchronously.
  }];
  let arguments = (ins AnyStaticShapeMemRef:$buffer, AnyMemRef:$array, Variadic<Index>:$offsets,
                       UnitAttr:$add, UnitAttr:$uncommitted, UnitAttr:$direct);
  let assemblyFormat = [{
    $buffer `,` $array `[` $offsets `]` attr-dict `:` type($buffer) `,` type($array)
  }];
  let hasVerifier = 1;
}

def Pallas_PrefetchOp : Pallas_Op<"prefetch"> {
  let summary = "prefetch a slice of an array into L2 (Pallas' async_prefetch)";
  let description = [{
    A hint: the slice of `array` at element `offsets` of the array's copy box
    (the shape of the buffers it is copied to) is fetched into L2. sm_90a:
    a TMA prefetch by thread 0; elsewhere nothing.
  }];
  let arguments = (ins AnyMemRef:$array, Variadic<Index>:$offsets, DenseI64ArrayAttr:$box,
                       UnitAttr:$direct);
  let assemblyFormat = "$array `[` $offsets `]` attr-dict `:` type($array)";
}

def Pallas_BarrierWaitOp : Pallas_Op<"barrier_wait"> {
  let summary = "every thread waits for the current phase of a barrier to complete";
  let description = [{
    The phase waited for is tracked per barrier: the first wait of a
    run_scoped region waits for phase 0, the next for phase 1, and so on.
    After it every thread sees the bytes of the copies that completed on it.
  }];
  let arguments = (ins Pallas_BarriersType:$barriers, Index:$barrier);
  let assemblyFormat = "$barriers `[` $barrier `]` attr-dict `:` type($barriers)";
}

def Pallas_BarrierArriveOp : Pallas_Op<"barrier_arrive"> {
  let summary = "the program arrives once on a barrier, after all its threads got here";
  let description = [{
    A barrier of the program's threads, then one arrival (by thread 0): what
    every thread did before it (reading a buffer, say) happens before the
    phase completes. Used to release a buffer to the copies that refill it.
  }];
  let arguments = (ins Pallas_BarriersType:$barriers, Index:$barrier);
  let assemblyFormat = "$barriers `[` $barrier `]` attr-dict `:` type($barriers)";
}

def Pallas_CommitSharedOp : Pallas_Op<"commit_shared"> {
  let summary = "the program's shared-memory writes become visible to async copies (Pallas' commit_smem)";
  let description = [{
    Every thread fences its shared-memory writes for the async proxy
    (fence.proxy.async.shared::cta), then a barrier of the program's threads:
    a copy_to_global issued after it reads what every thread wrote.
  }];
  let assemblyFormat = "attr-dict";
}

def Pallas_CommitCopiesToGlobalOp : Pallas_Op<"commit_copies_to_global"> {
  let summary = "end a bulk group of copies to global memory (Pallas' commit_smem_to_gmem_group)";
  let assemblyFormat = "attr-dict";
}

def Pallas_WaitCopiesToGlobalOp : Pallas_Op<"wait_copies_to_global"> {
  let summary = "wait until at most `pending` bulk groups of copies to global memory are in flight";
  let description = [{
    Pallas' wait_smem_to_gmem(n, wait_read_only): thread 0 waits for all but
    the newest `pending` bulk groups to complete (with `read_only`, to have
    read their buffers only), then a barrier of the program's threads, so
    every thread may write the buffers those copies read.
  }];
  let arguments = (ins I64Attr:$pending, UnitAttr:$read_only);
  let assemblyFormat = "$pending attr-dict";
}

#endif // PALLAS_DIALECT_TD
