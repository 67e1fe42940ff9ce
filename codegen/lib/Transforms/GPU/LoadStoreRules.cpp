//===- LoadStoreRules.cpp - blocks of operands and scratch, loads, stores, iota -===//
//
// A `strided` block (PallasLayouts.td) is moved run by run: a run of `vec`
// elements lies along the last dim; it is moved with 16-byte vector accesses
// when it is inside the array and its address is 16-byte aligned (checked at
// run time), and with masked scalar accesses otherwise, so edge blocks and odd
// strides are exact. A `replicated` value is stored element by element, each
// by one thread, and loaded whole by every thread. A block combined with an
// accumulator is loaded in the accumulator's tiled layout, element by element.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include <map>

namespace mlir::pallas::gpu_lowering {
namespace {

/// i1: the array element at `coords` has a `bytes`-aligned address. The
/// address is split into the start of its line (every coordinate but the
/// last) and the offset along the line, each tested on its own:
///
///   base + (offset + sum_{d<last} c_d * s_d) * size   % bytes == 0   (the line)
///   c_last * s_last * size                            % bytes == 0   (along it)
///
/// Both holding implies the address is aligned. The address can be aligned
/// with both misaligned by amounts that cancel; such a run only takes its
/// element-by-element path. The
/// split lets LLVM drop the second test when c_last is a known multiple of the
/// run (a run of 8 bf16 at 8k: 16k bytes) and hoist the first out of a loop
/// over chunks of a row. Example: a bf16 row at byte 0x1008 (misaligned)
/// fails the first test in every chunk, once, before the loop.
Value aligned(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords, int64_t bytes) {
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, ref.array);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, ref.array);
  auto mt = cast<MemRefType>(ref.array.getType());
  Value size = arith::ConstantIndexOp::create(b, loc, mt.getElementTypeBitWidth() / 8);
  Value line = meta.getOffset();
  for (auto [c, s] : llvm::zip(coords.drop_back(), meta.getStrides()))
    line = arith::AddIOp::create(b, loc, line, arith::MulIOp::create(b, loc, c, s));
  Value lineStart = arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, line, size));
  Value along = arith::MulIOp::create(
      b, loc, arith::MulIOp::create(b, loc, coords.back(), meta.getStrides().back()), size);
  Value mask = arith::ConstantIndexOp::create(b, loc, bytes - 1);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value misaligned = arith::OrIOp::create(b, loc, arith::AndIOp::create(b, loc, lineStart, mask),
                                          arith::AndIOp::create(b, loc, along, mask));
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, misaligned, zero);
}

/// Coordinates of element j of a run starting at `coords` (runs lie along the last dim).
SmallVector<Value> plus(OpBuilder& b, Location loc, ValueRange coords, int64_t j) {
  SmallVector<Value> out(coords.begin(), coords.end());
  out.back() = arith::AddIOp::create(b, loc, out.back(), arith::ConstantIndexOp::create(b, loc, j));
  return out;
}

bool inSharedMemory(Value array) {
  auto space =
      dyn_cast_or_null<gpu::AddressSpaceAttr>(cast<MemRefType>(array.getType()).getMemorySpace());
  return space && space.getValue() == gpu::AddressSpace::Workgroup;
}

/// Moves strided runs of element type `et`.
struct RunAccess {
  GpuLowering& g;
  Type et;
  int64_t vec = g.strided().getVec();
  /// One vector access: 16 bytes, or the whole run when it is smaller.
  int64_t bytes = std::min<int64_t>(16, vec* et.getIntOrFloatBitWidth() / 8);
  int64_t perAccess = bytes * 8 / et.getIntOrFloatBitWidth();

  /// i1: the run at `coords` is inside the array and aligned for vector
  /// access. With `insideLastDim` (pallas.load's promise) the row end is not
  /// tested.
  Value fastPath(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords,
                 bool insideLastDim = false) {
    Value inside = insideLastDim ? inBounds(b, loc, ref, coords.drop_back())
                                 : inBounds(b, loc, ref, coords, vec);
    return arith::AndIOp::create(b, loc, inside, aligned(b, loc, ref, coords, bytes));
  }

