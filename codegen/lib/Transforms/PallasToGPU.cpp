//===- PallasToGPU.cpp - blocks distributed over the threads of a CTA -----===//
//
// One program is one CTA of `threads` threads. A block value of shape S is
// held as a per-thread fragment under the warpgroup-strided layout (see the
// pass description in Passes.td): S is flattened row-major and cut into runs
// of `vec` contiguous elements; run k belongs to thread k % threads, so the
// thread's r-th run starts at flat element (r * threads + tid) * vec.
//
// `vec` is one value for the whole kernel (elementwise ops need operands and
// results in the same layout even when their dtypes differ): 16 bytes of the
// narrowest element type the kernel moves, reduced until it divides every
// block's last dim and every block's size is a multiple of threads * vec.
//
// A run is loaded/stored with 16-byte vector accesses when it lies inside the
// array and its address is 16-byte aligned (checked at run time), and with
// masked scalar accesses otherwise, so edge blocks and odd strides are exact.
//
//===----------------------------------------------------------------------===//

#include "BlockIndexing.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/IRMapping.h"

#include <numeric>

namespace mlir::pallas {
#define GEN_PASS_DEF_CONVERTPALLASTOGPU
#include "pallas/Transforms/Passes.h.inc"

namespace {

/// The layout parameters of one kernel.
struct Layout {
  int64_t threads;
  int64_t vec;
  /// Fragment type of a block value: its elements owned by one thread.
  VectorType fragment(VectorType block) const {
    return VectorType::get({block.getNumElements() / threads}, block.getElementType());
  }
  int64_t runs(VectorType block) const { return block.getNumElements() / (threads * vec); }
};

/// Picks `vec` for a kernel, or fails naming the block that does not fit.
FailureOr<Layout> chooseLayout(func::FuncOp kernel, int64_t threads) {
  // Their results would need a layout replicated across threads: say so
  // before the layout check below complains about their small shapes.
  WalkResult partial = kernel.walk([](vector::MultiDimReductionOp red) {
    if (!isa<VectorType>(red.getDestType())) return WalkResult::advance();
    red.emitOpError(
        "no GPU lowering rule for a reduction that keeps some dims yet; reduce the "
        "whole block to a scalar (1-D blocks per row)");
    return WalkResult::interrupt();
  });
  if (partial.wasInterrupted()) return failure();
  int64_t minBytes = 4;
  SmallVector<VectorType> blocks;
  kernel.walk([&](Operation* op) {
    for (Type t : op->getResultTypes())
      if (auto vt = dyn_cast<VectorType>(t)) {
        blocks.push_back(vt);
        if (vt.getElementType().isIntOrFloat() && vt.getElementTypeBitWidth() >= 8)
          minBytes = std::min<int64_t>(minBytes, vt.getElementTypeBitWidth() / 8);
      }
  });
  int64_t vec = 16 / minBytes;
  for (VectorType vt : blocks) {
    vec = std::gcd(vec, vt.getShape().back());
    while (vec > 1 && vt.getNumElements() % (threads * vec) != 0) vec /= 2;
    if (vt.getNumElements() % threads != 0) {
      kernel.emitError() << "block value of type " << vt << " has " << vt.getNumElements()
                         << " elements, not a multiple of the " << threads
                         << " threads of a program; the GPU layout needs it";
      return failure();
    }
  }
  return Layout{threads, vec};
}

/// The static shared memory a CUDA kernel may use without opting in.
constexpr int64_t kMaxStaticSharedBytes = 48 * 1024;

class GpuLowering {
 public:
  GpuLowering(func::FuncOp kernel, gpu::GPUModuleOp gpuModule, Layout layout)
      : kernel_(kernel), gpuModule_(gpuModule), layout_(layout) {}

