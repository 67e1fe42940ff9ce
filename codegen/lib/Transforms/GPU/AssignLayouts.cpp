//===- AssignLayouts.cpp - a thread layout for every block value ----------===//
//
// pallas-assign-layouts (see Passes.td): picks the kernel's strided layout,
// marks the values that are replicated, writes both into the IR, and makes
// every change of layout an explicit pallas.convert_layout.
//
//===----------------------------------------------------------------------===//

#include "Splats.h"
#include "pallas/Dialect/PallasDialect.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <functional>
#include <numeric>

namespace mlir::pallas {
#define GEN_PASS_DEF_PALLASASSIGNLAYOUTS
#include "pallas/Transforms/Passes.h.inc"

namespace {

/// Whether `ref` is a block of an accumulator (spec.accumulator: a
/// `pallas.scratch accumulator`, held in registers).
bool isAccumulatorRef(Value ref) {
  auto blk = ref.getDefiningOp<BlockOp>();
  auto scratch = blk ? blk.getArray().getDefiningOp<ScratchOp>() : ScratchOp();
  return scratch && scratch.getAccumulator();
}

/// The block values held *replicated*: every thread holds all N elements
/// (flattened row-major in a vector<N>), rather than a fragment. They are the
/// results of reductions that keep some dims (one value per row, say) and
/// what is computed from them alone, and loads of blocks too small to
/// distribute (fewer elements than threads); scalar broadcasts and splat constants
/// are replicated when their element count is not a multiple of `threads`
/// (too small to distribute), or when they only seed reductions that keep
/// dims (whose results are replicated). Loop-carried values follow their init.
DenseSet<Value> inferReplicatedAssuming(func::FuncOp kernel, int64_t threads,
                                        const DenseSet<Value>& assumedCarries) {
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
    } else if (auto load = dyn_cast<LoadOp>(op)) {
      // A block of at most one element per thread (a bias row): every thread
      // loads all of it (LoadStoreRules' loadReplicated).
      VectorType type = load.getResult().getType();
      if (type.getNumElements() < threads && !isAccumulatorRef(load.getRef()))
        replicated.insert(load.getResult());
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
        if (replicated.contains(init) || assumedCarries.contains(loop.getRegionIterArgs()[i])) {
          if (isSplat(init)) replicated.insert(init);  // adapts to any layout: no say in vec
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
        } else if (!isSplat(v)) {
          all = false;
        }
      }
      if (any && all) {
        replicated.insert(op->getResult(0));
        // Its splat operands adapt to the layout: they have no say in vec.
        for (Value v : op->getOperands())
          if (isa<VectorType>(v.getType()) && isSplat(v)) replicated.insert(v);
      }
    }
  });
  return replicated;
}

/// inferReplicated's loop carries: a carry that starts as a splat is
/// replicated when what the loop body yields for it is, which depends on the
/// carry itself (a running maximum of row maxima: m' = max(m, max(x, 1))).
/// Every such carry is first assumed replicated; a carry whose yield turns
/// out not to be is dropped and the inference runs again, until none is.
DenseSet<Value> inferReplicated(func::FuncOp kernel, int64_t threads) {
  DenseSet<Value> assumed;
  kernel.walk([&](scf::ForOp loop) {
    for (auto [i, init] : llvm::enumerate(loop.getInitArgs()))
      if (isa<VectorType>(init.getType()) && isSplat(init))
        assumed.insert(loop.getRegionIterArgs()[i]);
  });
  while (true) {
    DenseSet<Value> replicated = inferReplicatedAssuming(kernel, threads, assumed);
    SmallVector<Value> wrong;
    for (Value carry : assumed) {
      auto arg = cast<BlockArgument>(carry);
      auto loop = cast<scf::ForOp>(arg.getOwner()->getParentOp());
      Value yielded = loop.getBody()->getTerminator()->getOperand(arg.getArgNumber() - 1);
      if (!replicated.contains(yielded)) wrong.push_back(carry);
    }
    if (wrong.empty()) return replicated;
    for (Value carry : wrong) assumed.erase(carry);
  }
}