  /// The edge test of a run's elements, computed once per run for its
  /// element-by-element path: element j is inside the array iff every dim
  /// but the last is in bounds and j < room = extent - start along the last
  /// dim (signed; negative past the end). Each element then costs one compare
  /// with a constant rather than its own index. Example: a row of 4100 and a
  /// run of 8 at 4096: room 4, elements 0..3 are inside.
  struct Edge {
    Value leading;  // i1
    Value room;     // index; null when the slice is known inside the row
  };
  /// With `insideLastDim` (pallas.load's promise) a run taking this path is
  /// only misaligned, and the row end is not tested (no room).
  Edge edge(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords,
            bool insideLastDim = false) {
    Edge e;
    e.leading = inBounds(b, loc, ref, coords.drop_back());
    if (!insideLastDim) e.room = arith::SubIOp::create(b, loc, ref.extents.back(), coords.back());
    return e;
  }
  Value inside(OpBuilder& b, Location loc, const Edge& e, int64_t j) {
    if (!e.room) return e.leading;
    Value inRow =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, g.index(b, loc, j), e.room);
    return arith::AndIOp::create(b, loc, e.leading, inRow);
  }
};

LogicalResult lowerBlockOp(BlockOp blk, GpuLowering& g, OpBuilder& b) {
  if (auto scratch = blk.getArray().getDefiningOp<ScratchOp>(); scratch && scratch.getAccumulator())
    return lowerAccumulatorBlock(blk, g, b);
  if (g.stagesBlock(blk)) return lowerStagedBlock(blk, g, b);
  if (g.copyBuffers.count(blk.getArray())) return lowerBufferBlock(blk, g, b);
  g.refs[blk.getResult()] =
      resolveBlock(b, blk.getLoc(), blk, g.map.lookup(blk.getArray()), g.mapped(blk.getIndices()));
  return success();
}

/// A block of at most one element per thread (a bias row of 64 for 128
/// threads), loaded whole by every thread into the replicated form: element
/// k (row-major) is register k; elements past the array edge take the
/// padding. Every thread reads the same addresses, which the L1 broadcasts.
LogicalResult loadReplicated(LoadOp load, GpuLowering& g, OpBuilder& b) {
  Location loc = load.getLoc();
  const BlockRef& ref = g.refs.at(load.getRef());
  VectorType type = load.getResult().getType();
  VectorType flatType = VectorType::get({type.getNumElements()}, type.getElementType());
  Value fill = arith::ConstantOp::create(b, loc, load.getPaddingOrZero());
  Value all = arith::ConstantOp::create(b, loc, b.getZeroAttr(flatType));
  for (int64_t k = 0; k < type.getNumElements(); ++k) {
    SmallVector<Value> rc = unflatten(b, loc, g.index(b, loc, k), type.getShape());
    SmallVector<Value> coords =
        arrayCoords(b, loc, ref, load.getOffsets(), g.mapped(load.getDynamicOffsets()),
                    load.getSizes(), type.getShape(), rc);
    auto one = scf::IfOp::create(
        b, loc, inBounds(b, loc, ref, coords),
        [&](OpBuilder& tb, Location l) {
          scf::YieldOp::create(tb, l, memref::LoadOp::create(tb, l, ref.array, coords).getResult());
        },
        [&](OpBuilder& eb, Location l) { scf::YieldOp::create(eb, l, fill); });
    all = vector::InsertOp::create(b, loc, one.getResult(0), all, ArrayRef<int64_t>{k});
  }
  g.map.map(load.getResult(), all);
  return success();
}

