//===- Trace.cpp - tracing kernel bodies into the pallas dialect ----------===//
//
// The spec function runs once per instance. When it declares its body, the
// hook installed here builds the kernel function, evaluates every index map
// on the program ids, creates one `pallas.block` per operand and calls the
// body with the refs; every EDSL operation then appends MLIR ops at the
// builder of the (thread-local) current trace.
//
//===----------------------------------------------------------------------===//

#include "pallas/EDSL/Trace.h"

#include "pallas/Dialect/PallasDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include <limits>
#include <optional>
#include <sstream>

namespace pallas::edsl {

using mlir::OpBuilder;
using mlir::VectorType;

namespace {

struct RefState {
  mlir::Value ref;
  bool stored = false;
};

/// The kernel being traced on this thread.
struct Trace {
  KernelSpec* spec;
  mlir::MLIRContext* context;
  OpBuilder builder;
  mlir::Location loc;
  std::vector<mlir::Value> args;  // per operand: its func argument, or its pallas.scratch
  std::vector<RefState> refs;     // per operand (unused for scalars)
  int grid_rank = 0;
  // Per grid axis, for arbitrary (sequential) axes: the loop's induction
  // variable and trip count; null for parallel axes.
  std::vector<mlir::Value> sequential_ids, sequential_extents;
};

thread_local Trace* current_trace = nullptr;

Trace& trace() {
  if (!current_trace)
    throw SpecError("EDSL operations can only be used inside spec.body() or an index map");
  return *current_trace;
}

[[noreturn]] void fail(const std::string& message) { trace().spec->fail(message); }

mlir::Value unwrap(const Value& v) {
  if (!v.valid()) fail("use of an uninitialized Value");
  return mlir::Value::getFromOpaquePointer(v.opaque());
}
Value wrap(mlir::Value v) { return Value::from_opaque(v.getAsOpaquePointer()); }

OpBuilder& b() { return trace().builder; }
mlir::Location loc() { return trace().loc; }

/// The spec file as it should read in diagnostics: from `kernel_specs/` or
/// `tests/` on (the path the compiler was given is absolute), else the file name.
std::string spec_path(const char* file) {
  std::string path = file;
  for (const char* root : {"/kernel_specs/", "/tests/"})
    if (size_t at = path.rfind(root); at != std::string::npos) return path.substr(at + 1);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

mlir::Location source_loc(std::source_location where) {
  return mlir::FileLineColLoc::get(trace().context, spec_path(where.file_name()), where.line(),
                                   where.column());
}

/// While alive, ops are created at `where`, the spec line that asked for them.
/// The outermost one wins: an EDSL operation built from others (logistic from
/// exp and division) keeps the line of the spec's call.
class Located {
 public:
  explicit Located(std::source_location where) {
    if (depth_++ > 0) return;
    Trace& t = trace();
    saved_ = t.loc;
    t.loc = source_loc(where);
  }
  ~Located() {
    if (--depth_ == 0 && saved_) trace().loc = *saved_;
  }
  Located(const Located&) = delete;
  Located& operator=(const Located&) = delete;

 private:
  static thread_local int depth_;
  std::optional<mlir::Location> saved_;
};
thread_local int Located::depth_ = 0;

DType dtype_of(mlir::Type type) {
  mlir::Type e = mlir::getElementTypeOrSelf(type);
  if (e.isF32()) return DType::f32;
  if (e.isF16()) return DType::f16;
  if (e.isBF16()) return DType::bf16;
  if (e.isInteger(32)) return DType::i32;
  if (e.isInteger(1)) return DType::i1;
  if (e.isIndex()) return DType::index;
  throw SpecError("internal error: value of unsupported type");
}

std::string shape_str(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> shape_of(mlir::Value v) {
  if (auto vt = llvm::dyn_cast<VectorType>(v.getType())) return vt.getShape().vec();
  return {};
}

mlir::Type with_shape(mlir::Type element, llvm::ArrayRef<int64_t> shape) {
  if (shape.empty()) return element;
  return VectorType::get(shape, element);
}

/// Numpy broadcast of two shapes, or nullopt.
std::optional<std::vector<int64_t>> broadcast_shapes(std::vector<int64_t> a,
                                                     std::vector<int64_t> b) {
  if (a.size() < b.size()) std::swap(a, b);
  std::vector<int64_t> out = a;
  size_t lead = a.size() - b.size();
  for (size_t i = 0; i < b.size(); ++i) {
    int64_t x = a[lead + i], y = b[i];
    if (x == y || y == 1) continue;
    if (x == 1) {
      out[lead + i] = y;
      continue;
    }
    return std::nullopt;
  }
  return out;
}

mlir::Value broadcast_value(mlir::Value v, llvm::ArrayRef<int64_t> shape) {
  if (shape_of(v) == shape.vec()) return v;
  auto type = VectorType::get(shape, mlir::getElementTypeOrSelf(v.getType()));
  return mlir::vector::BroadcastOp::create(b(), loc(), type, v);
}

/// Checks dtypes match and broadcasts both operands to a common shape.
std::pair<mlir::Value, mlir::Value> unify(const char* op, const Value& x, const Value& y) {
  mlir::Value a = unwrap(x), c = unwrap(y);
  DType da = dtype_of(a.getType()), dc = dtype_of(c.getType());
  if (da != dc)
    fail(std::string("dtype mismatch in ") + op + ": " + name(da) + " and " + name(dc) +
         " (cast one operand first)");
  auto shape = broadcast_shapes(shape_of(a), shape_of(c));
  if (!shape)
    fail(std::string("shape mismatch in ") + op + ": " + shape_str(shape_of(a)) + " and " +
         shape_str(shape_of(c)));
  return {broadcast_value(a, *shape), broadcast_value(c, *shape)};
}

bool is_float_value(mlir::Value v) { return is_float(dtype_of(v.getType())); }

template <class FloatOp, class IntOp>
Value arith_binary(const char* op, const Value& x, const Value& y) {
  auto [a, c] = unify(op, x, y);
  if (dtype_of(a.getType()) == DType::i1) fail(std::string(op) + " is not defined on i1 values");
  if (is_float_value(a)) return wrap(FloatOp::create(b(), loc(), a, c));
  return wrap(IntOp::create(b(), loc(), a, c));
}

Value compare(const char* op, mlir::arith::CmpFPredicate fp, mlir::arith::CmpIPredicate ip,
              const Value& x, const Value& y) {
  auto [a, c] = unify(op, x, y);
  if (is_float_value(a)) return wrap(mlir::arith::CmpFOp::create(b(), loc(), fp, a, c));
  return wrap(mlir::arith::CmpIOp::create(b(), loc(), ip, a, c));
}

mlir::Value require_f32(const char* op, const Value& x) {
  mlir::Value v = unwrap(x);
  DType d = dtype_of(v.getType());
  if (d != DType::f32)
    fail(std::string(op) + " needs f32 operands, got " + name(d) + " (cast to f32 first)");
  return v;
}

template <class MathOp>
Value unary_f32(const char* op, const Value& x, std::source_location where) {
  Located here(where);
  return wrap(MathOp::create(b(), loc(), require_f32(op, x)));
}

}  // namespace

mlir::Type to_mlir_type(DType dtype, mlir::MLIRContext& context) {
  OpBuilder builder(&context);
  switch (dtype) {
    case DType::f32:
      return builder.getF32Type();
    case DType::f16:
      return builder.getF16Type();
    case DType::bf16:
      return builder.getBF16Type();
    case DType::i32:
      return builder.getI32Type();
    case DType::i1:
      return builder.getI1Type();
    case DType::index:
      return builder.getIndexType();
  }
  return {};
}

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
  auto without_ones = [](llvm::ArrayRef<int64_t> dims) {
    std::vector<int64_t> kept;
    for (int64_t d : dims)
      if (d != 1) kept.push_back(d);
    return kept;
  };
  if (shape.empty() || without_ones(type.getShape()) != without_ones(shape))
    fail("reshape " + shape_str(shape_of(v)) + " to " + shape_str(shape) +
         ": only dims of extent 1 may be added or dropped");
  if (type.getShape() == llvm::ArrayRef<int64_t>(shape)) return x;
  auto to = VectorType::get(shape, type.getElementType());
  return wrap(mlir::vector::ShapeCastOp::create(b(), loc(), to, v).getResult());
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
                                                b().getI32IntegerAttr(axis)));
}

