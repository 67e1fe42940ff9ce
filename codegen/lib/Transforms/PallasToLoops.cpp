//===- PallasToLoops.cpp - the host backend: kernels as CPU loops ---------===//
//
// Kernel `@k(operands...)` becomes `@pallas_host_k(operands..., g0, g1, g2)`:
//
//   for p0 in [0, g0): for p1 in [0, g1): ...   // the grid, sequentially
//     <body>
//
// Each block value (a vector) becomes a stack buffer allocated once at the
// function entry, and each op producing one becomes a loop nest writing it:
//
//   %c = arith.addf %a, %b : vector<2048xf32>
// becomes
//   scf.for %i = 0 to 2048 { %x = load %A[%i]; %y = load %B[%i];
//                            store (arith.addf %x, %y), %C[%i] }
//
// Loop-carried blocks of scf.for live in a carry buffer: the init value is
// copied in before the loop and the yielded value copied in at each yield.
//
//===----------------------------------------------------------------------===//

#include "BlockIndexing.h"
#include "ErrorRecord.h"
#include "ProgramSkeleton.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_CONVERTPALLASTOLOOPS
#include "pallas/Transforms/Passes.h.inc"

namespace {

using LoopBodyFn = function_ref<void(OpBuilder&, Location, ValueRange)>;

/// Emits `for (i0...) for (i1...) fn(i...)` over `shape`.
void loopNest(OpBuilder& b, Location loc, ArrayRef<int64_t> shape, LoopBodyFn fn) {
  SmallVector<Value> ivs;
  std::function<void(OpBuilder&, size_t)> build = [&](OpBuilder& builder, size_t d) {
    if (d == shape.size()) {
      fn(builder, loc, ivs);
      return;
    }
    Value lo = arith::ConstantIndexOp::create(builder, loc, 0);
    Value hi = arith::ConstantIndexOp::create(builder, loc, shape[d]);
    Value one = arith::ConstantIndexOp::create(builder, loc, 1);
    scf::ForOp::create(builder, loc, lo, hi, one, ValueRange{},
                       [&](OpBuilder& nb, Location, Value iv, ValueRange) {
                         ivs.push_back(iv);
                         build(nb, d + 1);
                         ivs.pop_back();
                         scf::YieldOp::create(nb, loc);
                       });
  };
  build(b, 0);
}

class HostLowering {
 public:
  HostLowering(func::FuncOp kernel) : kernel_(kernel) {}

  LogicalResult run() {
    OpBuilder b(kernel_);
    Location loc = kernel_.getLoc();
    int32_t gridRank = kernel_->getAttrOfType<IntegerAttr>(kGridRankAttrName).getInt();
    SmallVector<Type> args(kernel_.getArgumentTypes());
    for (int i = 0; i < 3; ++i) args.push_back(b.getIndexType());
    auto host = func::FuncOp::create(b, loc, ("pallas_host_" + kernel_.getSymName()).str(),
                                     b.getFunctionType(args, {}));
    Block* entry = host.addEntryBlock();
    for (auto [from, to] : llvm::zip(kernel_.getArguments(), entry->getArguments()))
      map_.map(from, to);
    for (int axis = 0; axis < 3; ++axis)
      grid_[axis] = entry->getArgument(kernel_.getNumArguments() + axis);

    // Buffers go before everything else in the entry block.
    OpBuilder body = OpBuilder::atBlockEnd(entry);
    arith::ConstantIndexOp::create(body, loc, 0);
    allocas_ = OpBuilder::atBlockBegin(entry);
    // The grid loops, outermost axis first.
    for (int axis = 0; axis < gridRank; ++axis) {
      Value lo = arith::ConstantIndexOp::create(body, loc, 0);
      Value one = arith::ConstantIndexOp::create(body, loc, 1);
      auto loop = scf::ForOp::create(body, loc, lo, grid_[axis], one);
      programIds_[axis] = loop.getInductionVar();
      body.setInsertionPoint(loop.getBody()->getTerminator());
    }
    if (failed(lowerBlock(kernel_.getBody().front(), body))) return failure();
    OpBuilder end = OpBuilder::atBlockEnd(entry);
    func::ReturnOp::create(end, loc);
    kernel_.erase();
    return success();
  }