/// An epilogue operand (a bias row, a residual or C block) loaded straight
/// into the WGMMA accumulator layout it is combined with (pallas-assign-layouts
/// chooses it): each register reads its own element, so no conversion
/// through shared memory follows. Worked example: bias [64] broadcast to a
/// [128, 64] accumulator: thread 37's register 0 is element (17, 2), which
/// reads bias[c0 + 2]; its register 1 reads bias[c0 + 3]. Registers that
/// differ only along broadcast dims share one load: registers 0, 2, 32 and
/// 34 (rows 17, 25, 81, 89) all read bias[c0 + 2].
LogicalResult loadTiled(LoadOp load, GpuLowering& g, OpBuilder& b) {
  Location loc = load.getLoc();
  auto layout = cast<TiledLayoutAttr>(g.layoutOf(load.getResult()));
  const BlockRef& ref = g.refs.at(load.getRef());
  VectorType type = load.getResult().getType();
  ArrayRef<int64_t> shape = type.getShape(), sizes = load.getSizes();
  const int64_t lead = type.getRank() - static_cast<int64_t>(sizes.size());
  auto broadcastDim = [&](int64_t d) {
    return d < lead || (sizes[d - lead] == 1 && shape[d] != 1);
  };
  Value fill = arith::ConstantOp::create(b, loc, load.getPaddingOrZero());
  Value frag = arith::ConstantOp::create(b, loc, b.getZeroAttr(g.threadType(type, layout)));
  std::map<SmallVector<int64_t>, Value> loaded;  // by register offset along read dims
  g.forEachTiledElement(b, loc, layout, shape, [&](int64_t r, SmallVector<Value>& rc) {
    SmallVector<int64_t> key = layout.elementAt(shape, 0, 0, r);
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (broadcastDim(d)) key[d] = 0;
    if (Value v = loaded[key]) {
      frag = vector::InsertOp::create(b, loc, v, frag, ArrayRef<int64_t>{r});
      return;
    }
    SmallVector<Value> coords =
        arrayCoords(b, loc, ref, load.getOffsets(), g.mapped(load.getDynamicOffsets()),
                    load.getSizes(), type.getShape(), rc);
    auto one = scf::IfOp::create(
        b, loc, inBounds(b, loc, ref, coords),
        [&](OpBuilder& tb, Location l) {
          scf::YieldOp::create(tb, l, memref::LoadOp::create(tb, l, ref.array, coords).getResult());
        },
        [&](OpBuilder& eb, Location l) { scf::YieldOp::create(eb, l, fill); });
    loaded[key] = one.getResult(0);
    frag = vector::InsertOp::create(b, loc, one.getResult(0), frag, ArrayRef<int64_t>{r});
  });
  g.map.map(load.getResult(), frag);
  return success();
}

