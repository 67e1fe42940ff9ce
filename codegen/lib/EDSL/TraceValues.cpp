//===- TraceValues.cpp - EDSL operations on traced values -----------------===//
//
// Arithmetic, math, reductions, select and reshapes, program ids, loops and
// conditionals, semaphores and checks: each appends MLIR ops at the current
// trace's builder, located at the spec line that called it (TraceState.h).
//
//===----------------------------------------------------------------------===//

#include "TraceState.h"

#include <limits>

namespace pallas::edsl {

using namespace trace_state;

//===----------------------------------------------------------------------===//
// Value operations
//===----------------------------------------------------------------------===//

DType Value::dtype() const { return dtype_of(unwrap(*this).getType()); }
std::vector<int64_t> Value::shape() const { return shape_of(unwrap(*this)); }

Value Value::cast(DType to, std::source_location where) const {
  Located here(where);
  mlir::Value v = unwrap(*this);
  DType from = dtype_of(v.getType());
  if (from == to) return *this;
  auto shape = shape_of(v);
  mlir::Type target = with_shape(to_mlir_type(to, *trace().context), shape);
  auto& bd = b();
  auto l = loc();
  auto width = [](DType d) { return d == DType::f32 ? 32 : 16; };
  if (is_float(from) && is_float(to)) {
    if (width(from) == width(to)) {  // f16 <-> bf16 goes through f32
      mlir::Value wide = mlir::arith::ExtFOp::create(bd, l, with_shape(bd.getF32Type(), shape), v);
      return wrap(mlir::arith::TruncFOp::create(bd, l, target, wide));
    }
    if (width(from) < width(to)) return wrap(mlir::arith::ExtFOp::create(bd, l, target, v));
    return wrap(mlir::arith::TruncFOp::create(bd, l, target, v));
  }
  if (from == DType::i1 && to == DType::index)  // 0 or 1 (a signed cast would give -1)
    return wrap(mlir::arith::IndexCastUIOp::create(bd, l, target, v));
  if (from == DType::index || to == DType::index) {
    if (is_float(to)) {
      mlir::Value i =
          mlir::arith::IndexCastOp::create(bd, l, with_shape(bd.getI32Type(), shape), v);
      return wrap(mlir::arith::SIToFPOp::create(bd, l, target, i));
    }
    if (is_float(from)) {
      mlir::Value i = mlir::arith::FPToSIOp::create(bd, l, with_shape(bd.getI32Type(), shape), v);
      return wrap(mlir::arith::IndexCastOp::create(bd, l, target, i));
    }
    return wrap(mlir::arith::IndexCastOp::create(bd, l, target, v));
  }
  if (from == DType::i1) {
    if (is_float(to)) return wrap(mlir::arith::UIToFPOp::create(bd, l, target, v));
    return wrap(mlir::arith::ExtUIOp::create(bd, l, target, v));
  }
  if (to == DType::i1) fail("cast to i1 is not supported; compare instead");
  if (is_float(to)) return wrap(mlir::arith::SIToFPOp::create(bd, l, target, v));
  return wrap(mlir::arith::FPToSIOp::create(bd, l, target, v));
}

Scalar::operator Value() const {
  Trace& t = trace();
  if (index_ < 0 || index_ >= static_cast<int>(t.args.size())) fail("use of an undeclared scalar");
  return wrap(t.args[index_]);
}

Value constant(double value, DType dtype, std::source_location where) {
  Located here(where);
  auto& bd = b();
  mlir::Type type = to_mlir_type(dtype, *trace().context);
  if (is_float(dtype))
    return wrap(mlir::arith::ConstantOp::create(bd, loc(), type, bd.getFloatAttr(type, value)));
  if (value != static_cast<double>(static_cast<int64_t>(value)))
    fail("literal " + std::to_string(value) + " is not an integer but the other operand is " +
         name(dtype));
  return wrap(mlir::arith::ConstantOp::create(
      bd, loc(), type, bd.getIntegerAttr(type, static_cast<int64_t>(value))));
}

Value index(int64_t value, std::source_location where) {
  return constant(static_cast<double>(value), DType::index, where);
}

using FP = mlir::arith::CmpFPredicate;
using IP = mlir::arith::CmpIPredicate;

Value binary(BinaryOp op, const Value& a, const Value& c, std::source_location where) {
  Located here(where);
  switch (op) {
    case BinaryOp::kAdd:
      return arith_binary<mlir::arith::AddFOp, mlir::arith::AddIOp>("add", a, c);
    case BinaryOp::kSub:
      return arith_binary<mlir::arith::SubFOp, mlir::arith::SubIOp>("sub", a, c);
    case BinaryOp::kMul:
      return arith_binary<mlir::arith::MulFOp, mlir::arith::MulIOp>("mul", a, c);
    case BinaryOp::kDiv:
      return arith_binary<mlir::arith::DivFOp, mlir::arith::DivSIOp>("div", a, c);
    case BinaryOp::kLt:
      return compare("lt", FP::OLT, IP::slt, a, c);
    case BinaryOp::kLe:
      return compare("le", FP::OLE, IP::sle, a, c);
    case BinaryOp::kGt:
      return compare("gt", FP::OGT, IP::sgt, a, c);
    case BinaryOp::kGe:
      return compare("ge", FP::OGE, IP::sge, a, c);
    case BinaryOp::kEq:
      return compare("eq", FP::OEQ, IP::eq, a, c);
    case BinaryOp::kNe:
      return compare("ne", FP::UNE, IP::ne, a, c);
  }
  fail("internal error: unknown binary operator");
}

Value operator-(const Term& t) {
  Located at(t.where);
  mlir::Value v = unwrap(t.value);
  if (is_float_value(v)) return wrap(mlir::arith::NegFOp::create(b(), loc(), v));
  return constant(0, t.value.dtype()) - t.value;
}

Value exp(const Value& x, std::source_location where) {
  return unary_f32<mlir::math::ExpOp>("exp", x, where);
}
Value exp2(const Value& x, std::source_location where) {
  return unary_f32<mlir::math::Exp2Op>("exp2", x, where);
}
Value log(const Value& x, std::source_location where) {
  return unary_f32<mlir::math::LogOp>("log", x, where);
}
Value tanh(const Value& x, std::source_location where) {
  return unary_f32<mlir::math::TanhOp>("tanh", x, where);
}
Value rsqrt(const Value& x, std::source_location where) {
  return unary_f32<mlir::math::RsqrtOp>("rsqrt", x, where);
}
Value sqrt(const Value& x, std::source_location where) {
  return unary_f32<mlir::math::SqrtOp>("sqrt", x, where);
}
Value erf(const Value& x, std::source_location where) {
  return unary_f32<mlir::math::ErfOp>("erf", x, where);
}
Value logistic(const Value& x, std::source_location where) {
  Located here(where);
  require_f32("logistic", x);
  return 1.0 / (1.0 + exp(-x));
}

Value abs(const Value& x, std::source_location where) {
  Located here(where);
  mlir::Value v = unwrap(x);
  if (is_float_value(v)) return wrap(mlir::math::AbsFOp::create(b(), loc(), v));
  if (dtype_of(v.getType()) == DType::i1) fail("abs is not defined on i1 values");
  return wrap(mlir::math::AbsIOp::create(b(), loc(), v));
}

Value maximum(const Value& a, const Value& c, std::source_location where) {
  Located here(where);
  return arith_binary<mlir::arith::MaximumFOp, mlir::arith::MaxSIOp>("maximum", a, c);
}
Value minimum(const Value& a, const Value& c, std::source_location where) {
  Located here(where);
  return arith_binary<mlir::arith::MinimumFOp, mlir::arith::MinSIOp>("minimum", a, c);
}

namespace {

/// vector.multi_reduction of `x` over `axes` (all when empty) with the
/// neutral element of `kind` as its accumulator.
Value reduce(const char* op, mlir::vector::CombiningKind kind, const Value& x,
             std::optional<int64_t> axis, bool keepdims) {
  mlir::Value v = unwrap(x);
  auto type = llvm::dyn_cast<VectorType>(v.getType());
  if (!type) fail(std::string(op) + " of a scalar; reductions take blocks");
  DType d = dtype_of(v.getType());
  if (d == DType::i1 || d == DType::index)
    fail(std::string(op) + " of " + name(d) + " values is not supported");
  const int64_t rank = type.getRank();
  if (axis && (*axis < 0 || *axis >= rank))
    fail(std::string(op) + " over axis " + std::to_string(*axis) + " of a rank-" +
         std::to_string(rank) + " block");
  llvm::SmallVector<bool> reduced(rank, !axis.has_value());
  if (axis) reduced[*axis] = true;
  llvm::SmallVector<int64_t> kept;
  for (int64_t i = 0; i < rank; ++i)
    if (!reduced[i]) kept.push_back(type.getShape()[i]);
  mlir::Type et = type.getElementType();
  auto& bd = b();
  bool isFloat = is_float(d);
  mlir::TypedAttr neutral;
  switch (kind) {
    case mlir::vector::CombiningKind::ADD:
      neutral = bd.getZeroAttr(et);
      break;
    case mlir::vector::CombiningKind::MAXIMUMF:
      neutral = bd.getFloatAttr(et, -std::numeric_limits<double>::infinity());
      break;
    case mlir::vector::CombiningKind::MINIMUMF:
      neutral = bd.getFloatAttr(et, std::numeric_limits<double>::infinity());
      break;
    case mlir::vector::CombiningKind::MAXSI:
      neutral = bd.getIntegerAttr(et, std::numeric_limits<int32_t>::min());
      break;
    default:
      neutral = bd.getIntegerAttr(et, std::numeric_limits<int32_t>::max());
      break;
  }
  (void)isFloat;
  mlir::Type resultType = kept.empty() ? et : mlir::Type(VectorType::get(kept, et));
  mlir::Value acc = mlir::arith::ConstantOp::create(bd, loc(), neutral);
  if (!kept.empty()) acc = mlir::vector::BroadcastOp::create(bd, loc(), resultType, acc);
  mlir::Value r = mlir::vector::MultiDimReductionOp::create(bd, loc(), v, acc, reduced, kind);
  if (keepdims) {
    if (!axis) fail(std::string(op) + " of every element with keepdims: use the scalar result");
    llvm::SmallVector<int64_t> shape(type.getShape());
    shape[*axis] = 1;
    auto keptType = VectorType::get(shape, et);
    r = kept.empty() ? mlir::vector::BroadcastOp::create(bd, loc(), keptType, r).getResult()
                     : mlir::vector::ShapeCastOp::create(bd, loc(), keptType, r).getResult();
  }
  return wrap(r);
}

mlir::vector::CombiningKind kind_for(const Value& x, bool isMax) {
  bool f = is_float(x.dtype());
  if (isMax) return f ? mlir::vector::CombiningKind::MAXIMUMF : mlir::vector::CombiningKind::MAXSI;
  return f ? mlir::vector::CombiningKind::MINIMUMF : mlir::vector::CombiningKind::MINSI;
}

}  // namespace

Value sum(const Value& x, std::source_location where) {
  Located here(where);
  return reduce("sum", mlir::vector::CombiningKind::ADD, x, std::nullopt, false);
}
Value max(const Value& x, std::source_location where) {
  Located here(where);
  return reduce("max", kind_for(x, true), x, std::nullopt, false);
}
Value min(const Value& x, std::source_location where) {
  Located here(where);
  return reduce("min", kind_for(x, false), x, std::nullopt, false);
}
Value sum(const Value& x, int64_t axis, bool keepdims, std::source_location where) {
  Located here(where);
  return reduce("sum", mlir::vector::CombiningKind::ADD, x, axis, keepdims);
}
Value max(const Value& x, int64_t axis, bool keepdims, std::source_location where) {
  Located here(where);
  return reduce("max", kind_for(x, true), x, axis, keepdims);
}
Value min(const Value& x, int64_t axis, bool keepdims, std::source_location where) {
  Located here(where);
  return reduce("min", kind_for(x, false), x, axis, keepdims);
}

Value select(const Value& cond, const Value& a, const Value& c, std::source_location where) {
  Located here(where);
  auto [x, y] = unify("select", a, c);
  mlir::Value p = unwrap(cond);
  if (dtype_of(p.getType()) != DType::i1)
    fail(std::string("select condition must be i1 (a comparison), got ") +
         name(dtype_of(p.getType())));
  auto shape = broadcast_shapes(shape_of(p), shape_of(x));
  if (!shape)
    fail("shape mismatch in select: condition " + shape_str(shape_of(p)) + " and values " +
         shape_str(shape_of(x)));
  x = broadcast_value(x, *shape);
  y = broadcast_value(y, *shape);
  p = broadcast_value(p, *shape);
  return wrap(mlir::arith::SelectOp::create(b(), loc(), p, x, y));
}

Value broadcast_to(const Value& x, std::vector<int64_t> shape, std::source_location where) {
  Located here(where);
  mlir::Value v = unwrap(x);
  auto joined = broadcast_shapes(shape_of(v), shape);
  if (!joined || *joined != shape)
    fail("cannot broadcast " + shape_str(shape_of(v)) + " to " + shape_str(shape));
  return wrap(broadcast_value(v, shape));
}

Value reshape(const Value& x, std::vector<int64_t> shape, std::source_location where) {
  Located here(where);
  mlir::Value v = unwrap(x);
  auto type = llvm::dyn_cast<VectorType>(v.getType());
  if (!type) fail("reshape of a scalar");
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d <= 0)
      fail("reshape " + shape_str(shape_of(v)) + " to " + shape_str(shape) +
           ": extents must be positive");
    count *= d;
  }
  if (shape.empty() || count != type.getNumElements())
    fail("reshape " + shape_str(shape_of(v)) + " to " + shape_str(shape) + ": " +
         std::to_string(type.getNumElements()) + " elements into " + std::to_string(count));
  if (type.getShape() == llvm::ArrayRef<int64_t>(shape)) return x;
  auto to = VectorType::get(shape, type.getElementType());
  return wrap(mlir::vector::ShapeCastOp::create(b(), loc(), to, v).getResult());
}