/// Picks the strided layout's `vec` for a kernel: 16 bytes of the narrowest
/// element type the kernel moves (elementwise ops need operands and results in
/// the same layout even when their dtypes differ), reduced until it divides
/// every block's last dim and every block's size is a multiple of
/// threads * vec. Fails naming the block that does not fit.
FailureOr<int64_t> chooseVec(func::FuncOp kernel, int64_t threads,
                             const DenseSet<Value>& replicated, const DenseSet<Value>& rows) {
  int64_t minBytes = 4;
  SmallVector<VectorType> blocks;
  kernel.walk([&](Operation* op) {
    for (Value result : op->getResults())
      if (auto vt = dyn_cast<VectorType>(result.getType());
          vt && !replicated.contains(result) && !rows.contains(result)) {
        blocks.push_back(vt);
        if (vt.getElementType().isIntOrFloat() && vt.getElementTypeBitWidth() >= 8)
          minBytes = std::min<int64_t>(minBytes, vt.getElementTypeBitWidth() / 8);
      }
  });
  int64_t vec = 16 / minBytes;
  // A spec may ask for longer runs (KernelSpec::run_elements): a 4 x 512 bf16
  // tile in runs of 16 puts each row in one warp (32 runs), each run two
  // 16-byte accesses.
  if (auto requested = kernel->getAttrOfType<IntegerAttr>("pallas.run_elements"))
    vec = requested.getInt();
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
  return vec;
}

/// Whether `v` can be computed straight in the accumulator layout for its
/// one use: a load of an operand's block (not staged, not scratch), an iota
/// (a mask's coordinates), or an elementwise op (a cast, say) of such
/// values and splats alone.
bool loadableInPlace(Value v) {
  Operation* def = v.getDefiningOp();
  if (!def || !v.hasOneUse() || !isa<VectorType>(v.getType())) return false;
  if (isa<IotaOp>(def)) return true;
  if (auto load = dyn_cast<LoadOp>(def)) {
    auto blk = load.getRef().getDefiningOp<BlockOp>();
    return blk && !blk.getStaged() && isa<BlockArgument>(blk.getArray());
  }
  return def->hasTrait<OpTrait::Elementwise>() && def->getNumResults() == 1 &&
         llvm::all_of(def->getOperands(), [](Value o) {
           return !isa<VectorType>(o.getType()) || isSplat(o) || loadableInPlace(o);
         });
}

/// The block values computed in the WGMMA accumulator layout, and beside
/// them the per-row values of accumulators (held where the accumulator
/// holds the row: PallasLayouts.td's wgmmaRow, or wgmmaRowKeepdims for [R, 1]).
struct AccumulatorValues {
  DenseSet<Value> tiled;  // [64 W, N] in the accumulator layout
  DenseSet<Value> rows;   // [64 W] or [64 W, 1]: one value per accumulator row
};

/// Whether `red` reduces the last axis of a 2-D block to one value per row.
bool reducesRows(vector::MultiDimReductionOp red) {
  SmallVector<bool> mask = red.getReductionMask();
  return isa<VectorType>(red.getDestType()) && mask.size() == 2 && !mask[0] && mask[1];
}

/// Whether `v` (a per-row value) may stay in the row layout at every use:
/// elementwise ops and shape casts computing more per-row values, broadcasts
/// over an accumulator's columns, and loop carries of per-row values.
bool rowUsesStay(Value v, const AccumulatorValues& values) {
  return llvm::all_of(v.getUses(), [&](OpOperand& use) {
    Operation* user = use.getOwner();
    if (isa<vector::BroadcastOp>(user)) return values.tiled.contains(user->getResult(0));
    if (isa<scf::YieldOp>(user)) {
      auto loop = dyn_cast<scf::ForOp>(user->getParentOp());
      return loop && values.rows.contains(loop.getResult(use.getOperandNumber()));
    }
    if (auto loop = dyn_cast<scf::ForOp>(user)) {
      if (use.getOperandNumber() < loop.getNumControlOperands()) return false;
      return values.rows.contains(
          loop.getResult(use.getOperandNumber() - loop.getNumControlOperands()));
    }
    return user->getNumResults() == 1 && values.rows.contains(user->getResult(0));
  });
}