Value num_programs(int axis, std::source_location where) {
  Located here(where);
  Trace& t = trace();
  if (axis < 0 || axis >= t.grid_rank)
    fail("num_programs(" + std::to_string(axis) + ") but the grid has " +
         std::to_string(t.grid_rank) + " axes");
  if (mlir::Value extent = t.sequential_extents[axis]) return wrap(extent);
  return wrap(mlir::pallas::NumProgramsOp::create(b(), loc(), b().getIndexType(),
                                                  b().getI32IntegerAttr(axis)));
}

namespace {
/// The value of a dim expression inside the kernel: dims are read from the
/// shape of the first array operand that has them.
mlir::Value materialize(const DimExpr& e) {
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

/// The program's linear index over the parallel grid axes, row-major.
mlir::Value linear_program_id() {
  Trace& t = trace();
  mlir::Value linear = unwrap(index(0));
  for (int axis = 0; axis < t.grid_rank; ++axis) {
    if (t.sequential_ids[axis]) continue;
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

//===----------------------------------------------------------------------===//
// Refs and index maps
//===----------------------------------------------------------------------===//

Value Idx::value() const {
  if (is_constant_) return index(constant_);
  mlir::Value v = unwrap(value_);
  if (dtype_of(v.getType()) != DType::index) return value_.cast(DType::index);
  return value_;
}

namespace {
RefState& ref_state(void* impl, int operand) {
  auto* t = static_cast<Trace*>(impl);
  if (t != current_trace) throw SpecError("a Ref was used outside the body it was given to");
  return t->refs[operand];
}
mlir::pallas::RefType ref_type(mlir::Value ref) {
  return llvm::cast<mlir::pallas::RefType>(ref.getType());
}

/// The value stored to operand `operand`, after checking that the operand is
/// stored to (an output or a workspace) and the dtypes agree.
mlir::Value stored_value(int operand, const Value& value) {
  const OperandDecl& decl = trace().spec->operands()[operand];
  if (decl.role != Role::kOutput && decl.role != Role::kWorkspace && decl.role != Role::kScratch)
    fail("store to input '" + decl.name + "'; only outputs, workspaces and scratch are stored");
  mlir::Value v = unwrap(value);
  DType d = dtype_of(v.getType());
  if (d != decl.dtype)
    fail("store of a " + std::string(edsl::name(d)) + " value to output '" + decl.name +
         "' of dtype " + edsl::name(decl.dtype) + " (cast first)");
  return v;
}
}  // namespace

std::vector<int64_t> Ref::shape() const {
  std::vector<int64_t> shape = ref_type(ref_state(impl_, operand_).ref).getShape().vec();
  for (int64_t& d : shape)
    if (mlir::ShapedType::isDynamic(d)) d = -1;
  return shape;
}

Value Ref::extent(int dim, std::source_location where) const {
  Located here(where);
  RefState& s = ref_state(impl_, operand_);
  auto block = s.ref.getDefiningOp<mlir::pallas::BlockOp>();
  llvm::SmallVector<int64_t> arrayDims;
  for (int64_t d = 0; d < static_cast<int64_t>(block.getSqueezed().size()); ++d)
    if (!block.getSqueezed()[d]) arrayDims.push_back(d);
  if (dim < 0 || dim >= static_cast<int>(arrayDims.size()))
    fail("extent(" + std::to_string(dim) + ") of '" + name() + "', whose block has " +
         std::to_string(arrayDims.size()) + " dims");
  return wrap(mlir::memref::DimOp::create(b(), loc(), block.getArray(), arrayDims[dim]));
}

Value Ref::load_scalar(const std::vector<Idx>& indices, std::source_location where) const {
  Located here(where);
  RefState& s = ref_state(impl_, operand_);
  auto type = ref_type(s.ref);
  if (static_cast<int64_t>(indices.size()) != type.getRank())
    fail("load_scalar of '" + name() + "': needs " + std::to_string(type.getRank()) + " indices");
  llvm::SmallVector<mlir::Value> at;
  for (const Idx& i : indices) at.push_back(unwrap(i.value()));
  return wrap(mlir::pallas::LoadScalarOp::create(b(), loc(), type.getElementType(), s.ref, at));
}

Value Ref::load_at(const std::vector<Idx>& offsets, std::vector<int64_t> sizes,
                   std::source_location where) const {
  Located here(where);
  RefState& s = ref_state(impl_, operand_);
  auto type = ref_type(s.ref);
  if (offsets.size() != sizes.size() || static_cast<int64_t>(sizes.size()) != type.getRank())
    fail("load_at of '" + name() + "': needs " + std::to_string(type.getRank()) +
         " offsets and sizes");
  llvm::SmallVector<mlir::Value> dynamic;
  for (const Idx& o : offsets) dynamic.push_back(unwrap(o.value()));
  for (int64_t size : sizes)
    if (size <= 0) fail("load_at of '" + name() + "': slice sizes must be positive");
  auto result = VectorType::get(sizes, type.getElementType());
  llvm::SmallVector<int64_t> zeros(sizes.size(), 0);
  return wrap(mlir::pallas::LoadOp::create(b(), loc(), result, s.ref, dynamic, zeros, sizes));
}

void Ref::store_at(const Value& value, const std::vector<Idx>& offsets,
                   std::source_location where) const {
  Located here(where);
  RefState& s = ref_state(impl_, operand_);
  auto type = ref_type(s.ref);
  mlir::Value v = stored_value(operand_, value);
  const bool scalar = shape_of(v).empty();  // a scalar writes one element
  if (static_cast<int64_t>(offsets.size()) != type.getRank() ||
      (!scalar && static_cast<int64_t>(shape_of(v).size()) != type.getRank()))
    fail("store_at to '" + name() + "': needs a scalar or a rank-" +
         std::to_string(type.getRank()) + " block value, and " + std::to_string(type.getRank()) +
         " offsets");
  llvm::SmallVector<mlir::Value> dynamic;
  for (const Idx& o : offsets) dynamic.push_back(unwrap(o.value()));
  llvm::SmallVector<int64_t> zeros(offsets.size(), 0);
  mlir::pallas::StoreOp::create(b(), loc(), v, s.ref, dynamic, zeros);
  s.stored = true;
}
DType Ref::dtype() const { return trace().spec->operands()[operand_].dtype; }
const std::string& Ref::name() const { return trace().spec->operands()[operand_].name; }

Value Ref::load(std::source_location where) const {
  Located here(where);
  for (int64_t d : shape())
    if (d < 0)
      fail("load of '" + name() + "': its block has a full (run-time) dim; load static-size " +
           "slices of it with load_at");
  return load(std::vector<int64_t>(shape().size(), 0), shape());
}

Value Ref::load(std::vector<int64_t> offsets, std::vector<int64_t> sizes,
                std::source_location where) const {
  Located here(where);
  RefState& s = ref_state(impl_, operand_);
  auto type = ref_type(s.ref);
  if (offsets.size() != sizes.size() || static_cast<int64_t>(sizes.size()) != type.getRank())
    fail("load of '" + name() + "': slice needs " + std::to_string(type.getRank()) +
         " offsets and sizes");
  for (size_t d = 0; d < sizes.size(); ++d)
    if (offsets[d] < 0 || sizes[d] <= 0 || offsets[d] + sizes[d] > type.getShape()[d])
      fail("load of '" + name() + "': slice [" + std::to_string(offsets[d]) + ", " +
           std::to_string(offsets[d] + sizes[d]) + ") of block dim " + std::to_string(d) +
           " is outside the block extent " + std::to_string(type.getShape()[d]));
  auto result = VectorType::get(sizes, type.getElementType());
  return wrap(
      mlir::pallas::LoadOp::create(b(), loc(), result, s.ref, mlir::ValueRange{}, offsets, sizes));
}

void Ref::store(const Value& value, std::source_location where) const {
  Located here(where);
  for (int64_t d : shape())
    if (d < 0)
      fail("store to '" + name() + "': its block has a full (run-time) dim; store static-size " +
           "slices of it with store_at");
  store(value, std::vector<int64_t>(shape().size(), 0));
}

void Ref::store(const Value& value, std::vector<int64_t> offsets,
                std::source_location where) const {
  Located here(where);
  RefState& s = ref_state(impl_, operand_);
  auto type = ref_type(s.ref);
  mlir::Value v = stored_value(operand_, value);
  if (static_cast<int64_t>(offsets.size()) != type.getRank())
    fail("store to '" + name() + "': needs " + std::to_string(type.getRank()) + " offsets");
  std::vector<int64_t> sizes = shape_of(v);
  if (sizes.empty()) {  // a scalar fills the rest of the block
    for (int64_t i = 0; i < type.getRank(); ++i) sizes.push_back(type.getShape()[i] - offsets[i]);
    v = broadcast_value(v, sizes);
  }
  if (static_cast<int64_t>(sizes.size()) != type.getRank())
    fail("store to '" + name() + "' of a rank-" + std::to_string(sizes.size()) +
         " value; the block has rank " + std::to_string(type.getRank()));
  for (size_t i = 0; i < sizes.size(); ++i)
    if (offsets[i] < 0 || offsets[i] + sizes[i] > type.getShape()[i])
      fail("store to '" + name() + "': value of shape " + shape_str(sizes) + " at offset " +
           shape_str(offsets) + " does not fit the block " + shape_str(type.getShape()));
  mlir::pallas::StoreOp::create(b(), loc(), v, s.ref, mlir::ValueRange{}, offsets);
  s.stored = true;
}

//===----------------------------------------------------------------------===//
// The trace of one instance
//===----------------------------------------------------------------------===//

namespace {

mlir::MemRefType array_type(const OperandDecl& d, mlir::MLIRContext& ctx) {
  int64_t rank = static_cast<int64_t>(d.shape.size());
  llvm::SmallVector<int64_t> shape(rank, mlir::ShapedType::kDynamic);
  mlir::Type element = to_mlir_type(d.dtype, ctx);
  if (rank == 1) return mlir::MemRefType::get(shape, element);
  // Row-major with arbitrary outer strides and a contiguous last dim.
  llvm::SmallVector<int64_t> strides(rank, mlir::ShapedType::kDynamic);
  strides.back() = 1;
  auto layout = mlir::StridedLayoutAttr::get(&ctx, /*offset=*/0, strides);
  return mlir::MemRefType::get(shape, element, layout);
}

/// Builds the kernel function once the body is declared.
void trace_body(KernelSpec& spec, mlir::ModuleOp module) {
  mlir::MLIRContext& ctx = *module.getContext();
  const auto& ops = spec.operands();
  if (spec.grid_axes().empty()) spec.fail("no grid declared (spec.grid)");
  // Every dim must be bound by an operand: the entry point reads it from a shape.
  std::vector<bool> bound(spec.dim_names().size(), false);
  for (const auto& d : ops)
    for (const DimExpr& e : d.shape)
      if ((d.role == Role::kInput || d.role == Role::kOutput) && e.kind() == DimExpr::Kind::kDim)
        bound[e.dim_index()] = true;
  for (size_t i = 0; i < bound.size(); ++i)
    if (!bound[i])
      spec.fail("dim '" + spec.dim_names()[i] +
                "' is not the dim of any operand, so no run-time value binds it");
  std::vector<std::string> ref_names;
  for (const auto& d : ops) {
    if (d.role == Role::kScalar || d.role == Role::kSemaphores || d.role == Role::kErrors) continue;
    if (!d.has_block) spec.fail("operand '" + d.name + "' has no block spec (spec.block)");
    ref_names.push_back(d.name);
    int64_t elements = 1;
    bool full = false;
    for (const auto& bd : d.block) {
      elements *= bd.size();
      full |= bd.is_full();
    }
    // Loaded blocks are distributed over the threads. An output block may be
    // smaller: a value with one element per row (replicated) is stored too.
    if (!full && d.role != Role::kOutput && elements % spec.threads() != 0)
      spec.fail("block of operand '" + d.name + "' has " + std::to_string(elements) +
                " elements, not a multiple of the " + std::to_string(spec.threads()) +
                " threads of a program");
  }
  if (spec.body_arity() != ref_names.size()) {
    std::string list;
    for (const auto& n : ref_names) list += (list.empty() ? "" : ", ") + n;
    spec.fail("body takes " + std::to_string(spec.body_arity()) + " refs but the spec declares " +
              std::to_string(ref_names.size()) + " array operands (" + list + ")");
  }

  OpBuilder builder(&ctx);
  llvm::SmallVector<mlir::Type> arg_types;  // scratch is not a kernel parameter
  for (const auto& d : ops)
    if (d.role != Role::kScratch)
      arg_types.push_back(d.role == Role::kScalar ? to_mlir_type(d.dtype, ctx)
                                                  : mlir::Type(array_type(d, ctx)));
  builder.setInsertionPointToEnd(module.getBody());
  auto loc = mlir::FileLineColLoc::get(&ctx, spec.op(), 0, 0);
  auto func = mlir::func::FuncOp::create(builder, loc, spec.instance_name(),
                                         builder.getFunctionType(arg_types, {}));
  func->setAttr(mlir::pallas::kKernelAttrName, builder.getUnitAttr());
  func->setAttr(mlir::pallas::kGridRankAttrName,
                builder.getI32IntegerAttr(static_cast<int32_t>(spec.grid_axes().size())));
  func->setAttr("pallas.threads", builder.getI64IntegerAttr(spec.threads()));
  // Approximate transcendentals (ex2.approx exp) are allowed when every float
  // input is half precision: their error (~1e-7 relative) is far below the
  // inputs' own (2^-9 for bf16), whatever the output dtype.
  bool float_inputs = false, all_half = true;
  for (const auto& d : ops)
    if (d.role == Role::kInput && is_float(d.dtype)) {
      float_inputs = true;
      all_half = all_half && (d.dtype == DType::f16 || d.dtype == DType::bf16);
    }
  if (float_inputs && all_half) func->setAttr("pallas.approx_math", builder.getUnitAttr());
  llvm::SmallVector<mlir::Attribute> grid_text;
  for (const auto& g : spec.grid_axes()) grid_text.push_back(builder.getStringAttr(g.to_string()));
  func->setAttr("pallas.grid", builder.getArrayAttr(grid_text));
  llvm::SmallVector<mlir::Attribute> names;
  for (const auto& d : ops) names.push_back(builder.getStringAttr(d.name));
  func->setAttr("pallas.operand_names", builder.getArrayAttr(names));
  mlir::Block* entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);

  Trace t{&spec, &ctx, builder, loc, {}, {}, static_cast<int>(spec.grid_axes().size()), {}, {}};
  for (size_t i = 0, arg = 0; i < ops.size(); ++i) {
    if (ops[i].role != Role::kScratch) {
      t.args.push_back(entry->getArgument(arg++));
      continue;
    }
    auto type = mlir::MemRefType::get(ops[i].scratch_shape, to_mlir_type(ops[i].dtype, ctx));
    auto scratch = mlir::pallas::ScratchOp::create(t.builder, loc, type);
    scratch->setAttr("name", mlir::StringAttr::get(&ctx, ops[i].name));
    t.args.push_back(scratch);
  }
  t.refs.resize(ops.size());
  t.sequential_ids.resize(t.grid_rank);
  t.sequential_extents.resize(t.grid_rank);
  Trace* saved = current_trace;
  current_trace = &t;
  struct Restore {
    Trace* saved;
    ~Restore() { current_trace = saved; }
  } restore{saved};

  // Arbitrary grid axes become loops inside the program, outermost first;
  // the body (index maps included) is traced inside the innermost one.
  OpBuilder::InsertPoint function_end = t.builder.saveInsertionPoint();
  for (int axis = 0; axis < t.grid_rank; ++axis) {
    if (spec.semantics(static_cast<size_t>(axis)) != Semantics::kArbitrary) continue;
    mlir::Value extent = materialize(spec.grid_axes()[static_cast<size_t>(axis)]);
    mlir::Value zero = mlir::arith::ConstantIndexOp::create(t.builder, loc, 0);
    mlir::Value one = mlir::arith::ConstantIndexOp::create(t.builder, loc, 1);
    auto loop = mlir::scf::ForOp::create(t.builder, loc, zero, extent, one);
    t.sequential_ids[axis] = loop.getInductionVar();
    t.sequential_extents[axis] = extent;
    t.builder.setInsertionPoint(loop.getBody()->getTerminator());
  }
  ProgramIds pids;
  for (int axis = 0; axis < t.grid_rank; ++axis) pids.push_back(program_id(axis));
  std::vector<Ref> refs;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OperandDecl& d = ops[i];
    if (d.role == Role::kScalar || d.role == Role::kSemaphores || d.role == Role::kErrors) continue;
    Indices idx = d.index_map(pids);
    if (idx.size() != d.shape.size())
      spec.fail("index map of operand '" + d.name + "' returns " + std::to_string(idx.size()) +
                " indices; the array has rank " + std::to_string(d.shape.size()));
    llvm::SmallVector<mlir::Value> indices;
    for (const Idx& x : idx) indices.push_back(unwrap(x.value()));
    llvm::SmallVector<int64_t> block_shape, ref_shape;
    llvm::SmallVector<bool> squeezed;
    for (const BlockDim& bd : d.block) {
      int64_t extent = bd.is_full() ? mlir::ShapedType::kDynamic : bd.size();
      block_shape.push_back(extent);
      squeezed.push_back(bd.is_squeezed());
      if (!bd.is_squeezed()) ref_shape.push_back(extent);
    }
    auto ref_type = mlir::pallas::RefType::get(&ctx, ref_shape, to_mlir_type(d.dtype, ctx));
    t.refs[i].ref = mlir::pallas::BlockOp::create(t.builder, loc, ref_type, t.args[i], indices,
                                                  block_shape, squeezed);
    refs.emplace_back(&t, static_cast<int>(i));
  }
  spec.body_fn()(refs);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].role == Role::kOutput && !t.refs[i].stored)
      spec.fail("output '" + ops[i].name + "' is never stored");
  t.builder.restoreInsertionPoint(function_end);
  mlir::func::ReturnOp::create(t.builder, loc);
}

}  // namespace