LogicalResult lowerLoad(LoadOp load, GpuLowering& g, OpBuilder& b) {
  if (g.accumulators.count(load.getRef())) return lowerAccumulatorLoad(load, g, b);
  if (g.staged.count(load.getRef())) return lowerStagedLoad(load, g, b);
  if (g.isReplicated(load.getResult())) return loadReplicated(load, g, b);
  if (isa_and_nonnull<TiledLayoutAttr>(g.layoutOf(load.getResult()))) return loadTiled(load, g, b);
  Location loc = load.getLoc();
  if (!isa_and_nonnull<WarpgroupStridedLayoutAttr>(g.layoutOf(load.getResult())))
    return load.emitOpError("the GPU loads blocks in the strided layout only, not ")
           << g.layoutOf(load.getResult());
  const BlockRef& ref = g.refs.at(load.getRef());
  VectorType type = load.getResult().getType();
  Type et = type.getElementType();
  RunAccess access{g, et};
  const int64_t vec = access.vec;
  VectorType runType = VectorType::get({vec}, et);
  bool contiguous = lastDimContiguous(ref, load.getSizes(), type.getShape());
  Value frag = g.assemble(b, loc, type, [&](int64_t, SmallVector<Value>& rc) -> Value {
    SmallVector<Value> coords =
        arrayCoords(b, loc, ref, load.getOffsets(), g.mapped(load.getDynamicOffsets()),
                    load.getSizes(), type.getShape(), rc);
    Value fill = arith::ConstantOp::create(b, loc, load.getPaddingOrZero());
    if (!contiguous) {  // the whole run reads one element (a stretched dim)
      auto one = scf::IfOp::create(
          b, loc, inBounds(b, loc, ref, coords),
          [&](OpBuilder& tb, Location l) {
            scf::YieldOp::create(tb, l,
                                 memref::LoadOp::create(tb, l, ref.array, coords).getResult());
          },
          [&](OpBuilder& eb, Location l) { scf::YieldOp::create(eb, l, fill); });
      return vector::BroadcastOp::create(b, loc, runType, one.getResult(0));
    }
    auto branch = scf::IfOp::create(
        b, loc, access.fastPath(b, loc, ref, coords, load.getInsideLastDim()),
        [&](OpBuilder& tb, Location l) {  // whole run, 16-byte accesses
          Value run = arith::ConstantOp::create(tb, l, tb.getZeroAttr(runType));
          for (int64_t j = 0; j < vec; j += access.perAccess) {
            auto piece = vector::LoadOp::create(
                tb, l, VectorType::get({access.perAccess}, et), ref.array, plus(tb, l, coords, j),
                /*nontemporal=*/false, llvm::MaybeAlign(access.bytes));
            run = vector::InsertStridedSliceOp::create(tb, l, piece, run, ArrayRef<int64_t>{j},
                                                       ArrayRef<int64_t>{1});
          }
          scf::YieldOp::create(tb, l, run);
        },
        [&](OpBuilder& eb, Location l) {  // edge or misaligned: element by element
          Value run = arith::ConstantOp::create(eb, l, eb.getZeroAttr(runType));
          RunAccess::Edge edge = access.edge(eb, l, ref, coords, load.getInsideLastDim());
          for (int64_t j = 0; j < vec; ++j) {
            SmallVector<Value> cj = plus(eb, l, coords, j);
            auto one = scf::IfOp::create(
                eb, l, access.inside(eb, l, edge, j),
                [&](OpBuilder& ib, Location il) {
                  scf::YieldOp::create(ib, il,
                                       memref::LoadOp::create(ib, il, ref.array, cj).getResult());
                },
                [&](OpBuilder& ob, Location ol) { scf::YieldOp::create(ob, ol, fill); });
            run = vector::InsertOp::create(eb, l, one.getResult(0), run, ArrayRef<int64_t>{j});
          }
          scf::YieldOp::create(eb, l, run);
        });
    return branch.getResult(0);
  });
  g.map.map(load.getResult(), frag);
  return success();
}

/// One element, the same in every thread: thread 0 writes it.
LogicalResult storeScalar(StoreOp store, GpuLowering& g, OpBuilder& b) {
  Location loc = store.getLoc();
  const BlockRef& ref = g.refs.at(store.getRef());
  SmallVector<Value> coords =
      elementCoords(b, loc, ref, store.getOffsets(), g.mapped(store.getDynamicOffsets()));
  Value write = arith::AndIOp::create(b, loc, g.isThread(b, loc, 0), inBounds(b, loc, ref, coords));
  scf::IfOp::create(b, loc, write, [&](OpBuilder& tb, Location tl) {
    memref::StoreOp::create(tb, tl, g.map.lookup(store.getValue()), ref.array, coords);
    scf::YieldOp::create(tb, tl);
  });
  return success();
}