/// The block values held in the WGMMA accumulator layout (#pallas.tiled,
/// PallasLayouts.td): the results of pallas.dot, loads of accumulators, and
/// what elementwise ops compute from any of them (an epilogue: scaling,
/// bias, activation, the cast to the output dtype), so that the MMA's
/// registers are used where they are. The epilogue's other operands that
/// are loaded from operands (bias, residual, C, and casts of them) or are
/// iotas (masks) are computed in that layout too (LoadStoreRules'
/// loadTiled, lowerIota); the rest are converted to it; other uses of tiled
/// values convert to the strided layout.
///
/// With `rowValues`, an online softmax stays in registers too (attention's
/// inner loop, kernel_specs/attention.cc): the row reductions of a tiled
/// value (max(s, 1, keepdims)) are per-row values in the row layout (each
/// held by the 4 lanes that hold its row: two shuffles, no shared memory),
/// elementwise ops of them alone are too, and broadcasting one over the
/// columns of an accumulator is tiled. A loop carry started from a value in
/// one of these layouts takes it (the yield is converted if need be), and one
/// started from a splat takes the layout of what the body yields for it, so
/// acc, m and l stay in registers across the loop's steps.
AccumulatorValues inferAccumulatorLayout(func::FuncOp kernel, bool rowValues) {
  AccumulatorValues values;
  DenseSet<Value>&tiled = values.tiled, &rows = values.rows;
  bool changed = true;
  auto mark = [&](DenseSet<Value>& set, Value v) { changed |= set.insert(v).second; };
  // A loop carry started from a splat, in no layout yet.
  auto splatCarry = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    auto loop = arg ? dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()) : scf::ForOp();
    return loop && arg.getArgNumber() >= loop.getNumInductionVars() &&
           isSplat(loop.getInitArgs()[arg.getArgNumber() - loop.getNumInductionVars()]) &&
           !tiled.contains(v) && !rows.contains(v);
  };
  // Carries depend on what their loop yields: walk until nothing changes.
  while (changed) {
    changed = false;
    kernel.walk<WalkOrder::PreOrder>([&](Operation* op) {
      if (auto dot = dyn_cast<DotOp>(op)) {
        mark(tiled, dot.getResult());
      } else if (auto load = dyn_cast<LoadOp>(op)) {
        if (isAccumulatorRef(load.getRef())) mark(tiled, load.getResult());
      } else if (auto red = dyn_cast<vector::MultiDimReductionOp>(op)) {
        if (rowValues && reducesRows(red) && tiled.contains(red.getSource()) &&
            isSplat(red.getAcc()))
          mark(rows, red.getResult());
      } else if (auto reshape = dyn_cast<vector::ShapeCastOp>(op)) {
        if (rows.contains(reshape.getSource()) && reshape.getResultVectorType().getRank() <= 2 &&
            reshape.getResultVectorType().getShape().front() ==
                reshape.getSourceVectorType().getShape().front())
          mark(rows, reshape.getResult());
      } else if (auto bc = dyn_cast<vector::BroadcastOp>(op)) {
        VectorType to = bc.getResultVectorType();
        if (rows.contains(bc.getSource()) && to.getRank() == 2 &&
            cast<VectorType>(bc.getSourceType()).getShape() ==
                ArrayRef<int64_t>{to.getShape()[0], 1} &&
            to.getShape()[1] % 8 == 0)
          mark(tiled, bc.getResult());
      } else if (auto loop = dyn_cast<scf::ForOp>(op)) {
        Operation* yield = loop.getBody()->getTerminator();
        for (auto [i, init] : llvm::enumerate(loop.getInitArgs()))
          for (DenseSet<Value>* set : {&tiled, &rows}) {
            Value yielded = yield->getOperand(i);
            // From a value in the layout (a branch as a loop of 0 or 1 trips
            // carrying s), or from a splat when the loop yields one.
            if (set->contains(init) || (isSplat(init) && set->contains(yielded))) {
              mark(*set, loop.getRegionIterArgs()[i]);
              mark(*set, loop.getResult(i));
            }
          }
      } else if (op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1 &&
                 isa<VectorType>(op->getResult(0).getType())) {
        auto vectors = llvm::make_filter_range(
            op->getOperands(), [](Value v) { return isa<VectorType>(v.getType()); });
        if (llvm::any_of(vectors, [&](Value v) { return tiled.contains(v); }))
          mark(tiled, op->getResult(0));
        else if (llvm::any_of(vectors, [&](Value v) { return rows.contains(v); }) &&
                 llvm::all_of(vectors, [&](Value v) {
                   return rows.contains(v) || isSplat(v) || splatCarry(v);
                 })) {
          mark(rows, op->getResult(0));
          // A running row maximum, m' = max(m, rowmax(s)): m is a row value
          // too if the loop yields one for it (checked below).
          for (Value v : vectors)
            if (splatCarry(v)) {
              auto arg = cast<BlockArgument>(v);
              auto loop = cast<scf::ForOp>(arg.getOwner()->getParentOp());
              mark(rows, arg);
              mark(rows, loop.getResult(arg.getArgNumber() - loop.getNumInductionVars()));
            }
        }
      }
    });
  }
  // Per-row values are all or nothing: one with a use that needs them
  // elsewhere (a store, a reduction to a scalar) keeps all replicated.
  auto yieldsRows = [&](Value v) {  // a row carry's loop yields a row value for it
    auto arg = dyn_cast<BlockArgument>(v);
    auto loop = arg ? dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()) : scf::ForOp();
    return !loop || rows.contains(loop.getBody()->getTerminator()->getOperand(
                        arg.getArgNumber() - loop.getNumInductionVars()));
  };
  if (!rows.empty() &&
      !llvm::all_of(rows, [&](Value v) { return rowUsesStay(v, values) && yieldsRows(v); }))
    return inferAccumulatorLayout(kernel, /*rowValues=*/false);
  std::function<void(Value)> loadTiled = [&](Value v) {
    if (!isa<VectorType>(v.getType()) || isSplat(v) || !tiled.insert(v).second) return;
    if (!isa<LoadOp, IotaOp>(v.getDefiningOp()))
      for (Value o : v.getDefiningOp()->getOperands()) loadTiled(o);
  };
  for (Value v : SmallVector<Value>(tiled.begin(), tiled.end()))
    if (Operation* op = v.getDefiningOp(); op && op->hasTrait<OpTrait::Elementwise>())
      for (Value o : op->getOperands())
        if (!tiled.contains(o) && loadableInPlace(o)) loadTiled(o);
  return values;
}

