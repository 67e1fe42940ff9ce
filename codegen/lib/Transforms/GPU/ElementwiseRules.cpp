//===- ElementwiseRules.cpp - elementwise ops, splats, broadcasts, shape casts -===//
//
// Elementwise ops compute on the per-thread form of their operands, which
// pallas-assign-layouts made agree with the result's layout (splats are made
// again in the layout of each use; anything else has a pallas.convert_layout).
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// Fast-math flags the GPU code may use:
///  - `contract` on every float op, so a * b + c becomes one FFMA (it rounds
///    once instead of twice: never less accurate);
///  - `afn` on exp2 when every float input of the kernel is half precision
///    (`pallas.approx_math`; exp and exp2 of f32 blocks have their own rules
///    below, lowerApproxExp and lowerApproxExp2: this covers scalars).
void relaxFloatSemantics(Operation* op, GpuLowering& g) {
  auto fastMath = dyn_cast<arith::ArithFastMathInterface>(op);
  if (!fastMath) return;
  arith::FastMathFlags flags = arith::FastMathFlags::contract;
  if (auto current = fastMath.getFastMathFlagsAttr()) flags = flags | current.getValue();
  if (g.approxTranscendentals && isa<math::Exp2Op>(op)) flags = flags | arith::FastMathFlags::afn;
  op->setAttr(fastMath.getFastMathAttrName(),
              arith::FastMathFlagsAttr::get(op->getContext(), flags));
}

LogicalResult lowerElementwise(Operation* op, GpuLowering& g, OpBuilder& b) {
  Location loc = op->getLoc();
  OperationState state(loc, op->getName());
  Attribute layout = op->getNumResults() == 1 ? g.layoutOf(op->getResult(0)) : Attribute();
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    if (!isa<VectorType>(v.getType())) {
      state.addOperands(g.map.lookup(v));
      continue;
    }
    FailureOr<Value> operand = failure();
    if (layout) operand = g.operandIn(b, loc, v, layout);
    if (failed(operand))
      return op->emitOpError("operand ")
             << i << " is in layout " << g.layoutOf(v) << " but the result in " << layout
             << "; pallas-assign-layouts inserts a pallas.convert_layout for such uses";
    state.addOperands(*operand);
  }
  for (Type t : op->getResultTypes()) {
    auto vt = dyn_cast<VectorType>(t);
    state.addTypes(vt ? Type(g.threadType(vt, layout)) : t);
  }
  state.addAttributes(op->getAttrs());
  Operation* lowered = b.create(state);
  relaxFloatSemantics(lowered, g);
  for (auto [from, to] : llvm::zip(op->getResults(), lowered->getResults())) g.map.map(from, to);
  return success();
}

/// The scalar f32 -> f32 NVVM intrinsic `name` applied to each element of `v`.
Value perElement(OpBuilder& b, Location loc, StringRef name, Value v) {
  auto type = cast<VectorType>(v.getType());
  StringAttr intrinsic = b.getStringAttr(name);
  SmallVector<Value> elements;
  for (int64_t i = 0; i < type.getNumElements(); ++i) {
    Value x = vector::ExtractOp::create(b, loc, v, i);
    elements.push_back(
        LLVM::CallIntrinsicOp::create(b, loc, b.getF32Type(), intrinsic, ValueRange{x})
            .getResult(0));
  }
  return vector::FromElementsOp::create(b, loc, type, elements);
}