Value transpose(const Value& x, std::source_location where) {
  Located here(where);
  mlir::Value v = unwrap(x);
  auto type = llvm::dyn_cast<VectorType>(v.getType());
  if (!type || type.getRank() != 2)
    fail("transpose of a " + (type ? shape_str(shape_of(v)) : std::string("scalar")) +
         " value; it transposes 2-D blocks");
  return wrap(
      mlir::vector::TransposeOp::create(b(), loc(), v, llvm::ArrayRef<int64_t>{1, 0}).getResult());
}

namespace {
/// acc + a @ b (acc may be null), after the checks a spec writer needs named.
Value trace_dot(const Value& lhs, const Value& rhs, const Value* acc, DotOptions options) {
  mlir::Value va = unwrap(lhs), vb = unwrap(rhs);
  auto ta = llvm::dyn_cast<VectorType>(va.getType());
  auto tb = llvm::dyn_cast<VectorType>(vb.getType());
  if (!ta || !tb || ta.getRank() != 2 || tb.getRank() != 2)
    fail("dot of a " + shape_str(shape_of(va)) + " and a " + shape_str(shape_of(vb)) +
         " value; it multiplies 2-D blocks");
  DType da = dtype_of(ta.getElementType()), db = dtype_of(tb.getElementType());
  if (da != db || (da != f16 && da != bf16))
    fail(std::string("dot of ") + name(da) + " and " + name(db) +
         " blocks; its operands are both f16 or both bf16 (cast first), summed in f32");
  const int64_t m = ta.getShape()[options.transpose_a ? 1 : 0];
  const int64_t k = ta.getShape()[options.transpose_a ? 0 : 1];
  const int64_t bk = tb.getShape()[options.transpose_b ? 1 : 0];
  const int64_t n = tb.getShape()[options.transpose_b ? 0 : 1];
  if (bk != k)
    fail("dot of " + shape_str(shape_of(va)) + " and " + shape_str(shape_of(vb)) +
         (options.transpose_a ? " (a transposed)" : "") +
         (options.transpose_b ? " (b transposed)" : "") + ": a has " + std::to_string(k) +
         (options.transpose_a ? " rows" : " columns") + " but b has " + std::to_string(bk) +
         (options.transpose_b ? " columns" : " rows"));
  auto result = VectorType::get({m, n}, b().getF32Type());
  mlir::Value vacc;
  if (acc) {
    vacc = unwrap(*acc);
    if (vacc.getType() != result)
      fail("dot accumulator of shape " + shape_str(shape_of(vacc)) + " and dtype " +
           name(dtype_of(vacc.getType())) + "; the product is f32 " +
           shape_str(result.getShape().vec()));
  }
  auto dot = mlir::pallas::DotOp::create(b(), loc(), result, va, vb, vacc, options.transpose_a,
                                         options.transpose_b);
  return wrap(dot.getResult());
}
}  // namespace