class LayoutAssignment {
 public:
  LayoutAssignment(func::FuncOp kernel, WarpgroupStridedLayoutAttr strided,
                   TiledLayoutAttr accumulator, DenseSet<Value> replicated,
                   AccumulatorValues values)
      : kernel_(kernel),
        strided_(strided),
        replicated_(ReplicatedLayoutAttr::get(kernel.getContext())),
        accumulator_(accumulator),
        rowsKeepdims_(
            TiledLayoutAttr::getWgmmaRowKeepdims(kernel.getContext(), strided.getThreads() / 128)),
        rows_(TiledLayoutAttr::getWgmmaRow(kernel.getContext(), strided.getThreads() / 128)),
        replicatedValues_(std::move(replicated)),
        tiledValues_(std::move(values.tiled)),
        rowValues_(std::move(values.rows)) {}

  void run() {
    chooseRowLayouts();
    kernel_->setAttr("pallas.strided_layout", strided_);
    kernel_.walk([&](Operation* op) { annotate(op); });
    SmallVector<Operation*> ops;
    kernel_.walk([&](Operation* op) { ops.push_back(op); });
    for (Operation* op : ops) convertOperands(op);
  }

 private:
  Attribute layoutOf(Value v) const {
    if (auto it = rowLayouts_.find(v); it != rowLayouts_.end()) return it->second;
    if (tiledValues_.contains(v)) return accumulator_;
    if (rowValues_.contains(v))
      return cast<VectorType>(v.getType()).getRank() == 1 ? rows_ : rowsKeepdims_;
    return replicatedValues_.contains(v) ? Attribute(replicated_) : Attribute(strided_);
  }