/// Register `reg` of the stored value's per-thread form goes to the value's
/// element `flat` (row-major), where `mine` holds and the element is inside
/// the array.
void storeElement(StoreOp store, GpuLowering& g, OpBuilder& b, Value flat, Value mine,
                  int64_t reg) {
  Location loc = store.getLoc();
  const BlockRef& ref = g.refs.at(store.getRef());
  auto type = cast<VectorType>(store.getValue().getType());
  SmallVector<Value> rc = unflatten(b, loc, flat, type.getShape());
  SmallVector<Value> coords =
      arrayCoords(b, loc, ref, store.getOffsets(), g.mapped(store.getDynamicOffsets()),
                  type.getShape(), type.getShape(), rc);
  Value write = arith::AndIOp::create(b, loc, mine, inBounds(b, loc, ref, coords));
  scf::IfOp::create(b, loc, write, [&](OpBuilder& tb, Location l) {
    Value v =
        vector::ExtractOp::create(tb, l, g.map.lookup(store.getValue()), ArrayRef<int64_t>{reg});
    memref::StoreOp::create(tb, l, v, ref.array, coords);
    scf::YieldOp::create(tb, l);
  });
}

/// A replicated value written element by element: element k by thread
/// k % threads, skipping elements past the array edge.
LogicalResult storeReplicated(StoreOp store, GpuLowering& g, OpBuilder& b) {
  Location loc = store.getLoc();
  auto type = cast<VectorType>(store.getValue().getType());
  for (int64_t k = 0; k < type.getNumElements(); ++k)
    storeElement(store, g, b, g.index(b, loc, k), g.isThread(b, loc, k % g.strided().getThreads()),
                 k);
  return success();
}

/// Per-row values (strided_rows) written by the first lane of each row's
/// lanes: thread t's register r holds row r * (threads / g) + t / g, g being
/// the lanes per row.
LogicalResult storeRows(StoreOp store, GpuLowering& g, OpBuilder& b) {
  Location loc = store.getLoc();
  auto layout = cast<StridedRowsLayoutAttr>(g.layoutOf(store.getValue()));
  auto type = cast<VectorType>(store.getValue().getType());
  const int64_t lanes = layout.lanesPerRow(), rowsPerRun = layout.getThreads() / lanes;
  Value perRow = g.index(b, loc, lanes);
  Value first =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                            arith::RemUIOp::create(b, loc, g.tid, perRow), g.index(b, loc, 0));
  Value rowInRun = arith::DivUIOp::create(b, loc, g.tid, perRow);
  for (int64_t r = 0; r < layout.valuesPerThread(type.getNumElements()); ++r)
    storeElement(store, g, b,
                 arith::AddIOp::create(b, loc, g.index(b, loc, r * rowsPerRun), rowInRun), first,
                 r);
  return success();
}