Value dot(const Value& lhs, const Value& rhs, DotOptions options, std::source_location where) {
  Located here(where);
  return trace_dot(lhs, rhs, nullptr, options);
}

Value dot(const Value& lhs, const Value& rhs, const Value& acc, DotOptions options,
          std::source_location where) {
  Located here(where);
  return trace_dot(lhs, rhs, &acc, options);
}

Value iota(std::vector<int64_t> shape, int64_t dimension, DType dtype, std::source_location where) {
  Located here(where);
  if (shape.empty()) fail("iota needs a non-empty shape");
  if (dimension < 0 || dimension >= static_cast<int64_t>(shape.size()))
    fail("iota dimension " + std::to_string(dimension) + " is out of range for shape " +
         shape_str(shape));
  auto type = VectorType::get(shape, b().getI32Type());
  Value v = wrap(mlir::pallas::IotaOp::create(b(), loc(), type, dimension));
  return v.cast(dtype);
}

Value program_id(int axis, std::source_location where) {
  Located here(where);
  Trace& t = trace();
  if (axis < 0 || axis >= t.grid_rank)
    fail("program_id(" + std::to_string(axis) + ") but the grid has " +
         std::to_string(t.grid_rank) + " axes");
  if (mlir::Value iv = t.sequential_ids[axis]) return wrap(iv);
  return wrap(mlir::pallas::ProgramIdOp::create(b(), loc(), b().getIndexType(),
                                                b().getI32IntegerAttr(t.launched_axis[axis])));
}

