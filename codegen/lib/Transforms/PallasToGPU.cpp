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
#include "ErrorRecord.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
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

/// The block values held *replicated*: every thread holds all N elements
/// (flattened row-major in a vector<N>), rather than a fragment. They are the
/// results of reductions that keep some dims (one value per row, say) and
/// what is computed from them alone; scalar broadcasts and splat constants
/// are replicated when their element count is not a multiple of `threads`
/// (too small to distribute), or when they only seed reductions that keep
/// dims (whose results are replicated). Loop-carried values follow their init.
DenseSet<Value> inferReplicated(func::FuncOp kernel, int64_t threads) {
  DenseSet<Value> replicated;
  auto small = [&](Type t) {
    auto vt = dyn_cast<VectorType>(t);
    return vt && vt.getNumElements() % threads != 0;
  };
  auto onlySeedsKeptReductions = [](Value v) {
    return !v.use_empty() && llvm::all_of(v.getUses(), [](OpOperand& use) {
      auto red = dyn_cast<vector::MultiDimReductionOp>(use.getOwner());
      return red && use.get() == red.getAcc() && isa<VectorType>(red.getDestType());
    });
  };
  kernel.walk<WalkOrder::PreOrder>([&](Operation* op) {
    if (auto red = dyn_cast<vector::MultiDimReductionOp>(op)) {
      if (isa<VectorType>(red.getDestType())) replicated.insert(red.getResult());
    } else if (auto cast = dyn_cast<vector::ShapeCastOp>(op)) {
      if (replicated.contains(cast.getSource())) replicated.insert(cast.getResult());
    } else if (auto bc = dyn_cast<vector::BroadcastOp>(op)) {
      bool fromReplicated = replicated.contains(bc.getSource());
      if ((fromReplicated || !isa<VectorType>(bc.getSourceType())) &&
          (small(bc.getType()) || onlySeedsKeptReductions(bc.getResult())))
        replicated.insert(bc.getResult());
    } else if (auto cst = dyn_cast<arith::ConstantOp>(op)) {
      if (isa<VectorType>(cst.getType()) &&
          (small(cst.getType()) || onlySeedsKeptReductions(cst.getResult())))
        replicated.insert(cst.getResult());
    } else if (auto loop = dyn_cast<scf::ForOp>(op)) {
      for (auto [i, init] : llvm::enumerate(loop.getInitArgs()))
        if (replicated.contains(init)) {
          replicated.insert(loop.getRegionIterArgs()[i]);
          replicated.insert(loop.getResult(i));
        }
    } else if (auto loop = dyn_cast<scf::WhileOp>(op)) {
      for (auto [i, init] : llvm::enumerate(loop.getInits()))
        if (replicated.contains(init)) {
          replicated.insert(loop.getBeforeArguments()[i]);
          replicated.insert(loop.getAfterArguments()[i]);
          replicated.insert(loop.getResult(i));
        }
    } else if (op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1 &&
               isa<VectorType>(op->getResult(0).getType())) {
      // Replicated when every block operand is (splats adapt to either form).
      bool any = false, all = true;
      for (Value v : op->getOperands()) {
        if (!isa<VectorType>(v.getType())) continue;
        if (replicated.contains(v)) {
          any = true;
        } else if (!(v.getDefiningOp<vector::BroadcastOp>() &&
                     !isa<VectorType>(v.getDefiningOp<vector::BroadcastOp>().getSourceType())) &&
                   !v.getDefiningOp<arith::ConstantOp>()) {
          all = false;
        }
      }
      if (any && all) replicated.insert(op->getResult(0));
    }
  });
  return replicated;
}