/// exp(x) of a kernel whose float inputs are all f16 or bf16
/// (`pallas.approx_math`), as a hand-written CUDA kernel computes it: one FFMA
/// and one MUFU.EX2 per element,
///
///   exp(a - b) = ex2.approx.ftz(fma(a, log2e, -(b * log2e)))
///   exp(x)     = ex2.approx.ftz(x * log2e)
///
/// where b (softmax's row maximum, a per-row value broadcast over the row) is
/// the same in every element, so b * log2e is computed once. ex2.approx has
/// 2 ulp of error; the fold rounds b * log2e once, which adds up to
/// |b| * 1.44 * 2^-24 to the exponent, i.e. a relative error of about
/// |b| * 2^-24 in the result: below 2^-14 while |b| < 1024 (logits are far
/// smaller), under the inputs' own precision (2^-8, 2^-11). Larger maxima lose
/// accuracy in proportion, as in hand-written and FlashAttention-style kernels
/// that fold the same scale. `.ftz` flushes results
/// below 2^-126 to 0: without it ptxas adds a range check and two multiplies
/// per element. Such results are below any f16 or bf16 normal number, and an
/// exp of the inputs' scale that small only ever feeds a sum or a product.
/// The emulator computes the same (emulator/src/libdevice.cc).
LogicalResult lowerApproxExp(math::ExpOp exp, GpuLowering& g, OpBuilder& b) {
  auto block = dyn_cast<VectorType>(exp.getType());
  if (!g.approxTranscendentals || !block || !block.getElementType().isF32())
    return lowerElementwise(exp, g, b);
  Location loc = exp.getLoc();
  Attribute layout = g.layoutOf(exp.getResult());
  Type f32 = b.getF32Type();
  VectorType type = g.threadType(block, layout);
  auto log2e = arith::ConstantOp::create(
      b, loc, SplatElementsAttr::get(type, b.getF32FloatAttr(1.4426950408889634f)));
  auto contract = arith::FastMathFlagsAttr::get(b.getContext(), arith::FastMathFlags::contract);

  Value scaled;
  if (auto sub = exp.getOperand().getDefiningOp<arith::SubFOp>()) {
    FailureOr<Value> lhs = g.operandIn(b, loc, sub.getLhs(), layout);
    FailureOr<Value> rhs = g.operandIn(b, loc, sub.getRhs(), layout);
    if (succeeded(lhs) && succeeded(rhs)) {
      Value bias =
          arith::NegFOp::create(b, loc, arith::MulFOp::create(b, loc, *rhs, log2e), contract);
      scaled = math::FmaOp::create(b, loc, *lhs, log2e, bias, contract);
    }
  }
  if (!scaled) {
    FailureOr<Value> x = g.operandIn(b, loc, exp.getOperand(), layout);
    if (failed(x)) return lowerElementwise(exp, g, b);  // names the layout mismatch
    scaled = arith::MulFOp::create(b, loc, *x, log2e, contract);
  }
  g.map.map(exp.getResult(), perElement(b, loc, "llvm.nvvm.ex2.approx.ftz.f32", scaled));
  return success();
}

/// exp2(x) of a kernel whose float inputs are all f16 or bf16: one MUFU.EX2
/// per element, `ex2.approx.ftz` for the reason above (without .ftz, ptxas
/// adds a range check and two multiplies to each: attention's loop, which
/// takes 34 exp2 a step, was 566 instructions with them).
LogicalResult lowerApproxExp2(math::Exp2Op exp2, GpuLowering& g, OpBuilder& b) {
  auto block = dyn_cast<VectorType>(exp2.getType());
  if (!g.approxTranscendentals || !block || !block.getElementType().isF32())
    return lowerElementwise(exp2, g, b);
  FailureOr<Value> x =
      g.operandIn(b, exp2.getLoc(), exp2.getOperand(), g.layoutOf(exp2.getResult()));
  if (failed(x)) return lowerElementwise(exp2, g, b);  // names the layout mismatch
  g.map.map(exp2.getResult(), perElement(b, exp2.getLoc(), "llvm.nvvm.ex2.approx.ftz.f32", *x));
  return success();
}

/// log(x) of a kernel whose float inputs are all f16 or bf16, as a
/// hand-written kernel's __logf: lg2.approx.ftz(x) * ln(2), one MUFU.LG2 and
/// one FMUL per element instead of libdevice's logf (about 20 instructions).
/// lg2.approx's absolute error is at most 2^-22.6 (so about 1e-7 after the
/// scale), far below the inputs' precision; `.ftz` reads a subnormal x as 0
/// (log -inf). The emulator computes the same (emulator/src/libdevice.cc).
LogicalResult lowerApproxLog(math::LogOp log, GpuLowering& g, OpBuilder& b) {
  if (!g.approxTranscendentals || !getElementTypeOrSelf(log.getType()).isF32())
    return lowerElementwise(log, g, b);
  Location loc = log.getLoc();
  auto contract = arith::FastMathFlagsAttr::get(b.getContext(), arith::FastMathFlags::contract);
  auto lg2 = b.getStringAttr("llvm.nvvm.lg2.approx.ftz.f");
  auto block = dyn_cast<VectorType>(log.getType());
  if (!block) {  // a scalar: a row's statistic
    Value x = LLVM::CallIntrinsicOp::create(b, loc, b.getF32Type(), lg2,
                                            ValueRange{g.map.lookup(log.getOperand())})
                  .getResult(0);
    Value ln2 = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.69314718f));
    g.map.map(log.getResult(), arith::MulFOp::create(b, loc, x, ln2, contract).getResult());
    return success();
  }
  Attribute layout = g.layoutOf(log.getResult());
  VectorType type = g.threadType(block, layout);
  FailureOr<Value> x = g.operandIn(b, loc, log.getOperand(), layout);
  if (failed(x)) return lowerElementwise(log, g, b);  // names the layout mismatch
  Value logs2 = perElement(b, loc, lg2.getValue(), *x);
  auto ln2 = arith::ConstantOp::create(
      b, loc, SplatElementsAttr::get(type, b.getF32FloatAttr(0.69314718f)));
  g.map.map(log.getResult(), arith::MulFOp::create(b, loc, logs2, ln2, contract).getResult());
  return success();
}