Value num_programs(int axis, std::source_location where) {
  Located here(where);
  Trace& t = trace();
  if (axis < 0 || axis >= t.grid_rank)
    fail("num_programs(" + std::to_string(axis) + ") but the grid has " +
         std::to_string(t.grid_rank) + " axes");
  if (mlir::Value extent = t.sequential_extents[axis]) return wrap(extent);
  return wrap(mlir::pallas::NumProgramsOp::create(b(), loc(), b().getIndexType(),
                                                  b().getI32IntegerAttr(t.launched_axis[axis])));
}

Value cluster_rank(std::source_location where) {
  Located here(where);
  return wrap(mlir::pallas::ClusterRankOp::create(b(), loc(), b().getIndexType()));
}

Value cluster_size(std::source_location where) {
  Located here(where);
  return wrap(mlir::pallas::ClusterSizeOp::create(b(), loc(), b().getIndexType()));
}

void cluster_barrier(std::source_location where) {
  Located here(where);
  mlir::pallas::ClusterBarrierOp::create(b(), loc());
}

TileRun tile_run(std::source_location where) {
  Located here(where);
  Trace& t = trace();
  if (!t.spec->persistence() || !t.spec->persistence()->stream_k)
    fail("tile_run() needs a stream-K persistent grid (spec.persistent with stream_k)");
  if (!t.tile_run_last_step) fail("tile_run() outside the body");
  return TileRun{wrap(t.tile_run_last_step), wrap(t.tile_run_parts), wrap(t.tile_run_part),
                 wrap(t.tile_run_split)};
}