  LogicalResult run() {
    Location loc = kernel_.getLoc();
    OpBuilder mb = OpBuilder::atBlockEnd(gpuModule_.getBody());
    auto func = gpu::GPUFuncOp::create(mb, loc, kernel_.getSymName(), kernel_.getFunctionType());
    func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), mb.getUnitAttr());
    func.setKnownBlockSizeAttr(
        mb.getDenseI32ArrayAttr({static_cast<int32_t>(layout_.threads), 1, 1}));
    func_ = func;
    Block& entry = func.getBody().front();
    for (auto [from, to] : llvm::zip(kernel_.getArguments(), entry.getArguments()))
      map_.map(from, to);
    OpBuilder b = OpBuilder::atBlockEnd(&entry);
    tid_ = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    if (failed(lowerBlock(kernel_.getBody().front(), b))) return failure();
    gpu::ReturnOp::create(b, loc);
    int64_t sharedBytes = 0;
    for (BlockArgument buffer : func.getWorkgroupAttributions()) {
      auto type = cast<MemRefType>(buffer.getType());
      sharedBytes += type.getNumElements() * type.getElementTypeBitWidth() / 8;
    }
    if (sharedBytes > kMaxStaticSharedBytes)
      return kernel_.emitError() << "a program needs " << sharedBytes
                                 << " bytes of shared memory (scratch and reduction buffers); "
                                    "static shared memory is at most "
                                 << kMaxStaticSharedBytes << " bytes";
    kernel_.erase();
    return success();
  }

 private:
  static gpu::Dimension dim(int32_t axis) {
    return axis == 0 ? gpu::Dimension::x : axis == 1 ? gpu::Dimension::y : gpu::Dimension::z;
  }

  LogicalResult lowerBlock(Block& block, OpBuilder& b) {
    for (Operation& op : block.without_terminator())
      if (failed(lowerOp(&op, b))) return failure();
    return success();
  }

  /// Flat element index where run `r` of this thread starts.
  Value runStart(OpBuilder& b, Location loc, int64_t r) {
    Value t =
        arith::MulIOp::create(b, loc, tid_, arith::ConstantIndexOp::create(b, loc, layout_.vec));
    return arith::AddIOp::create(
        b, loc, t, arith::ConstantIndexOp::create(b, loc, r * layout_.threads * layout_.vec));
  }

  /// Builds a fragment from one vector<vec> per run.
  Value assemble(OpBuilder& b, Location loc, VectorType block,
                 function_ref<Value(int64_t r, SmallVector<Value>& coords)> run) {
    VectorType frag = layout_.fragment(block);
    Value acc = arith::ConstantOp::create(b, loc, b.getZeroAttr(frag));
    for (int64_t r = 0; r < layout_.runs(block); ++r) {
      SmallVector<Value> coords = unflatten(b, loc, runStart(b, loc, r), block.getShape());
      Value piece = run(r, coords);
      acc = vector::InsertStridedSliceOp::create(
          b, loc, piece, acc, ArrayRef<int64_t>{r * layout_.vec}, ArrayRef<int64_t>{1});
    }
    return acc;
  }