 private:
  Value buffer(VectorType type) {
    return memref::AllocaOp::create(allocas_, kernel_.getLoc(),
                                    MemRefType::get(type.getShape(), type.getElementType()));
  }

  LogicalResult lowerBlock(Block& block, OpBuilder& b) {
    for (Operation& op : block.without_terminator())
      if (failed(lowerOp(&op, b))) return failure();
    return success();
  }

  LogicalResult lowerOp(Operation* op, OpBuilder& b) {
    Location loc = op->getLoc();
    if (lowerGridOp(op, map_, b, gridCoordinates_)) return success();
    // Host programs run one at a time: clusters of one.
    if (isa<ClusterRankOp, ClusterSizeOp>(op)) {
      map_.map(op->getResult(0),
               arith::ConstantIndexOp::create(b, op->getLoc(), isa<ClusterSizeOp>(op) ? 1 : 0));
      return success();
    }
    // ... so a cluster barrier is a no-op and a peer's scratch is the program's own (rank 0).
    if (isa<ClusterBarrierOp>(op)) return success();
    if (auto peer = dyn_cast<ClusterPeerOp>(op)) {
      BlockRef own = refs_.at(peer.getRef());  // a copy: inserting may move the map's entries
      refs_[peer.getResult()] = own;
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
    if (auto iota = dyn_cast<IotaOp>(op)) {
      VectorType type = iota.getResult().getType();
      Value out = buffer(type);
      loopNest(b, loc, type.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
        Value v =
            arith::IndexCastOp::create(nb, l, type.getElementType(), ivs[iota.getDimension()]);
        memref::StoreOp::create(nb, l, v, out, ivs);
      });
      map_.map(iota.getResult(), out);
      return success();
    }
    if (auto bc = dyn_cast<vector::BroadcastOp>(op)) {
      VectorType type = bc.getResultVectorType();
      Value out = buffer(type);
      Value src = map_.lookup(bc.getSource());
      auto srcType = dyn_cast<VectorType>(bc.getSource().getType());
      loopNest(b, loc, type.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
        Value v = src;
        if (srcType) {  // numpy rule: align right, extent-1 dims read index 0
          SmallVector<Value> idx;
          int64_t lead = type.getRank() - srcType.getRank();
          for (int64_t d = 0; d < srcType.getRank(); ++d)
            idx.push_back(srcType.getShape()[d] == 1 ? arith::ConstantIndexOp::create(nb, l, 0)
                                                     : ivs[lead + d]);
          v = memref::LoadOp::create(nb, l, src, idx);
        }
        memref::StoreOp::create(nb, l, v, out, ivs);
      });
      map_.map(bc.getResult(), out);
      return success();
    }
    if (auto cst = dyn_cast<arith::ConstantOp>(op); cst && isa<VectorType>(cst.getType())) {
      auto dense = dyn_cast<SplatElementsAttr>(cst.getValue());
      if (!dense) return op->emitOpError("host lowering supports only splat vector constants");
      auto type = cast<VectorType>(cst.getType());
      Value scalar = arith::ConstantOp::create(b, loc, dense.getSplatValue<TypedAttr>());
      Value out = buffer(type);
      loopNest(b, loc, type.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
        memref::StoreOp::create(nb, l, scalar, out, ivs);
      });
      map_.map(cst.getResult(), out);
      return success();
    }
    if (auto loop = dyn_cast<scf::ForOp>(op)) return lowerFor(loop, b);
    if (auto red = dyn_cast<vector::MultiDimReductionOp>(op)) return lowerReduction(red, b);
    if (auto add = dyn_cast<SemaphoreAddOp>(op)) {  // programs run one after another
      Value sems = map_.lookup(add.getSemaphores()), at = map_.lookup(add.getIndex());
      Value old = memref::LoadOp::create(b, loc, sems, at);
      memref::StoreOp::create(
          b, loc, arith::AddIOp::create(b, loc, old, map_.lookup(add.getValue())), sems, at);
      map_.map(add.getOld(), old);
      return success();
    }
    if (auto wait = dyn_cast<SemaphoreWaitOp>(op)) return lowerWait(wait, b);
    if (auto scratch = dyn_cast<ScratchOp>(op)) {  // one buffer, reused by every program
      Value buffer = memref::AllocaOp::create(allocas_, loc, scratch.getBuffer().getType());
      map_.map(scratch.getBuffer(), buffer);
      if (scratch.getAccumulator()) {  // zero when each program starts
        Value zero = arith::ConstantOp::create(
            b, loc, b.getZeroAttr(scratch.getBuffer().getType().getElementType()));
        loopNest(b, loc, scratch.getBuffer().getType().getShape(),
                 [&](OpBuilder& nb, Location l, ValueRange ivs) {
                   memref::StoreOp::create(nb, l, zero, buffer, ivs);
                 });
      }
      return success();
    }
    if (auto loop = dyn_cast<scf::WhileOp>(op)) return lowerWhile(loop, b);
    if (auto scope = dyn_cast<RunScopedOp>(op)) {  // buffers on the stack; barriers are moot
      for (BlockArgument arg : scope.getBody().front().getArguments())
        if (auto type = dyn_cast<MemRefType>(arg.getType()))
          map_.map(arg, memref::AllocaOp::create(allocas_, loc, type).getResult());
      return lowerBlock(scope.getBody().front(), b);
    }
    if (auto in = dyn_cast<CopyToSharedOp>(op)) {
      copySlice(b, loc, in.getArray(), in.getOffsets(), in.getBuffer(), /*toBuffer=*/true, false);
      return success();
    }
    if (auto out = dyn_cast<CopyToGlobalOp>(op)) {
      copySlice(b, loc, out.getArray(), out.getOffsets(), out.getBuffer(), false, out.getAdd());
      return success();
    }
    // One program runs at a time and copies complete at once: nothing to wait for.
    if (isa<PrefetchOp, BarrierWaitOp, BarrierArriveOp, CommitSharedOp, CommitCopiesToGlobalOp,
            WaitCopiesToGlobalOp>(op))
      return success();
    if (auto read = dyn_cast<SemaphoreReadOp>(op)) {
      map_.map(read.getValue(), memref::LoadOp::create(b, loc, map_.lookup(read.getSemaphores()),
                                                       map_.lookup(read.getIndex()))
                                    .getResult());
      return success();
    }
    if (auto check = dyn_cast<CheckOp>(op)) {  // programs run one after another
      auto failed = scf::IfOp::create(b, loc, map_.lookup(check.getFailed()), false);
      OpBuilder fb(failed.thenBlock()->getTerminator());
      Value errors = map_.lookup(check.getErrors());
      Value c0 = arith::ConstantIndexOp::create(fb, loc, 0);
      Value old = memref::LoadOp::create(fb, loc, errors, ValueRange{c0});
      Value one = arith::ConstantIntOp::create(fb, loc, fb.getI32Type(), 1);
      memref::StoreOp::create(fb, loc, arith::AddIOp::create(fb, loc, old, one), errors,
                              ValueRange{c0});
      writeFirstFailure(fb, loc, errors, old, static_cast<int32_t>(check.getCheck()),
                        mapped(check.getValues()));
      return success();
    }
    if (auto scalar = dyn_cast<LoadScalarOp>(op)) {
      map_.map(scalar.getResult(), loadScalar(b, scalar));
      return success();
    }
    if (auto branch = dyn_cast<scf::IfOp>(op);
        branch && branch.getNumResults() == 0 && branch.getElseRegion().empty()) {
      auto lowered = scf::IfOp::create(b, loc, map_.lookup(branch.getCondition()), false);
      OpBuilder tb = OpBuilder::atBlockBegin(lowered.thenBlock());
      tb.setInsertionPoint(lowered.thenBlock()->getTerminator());
      return lowerBlock(*branch.thenBlock(), tb);
    }
    if (auto cast = dyn_cast<vector::ShapeCastOp>(op)) {
      // Same elements in the same row-major order: element i of the result is
      // element i of the source.
      VectorType from = cast.getSourceVectorType(), to = cast.getResultVectorType();
      Value src = map_.lookup(cast.getSource());
      Value out = buffer(to);
      loopNest(b, loc, to.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
        Value flat = arith::ConstantIndexOp::create(nb, l, 0);
        for (auto [iv, extent] : llvm::zip(ivs, to.getShape()))
          flat = arith::AddIOp::create(
              nb, l,
              arith::MulIOp::create(nb, l, flat, arith::ConstantIndexOp::create(nb, l, extent)),
              iv);
        SmallVector<Value> at = unflatten(nb, l, flat, from.getShape());
        memref::StoreOp::create(nb, l, memref::LoadOp::create(nb, l, src, at), out, ivs);
      });
      map_.map(cast.getResult(), out);
      return success();
    }
    if (auto transpose = dyn_cast<vector::TransposeOp>(op)) {
      // result[i_0, ..., i_n] = source[i_perm^-1...]: result dim d is source dim perm[d].
      VectorType to = transpose.getResultVectorType();
      ArrayRef<int64_t> perm = transpose.getPermutation();
      Value src = map_.lookup(transpose.getVector());
      Value out = buffer(to);
      loopNest(b, loc, to.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
        SmallVector<Value> at(ivs.size());
        for (size_t d = 0; d < perm.size(); ++d) at[perm[d]] = ivs[d];
        memref::StoreOp::create(nb, l, memref::LoadOp::create(nb, l, src, at), out, ivs);
      });
      map_.map(transpose.getResult(), out);
      return success();
    }
    if (auto dot = dyn_cast<DotOp>(op)) {
      // out[i, j] = acc[i, j] + sum_k f32(a[i, k]) * f32(b[k, j]), k in order (a[k, i] and
      // b[j, k] where transposed).
      VectorType to = dot.getResult().getType();
      Value a = map_.lookup(dot.getA()), bm = map_.lookup(dot.getB());
      Value acc = dot.getAcc() ? map_.lookup(dot.getAcc()) : Value();
      Value out = buffer(to);
      Type f32 = b.getF32Type();
      loopNest(b, loc, to.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
        Value init = acc ? memref::LoadOp::create(nb, l, acc, ivs).getResult()
                         : arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(0)).getResult();
        Value lo = arith::ConstantIndexOp::create(nb, l, 0);
        Value hi = arith::ConstantIndexOp::create(nb, l, dot.getK());
        Value one = arith::ConstantIndexOp::create(nb, l, 1);
        auto loop = scf::ForOp::create(
            nb, l, lo, hi, one, ValueRange{init},
            [&](OpBuilder& kb, Location kl, Value k, ValueRange sum) {
              SmallVector<Value> aAt = dot.getTransposeA() ? SmallVector<Value>{k, ivs[0]}
                                                           : SmallVector<Value>{ivs[0], k};
              Value x = memref::LoadOp::create(kb, kl, a, aAt);
              SmallVector<Value> bAt = dot.getTransposeB() ? SmallVector<Value>{ivs[1], k}
                                                           : SmallVector<Value>{k, ivs[1]};
              Value y = memref::LoadOp::create(kb, kl, bm, bAt);
              Value p = arith::MulFOp::create(kb, kl, arith::ExtFOp::create(kb, kl, f32, x),
                                              arith::ExtFOp::create(kb, kl, f32, y));
              scf::YieldOp::create(kb, kl, ValueRange{arith::AddFOp::create(kb, kl, sum[0], p)});
            });
        memref::StoreOp::create(nb, l, loop.getResult(0), out, ivs);
      });
      map_.map(dot.getResult(), out);
      return success();
    }
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1 &&
        isa<VectorType>(op->getResult(0).getType()))
      return lowerElementwise(op, b);
    return cloneScalarOp(
        op, map_, b, "host",  // ProgramSkeleton.h
        "pallas.block, pallas.load, pallas.load_scalar, pallas.store, pallas.iota, "
        "pallas.scratch, pallas.semaphore_add, pallas.semaphore_read, pallas.run_scoped, "
        "the explicit copies and barriers, "
        "pallas.semaphore_wait, pallas.check, vector.broadcast, vector.shape_cast, "
        "vector.transpose, pallas.dot, "
        "vector.multi_reduction, splat constants, scf.for, scf.while, scf.if and "
        "elementwise arith/math ops");
  }

  /// Copies between the slice of `array` at element `offsets` and `buffer`
  /// (its shape): elements outside the array read as zero and are not
  /// written; with `add` the buffer is added to the array.
  void copySlice(OpBuilder& b, Location loc, Value array, ValueRange offsets, Value buffer,
                 bool toBuffer, bool add) {
    Value a = map_.lookup(array), buf = map_.lookup(buffer);
    auto type = cast<MemRefType>(buffer.getType());
    loopNest(b, loc, type.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
      SmallVector<Value> at;
      Value inside = arith::ConstantIntOp::create(nb, l, nb.getI1Type(), 1);
      for (auto [d, iv] : llvm::enumerate(ivs)) {
        Value x = arith::AddIOp::create(nb, l, map_.lookup(offsets[d]), iv);
        Value lo = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, x,
                                         arith::ConstantIndexOp::create(nb, l, 0));
        Value hi = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, x,
                                         memref::DimOp::create(nb, l, a, d));
        inside = arith::AndIOp::create(nb, l, inside, arith::AndIOp::create(nb, l, lo, hi));
        at.push_back(x);
      }
      Type et = type.getElementType();
      if (toBuffer) {
        Value v =
            scf::IfOp::create(
                nb, l, inside,
                [&](OpBuilder& tb, Location tl) {
                  scf::YieldOp::create(tb, tl, memref::LoadOp::create(tb, tl, a, at).getResult());
                },
                [&](OpBuilder& eb, Location el) {
                  scf::YieldOp::create(
                      eb, el, arith::ConstantOp::create(eb, el, eb.getZeroAttr(et)).getResult());
                })
                .getResult(0);
        memref::StoreOp::create(nb, l, v, buf, ivs);
        return;
      }
      scf::IfOp::create(nb, l, inside, [&](OpBuilder& tb, Location tl) {
        Value v = memref::LoadOp::create(tb, tl, buf, ivs);
        if (add) {
          Value old = memref::LoadOp::create(tb, tl, a, at);
          v = isa<FloatType>(et) ? arith::AddFOp::create(tb, tl, old, v).getResult()
                                 : arith::AddIOp::create(tb, tl, old, v).getResult();
        }
        memref::StoreOp::create(tb, tl, v, a, at);
        scf::YieldOp::create(tb, tl);
      });
    });
  }

  LogicalResult lowerElementwise(Operation* op, OpBuilder& b) {
    auto type = cast<VectorType>(op->getResult(0).getType());
    Value out = buffer(type);
    loopNest(b, op->getLoc(), type.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
      OperationState state(l, op->getName());
      for (Value v : op->getOperands()) {
        Value m = map_.lookup(v);
        state.addOperands(
            isa<VectorType>(v.getType()) ? memref::LoadOp::create(nb, l, m, ivs).getResult() : m);
      }
      state.addTypes(type.getElementType());
      state.addAttributes(op->getAttrs());
      Operation* scalar = nb.create(state);
      memref::StoreOp::create(nb, l, scalar->getResult(0), out, ivs);
    });
    map_.map(op->getResult(0), out);
    return success();
  }

  /// acc (a scalar, or a buffer of the result shape) combined with every
  /// source element at the result coordinates it reduces to.
  LogicalResult lowerReduction(vector::MultiDimReductionOp red, OpBuilder& b) {
    Location loc = red.getLoc();
    VectorType src = red.getSourceVectorType();
    Value source = map_.lookup(red.getSource());
    SmallVector<bool> reduced = red.getReductionMask();
    auto resultVector = dyn_cast<VectorType>(red.getDestType());
    Type et = src.getElementType();
    // A scalar result accumulates in a 0-d buffer.
    Value out = resultVector
                    ? buffer(resultVector)
                    : memref::AllocaOp::create(allocas_, loc, MemRefType::get({}, et)).getResult();
    Value acc = map_.lookup(red.getAcc());
    if (resultVector)
      memref::CopyOp::create(b, loc, acc, out);
    else
      memref::StoreOp::create(b, loc, acc, out, ValueRange{});
    loopNest(b, loc, src.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
      SmallVector<Value> at;
      for (auto [iv, r] : llvm::zip(ivs, reduced))
        if (!r) at.push_back(iv);
      Value x = memref::LoadOp::create(nb, l, source, ivs);
      Value a = memref::LoadOp::create(nb, l, out, at);
      memref::StoreOp::create(nb, l, vector::makeArithReduction(nb, l, red.getKind(), x, a), out,
                              at);
    });
    map_.map(red.getResult(),
             resultVector ? out : memref::LoadOp::create(b, loc, out, ValueRange{}).getResult());
    return success();
  }

  SmallVector<Value> mapped(ValueRange values) {
    SmallVector<Value> out;
    for (Value v : values) out.push_back(map_.lookup(v));
    return out;
  }

  /// One element of a block at dynamic indices, 0 past the array edge.
  Value loadScalar(OpBuilder& b, LoadScalarOp op) {
    const BlockRef& ref = refs_.at(op.getRef());
    SmallVector<int64_t> zeros(op.getIndices().size(), 0);
    SmallVector<Value> coords = elementCoords(b, op.getLoc(), ref, zeros, mapped(op.getIndices()));
    return loadOrZero(b, op.getLoc(), ref, coords, op.getResult().getType());
  }

  LogicalResult lowerLoad(LoadOp load, OpBuilder& b) {
    const BlockRef& ref = refs_.at(load.getRef());
    VectorType type = load.getResult().getType();
    Value out = buffer(type);
    loopNest(b, load.getLoc(), type.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
      SmallVector<Value> coords =
          arrayCoords(nb, l, ref, load.getOffsets(), mapped(load.getDynamicOffsets()),
                      load.getSizes(), type.getShape(), ivs);
      Value inside = inBounds(nb, l, ref, coords);
      auto branch = scf::IfOp::create(
          nb, l, inside,
          [&](OpBuilder& tb, Location tl) {
            scf::YieldOp::create(tb, tl,
                                 memref::LoadOp::create(tb, tl, ref.array, coords).getResult());
          },
          [&](OpBuilder& eb, Location el) {  // masked: outside the array reads the padding
            scf::YieldOp::create(
                eb, el, arith::ConstantOp::create(eb, el, load.getPaddingOrZero()).getResult());
          });
      memref::StoreOp::create(nb, l, branch.getResult(0), out, ivs);
    });
    map_.map(load.getResult(), out);
    return success();
  }

  LogicalResult lowerStore(StoreOp store, OpBuilder& b) {
    const BlockRef& ref = refs_.at(store.getRef());
    auto type = dyn_cast<VectorType>(store.getValue().getType());
    if (!type) {  // one element
      Location loc = store.getLoc();
      SmallVector<Value> coords =
          elementCoords(b, loc, ref, store.getOffsets(), mapped(store.getDynamicOffsets()));
      scf::IfOp::create(b, loc, inBounds(b, loc, ref, coords), [&](OpBuilder& tb, Location tl) {
        memref::StoreOp::create(tb, tl, map_.lookup(store.getValue()), ref.array, coords);
        scf::YieldOp::create(tb, tl);
      });
      return success();
    }
    Value value = map_.lookup(store.getValue());
    loopNest(b, store.getLoc(), type.getShape(), [&](OpBuilder& nb, Location l, ValueRange ivs) {
      SmallVector<Value> coords =
          arrayCoords(nb, l, ref, store.getOffsets(), mapped(store.getDynamicOffsets()),
                      type.getShape(), type.getShape(), ivs);
      Value inside = inBounds(nb, l, ref, coords);
      scf::IfOp::create(nb, l, inside, [&](OpBuilder& tb, Location tl) {
        Value v = memref::LoadOp::create(tb, tl, value, ivs);
        memref::StoreOp::create(tb, tl, v, ref.array, coords);
        scf::YieldOp::create(tb, tl);
      });
    });
    return success();
  }

  /// Programs run one after another, so a wait either succeeds at once or
  /// would block forever (no later program runs while it waits): then the
  /// runtime hook records the failure, the launch reports it, and the program
  /// goes on without taking anything.
  LogicalResult lowerWait(SemaphoreWaitOp wait, OpBuilder& b) {
    Location loc = wait.getLoc();
    auto operand = dyn_cast<BlockArgument>(wait.getSemaphores());
    if (!operand) return wait.emitOpError("semaphores must be a kernel argument");
    Value sems = map_.lookup(wait.getSemaphores()), at = map_.lookup(wait.getIndex());
    Value want = map_.lookup(wait.getValue());
    Value have = memref::LoadOp::create(b, loc, sems, at);
    Value enough = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, have, want);
    auto branch = scf::IfOp::create(b, loc, enough, /*withElseRegion=*/true);
    OpBuilder tb = OpBuilder::atBlockBegin(branch.thenBlock());
    memref::StoreOp::create(tb, loc, arith::SubIOp::create(tb, loc, have, want), sems, at);
    OpBuilder eb = OpBuilder::atBlockBegin(branch.elseBlock());
    func::FuncOp hook = stuckHook(loc);
    Value arg = arith::ConstantIntOp::create(eb, loc, eb.getI32Type(), operand.getArgNumber());
    Value index = arith::IndexCastOp::create(eb, loc, eb.getI64Type(), at);
    func::CallOp::create(eb, loc, hook, ValueRange{arg, index, want, have});
    return success();
  }

  /// `void pallas_host_semaphore_stuck(i32 operand, i64 index, i32 want, i32 have)`,
  /// defined by the runtime (api/src/launch.cc).
  func::FuncOp stuckHook(Location loc) {
    auto module = kernel_->getParentOfType<ModuleOp>();
    constexpr llvm::StringLiteral kName = "pallas_host_semaphore_stuck";
    if (auto f = module.lookupSymbol<func::FuncOp>(kName)) return f;
    OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
    Type i32 = mb.getI32Type();
    auto f = func::FuncOp::create(mb, loc, kName,
                                  mb.getFunctionType({i32, mb.getI64Type(), i32, i32}, {}));
    f.setPrivate();
    return f;
  }

  /// Like lowerFor: scalars stay loop values, blocks live in carry buffers
  /// (the condition forwards the before-block arguments unchanged).
  /// Loop carries: a block lives in a carry buffer (copied from its init),
  /// a scalar stays a loop-carried value. Returns the buffer per carry (null
  /// for scalars) and fills `scalarInits`.
  SmallVector<Value> carryBuffers(OpBuilder& b, Location loc, ValueRange inits,
                                  SmallVector<Value>& scalarInits) {
    SmallVector<Value> carries(inits.size());
    for (auto [i, init] : llvm::enumerate(inits)) {
      if (auto vt = dyn_cast<VectorType>(init.getType())) {
        carries[i] = buffer(vt);
        memref::CopyOp::create(b, loc, map_.lookup(init), carries[i]);
      } else {
        scalarInits.push_back(map_.lookup(init));
      }
    }
    return carries;
  }

  /// The next iteration's carries: blocks copied into their buffers (unless
  /// already there); returns the scalars to yield.
  SmallVector<Value> yieldCarries(OpBuilder& b, Location loc, ValueRange yielded,
                                  ArrayRef<Value> carries) {
    SmallVector<Value> scalarYields;
    for (auto [i, v] : llvm::enumerate(yielded)) {
      Value src = map_.lookup(v);
      if (!carries[i])
        scalarYields.push_back(src);
      else if (src != carries[i])
        memref::CopyOp::create(b, loc, src, carries[i]);
    }
    return scalarYields;
  }

  /// Maps `from` (one value per carry) to the buffers, or in order to `scalars`.
  void mapCarries(ValueRange from, ArrayRef<Value> carries, ValueRange scalars) {
    unsigned s = 0;
    for (auto [i, v] : llvm::enumerate(from)) map_.map(v, carries[i] ? carries[i] : scalars[s++]);
  }

  LogicalResult lowerWhile(scf::WhileOp loop, OpBuilder& b) {
    Location loc = loop.getLoc();
    scf::ConditionOp cond = loop.getConditionOp();
    if (cond.getArgs() != ValueRange(loop.getBeforeArguments()))
      return loop.emitOpError("host lowering needs the condition to forward the carry unchanged");
    SmallVector<Value> scalarInits;
    SmallVector<Value> carries = carryBuffers(b, loc, loop.getInits(), scalarInits);
    SmallVector<Type> scalarTypes(ValueRange(scalarInits).getTypes());
    SmallVector<Location> locs(scalarInits.size(), loc);
    auto lowered = scf::WhileOp::create(b, loc, scalarTypes, scalarInits);
    Block* before = b.createBlock(&lowered.getBefore(), {}, scalarTypes, locs);
    mapCarries(loop.getBeforeArguments(), carries, before->getArguments());
    OpBuilder bb = OpBuilder::atBlockEnd(before);
    if (failed(lowerBlock(loop.getBefore().front(), bb))) return failure();
    scf::ConditionOp::create(bb, loc, map_.lookup(cond.getCondition()), before->getArguments());
    Block* after = b.createBlock(&lowered.getAfter(), {}, scalarTypes, locs);
    mapCarries(loop.getAfterArguments(), carries, after->getArguments());
    OpBuilder ab = OpBuilder::atBlockEnd(after);
    if (failed(lowerBlock(loop.getAfter().front(), ab))) return failure();
    scf::YieldOp::create(ab, loc, yieldCarries(ab, loc, loop.getYieldOp().getOperands(), carries));
    b.setInsertionPointAfter(lowered);
    mapCarries(loop.getResults(), carries, lowered.getResults());
    return success();
  }

  LogicalResult lowerFor(scf::ForOp loop, OpBuilder& b) {
    Location loc = loop.getLoc();
    // Scalars stay iter_args; blocks live in carry buffers.
    SmallVector<Value> scalarInits;
    SmallVector<Value> carries = carryBuffers(b, loc, loop.getInitArgs(), scalarInits);
    auto newLoop = scf::ForOp::create(b, loc, map_.lookup(loop.getLowerBound()),
                                      map_.lookup(loop.getUpperBound()),
                                      map_.lookup(loop.getStep()), scalarInits);
    map_.map(loop.getInductionVar(), newLoop.getInductionVar());
    mapCarries(loop.getRegionIterArgs(), carries, newLoop.getRegionIterArgs());
    Block* body = newLoop.getBody();
    if (!body->empty()) body->back().erase();
    OpBuilder nb = OpBuilder::atBlockEnd(body);
    if (failed(lowerBlock(*loop.getBody(), nb))) return failure();
    auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
    scf::YieldOp::create(nb, loc, yieldCarries(nb, loc, yield.getOperands(), carries));
    mapCarries(loop.getResults(), carries, newLoop.getResults());
    return success();
  }

  func::FuncOp kernel_;
  OpBuilder allocas_{kernel_.getContext()};
  IRMapping map_;
  DenseMap<Value, BlockRef> refs_;
  Value programIds_[3];
  Value grid_[3];
  /// program_id and num_programs: the grid loops' induction variables and bounds.
  GridCoordinates gridCoordinates_{
      [this](OpBuilder&, Location, int32_t axis) { return programIds_[axis]; },
      [this](OpBuilder&, Location, int32_t axis) { return grid_[axis]; }};
};

struct ConvertPallasToLoopsPass : impl::ConvertPallasToLoopsBase<ConvertPallasToLoopsPass> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> kernels;
    getOperation().walk([&](func::FuncOp f) {
      if (f->hasAttr(kKernelAttrName)) kernels.push_back(f);
    });
    for (func::FuncOp k : kernels)
      if (failed(HostLowering(k).run())) return signalPassFailure();
  }
};

}  // namespace
}  // namespace mlir::pallas