mlir::Value trace_state::materialize(const DimExpr& e) {
  Trace& t = trace();
  auto& bd = b();
  switch (e.kind()) {
    case DimExpr::Kind::kConst:
      return mlir::arith::ConstantIndexOp::create(bd, loc(), e.value());
    case DimExpr::Kind::kDim: {
      const auto& ops = t.spec->operands();
      for (size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].role != Role::kInput && ops[i].role != Role::kOutput) continue;
        for (size_t k = 0; k < ops[i].shape.size(); ++k)
          if (ops[i].shape[k].kind() == DimExpr::Kind::kDim &&
              ops[i].shape[k].dim_index() == e.dim_index())
            return mlir::memref::DimOp::create(bd, loc(), t.args[i], static_cast<int64_t>(k));
      }
      fail("dim '" + e.dim_name() + "' is not the dim of any operand");
    }
    case DimExpr::Kind::kDeviceSharedBytes:
      fail("a kernel reads device_shared_bytes(); it may only choose a variant (spec.variant)");
    case DimExpr::Kind::kPrograms:  // the launched programs: CUDA's x
      if (!t.spec->persistence())
        fail("persistent_programs() in a grid that is not persistent (spec.persistent)");
      return mlir::pallas::NumProgramsOp::create(bd, loc(), bd.getIndexType(),
                                                 bd.getI32IntegerAttr(0));
    default:
      break;
  }
  mlir::Value l = materialize(e.lhs()), r = materialize(e.rhs());
  switch (e.kind()) {
    case DimExpr::Kind::kAdd:
      return mlir::arith::AddIOp::create(bd, loc(), l, r);
    case DimExpr::Kind::kSub:
      return mlir::arith::SubIOp::create(bd, loc(), l, r);
    case DimExpr::Kind::kMul:
      return mlir::arith::MulIOp::create(bd, loc(), l, r);
    case DimExpr::Kind::kCdiv:
      return mlir::arith::CeilDivSIOp::create(bd, loc(), l, r);
    case DimExpr::Kind::kMin:
      return mlir::arith::MinSIOp::create(bd, loc(), l, r);
    case DimExpr::Kind::kLe:
      return mlir::arith::SelectOp::create(
          bd, loc(), mlir::arith::CmpIOp::create(bd, loc(), mlir::arith::CmpIPredicate::sle, l, r),
          mlir::arith::ConstantIndexOp::create(bd, loc(), 1),
          mlir::arith::ConstantIndexOp::create(bd, loc(), 0));
    default:
      return mlir::arith::MaxSIOp::create(bd, loc(), l, r);
  }
}