  /// The strided_rows layout for a reduction of the last axis of a strided
  /// block whose rows lie in warps (from a splat accumulator), else null.
  StridedRowsLayoutAttr rowsLayoutFor(vector::MultiDimReductionOp red) const {
    VectorType src = red.getSourceVectorType();
    SmallVector<bool> mask = red.getReductionMask();
    if (!isa<VectorType>(red.getDestType()) || replicatedValues_.contains(red.getSource()) ||
        tiledValues_.contains(red.getSource()) || !isSplat(red.getAcc()) || !mask.back() ||
        llvm::count(mask, true) != 1 || !strided_.rowsInAWarp(src))
      return {};
    return StridedRowsLayoutAttr::get(strided_.getContext(), strided_.getThreads(),
                                      strided_.getVec(), src.getShape().back());
  }

  /// Row statistics that never leave their rows' warps get strided_rows
  /// (PallasLayouts.td) instead of replicated: the kept-dims reductions of
  /// rowsLayoutFor, and elementwise ops and shape casts of them alone (with
  /// splats), and loop carries started from a splat that such values are
  /// yielded to. It is chosen for the kernel's row statistics all together,
  /// when every use of them is one of those, a broadcast back over their
  /// block (a conversion in registers), a reduction of all of them to a
  /// scalar, or a store; otherwise all stay replicated.
  /// Worked example: softmax's tile keeps m = max(x, 1), s = sum(exp(x - m), 1)
  /// and x / s: m, s and the broadcasts qualify, so no shared memory is used.
  /// A chunk loop reshaped to [256, 8] keeps a running (m, l) per 8-element
  /// run in loop carries: they qualify too, and stay in each run's thread.
  void chooseRowLayouts() {
    DenseMap<Value, Attribute> rows;
    SmallVector<Value> worklist;
    bool conflict = false;
    auto add = [&](Value v, Attribute layout) {
      auto [it, inserted] = rows.try_emplace(v, layout);
      if (inserted) worklist.push_back(v);
      conflict |= it->second != layout;
    };
    // Loop carries that may take a row layout: replicated ones (started from
    // a splat, or from another loop's carry: a segment's full chunks, then its
    // last one; checked below).
    DenseSet<Value> carries;
    kernel_.walk([&](scf::ForOp loop) {
      for (Value arg : loop.getRegionIterArgs())
        if (replicatedValues_.contains(arg)) carries.insert(arg);
    });
    auto addCarry = [&](scf::ForOp loop, unsigned i, Attribute layout) {
      add(loop.getRegionIterArgs()[i], layout);
      add(loop.getResult(i), layout);
    };
    auto isFreeCarry = [&](Value v) { return carries.contains(v) && !rows.contains(v); };
    kernel_.walk([&](vector::MultiDimReductionOp red) {
      if (StridedRowsLayoutAttr layout = rowsLayoutFor(red)) add(red.getResult(), layout);
    });
    // What is computed from them alone, and the carries they are yielded to.
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      Attribute layout = rows.lookup(v);
      for (OpOperand& use : v.getUses()) {
        Operation* user = use.getOwner();
        if (isa<scf::YieldOp>(user)) {
          auto loop = dyn_cast<scf::ForOp>(user->getParentOp());
          if (loop && carries.contains(loop.getRegionIterArgs()[use.getOperandNumber()]))
            addCarry(loop, use.getOperandNumber(), layout);
          continue;
        }
        if (auto loop = dyn_cast<scf::ForOp>(user)) {  // the init of another loop's carry
          unsigned i = use.getOperandNumber() - loop.getNumControlOperands();
          if (carries.contains(loop.getRegionIterArgs()[i])) addCarry(loop, i, layout);
          continue;
        }
        if (user->getNumResults() != 1 || rows.contains(user->getResult(0))) continue;
        bool elementwise = user->hasTrait<OpTrait::Elementwise>() &&
                           isa<VectorType>(user->getResult(0).getType()) &&
                           llvm::all_of(user->getOperands(), [&](Value o) {
                             return !isa<VectorType>(o.getType()) || isSplat(o) ||
                                    rows.lookup(o) == layout || isFreeCarry(o);
                           });
        if (elementwise || isa<vector::ShapeCastOp>(user)) {
          for (Value o : user->getOperands())
            if (isFreeCarry(o)) {
              auto arg = cast<BlockArgument>(o);
              addCarry(cast<scf::ForOp>(arg.getOwner()->getParentOp()), arg.getArgNumber() - 1,
                       layout);
            }
          add(user->getResult(0), layout);
        }
      }
    }
    if (conflict) return;
    // Every use must take the layout.
    for (auto& [v, layout] : rows) {
      auto rowsLayout = cast<StridedRowsLayoutAttr>(layout);
      int64_t rowCount = cast<VectorType>(v.getType()).getNumElements();
      for (OpOperand& use : v.getUses()) {
        Operation* user = use.getOwner();
        if (user->getNumResults() == 1 && rows.lookup(user->getResult(0)) == layout) continue;
        if (auto store = dyn_cast<StoreOp>(user); store && store.getValue() == v) continue;
        if (auto bc = dyn_cast<vector::BroadcastOp>(user)) {
          VectorType to = bc.getResultVectorType();
          if (to.getShape().back() == rowsLayout.getCols() &&
              to.getNumElements() == rowCount * rowsLayout.getCols())
            continue;
        }
        if (auto red = dyn_cast<vector::MultiDimReductionOp>(user);
            red && red.getSource() == v && !isa<VectorType>(red.getDestType()))
          continue;  // the whole value to a scalar
        if (auto loop = dyn_cast<scf::ForOp>(user->getParentOp());
            loop && isa<scf::YieldOp>(user) &&
            rows.lookup(loop.getResult(use.getOperandNumber())) == layout)
          continue;
        if (auto loop = dyn_cast<scf::ForOp>(user);
            loop && use.getOperandNumber() >= loop.getNumControlOperands() &&
            rows.lookup(loop.getResult(use.getOperandNumber() - loop.getNumControlOperands())) ==
                layout)
          continue;
        return;  // a use that needs the values elsewhere: keep them replicated
      }
      // A carry starts from a splat or from a value in the same layout.
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        auto loop = cast<scf::ForOp>(arg.getOwner()->getParentOp());
        Value init = loop.getInitArgs()[arg.getArgNumber() - loop.getNumInductionVars()];
        if (!isSplat(init) && rows.lookup(init) != layout) return;
      }
    }
    for (auto& [v, layout] : rows) replicatedValues_.erase(v);
    rowLayouts_ = std::move(rows);
  }

  void annotate(Operation* op) {
    if (!llvm::any_of(op->getResultTypes(), llvm::IsaPred<VectorType>)) return;
    SmallVector<Attribute> layouts;
    for (Value r : op->getResults())
      layouts.push_back(isa<VectorType>(r.getType()) ? layoutOf(r)
                                                     : Attribute(UnitAttr::get(op->getContext())));
    op->setAttr(kLayoutsAttrName, ArrayAttr::get(op->getContext(), layouts));
  }

  /// `operand`'s value in `want`: itself, or through a new pallas.convert_layout before `user`.
  void convert(OpOperand& operand, Attribute want, Operation* user) {
    Value v = operand.get();
    if (!isa<VectorType>(v.getType()) || isSplat(v) || layoutOf(v) == want) return;
    OpBuilder b(user);
    auto type = cast<VectorType>(v.getType());
    auto c = ConvertLayoutOp::create(b, user->getLoc(), type, v, layoutOf(v), want);
    c->setAttr(kLayoutsAttrName, b.getArrayAttr({want}));
    if (want == Attribute(replicated_)) replicatedValues_.insert(c.getResult());
    if (want == Attribute(accumulator_)) tiledValues_.insert(c.getResult());
    operand.set(c.getResult());
  }

  /// Uses of accumulator-layout values: a dot's accumulator, a store to an
  /// accumulator or to a kernel operand's unstaged block (from the registers
  /// to global memory), a wgmma's value operand a, a dot's a and elementwise
  /// ops computing in that layout take it (their other operands are
  /// converted to it); a dot's other a and its b are read from strided
  /// fragments (or in place in shared memory); every other use converts the
  /// value to the strided layout first. Returns true for the uses it handled.
  bool convertAccumulatorUses(Operation* op) {
    if (auto dot = dyn_cast<DotOp>(op)) {
      // An a already in the accumulator layout (P from an accumulator) is
      // the MMA's A register fragment as it is (MatmulRules' registerWordsOfA),
      // unless it is multiplied transposed.
      if (dot.getTransposeA() || !tiledValues_.contains(dot.getA()))
        convert(dot.getAMutable(), strided_, op);
      convert(dot.getBMutable(), strided_, op);
      if (dot.getAcc()) convert(dot.getAccMutable()[0], accumulator_, op);
      return true;
    }
    if (auto red = dyn_cast<vector::MultiDimReductionOp>(op);
        red && rowValues_.contains(red.getResult()))
      return true;  // each row reduced where the accumulator holds it (ReductionRules)
    if (auto mma = dyn_cast<WgmmaOp>(op)) {  // a value a: wgmma's A registers are that layout
      convert(mma.getAMutable(), accumulator_, op);
      return true;
    }
    if (auto store = dyn_cast<StoreOp>(op)) {
      if (isAccumulatorRef(store.getRef())) {
        convert(store.getValueMutable(), accumulator_, op);
        return true;
      }
      // An epilogue's result goes from its registers straight to a kernel
      // operand's block in global memory (LoadStoreRules' storeTiled).
      auto blk = store.getRef().getDefiningOp<BlockOp>();
      if (blk && !blk.getStaged() && isa<BlockArgument>(blk.getArray()) &&
          tiledValues_.contains(store.getValue()))
        return true;
      // ... and to a scratch buffer in shared memory (split-K's partial tile for its
      // cluster's sum): each register to its element, no conversion buffer.
      auto scratch = blk ? blk.getArray().getDefiningOp<ScratchOp>() : ScratchOp();
      if (scratch && tiledValues_.contains(store.getValue())) return true;
    }
    if (isa<scf::ForOp, scf::WhileOp, scf::YieldOp, scf::ConditionOp>(op)) return false;
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1 &&
        tiledValues_.contains(op->getResult(0)))
      return false;  // the generic elementwise case converts the rest to the result's layout
    for (OpOperand& operand : op->getOpOperands())
      if (tiledValues_.contains(operand.get())) convert(operand, strided_, op);
    return false;
  }

  void convertOperands(Operation* op) {
    if (convertAccumulatorUses(op)) return;
    if (auto bc = dyn_cast<vector::BroadcastOp>(op)) {
      // Accumulator rows over its columns: a register copy (ElementwiseRules).
      if (tiledValues_.contains(bc.getResult()) && rowValues_.contains(bc.getSource())) return;
      // A replicated or per-row value spread over a strided block: the conversion broadcasts.
      Attribute from = layoutOf(bc.getSource());
      if (isa<VectorType>(bc.getSourceType()) && from != Attribute(strided_) &&
          !replicatedValues_.contains(bc.getResult())) {
        OpBuilder b(bc);
        auto c = ConvertLayoutOp::create(b, bc.getLoc(), bc.getResultVectorType(), bc.getSource(),
                                         from, strided_);
        c->setAttr(kLayoutsAttrName, b.getArrayAttr({strided_}));
        bc.getResult().replaceAllUsesWith(c.getResult());
        bc.erase();
      }
      return;
    }
    if (auto red = dyn_cast<vector::MultiDimReductionOp>(op)) {
      if (isa<VectorType>(red.getDestType())) convert(red.getAccMutable(), replicated_, op);
      return;
    }
    if (auto transpose = dyn_cast<vector::TransposeOp>(op)) {  // strided in and out
      convert(transpose.getVectorMutable(), strided_, op);
      return;
    }
    if (auto loop = dyn_cast<scf::ForOp>(op)) {
      for (auto [i, init] : llvm::enumerate(loop.getInitArgsMutable()))
        convert(init, layoutOf(loop.getResult(i)), op);
      Operation* yield = loop.getBody()->getTerminator();
      for (auto [i, y] : llvm::enumerate(yield->getOpOperands()))
        convert(y, layoutOf(loop.getResult(i)), yield);
      return;
    }
    if (auto loop = dyn_cast<scf::WhileOp>(op)) {
      for (auto [i, init] : llvm::enumerate(loop.getInitsMutable()))
        convert(init, layoutOf(loop.getResult(i)), op);
      Operation* cond = loop.getConditionOp();
      for (auto [i, arg] : llvm::enumerate(loop.getConditionOp().getArgsMutable()))
        convert(arg, layoutOf(loop.getResult(i)), cond);
      Operation* yield = loop.getYieldOp();
      for (auto [i, y] : llvm::enumerate(yield->getOpOperands()))
        convert(y, layoutOf(loop.getResult(i)), yield);
      return;
    }
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1 &&
        isa<VectorType>(op->getResult(0).getType())) {
      Attribute want = layoutOf(op->getResult(0));
      for (OpOperand& operand : op->getOpOperands()) convert(operand, want, op);
    }
  }

  func::FuncOp kernel_;
  WarpgroupStridedLayoutAttr strided_;
  ReplicatedLayoutAttr replicated_;
  TiledLayoutAttr accumulator_;
  TiledLayoutAttr rowsKeepdims_, rows_;  // per-row values of accumulators: [R, 1], [R]
  DenseSet<Value> replicatedValues_;
  DenseSet<Value> tiledValues_;            // in accumulator_
  DenseSet<Value> rowValues_;              // in rows_ or rowsKeepdims_
  DenseMap<Value, Attribute> rowLayouts_;  // strided_rows values
};