/// Picks `vec` for a kernel, or fails naming the block that does not fit.
FailureOr<Layout> chooseLayout(func::FuncOp kernel, int64_t threads,
                               const DenseSet<Value>& replicated) {
  int64_t minBytes = 4;
  SmallVector<VectorType> blocks;
  kernel.walk([&](Operation* op) {
    for (Value result : op->getResults())
      if (auto vt = dyn_cast<VectorType>(result.getType()); vt && !replicated.contains(result)) {
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
  GpuLowering(func::FuncOp kernel, gpu::GPUModuleOp gpuModule, Layout layout,
              DenseSet<Value> replicated)
      : kernel_(kernel),
        gpuModule_(gpuModule),
        layout_(layout),
        replicated_(std::move(replicated)) {}

  LogicalResult run() {
    Location loc = kernel_.getLoc();
    OpBuilder mb = OpBuilder::atBlockEnd(gpuModule_.getBody());
    auto func = gpu::GPUFuncOp::create(mb, loc, kernel_.getSymName(), kernel_.getFunctionType());
    func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), mb.getUnitAttr());
    func.setKnownBlockSizeAttr(
        mb.getDenseI32ArrayAttr({static_cast<int32_t>(layout_.threads), 1, 1}));
    // At least kMinThreadsPerSM resident threads (.minnctapersm): with four 16-byte loads
    // per thread per chunk, 384 threads keep 24 KiB in flight per SM, about what covers
    // the memory latency at full bandwidth. It also gives ptxas a register budget (170 for
    // 128 threads) to keep to instead of its own occupancy target, which it reaches by
    // spilling (rms_norm_residual_f16: 80 registers and 16 bytes of spills without it, 105
    // and none with it; layer_norm_residual_f32 needs 138).
    constexpr int64_t kMinThreadsPerSM = 384;
    func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                  mb.getI32IntegerAttr(static_cast<int32_t>(
                      std::max<int64_t>(1, kMinThreadsPerSM / layout_.threads))));
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
    if (isReplicated(store.getValue())) {
      bool shared = inSharedMemory(refs_.at(store.getRef()).array);
      if (shared) gpu::BarrierOp::create(b, store.getLoc());
      if (failed(storeReplicated(store, b))) return failure();
      if (shared) gpu::BarrierOp::create(b, store.getLoc());
      return success();
    }
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

  //===--------------------------------------------------------------------===//
  // Replicated values (see inferReplicated): vector<N>, the same in every thread.
  //===--------------------------------------------------------------------===//

  bool isReplicated(Value v) const { return replicated_.contains(v); }
  static VectorType flat(VectorType t) {
    return VectorType::get({t.getNumElements()}, t.getElementType());
  }

  /// A buffer in shared memory, aligned to 16 bytes: it is accessed with
  /// 16-byte vectors (ld/st.shared.v4 fault on a smaller alignment), and
  /// without `llvm.align` the lowering declares it with its element's.
  Value workgroupBuffer(MemRefType type, Location loc) {
    Value buffer = func_.addWorkgroupAttribution(type, loc);
    func_.setWorkgroupAttributionAttr(
        func_.getNumWorkgroupAttributions() - 1, LLVM::LLVMDialect::getAlignAttrName(),
        IntegerAttr::get(IntegerType::get(type.getContext(), 64), 16));
    return buffer;
  }
  Value sharedBuffer(OpBuilder& b, Location loc, int64_t elements, Type et) {
    auto type =
        MemRefType::get({elements}, et, AffineMap(),
                        gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup));
    return workgroupBuffer(type, loc);
  }
  Value index(OpBuilder& b, Location loc, int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v);
  }

  /// The replicated (flat) form of original block value `v`: its mapping when
  /// it is replicated, or a splat made again in that form.
  FailureOr<Value> replicatedOperand(OpBuilder& b, Location loc, Value v) {
    if (isReplicated(v)) return map_.lookup(v);
    auto type = flat(cast<VectorType>(v.getType()));
    if (auto bc = v.getDefiningOp<vector::BroadcastOp>();
        bc && !isa<VectorType>(bc.getSourceType()))
      return vector::BroadcastOp::create(b, loc, type, map_.lookup(bc.getSource())).getResult();
    if (auto cst = v.getDefiningOp<arith::ConstantOp>())
      if (auto splat = dyn_cast<SplatElementsAttr>(cst.getValue()))
        return arith::ConstantOp::create(b, loc, splat.resizeSplat(type)).getResult();
    return failure();
  }

  /// The fragment of distributed type `target` whose element at coordinates c
  /// is the element of replicated `src` (of shape `srcType`) that numpy
  /// broadcasting maps c to. Thread k % threads writes element k to shared
  /// memory; after a barrier each thread reads its runs' elements back.
  Value distribute(OpBuilder& b, Location loc, Value src, VectorType srcType, VectorType target) {
    const int64_t n = srcType.getNumElements();
    Type et = srcType.getElementType();
    Value buffer = sharedBuffer(b, loc, n, et);
    for (int64_t k = 0; k < n; ++k) {
      Value mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_,
                                         index(b, loc, k % layout_.threads));
      scf::IfOp::create(b, loc, mine, [&](OpBuilder& tb, Location l) {
        Value v = vector::ExtractOp::create(tb, l, src, ArrayRef<int64_t>{k});
        memref::StoreOp::create(tb, l, v, buffer, ValueRange{index(tb, l, k)});
        scf::YieldOp::create(tb, l);
      });
    }
    gpu::BarrierOp::create(b, loc);
    const int64_t lead = target.getRank() - srcType.getRank();
    VectorType runType = VectorType::get({layout_.vec}, et);
    Value frag = assemble(b, loc, target, [&](int64_t, SmallVector<Value>& coords) -> Value {
      // Row-major flat index of the source element for the run's first element.
      Value at = index(b, loc, 0);
      for (int64_t d = 0; d < srcType.getRank(); ++d) {
        Value c = srcType.getShape()[d] == 1 ? index(b, loc, 0) : coords[lead + d];
        at = arith::AddIOp::create(
            b, loc, arith::MulIOp::create(b, loc, at, index(b, loc, srcType.getShape()[d])), c);
      }
      bool stretched = srcType.getRank() == 0 || srcType.getShape().back() == 1;
      if (stretched)
        return vector::BroadcastOp::create(b, loc, runType,
                                           memref::LoadOp::create(b, loc, buffer, ValueRange{at}));
      Value run = arith::ConstantOp::create(b, loc, b.getZeroAttr(runType));
      for (int64_t j = 0; j < layout_.vec; ++j) {
        Value aj = arith::AddIOp::create(b, loc, at, index(b, loc, j));
        Value v = memref::LoadOp::create(b, loc, buffer, ValueRange{aj});
        run = vector::InsertOp::create(b, loc, v, run, ArrayRef<int64_t>{j});
      }
      return run;
    });
    gpu::BarrierOp::create(b, loc);
    return frag;
  }

  /// Original block value `v` in the distributed form of `target`.
  FailureOr<Value> distributedOperand(OpBuilder& b, Location loc, Value v, VectorType target) {
    if (!isReplicated(v)) return map_.lookup(v);
    return distribute(b, loc, map_.lookup(v), cast<VectorType>(v.getType()), target);
  }

  /// A replicated value written element by element: element k by thread
  /// k % threads, skipping elements past the array edge.
  LogicalResult storeReplicated(StoreOp store, OpBuilder& b) {
    Location loc = store.getLoc();
    const BlockRef& ref = refs_.at(store.getRef());
    auto type = cast<VectorType>(store.getValue().getType());
    Value value = map_.lookup(store.getValue());
    for (int64_t k = 0; k < type.getNumElements(); ++k) {
      SmallVector<Value> rc = unflatten(b, loc, index(b, loc, k), type.getShape());
      SmallVector<Value> coords =
          arrayCoords(b, loc, ref, store.getOffsets(), mapped(store.getDynamicOffsets()),
                      type.getShape(), type.getShape(), rc);
      Value mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_,
                                         index(b, loc, k % layout_.threads));
      Value write = arith::AndIOp::create(b, loc, mine, inBounds(b, loc, ref, coords));
      scf::IfOp::create(b, loc, write, [&](OpBuilder& tb, Location l) {
        Value v = vector::ExtractOp::create(tb, l, value, ArrayRef<int64_t>{k});
        memref::StoreOp::create(tb, l, v, ref.array, coords);
        scf::YieldOp::create(tb, l);
      });
    }
    return success();
  }

  /// shfl.xor butterfly over lanes within aligned groups of `width` lanes:
  /// afterwards every lane holds its group's combination.
  Value butterfly(OpBuilder& b, Location loc, vector::CombiningKind kind, Value v, int64_t width) {
    Value warpWidth = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 32);
    for (int64_t offset = width / 2; offset >= 1; offset /= 2) {
      Value o = arith::ConstantIntOp::create(b, loc, b.getI32Type(), offset);
      auto shfl = gpu::ShuffleOp::create(b, loc, v, o, warpWidth, gpu::ShuffleMode::XOR);
      v = vector::makeArithReduction(b, loc, kind, v, shfl.getShuffleResult());
    }
    return v;
  }

  /// A reduction of the last axis of a distributed block, to a replicated
  /// vector of one value per row (N rows of C elements; a row is G = C / vec
  /// runs). Each row's values are combined in registers, then across lanes
  /// with shfl.xor, then across warps through shared-memory slots that every
  /// thread reads back in the same order (so all threads hold the same bits):
  ///
  ///  - long rows, G a multiple of `threads` (say 1 x 4096 f32, G = 1024): run
  ///    r of every thread lies in row r * threads / G, so a thread first
  ///    folds its runs of each row; a full-warp butterfly; slot [row][warp].
  ///  - short rows, G dividing `threads` (say 16 x 128 f32, G = 32; or
  ///    64 x 32, G = 8): run r of thread t lies in row r * threads / G + t / G,
  ///    and lanes of a row are g = min(G, 32) aligned neighbours; a butterfly
  ///    over g lanes; slot [row][(t % G) / g], written by the group's first lane.
  LogicalResult lowerRowReduction(vector::MultiDimReductionOp red, OpBuilder& b) {
    Location loc = red.getLoc();
    VectorType srcType = red.getSourceVectorType();
    auto destType = cast<VectorType>(red.getDestType());
    SmallVector<bool> mask = red.getReductionMask();  // a temporary: copy it
    for (int64_t d = 0; d + 1 < srcType.getRank(); ++d)
      if (mask[d])
        return red.emitOpError("the GPU reduces either the last axis or leading axes, not dim ")
               << d << " together with the last; reduce them one after the other";
    Type et = srcType.getElementType();
    if (et.getIntOrFloatBitWidth() != 32)
      return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
    FailureOr<Value> acc = replicatedOperand(b, loc, red.getAcc());
    if (failed(acc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
    const int64_t threads = layout_.threads, vec = layout_.vec;
    const int64_t cols = srcType.getShape().back(), runsPerRow = cols / vec;
    const int64_t rows = destType.getNumElements(), runs = layout_.runs(srcType);
    vector::CombiningKind kind = red.getKind();
    Value frag = map_.lookup(red.getSource());
    auto runValue = [&](int64_t r) {
      Value run = vector::ExtractStridedSliceOp::create(
          b, loc, frag, ArrayRef<int64_t>{r * vec}, ArrayRef<int64_t>{vec}, ArrayRef<int64_t>{1});
      return vector::ReductionOp::create(b, loc, kind, run).getResult();
    };
    Value c32 = index(b, loc, 32);
    Value lane = arith::RemUIOp::create(b, loc, tid_, c32);
    int64_t slotsPerRow;
    Value slots;
    if (runsPerRow % threads == 0) {
      slotsPerRow = threads / 32;
      slots = sharedBuffer(b, loc, rows * slotsPerRow, et);
      SmallVector<Value> perRow(rows);
      for (int64_t r = 0; r < runs; ++r) {
        int64_t row = r * threads / runsPerRow;
        Value v = runValue(r);
        perRow[row] = perRow[row] ? vector::makeArithReduction(b, loc, kind, perRow[row], v) : v;
      }
      for (Value& v : perRow) v = butterfly(b, loc, kind, v, 32);
      Value warp = arith::DivUIOp::create(b, loc, tid_, c32);
      Value leader =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, index(b, loc, 0));
      scf::IfOp::create(b, loc, leader, [&](OpBuilder& tb, Location l) {
        for (int64_t row = 0; row < rows; ++row) {
          Value at = arith::AddIOp::create(tb, l, index(tb, l, row * slotsPerRow), warp);
          memref::StoreOp::create(tb, l, perRow[row], slots, ValueRange{at});
        }
        scf::YieldOp::create(tb, l);
      });
    } else if (threads % runsPerRow == 0 && (runsPerRow % 32 == 0 || 32 % runsPerRow == 0)) {
      const int64_t group = std::min<int64_t>(runsPerRow, 32);
      slotsPerRow = runsPerRow / group;
      slots = sharedBuffer(b, loc, rows * slotsPerRow, et);
      Value g = index(b, loc, runsPerRow);
      Value rowInSet = arith::DivUIOp::create(b, loc, tid_, g);
      Value slotInRow = arith::DivUIOp::create(b, loc, arith::RemUIOp::create(b, loc, tid_, g),
                                               index(b, loc, group));
      Value first = arith::CmpIOp::create(
          b, loc, arith::CmpIPredicate::eq,
          arith::RemUIOp::create(b, loc, lane, index(b, loc, group)), index(b, loc, 0));
      for (int64_t r = 0; r < runs; ++r) {
        Value v = butterfly(b, loc, kind, runValue(r), group);
        Value row =
            arith::AddIOp::create(b, loc, index(b, loc, r * threads / runsPerRow), rowInSet);
        Value at = arith::AddIOp::create(
            b, loc, arith::MulIOp::create(b, loc, row, index(b, loc, slotsPerRow)), slotInRow);
        scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
          memref::StoreOp::create(tb, l, v, slots, ValueRange{at});
          scf::YieldOp::create(tb, l);
        });
      }
    } else {
      return red.emitOpError("no GPU rule for reducing rows of ")
             << cols << " elements: a row is " << runsPerRow << " runs of " << vec
             << ", which must be a multiple of the " << threads
             << " threads, or divide them (a power of two below 32, or a multiple of 32)";
    }
    gpu::BarrierOp::create(b, loc);
    Value result = *acc;
    for (int64_t row = 0; row < rows; ++row) {
      Value total = vector::ExtractOp::create(b, loc, *acc, ArrayRef<int64_t>{row});
      for (int64_t k = 0; k < slotsPerRow; ++k) {
        Value v =
            memref::LoadOp::create(b, loc, slots, ValueRange{index(b, loc, row * slotsPerRow + k)});
        total = vector::makeArithReduction(b, loc, kind, v, total);
      }
      result = vector::InsertOp::create(b, loc, total, result, ArrayRef<int64_t>{row});
    }
    gpu::BarrierOp::create(b, loc);
    map_.map(red.getResult(), result);
    return success();
  }

  /// A reduction over leading dims of a distributed block that keeps its last
  /// dim (the column sums of [R, C], say), to a replicated vector of the M
  /// kept elements, through shared memory and in a fixed order, so every
  /// thread holds the same bits:
  ///  1. each thread stores its runs at their row-major positions;
  ///  2. thread t folds results m = t, t + threads, ...: the N / M source
  ///     elements of m in increasing position (consecutive threads read
  ///     consecutive words, so no bank conflicts), into a second buffer;
  ///  3. every thread reads the M results back.
  /// Worked example: [16, 128] f32 summed over dim 0: thread t adds elements
  /// t, 128 + t, ..., 15 * 128 + t of the block.
  LogicalResult lowerLeadingReduction(vector::MultiDimReductionOp red, OpBuilder& b) {
    Location loc = red.getLoc();
    VectorType srcType = red.getSourceVectorType();
    ArrayRef<int64_t> shape = srcType.getShape();
    SmallVector<bool> mask = red.getReductionMask();  // a temporary: copy it
    Type et = srcType.getElementType();
    if (et.getIntOrFloatBitWidth() != 32)
      return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
    const int64_t n = srcType.getNumElements(), threads = layout_.threads, vec = layout_.vec;
    const int64_t m = cast<VectorType>(red.getDestType()).getNumElements();
    constexpr int64_t kMaxKept = 256;  // every thread holds them all
    if (m > kMaxKept)
      return red.emitOpError("keeps ")
             << m << " elements, which every GPU thread would hold; at most " << kMaxKept
             << " (reduce a smaller block)";
    FailureOr<Value> acc = replicatedOperand(b, loc, red.getAcc());
    if (failed(acc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
    const int64_t rank = srcType.getRank();
    SmallVector<int64_t> strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
    SmallVector<int64_t> offsets = {0};  // of the reduced elements, increasing
    for (int64_t d = 0; d < rank; ++d) {
      if (!mask[d]) continue;
      SmallVector<int64_t> wider;
      for (int64_t o : offsets)
        for (int64_t i = 0; i < shape[d]; ++i) wider.push_back(o + i * strides[d]);
      offsets = std::move(wider);
    }
    vector::CombiningKind kind = red.getKind();

    Value source = sharedBuffer(b, loc, n, et);
    Value frag = map_.lookup(red.getSource());
    for (int64_t k = 0; k < layout_.runs(srcType); ++k) {
      Value run = vector::ExtractStridedSliceOp::create(
          b, loc, frag, ArrayRef<int64_t>{k * vec}, ArrayRef<int64_t>{vec}, ArrayRef<int64_t>{1});
      Value at = arith::MulIOp::create(
          b, loc, arith::AddIOp::create(b, loc, index(b, loc, k * threads), tid_),
          index(b, loc, vec));
      vector::StoreOp::create(b, loc, run, source, ValueRange{at});
    }
    gpu::BarrierOp::create(b, loc);
    Value results = sharedBuffer(b, loc, m, et);
    for (int64_t k = 0; k * threads < m; ++k) {
      Value mi = arith::AddIOp::create(b, loc, index(b, loc, k * threads), tid_);
      auto fold = [&](OpBuilder& fb, Location l) {
        Value base = index(fb, l, 0), rest = mi;  // mi's kept coordinates, innermost first
        for (int64_t d = rank - 1; d >= 0; --d) {
          if (mask[d]) continue;
          Value extent = index(fb, l, shape[d]);
          Value coord = arith::RemUIOp::create(fb, l, rest, extent);
          rest = arith::DivUIOp::create(fb, l, rest, extent);
          base = arith::AddIOp::create(
              fb, l, base, arith::MulIOp::create(fb, l, coord, index(fb, l, strides[d])));
        }
        Value total;
        for (int64_t o : offsets) {
          Value at = arith::AddIOp::create(fb, l, base, index(fb, l, o));
          Value v = memref::LoadOp::create(fb, l, source, ValueRange{at});
          total = total ? vector::makeArithReduction(fb, l, kind, total, v) : v;
        }
        memref::StoreOp::create(fb, l, total, results, ValueRange{mi});
      };
      if ((k + 1) * threads <= m) {
        fold(b, loc);
        continue;
      }
      Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, mi, index(b, loc, m));
      scf::IfOp::create(b, loc, inside, [&](OpBuilder& tb, Location l) {
        fold(tb, l);
        scf::YieldOp::create(tb, l);
      });
    }
    gpu::BarrierOp::create(b, loc);
    Value all = vector::LoadOp::create(b, loc, VectorType::get({m}, et), results,
                                       ValueRange{index(b, loc, 0)});
    map_.map(red.getResult(), vector::makeArithReduction(b, loc, kind, all, *acc));
    return success();
  }

  /// A reduction of a replicated value: done by every thread on its copy.
  LogicalResult lowerReplicatedReduction(vector::MultiDimReductionOp red, OpBuilder& b) {
    Location loc = red.getLoc();
    VectorType srcType = red.getSourceVectorType();
    Value src = vector::ShapeCastOp::create(b, loc, srcType, map_.lookup(red.getSource()));
    Value acc = map_.lookup(red.getAcc());
    if (auto destType = dyn_cast<VectorType>(red.getDestType())) {
      FailureOr<Value> flatAcc = replicatedOperand(b, loc, red.getAcc());
      if (failed(flatAcc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
      acc = vector::ShapeCastOp::create(b, loc, destType, *flatAcc);
    }
    Value r = vector::MultiDimReductionOp::create(b, loc, src, acc, red.getReductionMask(),
                                                  red.getKind());
    if (auto destType = dyn_cast<VectorType>(red.getDestType()))
      r = vector::ShapeCastOp::create(b, loc, flat(destType), r);
    map_.map(red.getResult(), r);
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
    if (isReplicated(red.getSource())) return lowerReplicatedReduction(red, b);
    if (isa<VectorType>(red.getDestType()))
      return red.getReductionMask().back() ? lowerRowReduction(red, b)
                                           : lowerLeadingReduction(red, b);
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
    Value scratch = workgroupBuffer(scratchType, loc);
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

  /// One atomic operation per program: after a barrier (so every thread's
  /// earlier writes precede a release), thread 0 runs `atomic` and, when the
  /// result is wanted, publishes it in shared memory; after a second barrier
  /// every thread reads it (so an acquire orders every thread's later reads).
  Value onceInThreadZero(OpBuilder& b, Location loc, bool wantResult,
                         function_ref<Value(OpBuilder&, Location)> atomic) {
    Value slot;
    if (wantResult) {
      auto slotType =
          MemRefType::get({1}, b.getI32Type(), AffineMap(),
                          gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup));
      slot = workgroupBuffer(slotType, loc);
    }
    Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
    gpu::BarrierOp::create(b, loc);
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_, c0);
    scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
      Value result = atomic(tb, l);
      if (slot) memref::StoreOp::create(tb, l, result, slot, ValueRange{c0});
      scf::YieldOp::create(tb, l);
    });
    if (!slot) return {};
    gpu::BarrierOp::create(b, loc);
    return memref::LoadOp::create(b, loc, slot, ValueRange{c0});
  }

  /// An atomic add once per program, with release semantics (and acquire
  /// when the old value is wanted); returns the old value in every thread, or
  /// nothing for a signal (`wantOld` false). NVPTX emits atomicrmw as a
  /// relaxed `atom` whatever its ordering, so the ordering comes from GPU-scope
  /// fences around it: fence; atom (release), atom; fence (acquire).
  Value semaphoreAdd(OpBuilder& b, Location loc, Value semaphores, Value index, Value value,
                     bool wantOld = true) {
    return onceInThreadZero(b, loc, wantOld, [&](OpBuilder& tb, Location l) {
      LLVM::FenceOp::create(tb, l, LLVM::AtomicOrdering::release, StringRef("device"));
      Value old =
          memref::AtomicRMWOp::create(tb, l, arith::AtomicRMWKind::addi, value,
                                      map_.lookup(semaphores), ValueRange{map_.lookup(index)});
      if (wantOld) LLVM::FenceOp::create(tb, l, LLVM::AtomicOrdering::acquire, StringRef("device"));
      return old;
    });
  }

  /// An acquire load once per program, in every thread. A load rather than an
  /// add of 0: programs spinning on a counter then only read its cache line.
  Value semaphoreRead(OpBuilder& b, Location loc, Value semaphores, Value index) {
    return onceInThreadZero(b, loc, true, [&](OpBuilder& tb, Location l) {
      Value ptr = elementPointer(tb, l, map_.lookup(semaphores), map_.lookup(index));
      return LLVM::LoadOp::create(tb, l, tb.getI32Type(), ptr, /*alignment=*/4,
                                  /*isVolatile=*/false, /*isNonTemporal=*/false,
                                  /*isInvariant=*/false, /*isInvariantGroup=*/false,
                                  LLVM::AtomicOrdering::acquire)
          .getResult();
    });
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

  /// A loop carry keeps the form of its init: one that starts replicated (say
  /// a per-row statistic) cannot become a distributed block in the body.
  LogicalResult checkCarryForms(Operation* loop, ValueRange inits, ValueRange yields) {
    auto form = [&](Value v) {
      return isReplicated(v) ? "a value every GPU thread holds whole (from a reduction that "
                               "keeps dims)"
                             : "a block spread over the threads";
    };
    for (auto [i, pair] : llvm::enumerate(llvm::zip(inits, yields))) {
      auto [init, yield] = pair;
      if (isa<VectorType>(init.getType()) && isReplicated(init) != isReplicated(yield))
        return loop->emitOpError("carry ")
               << i << " starts as " << form(init) << " but the body yields " << form(yield)
               << "; start it from a value of the same kind";
    }
    return success();
  }

  /// scf.while with the same structure; block carries become fragments. The
  /// condition is uniform across the program (while_loop's contract).
  LogicalResult lowerWhile(scf::WhileOp loop, OpBuilder& b) {
    Location loc = loop.getLoc();
    SmallVector<Value> inits = mapped(loop.getInits());
    SmallVector<Type> types;
    SmallVector<Location> locs;
    for (Value v : loop.getInits()) {
      types.push_back(map_.lookup(v).getType());
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
    SmallVector<Value> yields = mapped(loop.getYieldOp().getOperands());
    if (failed(checkCarryForms(loop, loop.getInits(), loop.getYieldOp().getOperands())))
      return failure();
    scf::YieldOp::create(ab, loc, yields);
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
    if (failed(checkCarryForms(loop, loop.getInitArgs(),
                               loop.getBody()->getTerminator()->getOperands())))
      return failure();
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
      map_.map(scratch.getBuffer(), workgroupBuffer(shared, loc));
      return success();
    }
    if (auto loop = dyn_cast<scf::WhileOp>(op)) return lowerWhile(loop, b);
    if (auto read = dyn_cast<SemaphoreReadOp>(op)) {
      map_.map(read.getValue(), semaphoreRead(b, loc, read.getSemaphores(), read.getIndex()));
      return success();
    }
    if (auto check = dyn_cast<CheckOp>(op)) {  // once per failing program, by thread 0
      Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_,
                                          arith::ConstantIndexOp::create(b, loc, 0));
      Value record = arith::AndIOp::create(b, loc, first, map_.lookup(check.getFailed()));
      scf::IfOp::create(b, loc, record, [&](OpBuilder& tb, Location l) {
        Value errors = map_.lookup(check.getErrors());
        Value one = arith::ConstantIntOp::create(tb, l, tb.getI32Type(), 1);
        Value old =
            memref::AtomicRMWOp::create(tb, l, arith::AtomicRMWKind::addi, one, errors,
                                        ValueRange{arith::ConstantIndexOp::create(tb, l, 0)});
        writeFirstFailure(tb, l, errors, old, static_cast<int32_t>(check.getCheck()),
                          mapped(check.getValues()));
        scf::YieldOp::create(tb, l);
      });
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
      VectorType to = bc.getResultVectorType();
      if (auto from = dyn_cast<VectorType>(bc.getSourceType());
          from && isReplicated(bc.getSource())) {
        Value src = map_.lookup(bc.getSource());
        if (isReplicated(bc.getResult())) {  // numpy broadcast within each thread's copy
          Value shaped = vector::ShapeCastOp::create(b, loc, from, src);
          Value wide = vector::BroadcastOp::create(b, loc, to, shaped);
          map_.map(bc.getResult(), vector::ShapeCastOp::create(b, loc, flat(to), wide).getResult());
        } else {
          map_.map(bc.getResult(), distribute(b, loc, src, from, to));
        }
        return success();
      }
      if (isReplicated(bc.getResult())) {
        map_.map(
            bc.getResult(),
            vector::BroadcastOp::create(b, loc, flat(to), map_.lookup(bc.getSource())).getResult());
        return success();
      }
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
      auto full = cast<VectorType>(cst.getType());
      VectorType frag = isReplicated(cst.getResult()) ? flat(full) : layout_.fragment(full);
      map_.map(cst.getResult(),
               arith::ConstantOp::create(b, loc, splat.resizeSplat(frag)).getResult());
      return success();
    }
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumRegions() == 0) {
      OperationState state(loc, op->getName());
      bool replicatedResult = op->getNumResults() == 1 && isReplicated(op->getResult(0));
      for (Value v : op->getOperands()) {
        auto vt = dyn_cast<VectorType>(v.getType());
        FailureOr<Value> operand = map_.lookup(v);
        if (vt && replicatedResult)
          operand = replicatedOperand(b, loc, v);
        else if (vt)
          operand = distributedOperand(b, loc, v, vt);
        if (failed(operand)) return op->emitOpError("no GPU rule for this operand's layout");
        state.addOperands(*operand);
      }
      for (Type t : op->getResultTypes()) {
        auto vt = dyn_cast<VectorType>(t);
        state.addTypes(!vt ? t : replicatedResult ? Type(flat(vt)) : Type(layout_.fragment(vt)));
      }
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
  DenseSet<Value> replicated_;
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
      DenseSet<Value> replicated = inferReplicated(k, threads);
      FailureOr<Layout> layout = chooseLayout(k, threads, replicated);
      if (failed(layout) || failed(GpuLowering(k, gpuModule, *layout, std::move(replicated)).run()))
        return signalPassFailure();
    }
  }
};

}  // namespace
}  // namespace mlir::pallas