namespace {
/// The program's linear index over the parallel grid axes, row-major.
mlir::Value linear_program_id() {
  Trace& t = trace();
  mlir::Value linear = unwrap(index(0));
  for (int axis = 0; axis < t.grid_rank; ++axis) {
    // A persistent grid's parallel axes are the tile's ids, loop values too.
    if (t.sequential_ids[axis] &&
        t.spec->semantics(static_cast<size_t>(axis)) == Semantics::kArbitrary)
      continue;
    linear = mlir::arith::MulIOp::create(b(), loc(), linear, unwrap(num_programs(axis)));
    linear = mlir::arith::AddIOp::create(b(), loc(), linear, unwrap(program_id(axis)));
  }
  return linear;
}
}  // namespace

std::vector<Value> fori(const Value& lo, const Value& hi, std::vector<Value> carry,
                        const std::function<std::vector<Value>(Value, std::vector<Value>)>& body,
                        std::source_location where) {
  mlir::Value l = unwrap(lo), h = unwrap(hi);
  if (dtype_of(l.getType()) != DType::index || dtype_of(h.getType()) != DType::index)
    fail("fori bounds must be index values (use index(n) or program_id)");
  llvm::SmallVector<mlir::Value> init;
  for (const Value& v : carry) init.push_back(unwrap(v));
  auto& bd = b();
  // The body's ops carry their own lines: only the loop is at `where`.
  mlir::Value one = mlir::arith::ConstantIndexOp::create(bd, source_loc(where), 1);
  auto loop = mlir::scf::ForOp::create(bd, source_loc(where), l, h, one, init);
  mlir::Block* block = loop.getBody();
  if (!block->empty()) block->back().erase();  // the implicit yield
  OpBuilder::InsertionGuard guard(bd);
  bd.setInsertionPointToEnd(block);
  std::vector<Value> args;
  for (mlir::Value a : loop.getRegionIterArgs()) args.push_back(wrap(a));
  std::vector<Value> next = body(wrap(loop.getInductionVar()), args);
  if (next.size() != init.size())
    fail("fori body returns " + std::to_string(next.size()) + " values but carries " +
         std::to_string(init.size()));
  llvm::SmallVector<mlir::Value> yielded;
  for (size_t i = 0; i < next.size(); ++i) {
    mlir::Value v = unwrap(next[i]);
    if (v.getType() != init[i].getType()) {
      std::string got, want;
      llvm::raw_string_ostream(got) << v.getType();
      llvm::raw_string_ostream(want) << init[i].getType();
      fail("fori carry " + std::to_string(i) + " changes type from " + want + " to " + got);
    }
    yielded.push_back(v);
  }
  mlir::scf::YieldOp::create(bd, source_loc(where), yielded);
  std::vector<Value> results;
  for (mlir::Value r : loop.getResults()) results.push_back(wrap(r));
  return results;
}