LogicalResult storeStrided(StoreOp store, GpuLowering& g, OpBuilder& b) {
  Location loc = store.getLoc();
  const BlockRef& ref = g.refs.at(store.getRef());
  auto type = cast<VectorType>(store.getValue().getType());
  FailureOr<Value> frag = g.operandIn(b, loc, store.getValue(), g.strided());
  if (failed(frag)) return store.emitOpError("stores a value that is not in the strided layout");
  RunAccess access{g, type.getElementType()};
  const int64_t vec = access.vec;
  for (int64_t r = 0; r < g.runs(type); ++r) {
    SmallVector<Value> rc = unflatten(b, loc, g.runStart(b, loc, r), type.getShape());
    SmallVector<Value> coords =
        arrayCoords(b, loc, ref, store.getOffsets(), g.mapped(store.getDynamicOffsets()),
                    type.getShape(), type.getShape(), rc);
    Value run = vector::ExtractStridedSliceOp::create(b, loc, *frag, ArrayRef<int64_t>{r * vec},
                                                      ArrayRef<int64_t>{vec}, ArrayRef<int64_t>{1});
    scf::IfOp::create(
        b, loc, access.fastPath(b, loc, ref, coords),
        [&](OpBuilder& tb, Location l) {
          for (int64_t j = 0; j < vec; j += access.perAccess) {
            Value piece = vector::ExtractStridedSliceOp::create(tb, l, run, ArrayRef<int64_t>{j},
                                                                ArrayRef<int64_t>{access.perAccess},
                                                                ArrayRef<int64_t>{1});
            vector::StoreOp::create(tb, l, piece, ref.array, plus(tb, l, coords, j),
                                    /*nontemporal=*/false, llvm::MaybeAlign(access.bytes));
          }
          scf::YieldOp::create(tb, l);
        },
        [&](OpBuilder& eb, Location l) {
          RunAccess::Edge edge = access.edge(eb, l, ref, coords);
          for (int64_t j = 0; j < vec; ++j) {
            SmallVector<Value> cj = plus(eb, l, coords, j);
            scf::IfOp::create(
                eb, l, access.inside(eb, l, edge, j), [&](OpBuilder& ib, Location il) {
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

/// A value in the WGMMA accumulator layout stored straight from its
/// registers into a block of a kernel operand (an epilogue's D;
/// pallas-assign-layouts keeps the layout for it): no conversion through
/// shared memory, which for a [128, 256] tile would take 64 KiB (bf16) to
/// 128 KiB (f32) beside the pipeline's stages. A thread's registers come in
/// runs along the last dim (the layout's vector dim: 2 for the accumulator).
/// One test per thread picks the path: when the whole block is inside the
/// array and every run start is aligned (the thread's first element, and
/// every row stride a multiple of the run's bytes), each run is one
/// unconditional vector store at a constant offset from the thread's first
/// element; otherwise every element is stored on its own, masked. Worked
/// example: D [128, 256] bf16, thread 37 of one warpgroup: registers 0, 1 are
/// (17, 2), (17, 3): one 4-byte store at D[i0 + 17, j0 + 2]; the 4 lanes of
/// a row group write 16 contiguous bytes.
LogicalResult storeTiled(StoreOp store, GpuLowering& g, OpBuilder& b) {
  Location loc = store.getLoc();
  auto layout = cast<TiledLayoutAttr>(g.layoutOf(store.getValue()));
  const BlockRef& ref = g.refs.at(store.getRef());
  auto type = cast<VectorType>(store.getValue().getType());
  ArrayRef<int64_t> shape = type.getShape();
  FailureOr<Value> frag = g.operandIn(b, loc, store.getValue(), layout);
  if (failed(frag)) return store.emitOpError("stores a value that is not in its tiled layout");
  const int64_t registers = layout.registersPerThread(shape);
  // Runs: registers r .. r + vec - 1 holding consecutive elements of a row,
  // starting at a multiple of vec along it.
  int64_t vec = layout.getVectorDim() == -1 ? (*layout.tiledShape(shape)).back() : 1;
  for (int64_t r = 0; r < registers && vec > 1; r += vec) {
    SmallVector<int64_t> first = layout.elementAt(shape, 0, 0, r);
    if (first.back() % vec != 0) vec = 1;
    for (int64_t j = 1; j < vec; ++j) {
      SmallVector<int64_t> next = first;
      next.back() += j;
      if (layout.elementAt(shape, 0, 0, r + j) != next) vec = 1;
    }
  }
  const int64_t elementBytes = type.getElementType().getIntOrFloatBitWidth() / 8;
  const int64_t bytes = vec * elementBytes;
  SmallVector<Value> origin = g.tiledThreadOrigin(b, loc, layout, shape);
  auto coordsOf = [&](OpBuilder& at, Location l, ArrayRef<int64_t> blockCoords) {
    SmallVector<Value> rc;
    for (auto [o, c] : llvm::zip(origin, blockCoords))
      rc.push_back(arith::AddIOp::create(at, l, o, g.index(at, l, c)));
    return arrayCoords(at, l, ref, store.getOffsets(), g.mapped(store.getDynamicOffsets()), shape,
                       shape, rc);
  };
  auto run = [&](OpBuilder& at, Location l, int64_t r, int64_t count) {
    return vector::ExtractStridedSliceOp::create(at, l, *frag, ArrayRef<int64_t>{r},
                                                 ArrayRef<int64_t>{count}, ArrayRef<int64_t>{1});
  };
  auto elementwise = [&](OpBuilder& eb, Location l) {
    for (int64_t r = 0; r < registers; ++r) {
      SmallVector<Value> coords = coordsOf(eb, l, layout.elementAt(shape, 0, 0, r));
      scf::IfOp::create(eb, l, inBounds(eb, l, ref, coords), [&](OpBuilder& ib, Location il) {
        Value v = vector::ExtractOp::create(ib, il, *frag, ArrayRef<int64_t>{r});
        memref::StoreOp::create(ib, il, v, ref.array, coords);
        scf::YieldOp::create(ib, il);
      });
    }
  };
  if (vec == 1) {
    elementwise(b, loc);
    return success();
  }
  // The block's first and last elements inside the array: all of it is
  // (the first can be outside: store_at's run-time offsets may be negative).
  // Runs aligned: the thread's first element, and every stride but the last
  // a multiple of `bytes` (the runs start at multiples of vec along the row).
  auto corner = [&](bool last) {
    SmallVector<Value> c;
    for (int64_t extent : shape) c.push_back(g.index(b, loc, last ? extent - 1 : 0));
    return arrayCoords(b, loc, ref, store.getOffsets(), g.mapped(store.getDynamicOffsets()), shape,
                       shape, c);
  };
  Value inside = arith::AndIOp::create(b, loc, inBounds(b, loc, ref, corner(false)),
                                       inBounds(b, loc, ref, corner(true)));
  Value fast = arith::AndIOp::create(
      b, loc, inside,
      aligned(b, loc, ref, coordsOf(b, loc, SmallVector<int64_t>(shape.size(), 0)), bytes));
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, ref.array);
  for (Value stride : llvm::drop_end(meta.getStrides())) {
    Value rowBytes = arith::MulIOp::create(b, loc, stride, g.index(b, loc, elementBytes));
    Value rem = arith::RemUIOp::create(b, loc, rowBytes, g.index(b, loc, bytes));
    fast = arith::AndIOp::create(
        b, loc, fast,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rem, g.index(b, loc, 0)));
  }
  scf::IfOp::create(
      b, loc, fast,
      [&](OpBuilder& tb, Location l) {
        for (int64_t r = 0; r < registers; r += vec)
          vector::StoreOp::create(tb, l, run(tb, l, r, vec), ref.array,
                                  coordsOf(tb, l, layout.elementAt(shape, 0, 0, r)),
                                  /*nontemporal=*/false, llvm::MaybeAlign(bytes));
        scf::YieldOp::create(tb, l);
      },
      [&](OpBuilder& eb, Location l) {
        elementwise(eb, l);
        scf::YieldOp::create(eb, l);
      });
  return success();
}

/// A store to scratch is fenced by barriers: the one before lets every
/// thread finish reading the old contents, the one after makes the new
/// contents visible to every thread (any thread may load any element).
LogicalResult lowerStore(StoreOp store, GpuLowering& g, OpBuilder& b) {
  if (g.accumulators.count(store.getRef())) return lowerAccumulatorStore(store, g, b);
  if (g.staged.count(store.getRef())) return lowerStagedStore(store, g, b);
  bool shared = inSharedMemory(g.refs.at(store.getRef()).array);
  if (shared) gpu::BarrierOp::create(b, store.getLoc());
  LogicalResult done = !isa<VectorType>(store.getValue().getType()) ? storeScalar(store, g, b)
                       : g.isReplicated(store.getValue())           ? storeReplicated(store, g, b)
                       : isa_and_nonnull<TiledLayoutAttr>(g.layoutOf(store.getValue()))
                           ? storeTiled(store, g, b)
                       : isa_and_nonnull<StridedRowsLayoutAttr>(g.layoutOf(store.getValue()))
                           ? storeRows(store, g, b)
                           : storeStrided(store, g, b);
  if (failed(done)) return failure();
  if (shared) gpu::BarrierOp::create(b, store.getLoc());
  return success();
}

LogicalResult lowerIota(IotaOp iota, GpuLowering& g, OpBuilder& b) {
  Location loc = iota.getLoc();
  VectorType type = iota.getResult().getType();
  Type et = type.getElementType();
  // In a tiled layout (a mask beside an accumulator): each register's coordinate.
  if (auto tiled = dyn_cast_or_null<TiledLayoutAttr>(g.layoutOf(iota.getResult()))) {
    Value frag = arith::ConstantOp::create(b, loc, b.getZeroAttr(g.threadType(type, tiled)));
    g.forEachTiledElement(b, loc, tiled, type.getShape(), [&](int64_t r, SmallVector<Value>& c) {
      Value v = arith::IndexCastOp::create(b, loc, et, c[iota.getDimension()]);
      frag = vector::InsertOp::create(b, loc, v, frag, r);
    });
    g.map.map(iota.getResult(), frag);
    return success();
  }
  const int64_t vec = g.strided().getVec();
  VectorType runType = VectorType::get({vec}, et);
  int64_t dimension = iota.getDimension();
  bool alongRun = dimension == type.getRank() - 1;
  Value frag = g.assemble(b, loc, type, [&](int64_t, SmallVector<Value>& rc) -> Value {
    Value base = arith::IndexCastOp::create(b, loc, et, rc[dimension]);
    Value run = vector::BroadcastOp::create(b, loc, runType, base);
    if (!alongRun) return run;
    SmallVector<APInt> steps;
    for (int64_t j = 0; j < vec; ++j) steps.push_back(APInt(et.getIntOrFloatBitWidth(), j));
    Value step = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(runType, steps));
    return arith::AddIOp::create(b, loc, run, step);
  });
  g.map.map(iota.getResult(), frag);
  return success();
}

/// Every thread loads the same element.
LogicalResult lowerLoadScalar(LoadScalarOp scalar, GpuLowering& g, OpBuilder& b) {
  Location loc = scalar.getLoc();
  const BlockRef& ref = g.refs.at(scalar.getRef());
  SmallVector<int64_t> zeros(scalar.getIndices().size(), 0);
  SmallVector<Value> coords = elementCoords(b, loc, ref, zeros, g.mapped(scalar.getIndices()));
  g.map.map(scalar.getResult(), loadOrZero(b, loc, ref, coords, scalar.getResult().getType()));
  return success();
}

/// Scratch lives in the kernel's shared memory for the whole program.
LogicalResult lowerScratch(ScratchOp scratch, GpuLowering& g, OpBuilder& b) {
  if (scratch.getAccumulator()) return success();  // in registers: its pallas.block allocates
  MemRefType type = scratch.getBuffer().getType();
  std::string purpose;
  llvm::raw_string_ostream os(purpose);
  os << "scratch " << type;
  if (auto name = scratch->getAttrOfType<StringAttr>("name")) os << " '" << name.getValue() << "'";
  g.map.map(scratch.getBuffer(),
            g.sharedBuffer(b, scratch.getLoc(), type, SharedLifetime::kKernel, 16, purpose));
  return success();
}

}  // namespace

void populateLoadStoreRules(RuleRegistry& rules) {
  rules.add(BlockOp::getOperationName(), ruleFor(lowerBlockOp));
  rules.add(LoadOp::getOperationName(), ruleFor(lowerLoad));
  rules.add(StoreOp::getOperationName(), ruleFor(lowerStore));
  rules.add(IotaOp::getOperationName(), ruleFor(lowerIota));
  rules.add(LoadScalarOp::getOperationName(), ruleFor(lowerLoadScalar));
  rules.add(ScratchOp::getOperationName(), ruleFor(lowerScratch));
}

}  // namespace mlir::pallas::gpu_lowering