  /// Byte address of the array element at `coords`, for the alignment test.
  Value address(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords) {
    auto meta = memref::ExtractStridedMetadataOp::create(b, loc, ref.array);
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, ref.array);
    Value linear = meta.getOffset();
    for (auto [c, s] : llvm::zip(coords, meta.getStrides()))
      linear = arith::AddIOp::create(b, loc, linear, arith::MulIOp::create(b, loc, c, s));
    auto mt = cast<MemRefType>(ref.array.getType());
    Value bytes = arith::ConstantIndexOp::create(b, loc, mt.getElementTypeBitWidth() / 8);
    return arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, linear, bytes));
  }

  /// i1: the run at `coords` is inside the array and aligned for vector access.
  Value fastPath(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords,
                 int64_t accessBytes) {
    Value inside = inBounds(b, loc, ref, coords, layout_.vec);
    Value addr = address(b, loc, ref, coords);
    Value rem =
        arith::RemUIOp::create(b, loc, addr, arith::ConstantIndexOp::create(b, loc, accessBytes));
    Value aligned = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rem,
                                          arith::ConstantIndexOp::create(b, loc, 0));
    return arith::AndIOp::create(b, loc, inside, aligned);
  }

  /// Size in bytes of one vector access for a run of `et`: 16 bytes, or the
  /// whole run when it is smaller.
  int64_t accessBytes(Type et) const {
    return std::min<int64_t>(16, layout_.vec * et.getIntOrFloatBitWidth() / 8);
  }

  /// Coordinates of element j of a run starting at `coords` (runs lie along the last dim).
  SmallVector<Value> plus(OpBuilder& b, Location loc, ValueRange coords, int64_t j) {
    SmallVector<Value> out(coords.begin(), coords.end());
    out.back() =
        arith::AddIOp::create(b, loc, out.back(), arith::ConstantIndexOp::create(b, loc, j));
    return out;
  }

  SmallVector<Value> mapped(ValueRange values) {
    SmallVector<Value> out;
    for (Value v : values) out.push_back(map_.lookup(v));
    return out;
  }

  LogicalResult lowerLoad(LoadOp load, OpBuilder& b) {
    Location loc = load.getLoc();
    const BlockRef& ref = refs_.at(load.getRef());
    VectorType type = load.getResult().getType();
    Type et = type.getElementType();
    VectorType runType = VectorType::get({layout_.vec}, et);
    int64_t bytes = accessBytes(et);
    int64_t perAccess = bytes * 8 / et.getIntOrFloatBitWidth();
    bool contiguous = lastDimContiguous(ref, load.getSizes(), type.getShape());
    Value frag = assemble(b, loc, type, [&](int64_t, SmallVector<Value>& rc) -> Value {
      SmallVector<Value> coords =
          arrayCoords(b, loc, ref, load.getOffsets(), mapped(load.getDynamicOffsets()),
                      load.getSizes(), type.getShape(), rc);
      Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(et));
      if (!contiguous) {  // the whole run reads one element (a stretched dim)
        auto one = scf::IfOp::create(
            b, loc, inBounds(b, loc, ref, coords),
            [&](OpBuilder& tb, Location l) {
              scf::YieldOp::create(tb, l,
                                   memref::LoadOp::create(tb, l, ref.array, coords).getResult());
            },
            [&](OpBuilder& eb, Location l) { scf::YieldOp::create(eb, l, zero); });
        return vector::BroadcastOp::create(b, loc, runType, one.getResult(0));
      }
      auto branch = scf::IfOp::create(
          b, loc, fastPath(b, loc, ref, coords, bytes),
          [&](OpBuilder& tb, Location l) {  // whole run, 16-byte accesses
            Value run = arith::ConstantOp::create(tb, l, tb.getZeroAttr(runType));
            for (int64_t j = 0; j < layout_.vec; j += perAccess) {
              auto piece = vector::LoadOp::create(tb, l, VectorType::get({perAccess}, et),
                                                  ref.array, plus(tb, l, coords, j),
                                                  /*nontemporal=*/false, llvm::MaybeAlign(bytes));
              run = vector::InsertStridedSliceOp::create(tb, l, piece, run, ArrayRef<int64_t>{j},
                                                         ArrayRef<int64_t>{1});
            }
            scf::YieldOp::create(tb, l, run);
          },
          [&](OpBuilder& eb, Location l) {  // edge or misaligned: element by element
            Value run = arith::ConstantOp::create(eb, l, eb.getZeroAttr(runType));
            for (int64_t j = 0; j < layout_.vec; ++j) {
              SmallVector<Value> cj = plus(eb, l, coords, j);
              auto one = scf::IfOp::create(
                  eb, l, inBounds(eb, l, ref, cj),
                  [&](OpBuilder& ib, Location il) {
                    scf::YieldOp::create(ib, il,
                                         memref::LoadOp::create(ib, il, ref.array, cj).getResult());
                  },
                  [&](OpBuilder& ob, Location ol) {
                    scf::YieldOp::create(
                        ob, ol, arith::ConstantOp::create(ob, ol, ob.getZeroAttr(et)).getResult());
                  });
              run = vector::InsertOp::create(eb, l, one.getResult(0), run, ArrayRef<int64_t>{j});
            }
            scf::YieldOp::create(eb, l, run);
          });
      return branch.getResult(0);
    });
    map_.map(load.getResult(), frag);
    return success();
  }

  static bool inSharedMemory(Value array) {
    auto space =
        dyn_cast_or_null<gpu::AddressSpaceAttr>(cast<MemRefType>(array.getType()).getMemorySpace());
    return space && space.getValue() == gpu::AddressSpace::Workgroup;
  }

  /// A store to scratch is fenced by barriers: the one before lets every
  /// thread finish reading the old contents, the one after makes the new
  /// contents visible to every thread (any thread may load any element).
  LogicalResult lowerStore(StoreOp store, OpBuilder& b) {
    if (!inSharedMemory(refs_.at(store.getRef()).array)) return lowerStoreElements(store, b);
    gpu::BarrierOp::create(b, store.getLoc());
    if (failed(lowerStoreElements(store, b))) return failure();
    gpu::BarrierOp::create(b, store.getLoc());
    return success();
  }

  LogicalResult lowerStoreElements(StoreOp store, OpBuilder& b) {
    Location loc = store.getLoc();
    const BlockRef& ref = refs_.at(store.getRef());
    auto type = dyn_cast<VectorType>(store.getValue().getType());
    if (!type) {  // one element, replicated in every thread: thread 0 writes it
      SmallVector<Value> coords =
          elementCoords(b, loc, ref, store.getOffsets(), mapped(store.getDynamicOffsets()));
      Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_,
                                          arith::ConstantIndexOp::create(b, loc, 0));
      Value write = arith::AndIOp::create(b, loc, first, inBounds(b, loc, ref, coords));
      scf::IfOp::create(b, loc, write, [&](OpBuilder& tb, Location tl) {
        memref::StoreOp::create(tb, tl, map_.lookup(store.getValue()), ref.array, coords);
        scf::YieldOp::create(tb, tl);
      });
      return success();
    }
    Type et = type.getElementType();
    int64_t bytes = accessBytes(et);
    int64_t perAccess = bytes * 8 / et.getIntOrFloatBitWidth();
    Value frag = map_.lookup(store.getValue());
    for (int64_t r = 0; r < layout_.runs(type); ++r) {
      SmallVector<Value> rc = unflatten(b, loc, runStart(b, loc, r), type.getShape());
      SmallVector<Value> coords =
          arrayCoords(b, loc, ref, store.getOffsets(), mapped(store.getDynamicOffsets()),
                      type.getShape(), type.getShape(), rc);
      Value run = vector::ExtractStridedSliceOp::create(
          b, loc, frag, ArrayRef<int64_t>{r * layout_.vec}, ArrayRef<int64_t>{layout_.vec},
          ArrayRef<int64_t>{1});
      scf::IfOp::create(
          b, loc, fastPath(b, loc, ref, coords, bytes),
          [&](OpBuilder& tb, Location l) {
            for (int64_t j = 0; j < layout_.vec; j += perAccess) {
              Value piece = vector::ExtractStridedSliceOp::create(tb, l, run, ArrayRef<int64_t>{j},
                                                                  ArrayRef<int64_t>{perAccess},
                                                                  ArrayRef<int64_t>{1});
              vector::StoreOp::create(tb, l, piece, ref.array, plus(tb, l, coords, j),
                                      /*nontemporal=*/false, llvm::MaybeAlign(bytes));
            }
            scf::YieldOp::create(tb, l);
          },
          [&](OpBuilder& eb, Location l) {
            for (int64_t j = 0; j < layout_.vec; ++j) {
              SmallVector<Value> cj = plus(eb, l, coords, j);
              scf::IfOp::create(eb, l, inBounds(eb, l, ref, cj), [&](OpBuilder& ib, Location il) {
                Value v = vector::ExtractOp::create(ib, il, run, ArrayRef<int64_t>{j});
                memref::StoreOp::create(ib, il, v, ref.array, cj);
                scf::YieldOp::create(ib, il);
              });
            }
            scf::YieldOp::create(eb, l);
          });
    }
    return success();
  }

  LogicalResult lowerIota(IotaOp iota, OpBuilder& b) {
    Location loc = iota.getLoc();
    VectorType type = iota.getResult().getType();
    Type et = type.getElementType();
    VectorType runType = VectorType::get({layout_.vec}, et);
    int64_t dimension = iota.getDimension();
    bool alongRun = dimension == type.getRank() - 1;
    Value frag = assemble(b, loc, type, [&](int64_t, SmallVector<Value>& rc) -> Value {
      Value base = arith::IndexCastOp::create(b, loc, et, rc[dimension]);
      Value run = vector::BroadcastOp::create(b, loc, runType, base);
      if (!alongRun) return run;
      SmallVector<APInt> steps;
      for (int64_t j = 0; j < layout_.vec; ++j)
        steps.push_back(APInt(et.getIntOrFloatBitWidth(), j));
      Value step = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(runType, steps));
      return arith::AddIOp::create(b, loc, run, step);
    });
    map_.map(iota.getResult(), frag);
    return success();
  }

  /// A reduction of every element of a block to a scalar, replicated in all
  /// threads: each thread reduces its fragment, a warp combines its 32
  /// partials with a butterfly of shfl.xor (every lane ends with the warp's
  /// value), lane 0 of each warp writes it to shared memory, and after a
  /// barrier every thread combines the warps' values in the same order (so all
  /// threads hold the same bits). A second barrier keeps the next use of the
  /// scratch (a reduction in a loop) from overwriting values still being read.
  LogicalResult lowerReduction(vector::MultiDimReductionOp red, OpBuilder& b) {
    Location loc = red.getLoc();
    if (isa<VectorType>(red.getDestType()))
      return red.emitOpError(
          "no GPU lowering rule for a reduction that keeps some dims yet; "
          "reduce the whole block to a scalar (1-D blocks per row)");
    Type et = red.getSourceVectorType().getElementType();
    if (et.getIntOrFloatBitWidth() != 32)
      return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
    vector::CombiningKind kind = red.getKind();
    Value local =
        vector::ReductionOp::create(b, loc, kind, map_.lookup(red.getSource())).getResult();
    Value width = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 32);
    for (int32_t offset = 16; offset >= 1; offset /= 2) {
      Value o = arith::ConstantIntOp::create(b, loc, b.getI32Type(), offset);
      auto shfl = gpu::ShuffleOp::create(b, loc, local, o, width, gpu::ShuffleMode::XOR);
      local = vector::makeArithReduction(b, loc, kind, local, shfl.getShuffleResult());
    }
    const int64_t warps = layout_.threads / 32;
    auto scratchType =
        MemRefType::get({warps}, et, AffineMap(),
                        gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup));
    Value scratch = func_.addWorkgroupAttribution(scratchType, loc);
    Value c32 = arith::ConstantIndexOp::create(b, loc, 32);
    Value lane = arith::RemUIOp::create(b, loc, tid_, c32);
    Value warp = arith::DivUIOp::create(b, loc, tid_, c32);
    Value leader = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane,
                                         arith::ConstantIndexOp::create(b, loc, 0));
    scf::IfOp::create(b, loc, leader, [&](OpBuilder& tb, Location l) {
      memref::StoreOp::create(tb, l, local, scratch, ValueRange{warp});
      scf::YieldOp::create(tb, l);
    });
    gpu::BarrierOp::create(b, loc);
    Value total = map_.lookup(red.getAcc());
    for (int64_t w = 0; w < warps; ++w) {
      Value partial = memref::LoadOp::create(b, loc, scratch,
                                             ValueRange{arith::ConstantIndexOp::create(b, loc, w)});
      total = vector::makeArithReduction(b, loc, kind, partial, total);
    }
    gpu::BarrierOp::create(b, loc);
    map_.map(red.getResult(), total);
    return success();
  }

  /// One atomic add per program: after a barrier (so every thread's earlier
  /// writes precede the release), thread 0 adds and publishes the old value
  /// in shared memory; after a second barrier every thread reads it.
  /// A signal (`wantOld` false) needs only the first barrier and the atomic.
  Value semaphoreAdd(OpBuilder& b, Location loc, Value semaphores, Value index, Value value,
                     bool wantOld = true) {
    Value slot;
    if (wantOld) {
      auto slotType =
          MemRefType::get({1}, b.getI32Type(), AffineMap(),
                          gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup));
      slot = func_.addWorkgroupAttribution(slotType, loc);
    }
    Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
    gpu::BarrierOp::create(b, loc);
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_, c0);
    scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
      Value old =
          memref::AtomicRMWOp::create(tb, l, arith::AtomicRMWKind::addi, value,
                                      map_.lookup(semaphores), ValueRange{map_.lookup(index)});
      if (slot) memref::StoreOp::create(tb, l, old, slot, ValueRange{c0});
      scf::YieldOp::create(tb, l);
    });
    if (!slot) return {};
    gpu::BarrierOp::create(b, loc);
    return memref::LoadOp::create(b, loc, slot, ValueRange{c0});
  }

  /// Pointer to element `index` of a 1-D memref, for LLVM atomics.
  Value elementPointer(OpBuilder& b, Location loc, Value memref, Value index) {
    auto meta = memref::ExtractStridedMetadataOp::create(b, loc, memref);
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
    auto type = cast<MemRefType>(memref.getType());
    Value element = arith::ConstantIndexOp::create(b, loc, type.getElementTypeBitWidth() / 8);
    Value linear = arith::AddIOp::create(b, loc, meta.getOffset(), index);
    Value addr =
        arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, linear, element));
    Value bits = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), addr);
    return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext()), bits);
  }

  /// Thread 0 spins until it takes `value` from the counter:
  ///
  ///   do { have = atomic load (relaxed);
  ///        took = have >= value && cmpxchg(ptr, have, have - value, acq_rel) }
  ///   while (!took);
  ///
  /// then a barrier holds the other threads until it has. The counter is read
  /// with an atomic load on every iteration (memref.generic_atomic_rmw starts
  /// from a plain load, a data race with the signalling programs).
  void semaphoreWait(OpBuilder& b, Location loc, Value semaphores, Value index, Value value) {
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_,
                                        arith::ConstantIndexOp::create(b, loc, 0));
    scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
      Value ptr = elementPointer(tb, l, semaphores, index);
      auto spin = scf::WhileOp::create(tb, l, TypeRange{}, ValueRange{});
      OpBuilder wb = OpBuilder::atBlockEnd(tb.createBlock(&spin.getBefore()));
      Type i32 = wb.getI32Type();
      Value have =
          LLVM::LoadOp::create(wb, l, i32, ptr, /*alignment=*/4, /*isVolatile=*/false,
                               /*isNonTemporal=*/false, /*isInvariant=*/false,
                               /*isInvariantGroup=*/false, LLVM::AtomicOrdering::monotonic);
      Value enough = arith::CmpIOp::create(wb, l, arith::CmpIPredicate::sge, have, value);
      auto take = scf::IfOp::create(
          wb, l, enough,
          [&](OpBuilder& ib, Location il) {
            Value rest = arith::SubIOp::create(ib, il, have, value);
            auto cas = LLVM::AtomicCmpXchgOp::create(ib, il, ptr, have, rest,
                                                     LLVM::AtomicOrdering::acq_rel,
                                                     LLVM::AtomicOrdering::monotonic);
            scf::YieldOp::create(
                ib, il,
                LLVM::ExtractValueOp::create(ib, il, cas, ArrayRef<int64_t>{1}).getResult());
          },
          [&](OpBuilder& eb, Location el) {
            scf::YieldOp::create(eb, el, arith::ConstantIntOp::create(eb, el, 0, 1).getResult());
          });
      Value notYet = arith::XOrIOp::create(wb, l, take.getResult(0),
                                           arith::ConstantIntOp::create(wb, l, 1, 1));
      scf::ConditionOp::create(wb, l, notYet, ValueRange{});
      OpBuilder ab = OpBuilder::atBlockEnd(tb.createBlock(&spin.getAfter()));
      scf::YieldOp::create(ab, l);
      tb.setInsertionPointAfter(spin);
      scf::YieldOp::create(tb, l);
    });
    gpu::BarrierOp::create(b, loc);
  }

  /// Scalars keep their type; a block value becomes this thread's fragment.
  Type loweredType(Type t) const {
    if (auto vt = dyn_cast<VectorType>(t)) return layout_.fragment(vt);
    return t;
  }

  /// scf.while with the same structure; block carries become fragments. The
  /// condition is uniform across the program (while_loop's contract).
  LogicalResult lowerWhile(scf::WhileOp loop, OpBuilder& b) {
    Location loc = loop.getLoc();
    SmallVector<Value> inits = mapped(loop.getInits());
    SmallVector<Type> types;
    SmallVector<Location> locs;
    for (Value v : loop.getInits()) {
      types.push_back(loweredType(v.getType()));
      locs.push_back(loc);
    }
    auto lowered = scf::WhileOp::create(b, loc, types, inits);
    OpBuilder bb = OpBuilder::atBlockEnd(b.createBlock(&lowered.getBefore(), {}, types, locs));
    for (auto [from, to] :
         llvm::zip(loop.getBeforeArguments(), lowered.getBefore().front().getArguments()))
      map_.map(from, to);
    if (failed(lowerBlock(loop.getBefore().front(), bb))) return failure();
    scf::ConditionOp cond = loop.getConditionOp();
    scf::ConditionOp::create(bb, loc, map_.lookup(cond.getCondition()), mapped(cond.getArgs()));
    OpBuilder ab = OpBuilder::atBlockEnd(b.createBlock(&lowered.getAfter(), {}, types, locs));
    for (auto [from, to] :
         llvm::zip(loop.getAfterArguments(), lowered.getAfter().front().getArguments()))
      map_.map(from, to);
    if (failed(lowerBlock(loop.getAfter().front(), ab))) return failure();
    scf::YieldOp::create(ab, loc, mapped(loop.getYieldOp().getOperands()));
    b.setInsertionPointAfter(lowered);
    for (auto [from, to] : llvm::zip(loop.getResults(), lowered.getResults())) map_.map(from, to);
    return success();
  }

  LogicalResult lowerFor(scf::ForOp loop, OpBuilder& b) {
    SmallVector<Value> inits;
    for (Value v : loop.getInitArgs()) inits.push_back(map_.lookup(v));
    auto newLoop =
        scf::ForOp::create(b, loop.getLoc(), map_.lookup(loop.getLowerBound()),
                           map_.lookup(loop.getUpperBound()), map_.lookup(loop.getStep()), inits);
    map_.map(loop.getInductionVar(), newLoop.getInductionVar());
    for (auto [from, to] : llvm::zip(loop.getRegionIterArgs(), newLoop.getRegionIterArgs()))
      map_.map(from, to);
    Block* body = newLoop.getBody();
    if (!body->empty()) body->back().erase();
    OpBuilder nb = OpBuilder::atBlockEnd(body);
    if (failed(lowerBlock(*loop.getBody(), nb))) return failure();
    SmallVector<Value> yields;
    for (Value v : loop.getBody()->getTerminator()->getOperands()) yields.push_back(map_.lookup(v));
    scf::YieldOp::create(nb, loop.getLoc(), yields);
    for (auto [from, to] : llvm::zip(loop.getResults(), newLoop.getResults())) map_.map(from, to);
    return success();
  }

  LogicalResult lowerOp(Operation* op, OpBuilder& b) {
    Location loc = op->getLoc();
    if (auto pid = dyn_cast<ProgramIdOp>(op)) {
      map_.map(pid.getResult(), gpu::BlockIdOp::create(b, loc, dim(pid.getAxis())).getResult());
      return success();
    }
    if (auto np = dyn_cast<NumProgramsOp>(op)) {
      map_.map(np.getResult(), gpu::GridDimOp::create(b, loc, dim(np.getAxis())).getResult());
      return success();
    }
    if (auto blk = dyn_cast<BlockOp>(op)) {
      SmallVector<Value> indices;
      for (Value v : blk.getIndices()) indices.push_back(map_.lookup(v));
      refs_[blk.getResult()] = resolveBlock(b, loc, blk, map_.lookup(blk.getArray()), indices);
      return success();
    }
    if (auto load = dyn_cast<LoadOp>(op)) return lowerLoad(load, b);
    if (auto store = dyn_cast<StoreOp>(op)) return lowerStore(store, b);
    if (auto iota = dyn_cast<IotaOp>(op)) return lowerIota(iota, b);
    if (auto loop = dyn_cast<scf::ForOp>(op)) return lowerFor(loop, b);
    if (auto red = dyn_cast<vector::MultiDimReductionOp>(op)) return lowerReduction(red, b);
    if (auto add = dyn_cast<SemaphoreAddOp>(op)) {
      Value old = semaphoreAdd(b, loc, add.getSemaphores(), add.getIndex(),
                               map_.lookup(add.getValue()), !add.getOld().use_empty());
      if (old) map_.map(add.getOld(), old);
      return success();
    }
    if (auto wait = dyn_cast<SemaphoreWaitOp>(op)) {
      semaphoreWait(b, loc, map_.lookup(wait.getSemaphores()), map_.lookup(wait.getIndex()),
                    map_.lookup(wait.getValue()));
      return success();
    }
    if (auto scratch = dyn_cast<ScratchOp>(op)) {
      MemRefType type = scratch.getBuffer().getType();
      auto shared =
          MemRefType::get(type.getShape(), type.getElementType(), AffineMap(),
                          gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup));
      map_.map(scratch.getBuffer(), func_.addWorkgroupAttribution(shared, loc));
      return success();
    }
    if (auto loop = dyn_cast<scf::WhileOp>(op)) return lowerWhile(loop, b);
    if (auto read = dyn_cast<SemaphoreReadOp>(op)) {  // an atomic add of 0 reads with acquire
      Value zero = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0);
      map_.map(read.getValue(), semaphoreAdd(b, loc, read.getSemaphores(), read.getIndex(), zero));
      return success();
    }
    if (auto scalar = dyn_cast<LoadScalarOp>(op)) {  // every thread loads the same element
      const BlockRef& ref = refs_.at(scalar.getRef());
      SmallVector<int64_t> zeros(scalar.getIndices().size(), 0);
      SmallVector<Value> coords = elementCoords(b, loc, ref, zeros, mapped(scalar.getIndices()));
      map_.map(scalar.getResult(), loadOrZero(b, loc, ref, coords, scalar.getResult().getType()));
      return success();
    }
    if (auto branch = dyn_cast<scf::IfOp>(op);
        branch && branch.getNumResults() == 0 && branch.getElseRegion().empty()) {
      // The condition is uniform across the program (when()), so barriers inside are safe.
      auto lowered = scf::IfOp::create(b, loc, map_.lookup(branch.getCondition()), false);
      OpBuilder tb(lowered.thenBlock()->getTerminator());
      return lowerBlock(*branch.thenBlock(), tb);
    }
    if (auto cast = dyn_cast<vector::ShapeCastOp>(op)) {
      // The layout is defined on the flattened block, so a reshape that keeps
      // the element count moves no data (vec divides every last dim).
      map_.map(cast.getResult(), map_.lookup(cast.getSource()));
      return success();
    }
    if (auto bc = dyn_cast<vector::BroadcastOp>(op)) {
      if (isa<VectorType>(bc.getSource().getType()))
        return op->emitOpError(
            "no GPU lowering rule for broadcasting a block value; "
            "pallas-sink-broadcasts folds broadcasts of loads, iotas and "
            "elementwise ops over them");
      map_.map(bc.getResult(),
               vector::BroadcastOp::create(b, loc, layout_.fragment(bc.getResultVectorType()),
                                           map_.lookup(bc.getSource()))
                   .getResult());
      return success();
    }
    if (auto cst = dyn_cast<arith::ConstantOp>(op); cst && isa<VectorType>(cst.getType())) {
      auto splat = dyn_cast<SplatElementsAttr>(cst.getValue());
      if (!splat) return op->emitOpError("no GPU lowering rule for non-splat block constants");
      VectorType frag = layout_.fragment(cast<VectorType>(cst.getType()));
      map_.map(cst.getResult(),
               arith::ConstantOp::create(b, loc, splat.resizeSplat(frag)).getResult());
      return success();
    }
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumRegions() == 0) {
      OperationState state(loc, op->getName());
      for (Value v : op->getOperands()) state.addOperands(map_.lookup(v));
      for (Type t : op->getResultTypes())
        state.addTypes(isa<VectorType>(t) ? Type(layout_.fragment(cast<VectorType>(t))) : t);
      state.addAttributes(op->getAttrs());
      Operation* lowered = b.create(state);
      for (auto [from, to] : llvm::zip(op->getResults(), lowered->getResults())) map_.map(from, to);
      return success();
    }
    for (Type t : op->getResultTypes())
      if (isa<VectorType>(t))
        return op->emitOpError(
            "no GPU lowering rule for this op on blocks; known: pallas.load, "
            "pallas.store, pallas.iota, vector.broadcast of scalars, splat "
            "constants, scf.for and elementwise arith/math ops");
    if (op->getNumRegions() != 0) return op->emitOpError("no GPU lowering rule for this op");
    b.clone(*op, map_);
    return success();
  }

  func::FuncOp kernel_;
  gpu::GPUModuleOp gpuModule_;
  Layout layout_;
  IRMapping map_;
  DenseMap<Value, BlockRef> refs_;
  Value tid_;
  gpu::GPUFuncOp func_;
};

struct ConvertPallasToGPUPass : impl::ConvertPallasToGPUBase<ConvertPallasToGPUPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> kernels;
    module.walk([&](func::FuncOp f) {
      if (f->hasAttr(kKernelAttrName)) kernels.push_back(f);
    });
    if (kernels.empty()) return;
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), UnitAttr::get(&getContext()));
    auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>("pallas_kernels");
    if (!gpuModule) {
      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      gpuModule = gpu::GPUModuleOp::create(b, module.getLoc(), "pallas_kernels");
    }
    for (func::FuncOp k : kernels) {
      int64_t threads = this->threads;
      if (auto attr = k->getAttrOfType<IntegerAttr>("pallas.threads")) threads = attr.getInt();
      FailureOr<Layout> layout = chooseLayout(k, threads);
      if (failed(layout) || failed(GpuLowering(k, gpuModule, *layout).run()))
        return signalPassFailure();
    }
  }
};

}  // namespace
}  // namespace mlir::pallas