struct PallasAssignLayoutsPass : impl::PallasAssignLayoutsBase<PallasAssignLayoutsPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<func::FuncOp> kernels;
    getOperation().walk([&](func::FuncOp f) {
      if (f->hasAttr(kKernelAttrName)) kernels.push_back(f);
    });
    for (func::FuncOp k : kernels) {
      int64_t threads = this->threads;
      if (auto attr = k->getAttrOfType<IntegerAttr>("pallas.threads")) threads = attr.getInt();
      DenseSet<Value> replicated = inferReplicated(k, threads);
      AccumulatorValues values = inferAccumulatorLayout(k, /*rowValues=*/threads % 128 == 0);
      for (Value v : values.rows) replicated.erase(v);
      FailureOr<int64_t> vec = chooseVec(k, threads, replicated, values.rows);
      if (failed(vec)) return signalPassFailure();
      if (!values.tiled.empty() && threads % 128 != 0) {
        k.emitError() << "the kernel has " << threads
                      << " threads per program, but dot and accumulators need the WGMMA "
                         "accumulator layout of whole warpgroups (a multiple of 128 threads)";
        return signalPassFailure();
      }
      // W warpgroups split an accumulator's rows, 64 each: every value in
      // the layout must have exactly 64 W rows (PallasLayouts.td).
      auto accumulator = TiledLayoutAttr::getWgmmaAccumulator(&getContext(), threads / 128);
      if (threads > 128) {
        WalkResult fits = k.walk([&](Operation* op) {  // in program order: the first one is named
          for (Value v : op->getResults()) {
            auto type = dyn_cast<VectorType>(v.getType());
            if (!(values.tiled.contains(v) || values.rows.contains(v)) ||
                (type.getRank() <= 2 && type.getShape()[0] == threads / 2))
              continue;
            op->emitError() << "a " << type << " in the WGMMA accumulator layout of "
                            << threads / 128 << " warpgroups; each warpgroup holds 64 rows, so it "
                            << "needs " << threads / 2 << " rows";
            return WalkResult::interrupt();
          }
          return WalkResult::advance();
        });
        if (fits.wasInterrupted()) return signalPassFailure();
      }
      LayoutAssignment(k, WarpgroupStridedLayoutAttr::get(&getContext(), threads, *vec),
                       accumulator, std::move(replicated), std::move(values))
          .run();
    }
  }
};

}  // namespace
}  // namespace mlir::pallas