/// a / b of a kernel whose float inputs are all f16 or bf16, as a
/// hand-written kernel's __fdividef: a * rcp.approx.ftz(b), one MUFU.RCP and
/// one FMUL per element, where div.rn.f32 calls a subroutine of about 10
/// instructions and 8 registers, which a matmul epilogue dividing 64
/// accumulator registers (silu's logistic) cannot afford. rcp.approx's
/// relative error is at most 2^-23 (1 ulp), far below the inputs' precision;
/// `.ftz` flushes subnormals (1 / 2^127 reads 0). The emulator computes the
/// same (emulator/src/libdevice.cc).
LogicalResult lowerApproxDiv(arith::DivFOp div, GpuLowering& g, OpBuilder& b) {
  if (!g.approxTranscendentals || !getElementTypeOrSelf(div.getType()).isF32())
    return lowerElementwise(div, g, b);
  Location loc = div.getLoc();
  auto contract = arith::FastMathFlagsAttr::get(b.getContext(), arith::FastMathFlags::contract);
  auto rcp = b.getStringAttr("llvm.nvvm.rcp.approx.ftz.f");
  auto block = dyn_cast<VectorType>(div.getType());
  if (!block) {  // scalars
    Value r = LLVM::CallIntrinsicOp::create(b, loc, b.getF32Type(), rcp,
                                            ValueRange{g.map.lookup(div.getRhs())})
                  .getResult(0);
    g.map.map(div.getResult(),
              arith::MulFOp::create(b, loc, g.map.lookup(div.getLhs()), r, contract).getResult());
    return success();
  }
  Attribute layout = g.layoutOf(div.getResult());
  FailureOr<Value> lhs = g.operandIn(b, loc, div.getLhs(), layout);
  FailureOr<Value> rhs = g.operandIn(b, loc, div.getRhs(), layout);
  if (failed(lhs) || failed(rhs)) return lowerElementwise(div, g, b);  // names the mismatch
  Value r = perElement(b, loc, rcp.getValue(), *rhs);
  g.map.map(div.getResult(), arith::MulFOp::create(b, loc, *lhs, r, contract).getResult());
  return success();
}

/// bf16 -> f32 is a 16-bit shift of the bits. A per-thread vector of bf16
/// pairs is unpacked 32 bits at a time, each element with one instruction:
///
///   word = hi:lo (two bf16)   lo -> f32: word << 16   hi -> f32: word & 0xffff0000
///
/// where LLVM's generic fpext extracts the high half first (PRMT, then a
/// shift: two instructions). Exact, like any bf16 -> f32 conversion.
LogicalResult lowerExtF(arith::ExtFOp ext, GpuLowering& g, OpBuilder& b) {
  auto block = dyn_cast<VectorType>(ext.getType());
  if (!block || !block.getElementType().isF32() ||
      !getElementTypeOrSelf(ext.getIn().getType()).isBF16())
    return lowerElementwise(ext, g, b);
  Location loc = ext.getLoc();
  Attribute layout = g.layoutOf(ext.getResult());
  VectorType type = g.threadType(block, layout);
  const int64_t n = type.getNumElements();
  FailureOr<Value> in = g.operandIn(b, loc, ext.getIn(), layout);
  if (failed(in) || n % 2 != 0) return lowerElementwise(ext, g, b);
  Type i32 = b.getI32Type();
  auto wordsType = VectorType::get({n / 2}, i32);
  Value words = vector::BitCastOp::create(b, loc, wordsType, *in);
  auto splat = [&](uint32_t v) {
    return arith::ConstantOp::create(
        b, loc, SplatElementsAttr::get(wordsType, b.getI32IntegerAttr(static_cast<int32_t>(v))));
  };
  auto asF32 = [&](Value w) {
    return vector::BitCastOp::create(b, loc, VectorType::get({n / 2}, b.getF32Type()), w);
  };
  Value lo = asF32(arith::ShLIOp::create(b, loc, words, splat(16)));
  Value hi = asF32(arith::AndIOp::create(b, loc, words, splat(0xffff0000u)));
  SmallVector<int64_t> interleave;
  for (int64_t k = 0; k < n / 2; ++k) interleave.append({k, n / 2 + k});
  g.map.map(ext.getResult(), vector::ShuffleOp::create(b, loc, lo, hi, interleave).getResult());
  return success();
}

LogicalResult lowerConstant(arith::ConstantOp cst, GpuLowering& g, OpBuilder& b) {
  auto full = dyn_cast<VectorType>(cst.getType());
  if (!full) {
    g.map.map(cst.getResult(), b.clone(*cst)->getResult(0));
    return success();
  }
  auto splat = dyn_cast<SplatElementsAttr>(cst.getValue());
  if (!splat) return cst.emitOpError("no GPU lowering rule for non-splat block constants");
  VectorType type = g.threadType(full, g.layoutOf(cst.getResult()));
  g.map.map(cst.getResult(),
            arith::ConstantOp::create(b, cst.getLoc(), splat.resizeSplat(type)).getResult());
  return success();
}