std::vector<Value> while_loop(const std::function<Value(std::vector<Value>)>& cond,
                              const std::function<std::vector<Value>(std::vector<Value>)>& body,
                              std::vector<Value> carry, std::source_location where) {
  llvm::SmallVector<mlir::Value> init;
  llvm::SmallVector<mlir::Type> types;
  llvm::SmallVector<mlir::Location> locs;
  for (const Value& v : carry) {
    init.push_back(unwrap(v));
    types.push_back(init.back().getType());
    locs.push_back(source_loc(where));
  }
  auto& bd = b();
  auto loop = mlir::scf::WhileOp::create(bd, source_loc(where), types, init);
  OpBuilder::InsertionGuard guard(bd);
  auto args_of = [](mlir::Block* block) {
    std::vector<Value> args;
    for (mlir::Value a : block->getArguments()) args.push_back(wrap(a));
    return args;
  };
  mlir::Block* before = bd.createBlock(&loop.getBefore(), {}, types, locs);
  mlir::Value c = unwrap(cond(args_of(before)));
  if (!c.getType().isInteger(1))
    fail("while_loop condition must be a scalar i1 (a comparison of scalars)");
  mlir::scf::ConditionOp::create(bd, source_loc(where), c, before->getArguments());
  mlir::Block* after = bd.createBlock(&loop.getAfter(), {}, types, locs);
  std::vector<Value> next = body(args_of(after));
  if (next.size() != init.size())
    fail("while_loop body returns " + std::to_string(next.size()) + " values but carries " +
         std::to_string(init.size()));
  llvm::SmallVector<mlir::Value> yielded;
  for (size_t i = 0; i < next.size(); ++i) {
    yielded.push_back(unwrap(next[i]));
    if (yielded.back().getType() != types[i])
      fail("while_loop carry " + std::to_string(i) + " changes type");
  }
  mlir::scf::YieldOp::create(bd, source_loc(where), yielded);
  std::vector<Value> results;
  for (mlir::Value r : loop.getResults()) results.push_back(wrap(r));
  return results;
}

