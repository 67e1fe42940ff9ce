//===- TraceState.h - the state every EDSL operation traces into --*- C++ -*-===//
//
// Internal to the EDSL's tracer (Trace.cpp: kernels, refs and index maps;
// TraceValues.cpp: operations on values): the thread's current trace, its
// builder and location, and the helpers that check and unify operands.
//
//===----------------------------------------------------------------------===//
#ifndef PALLAS_EDSL_TRACESTATE_H
#define PALLAS_EDSL_TRACESTATE_H

#include "pallas/EDSL/Trace.h"

#include "pallas/Dialect/PallasDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

#include <optional>
#include <source_location>
#include <string>

namespace pallas::edsl::trace_state {

using mlir::OpBuilder;
using mlir::VectorType;

struct RefState {
  mlir::Value ref;  // the pallas.block; null once its emit_pipeline or run_scoped body is traced
  bool stored = false;
  int operand = -1;         // the operand whose block it is; -1 for a run_scoped buffer
  std::string buffer_name;  // a run_scoped buffer's name and dtype
  DType buffer_dtype = DType::f32;
  bool peer = false;  // a cluster peer's view (Ref::in_cluster_program): loads only
};

/// An array of run_scoped barriers (TraceAsync.cpp).
struct BarrierState {
  mlir::Value value;  // the run_scoped region's !pallas.barriers argument; null after it
  std::string name;
  int count = 0;
};

/// The kernel being traced on this thread.
struct Trace {
  KernelSpec* spec;
  mlir::MLIRContext* context;
  OpBuilder builder;
  mlir::Location loc;
  std::vector<mlir::Value> args;  // per operand: its func argument, or its pallas.scratch
  std::vector<RefState> refs;     // per operand (unused for scalars), then inner blocks
  std::vector<BarrierState> barriers;
  int grid_rank = 0;
  // Per grid axis, for arbitrary (sequential) axes: the loop's induction
  // variable and trip count; null for parallel axes. A persistent grid sets
  // every axis: the tile's indices computed from the loop's step.
  std::vector<mlir::Value> sequential_ids, sequential_extents;
  // Per grid axis, for parallel axes: the launched axis (CUDA's x, y, z) it
  // runs as, counting parallel axes only; -1 for arbitrary axes. A grid
  // (b, i, j, arbitrary k) launches b, i, j as 0, 1, 2.
  std::vector<int> launched_axis;
  // A persistent grid in clusters (Persistent::cluster > 1): the tile's row
  // index, which the CTAs of a cluster differ in; blocks whose indices do
  // not depend on it are multicast.
  mlir::Value cluster_row_id;
  // A stream-K persistent grid (Persistent::stream_k): the current step's
  // TileRun (i1, index, index, index), set by its loop.
  mlir::Value tile_run_last_step, tile_run_parts, tile_run_part, tile_run_split;
};

inline thread_local Trace* current_trace = nullptr;

inline Trace& trace() {
  if (!current_trace)
    throw SpecError("EDSL operations can only be used inside spec.body() or an index map");
  return *current_trace;
}

[[noreturn]] inline void fail(const std::string& message) { trace().spec->fail(message); }

inline mlir::Value unwrap(const Value& v) {
  if (!v.valid()) fail("use of an uninitialized Value");
  return mlir::Value::getFromOpaquePointer(v.opaque());
}
inline Value wrap(mlir::Value v) { return Value::from_opaque(v.getAsOpaquePointer()); }

inline OpBuilder& b() { return trace().builder; }
inline mlir::Location loc() { return trace().loc; }

/// The spec file as it should read in diagnostics: from `kernel_specs/` or
/// `tests/` on (the path the compiler was given is absolute), else the file name.
inline std::string spec_path(const char* file) {
  std::string path = file;
  for (const char* root : {"/kernel_specs/", "/tests/"})
    if (size_t at = path.rfind(root); at != std::string::npos) return path.substr(at + 1);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

inline mlir::Location source_loc(std::source_location where) {
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
  static inline thread_local int depth_ = 0;
  std::optional<mlir::Location> saved_;
};

inline DType dtype_of(mlir::Type type) {
  mlir::Type e = mlir::getElementTypeOrSelf(type);
  if (e.isF32()) return DType::f32;
  if (e.isF16()) return DType::f16;
  if (e.isBF16()) return DType::bf16;
  if (e.isInteger(32)) return DType::i32;
  if (e.isInteger(1)) return DType::i1;
  if (e.isIndex()) return DType::index;
  throw SpecError("internal error: value of unsupported type");
}

inline std::string shape_str(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline std::vector<int64_t> shape_of(mlir::Value v) {
  if (auto vt = llvm::dyn_cast<VectorType>(v.getType())) return vt.getShape().vec();
  return {};
}

inline mlir::Type with_shape(mlir::Type element, llvm::ArrayRef<int64_t> shape) {
  if (shape.empty()) return element;
  return VectorType::get(shape, element);
}

/// Numpy broadcast of two shapes, or nullopt.
inline std::optional<std::vector<int64_t>> broadcast_shapes(std::vector<int64_t> a,
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

inline mlir::Value broadcast_value(mlir::Value v, llvm::ArrayRef<int64_t> shape) {
  if (shape_of(v) == shape.vec()) return v;
  auto type = VectorType::get(shape, mlir::getElementTypeOrSelf(v.getType()));
  return mlir::vector::BroadcastOp::create(b(), loc(), type, v);
}

/// Checks dtypes match and broadcasts both operands to a common shape.
inline std::pair<mlir::Value, mlir::Value> unify(const char* op, const Value& x, const Value& y) {
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

inline bool is_float_value(mlir::Value v) { return is_float(dtype_of(v.getType())); }

template <class FloatOp, class IntOp>
inline Value arith_binary(const char* op, const Value& x, const Value& y) {
  auto [a, c] = unify(op, x, y);
  if (dtype_of(a.getType()) == DType::i1) fail(std::string(op) + " is not defined on i1 values");
  if (is_float_value(a)) return wrap(FloatOp::create(b(), loc(), a, c));
  return wrap(IntOp::create(b(), loc(), a, c));
}

inline Value compare(const char* op, mlir::arith::CmpFPredicate fp, mlir::arith::CmpIPredicate ip,
                     const Value& x, const Value& y) {
  auto [a, c] = unify(op, x, y);
  if (is_float_value(a)) return wrap(mlir::arith::CmpFOp::create(b(), loc(), fp, a, c));
  return wrap(mlir::arith::CmpIOp::create(b(), loc(), ip, a, c));
}

inline mlir::Value require_f32(const char* op, const Value& x) {
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

/// The value of a dim expression inside the kernel: dims are read from the
/// shape of the first array operand that has them (TraceValues.cpp).
mlir::Value materialize(const DimExpr& e);

}  // namespace pallas::edsl::trace_state

namespace pallas::edsl {
/// The state behind a Ref, checked to be alive in the current trace (Ref
/// keeps its trace and index private).
struct RefAccess {
  /// The tracer's state of `r`; fails for a transposed view (its callers
  /// take blocks, not views).
  static trace_state::RefState& state(const Ref& r);
  /// The block a (transposed) view looks at.
  static Ref base(const Ref& r);
};
}  // namespace pallas::edsl

#endif  // PALLAS_EDSL_TRACESTATE_H