std::vector<TracedKernel> trace_spec(const char* op, SpecFn spec_fn, mlir::MLIRContext& context) {
  context.loadDialect<mlir::pallas::PallasDialect, mlir::func::FuncDialect,
                      mlir::arith::ArithDialect, mlir::math::MathDialect, mlir::scf::SCFDialect,
                      mlir::vector::VectorDialect, mlir::memref::MemRefDialect>();
  std::vector<TracedKernel> out;
  std::vector<int> radix;  // options per dtype parameter, learned from instance 0
  int count = 1;
  for (int instance = 0; instance < count; ++instance) {
    // Instance k picks option (k / prod(radix[j+1..])) % radix[j] of parameter j.
    std::vector<int> choice(radix.size());
    for (int j = static_cast<int>(radix.size()) - 1, k = instance; j >= 0; --j) {
      choice[j] = k % radix[j];
      k /= radix[j];
    }
    auto spec = std::make_shared<KernelSpec>(op, choice);
    mlir::OwningOpRef<mlir::ModuleOp> module(
        mlir::ModuleOp::create(mlir::UnknownLoc::get(&context)));
    mlir::ModuleOp m = *module;
    spec->set_body_hook([m](KernelSpec& s) mutable {
      if (!m.getBody()->empty()) s.fail("body is declared twice");
      trace_body(s, m);
    });
    spec_fn(*spec);
    spec->set_body_hook(nullptr);
    if (!spec->has_body()) spec->fail("no body declared (spec.body)");
    if (instance == 0) {
      radix = spec->param_counts();
      count = spec->num_instances();
    }
    if (mlir::failed(mlir::verify(m)))
      spec->fail("internal error: traced kernel IR does not verify");
    out.push_back(TracedKernel{spec->instance_name(), spec, std::move(module)});
  }
  return out;
}

}  // namespace pallas::edsl