/// A scalar splat in the result's layout, or a numpy broadcast of a
/// replicated value within each thread's copy. A broadcast from a replicated
/// value to a strided block is a pallas.convert_layout, and broadcasts of
/// strided blocks are folded into their loads by pallas-sink-broadcasts.
LogicalResult lowerBroadcast(vector::BroadcastOp bc, GpuLowering& g, OpBuilder& b) {
  Location loc = bc.getLoc();
  VectorType to = bc.getResultVectorType();
  Attribute layout = g.layoutOf(bc.getResult());
  auto from = dyn_cast<VectorType>(bc.getSourceType());
  if (!from) {
    g.map.map(bc.getResult(), vector::BroadcastOp::create(b, loc, g.threadType(to, layout),
                                                          g.map.lookup(bc.getSource()))
                                  .getResult());
    return success();
  }
  if (g.isReplicated(bc.getSource()) && isa<ReplicatedLayoutAttr>(layout)) {
    Value shaped = vector::ShapeCastOp::create(b, loc, from, g.map.lookup(bc.getSource()));
    Value wide = vector::BroadcastOp::create(b, loc, to, shaped);
    g.map.map(bc.getResult(),
              vector::ShapeCastOp::create(b, loc, GpuLowering::flat(to), wide).getResult());
    return success();
  }
  // One value per accumulator row (wgmmaRowKeepdims) over the accumulator's
  // columns: each register takes the row register of its row, which the
  // same thread holds (PallasLayouts.td; rowRegisterOf's worked example).
  auto fromTiled = dyn_cast_or_null<TiledLayoutAttr>(g.layoutOf(bc.getSource()));
  auto toTiled = dyn_cast_or_null<TiledLayoutAttr>(layout);
  if (fromTiled && toTiled && from.getRank() == 2 && to.getRank() == 2 && from.getShape()[1] == 1 &&
      from.getShape()[0] == to.getShape()[0]) {
    if (std::optional<SmallVector<int64_t>> rowRegister =
            rowRegisterOf(toTiled, to.getShape(), fromTiled, from.getShape())) {
      Value rows = g.map.lookup(bc.getSource());
      Value frag = arith::ConstantOp::create(b, loc, b.getZeroAttr(g.threadType(to, toTiled)));
      for (auto [r, j] : llvm::enumerate(*rowRegister))
        frag = vector::InsertOp::create(b, loc, vector::ExtractOp::create(b, loc, rows, j), frag,
                                        static_cast<int64_t>(r));
      g.map.map(bc.getResult(), frag);
      return success();
    }
  }
  return bc.emitOpError("no GPU lowering rule for broadcasting a block in layout ")
         << g.layoutOf(bc.getSource()) << " to " << layout
         << "; pallas-sink-broadcasts folds broadcasts of loads, iotas and elementwise ops over "
            "them, and pallas-assign-layouts makes broadcasts of replicated values conversions";
}

/// Both layouts are defined on the flattened block, so a reshape that keeps
/// the element count moves no data (the strided `vec` divides every last dim).
LogicalResult lowerShapeCast(vector::ShapeCastOp cast, GpuLowering& g, OpBuilder&) {
  g.map.map(cast.getResult(), g.map.lookup(cast.getSource()));
  return success();
}

}  // namespace

void populateElementwiseRules(RuleRegistry& rules) {
  rules.add(arith::ConstantOp::getOperationName(), ruleFor(lowerConstant));
  rules.add(math::ExpOp::getOperationName(), ruleFor(lowerApproxExp));
  rules.add(math::Exp2Op::getOperationName(), ruleFor(lowerApproxExp2));
  rules.add(math::LogOp::getOperationName(), ruleFor(lowerApproxLog));
  rules.add(arith::DivFOp::getOperationName(), ruleFor(lowerApproxDiv));
  rules.add(arith::ExtFOp::getOperationName(), ruleFor(lowerExtF));
  rules.add(vector::BroadcastOp::getOperationName(), ruleFor(lowerBroadcast));
  rules.add(vector::ShapeCastOp::getOperationName(), ruleFor(lowerShapeCast));
  rules.addFamily(
      "elementwise arith/math ops",
      [](Operation* op) {
        return op->hasTrait<OpTrait::Elementwise>() && op->getNumRegions() == 0 &&
               llvm::any_of(op->getResultTypes(), llvm::IsaPred<VectorType>);
      },
      lowerElementwise);
}

}  // namespace mlir::pallas::gpu_lowering