void when(const Value& cond, const std::function<void()>& body, std::source_location where) {
  mlir::Value c = unwrap(cond);
  if (!c.getType().isInteger(1))
    fail("when() needs a scalar i1 condition (a comparison of scalars)");
  auto& bd = b();
  // The body's ops carry their own lines: only the scf.if is at `where`.
  auto branch = mlir::scf::IfOp::create(bd, source_loc(where), c, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(bd);
  bd.setInsertionPoint(branch.thenBlock()->getTerminator());
  body();
}

namespace {
/// The i32 scalar operand of a semaphore operation.
mlir::Value semaphore_value(const Semaphores& s, const char* what, const Value& value) {
  mlir::Value v = unwrap(value);
  if (dtype_of(v.getType()) != DType::i32 || llvm::isa<VectorType>(v.getType()))
    fail("semaphore " + std::string(what) + " on '" + trace().spec->operands()[s.operand()].name +
         "' needs an i32 scalar value");
  return v;
}

/// The position of counter `index` of program `program` (the current one when
/// null) in the semaphore buffer: programs own consecutive slices of `count`
/// counters; with global scope the index itself.
mlir::Value semaphore_slot(const Semaphores& s, const Idx& index, mlir::Value program = {}) {
  mlir::Value i = unwrap(index.value());
  if (s.scope() == SemaphoreScope::kGlobal) return i;
  if (!program) program = linear_program_id();
  const OperandDecl& d = trace().spec->operands()[s.operand()];
  mlir::Value base = mlir::arith::MulIOp::create(b(), loc(), program, materialize(d.shape[0]));
  return mlir::arith::AddIOp::create(b(), loc(), base, i);
}
}  // namespace

void Semaphores::signal(const Idx& index, const Value& inc, std::source_location where) const {
  Located here(where);
  mlir::Value v = semaphore_value(*this, "signal", inc);
  mlir::Value slot = semaphore_slot(*this, index);
  mlir::pallas::SemaphoreAddOp::create(b(), loc(), b().getI32Type(), trace().args.at(operand_),
                                       slot, v);
}

void Semaphores::signal(const Idx& index, std::source_location where) const {
  signal(index, constant(1, DType::i32, where), where);
}

void Semaphores::signal_program(const Value& program, const Idx& index, const Value& inc,
                                std::source_location where) const {
  Located here(where);
  if (scope_ != SemaphoreScope::kProgram)
    fail("signal_program on '" + trace().spec->operands()[operand_].name +
         "', whose scope is global (use signal)");
  mlir::Value v = semaphore_value(*this, "signal", inc);
  mlir::Value slot = semaphore_slot(*this, index, unwrap(Idx(program).value()));
  mlir::pallas::SemaphoreAddOp::create(b(), loc(), b().getI32Type(), trace().args.at(operand_),
                                       slot, v);
}

void Semaphores::wait(const Idx& index, const Value& value, std::source_location where) const {
  Located here(where);
  mlir::Value v = semaphore_value(*this, "wait", value);
  mlir::Value slot = semaphore_slot(*this, index);
  mlir::pallas::SemaphoreWaitOp::create(b(), loc(), trace().args.at(operand_), slot, v);
}

void Semaphores::wait(const Idx& index, std::source_location where) const {
  wait(index, constant(1, DType::i32, where), where);
}

Value Semaphores::add(const Idx& index, const Value& value, std::source_location where) const {
  Located here(where);
  mlir::Value v = semaphore_value(*this, "add", value);
  mlir::Value slot = semaphore_slot(*this, index);
  return wrap(mlir::pallas::SemaphoreAddOp::create(b(), loc(), b().getI32Type(),
                                                   trace().args.at(operand_), slot, v));
}

Value Semaphores::read(const Idx& index, std::source_location where) const {
  Located here(where);
  mlir::Value slot = semaphore_slot(*this, index);
  return wrap(mlir::pallas::SemaphoreReadOp::create(b(), loc(), b().getI32Type(),
                                                    trace().args.at(operand_), slot));
}

void Check::fail_if(const Value& failed, const std::vector<Value>& values,
                    std::source_location where) const {
  Located here(where);
  const std::string& message = trace().spec->check_messages().at(static_cast<size_t>(check_));
  mlir::Value f = unwrap(failed);
  if (!f.getType().isInteger(1))
    fail("check \"" + message + "\": fail_if needs a scalar i1 condition");
  if (values.size() > 3)
    fail("check \"" + message + "\": fail_if records at most 3 values, not " +
         std::to_string(values.size()));
  for (size_t k = values.size(); k < 3; ++k)
    if (message.find("{" + std::to_string(k) + "}") != std::string::npos)
      fail("check \"" + message + "\" names {" + std::to_string(k) + "} but fail_if records " +
           std::to_string(values.size()) + " values");
  // Each value as an i64 split into two i32 halves (low, high): the record is int32.
  auto& bd = b();
  mlir::Type i32 = bd.getI32Type(), i64 = bd.getI64Type();
  llvm::SmallVector<mlir::Value> halves;
  for (size_t k = 0; k < values.size(); ++k) {
    mlir::Value v = unwrap(values[k]);
    mlir::Value wide;
    if (v.getType().isIndex())
      wide = mlir::arith::IndexCastOp::create(bd, loc(), i64, v);
    else if (v.getType().isInteger(32))
      wide = mlir::arith::ExtSIOp::create(bd, loc(), i64, v);
    else
      fail("check \"" + message + "\": value " + std::to_string(k) +
           " must be a scalar i32 or index");
    mlir::Value shift = mlir::arith::ConstantIntOp::create(bd, loc(), i64, 32);
    halves.push_back(mlir::arith::TruncIOp::create(bd, loc(), i32, wide));
    halves.push_back(mlir::arith::TruncIOp::create(
        bd, loc(), i32, mlir::arith::ShRUIOp::create(bd, loc(), wide, shift)));
  }
  mlir::pallas::CheckOp::create(bd, loc(), trace().args.at(static_cast<size_t>(operand_)),
                                static_cast<int32_t>(check_), f, halves);
}

}  // namespace pallas::edsl
