//===- Trace.cpp - tracing kernel bodies into the pallas dialect ----------===//
//
// The spec function runs once per instance. When it declares its body, the
// hook installed here builds the kernel function, evaluates every index map
// on the program ids, creates one `pallas.block` per operand and calls the
// body with the refs; every EDSL operation then appends MLIR ops at the
// builder of the (thread-local) current trace.
//
//===----------------------------------------------------------------------===//

#include "TraceState.h"

#include "mlir/IR/Verifier.h"

#include <algorithm>
#include <sstream>

static_assert(::pallas::edsl::kMaxPipelineDepth == ::mlir::pallas::kMaxStageBuffers,
              "the EDSL's pipeline depth and the dialect's stage buffers agree");

namespace pallas::edsl {

using namespace trace_state;

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
// Refs and index maps
//===----------------------------------------------------------------------===//

Value Idx::value() const {
  if (is_constant_) return index(constant_);
  mlir::Value v = unwrap(value_);
  if (dtype_of(v.getType()) != DType::index) return value_.cast(DType::index);
  return value_;
}

namespace {
RefState& ref_state(void* impl, int index) {
  auto* t = static_cast<Trace*>(impl);
  if (t != current_trace) throw SpecError("a Ref was used outside the body it was given to");
  RefState& s = t->refs[static_cast<size_t>(index)];
  if (!s.ref && s.operand < 0)
    fail("buffer '" + s.buffer_name + "' was used after the run_scoped body it was given to");
  if (!s.ref)
    fail("a block Ref of operand '" + t->spec->operands()[static_cast<size_t>(s.operand)].name +
         "' was used after the emit_pipeline body it was given to");
  return s;
}
mlir::pallas::RefType ref_type(mlir::Value ref) {
  return llvm::cast<mlir::pallas::RefType>(ref.getType());
}

/// The value stored through `s`, after checking that its operand is stored
/// to (an output or a workspace) and the dtypes agree. Marks the operand stored.
mlir::Value stored_value(RefState& s, const Value& value) {
  if (s.peer)
    fail("store through a cluster peer's view of '" +
         trace().spec->operands()[static_cast<size_t>(s.operand)].name +
         "' (Ref::in_cluster_program); a peer's scratch is read-only, store to your own");
  if (s.operand < 0) {  // a run_scoped buffer
    mlir::Value v = unwrap(value);
    if (dtype_of(v.getType()) != s.buffer_dtype)
      fail("store of a " + std::string(edsl::name(dtype_of(v.getType()))) + " value to buffer '" +
           s.buffer_name + "' of dtype " + edsl::name(s.buffer_dtype) + " (cast first)");
    return v;
  }
  const OperandDecl& decl = trace().spec->operands()[static_cast<size_t>(s.operand)];
  trace().refs[static_cast<size_t>(s.operand)].stored = true;
  if (decl.role != Role::kOutput && decl.role != Role::kWorkspace && decl.role != Role::kScratch)
    fail("store to input '" + decl.name + "'; only outputs, workspaces and scratch are stored");
  mlir::Value v = unwrap(value);
  DType d = dtype_of(v.getType());
  if (d != decl.dtype)
    fail("store of a " + std::string(edsl::name(d)) + " value to output '" + decl.name +
         "' of dtype " + edsl::name(decl.dtype) + " (cast first)");
  return v;
}

/// An accumulator (spec.accumulator) lives in registers, one layout for the
/// whole matrix: it is loaded and stored whole. Fails naming the accumulator
/// for any other access (`what`: "load_at", ...).
void require_whole_accumulator(const RefState& s, const std::string& what, bool whole) {
  if (s.operand < 0 || whole) return;
  const OperandDecl& decl = trace().spec->operands()[static_cast<size_t>(s.operand)];
  if (decl.accumulator)
    fail(what + " of accumulator '" + decl.name +
         "': an accumulator is held in registers and is loaded and stored whole");
}
}  // namespace

namespace {
/// `v` with its two entries swapped (a transposed view's offsets, sizes).
template <typename T>
std::vector<T> swapped(std::vector<T> v) {
  std::reverse(v.begin(), v.end());
  return v;
}
}  // namespace

Ref Ref::transposed(std::source_location where) const {
  Located here(where);
  if (base().shape().size() != 2)
    fail("transposed view of '" + name() + "', whose block has " +
         std::to_string(base().shape().size()) + " dims; a view transposes a 2-D block");
  Ref view = *this;
  view.transposed_ = !transposed_;
  return view;
}

Ref Ref::in_cluster_program(const Value& rank, std::source_location where) const {
  Located here(where);
  if (transposed_)
    fail("in_cluster_program of a transposed view of '" + name() +
         "'; take the peer's view of the block, then transpose it");
  RefState& s = ref_state(impl_, operand_);
  const auto& ops = trace().spec->operands();
  if (s.peer) fail("in_cluster_program of '" + name() + "', already a cluster peer's view");
  if (s.operand < 0 || ops[static_cast<size_t>(s.operand)].role != Role::kScratch ||
      ops[static_cast<size_t>(s.operand)].accumulator)
    fail("in_cluster_program of '" + name() +
         "'; a cluster peer's view is of a scratch operand (spec.scratch: shared memory), "
         "not of an input, output, workspace, accumulator or run_scoped buffer");
  mlir::Value r = unwrap(rank);
  if (!r.getType().isIndex())
    fail("in_cluster_program of '" + name() +
         "': the rank must be an index value (cluster_rank(), index(n), ...)");
  mlir::Value peer = mlir::pallas::ClusterPeerOp::create(b(), loc(), s.ref.getType(), s.ref, r);
  RefState view = s;
  view.ref = peer;
  view.peer = true;
  Trace& t = trace();
  t.refs.push_back(view);
  return Ref(&t, static_cast<int>(t.refs.size() - 1));
}

std::vector<int64_t> Ref::shape() const {
  std::vector<int64_t> shape = ref_type(ref_state(impl_, operand_).ref).getShape().vec();
  for (int64_t& d : shape)
    if (mlir::ShapedType::isDynamic(d)) d = -1;
  return transposed_ ? swapped(shape) : shape;
}

Value Ref::extent(int dim, std::source_location where) const {
  Located here(where);
  if (transposed_ && (dim == 0 || dim == 1)) return base().extent(1 - dim, where);
  RefState& s = ref_state(impl_, operand_);
  auto block = s.ref.getDefiningOp<mlir::pallas::BlockOp>();
  llvm::SmallVector<int64_t> arrayDims;
  for (int64_t d = 0; d < static_cast<int64_t>(block.getSqueezed().size()); ++d)
    if (!block.getSqueezed()[d]) arrayDims.push_back(d);
  if (dim < 0 || dim >= static_cast<int>(arrayDims.size()))
    fail("extent(" + std::to_string(dim) + ") of '" + name() + "', whose block has " +
         std::to_string(arrayDims.size()) + " dims");
  if (s.operand < 0)  // a run_scoped buffer: its static shape
    return index(llvm::cast<mlir::MemRefType>(block.getArray().getType()).getShape()[dim]);
  return wrap(mlir::memref::DimOp::create(b(), loc(), block.getArray(), arrayDims[dim]));
}

Value Ref::load_scalar(const std::vector<Idx>& indices, std::source_location where) const {
  Located here(where);
  if (transposed_) return base().load_scalar(swapped(indices), where);
  RefState& s = ref_state(impl_, operand_);
  require_whole_accumulator(s, "load_scalar", false);
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
  if (transposed_) return transpose(base().load_at(swapped(offsets), swapped(sizes), where), where);
  RefState& s = ref_state(impl_, operand_);
  require_whole_accumulator(s, "load_at", false);
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
  return wrap(
      mlir::pallas::LoadOp::create(b(), loc(), result, s.ref, dynamic, zeros, sizes, nullptr));
}

Value Ref::load_inside(const std::vector<Idx>& offsets, std::vector<int64_t> sizes,
                       std::source_location where) const {
  Located here(where);
  if (transposed_)
    return transpose(base().load_inside(swapped(offsets), swapped(sizes), where), where);
  Value v = load_at(offsets, std::move(sizes), where);
  unwrap(v).getDefiningOp<mlir::pallas::LoadOp>().setInsideLastDim(true);
  return v;
}

Value Ref::load_at(const std::vector<Idx>& offsets, std::vector<int64_t> sizes, double fill,
                   std::source_location where) const {
  Located here(where);
  if (transposed_)
    return transpose(base().load_at(swapped(offsets), swapped(sizes), fill, where), where);
  Value v = load_at(offsets, std::move(sizes), where);
  auto load = unwrap(v).getDefiningOp<mlir::pallas::LoadOp>();
  mlir::Type et = ref_type(ref_state(impl_, operand_).ref).getElementType();
  if (llvm::isa<mlir::FloatType>(et)) {
    load.setPaddingAttr(b().getFloatAttr(et, fill));
  } else {
    if (fill != static_cast<double>(static_cast<int64_t>(fill)))
      fail("load_at of '" + name() + "': fill " + std::to_string(fill) +
           " is not an integer but the operand is " + edsl::name(dtype()));
    load.setPaddingAttr(b().getIntegerAttr(et, static_cast<int64_t>(fill)));
  }
  return v;
}

void Ref::store_at(const Value& value, const std::vector<Idx>& offsets,
                   std::source_location where) const {
  Located here(where);
  if (transposed_)
    return base().store_at(shape_of(unwrap(value)).empty() ? value : transpose(value, where),
                           swapped(offsets), where);
  RefState& s = ref_state(impl_, operand_);
  require_whole_accumulator(s, "store_at", false);
  auto type = ref_type(s.ref);
  mlir::Value v = stored_value(s, value);
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
}
DType Ref::dtype() const {
  const RefState& s = ref_state(impl_, operand_);
  if (s.operand < 0) return s.buffer_dtype;
  return trace().spec->operands()[static_cast<size_t>(s.operand)].dtype;
}
const std::string& Ref::name() const {
  const RefState& s = ref_state(impl_, operand_);
  if (s.operand < 0) return s.buffer_name;
  return trace().spec->operands()[static_cast<size_t>(s.operand)].name;
}

Value Ref::load(std::source_location where) const {
  Located here(where);
  if (transposed_) return transpose(base().load(where), where);
  for (int64_t d : shape())
    if (d < 0)
      fail("load of '" + name() + "': its block has a full (run-time) dim; load static-size " +
           "slices of it with load_at");
  return load(std::vector<int64_t>(shape().size(), 0), shape());
}

Value Ref::load(std::vector<int64_t> offsets, std::vector<int64_t> sizes,
                std::source_location where) const {
  Located here(where);
  if (transposed_)
    return transpose(base().load(swapped(std::move(offsets)), swapped(std::move(sizes)), where),
                     where);
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
  // An accumulator's column slice of whole rows, 8 columns aligned, is
  // some of its registers (an epilogue in column chunks keeps fewer values
  // live); any other slice is not held in the layout.
  const bool column_slice = type.getRank() == 2 && offsets[0] == 0 &&
                            sizes[0] == type.getShape()[0] && offsets[1] % 8 == 0 &&
                            sizes[1] % 8 == 0;
  if (s.operand >= 0 && !column_slice &&
      trace().spec->operands()[static_cast<size_t>(s.operand)].accumulator)
    fail("load of accumulator '" + name() + "': slice [" + std::to_string(offsets[0]) + ":" +
         std::to_string(offsets[0] + sizes[0]) + ", " + std::to_string(offsets[1]) + ":" +
         std::to_string(offsets[1] + sizes[1]) +
         "]; its registers hold whole rows, columns in multiples of 8 (a slice [0:" +
         std::to_string(type.getShape()[0]) + ", c0:c0 + n], c0 and n multiples of 8)");
  auto result = VectorType::get(sizes, type.getElementType());
  return wrap(mlir::pallas::LoadOp::create(b(), loc(), result, s.ref, mlir::ValueRange{}, offsets,
                                           sizes,
                                           /*padding=*/nullptr));
}

void Ref::store(const Value& value, std::source_location where) const {
  Located here(where);
  if (transposed_)
    return base().store(shape_of(unwrap(value)).empty() ? value : transpose(value, where), where);
  for (int64_t d : shape())
    if (d < 0)
      fail("store to '" + name() + "': its block has a full (run-time) dim; store static-size " +
           "slices of it with store_at");
  store(value, std::vector<int64_t>(shape().size(), 0));
}

void Ref::store(const Value& value, std::vector<int64_t> offsets,
                std::source_location where) const {
  Located here(where);
  if (transposed_)
    return base().store(shape_of(unwrap(value)).empty() ? value : transpose(value, where),
                        swapped(std::move(offsets)), where);
  RefState& s = ref_state(impl_, operand_);
  auto type = ref_type(s.ref);
  mlir::Value v = stored_value(s, value);
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
  require_whole_accumulator(s, "a slice store",
                            llvm::equal(sizes, type.getShape()) &&
                                llvm::all_of(offsets, [](int64_t o) { return o == 0; }));
  mlir::pallas::StoreOp::create(b(), loc(), v, s.ref, mlir::ValueRange{}, offsets);
}

//===----------------------------------------------------------------------===//
// emit_pipeline
//===----------------------------------------------------------------------===//

RefState& RefAccess::state(const Ref& r) {
  if (r.transposed_)
    fail("'" + r.name() +
         "' is a transposed view (Ref::transposed); only loads, stores and wgmma's operands "
         "take one");
  return ref_state(r.impl_, r.operand_);
}
Ref RefAccess::base(const Ref& r) { return r.base(); }

//===----------------------------------------------------------------------===//
// wgmma
//===----------------------------------------------------------------------===//

namespace {
/// The declaration of the operand behind `ref` ("wgmma operand a"), after
/// checking that it is what wgmma takes there.
const OperandDecl& wgmma_operand(const Ref& ref, const char* which, bool accumulator) {
  const int operand = RefAccess::state(ref).operand;
  if (operand < 0)
    fail(std::string("wgmma ") + which + " '" + ref.name() +
         "' is a run_scoped buffer; wgmma multiplies blocks staged by the grid's pipeline");
  const OperandDecl& d = trace().spec->operands()[static_cast<size_t>(operand)];
  if (accumulator && !d.accumulator)
    fail(std::string("wgmma ") + which + " '" + d.name +
         "' is not an accumulator; declare it with spec.accumulator");
  if (!accumulator && !d.staged)
    fail(std::string("wgmma ") + which + " '" + d.name + "' is not staged in shared memory" +
         (trace().spec->direct() ? " (this is the direct instance, which stages nothing: use dot)"
                                 : "; declare its block with InShared"));
  return d;
}
}  // namespace

namespace {
/// Operand a of wgmma: a staged block's ref, or a value in registers.
struct WgmmaLhs {
  std::string name;  // for messages: the operand's, or "the value"
  DType dtype;
  std::vector<int64_t> shape;  // as multiplied: [M, K]
  mlir::Value value;           // the ref (its block [K, M] with transpose_a) or the block value
};

void wgmma_into(const Ref& acc, const WgmmaLhs& a, const Ref& rhs_view, DotOptions options) {
  if (acc.is_transposed())
    fail("wgmma accumulator '" + acc.name() +
         "' is a transposed view; wgmma takes views as operands a and b only");
  // A transposed view of b is b itself with the other orientation.
  const Ref rhs = RefAccess::base(rhs_view);
  if (rhs_view.is_transposed()) options.transpose_b = !options.transpose_b;
  const OperandDecl& dacc = wgmma_operand(acc, "accumulator", true);
  const OperandDecl& db = wgmma_operand(rhs, "operand b", false);
  if (a.dtype != db.dtype || (a.dtype != f16 && a.dtype != bf16))
    fail("wgmma of " + a.name + " (" + name(a.dtype) + ") and '" + db.name + "' (" +
         name(db.dtype) + "); its operands are both f16 or both bf16, summed in f32");
  const std::vector<int64_t>&sa = a.shape, sb = rhs.shape(), sacc = acc.shape();
  if (sa.size() != 2 || sb.size() != 2)
    fail("wgmma of " + a.name + " " + shape_str(sa) + " and '" + db.name + "' " + shape_str(sb) +
         "; it multiplies 2-D blocks");
  const int64_t k = sa[1], bk = sb[options.transpose_b ? 1 : 0],
                n = sb[options.transpose_b ? 0 : 1];
  if (bk != k)
    fail("wgmma of " + a.name + " " + shape_str(sa) + " and '" + db.name + "' " + shape_str(sb) +
         (options.transpose_b ? " (b transposed)" : "") + ": a has " + std::to_string(k) +
         " columns but b has " + std::to_string(bk) + (options.transpose_b ? " columns" : " rows"));
  if (sacc != std::vector<int64_t>{sa[0], n})
    fail("wgmma into accumulator '" + dacc.name + "' " + shape_str(sacc) + "; the product is " +
         shape_str({sa[0], n}));
  RefState& s = RefAccess::state(acc);
  s.stored = true;
  mlir::pallas::WgmmaOp::create(b(), loc(), s.ref, a.value, RefAccess::state(rhs).ref,
                                options.transpose_a, options.transpose_b);
}
}  // namespace

void wgmma(const Ref& acc, const Ref& lhs_view, const Ref& rhs, DotOptions options,
           std::source_location where) {
  Located here(where);
  // A transposed view of a is a itself with the other orientation: a block staged [K, M],
  // read MN-major.
  const Ref lhs = RefAccess::base(lhs_view);
  if (lhs_view.is_transposed()) options.transpose_a = !options.transpose_a;
  const OperandDecl& da = wgmma_operand(lhs, "operand a", false);
  std::vector<int64_t> shape = lhs.shape();
  if (options.transpose_a && shape.size() == 2) std::swap(shape[0], shape[1]);
  wgmma_into(acc, {"'" + da.name + "'", da.dtype, shape, RefAccess::state(lhs).ref}, rhs, options);
}

void wgmma(const Ref& acc, const Value& lhs, const Ref& rhs, DotOptions options,
           std::source_location where) {
  Located here(where);
  if (!lhs.is_block())
    fail("wgmma of a scalar; operand a is a 2-D block (a staged ref or a value)");
  if (options.transpose_a)
    fail(
        "wgmma with transpose_a of a value operand a; registers are read [M, K] (transpose the "
        "value, or stage the block and pass its ref)");
  wgmma_into(acc, {"the value operand a", lhs.dtype(), lhs.shape(), unwrap(lhs)}, rhs, options);
}

void wgmma_wait(int pending, std::source_location where) {
  Located here(where);
  if (pending < 0) fail("wgmma_wait(" + std::to_string(pending) + "): a count of 0 or more");
  mlir::pallas::WgmmaWaitOp::create(b(), loc(), pending);
}

namespace {
/// The operand behind `ref`, after checking that its block is the whole
/// array (every dim full), as a pipeline operand's must be.
int whole_array_operand(const Ref& ref, size_t position) {
  const int operand = RefAccess::state(ref).operand;
  if (operand < 0)
    fail("emit_pipeline operand " + std::to_string(position) + " ('" + ref.name() +
         "') is a run_scoped buffer; a pipeline copies blocks of an operand's whole-array Ref");
  // Every dim full, none squeezed: the pipeline's index maps index the array itself.
  const size_t rank = trace().spec->operands()[static_cast<size_t>(operand)].shape.size();
  for (int64_t extent : ref.shape())
    if (extent >= 0 || ref.shape().size() != rank)
      fail("emit_pipeline operand " + std::to_string(position) + " ('" + ref.name() +
           "'): its block must be the whole array (every dim full); the pipeline copies "
           "blocks of it");
  return operand;
}
}  // namespace

std::vector<Value> emit_pipeline(
    const Value& first, const Value& end, std::vector<PipelineOperand> operands,
    std::vector<Value> carry,
    const std::function<std::vector<Value>(Value, std::vector<Ref>, std::vector<Value>)>& body,
    int max_concurrent_steps, std::source_location where) {
  Located here(where);
  Trace& t = trace();
  KernelSpec& spec = *t.spec;
  if (max_concurrent_steps < 1 || max_concurrent_steps > kMaxPipelineDepth)
    fail("emit_pipeline with max_concurrent_steps " + std::to_string(max_concurrent_steps) +
         "; a pipeline keeps 1 to " + std::to_string(kMaxPipelineDepth) + " steps");
  if (operands.empty()) fail("emit_pipeline without operands (use fori)");
  std::vector<int> operand_index;
  bool pipelined = false;
  for (size_t k = 0; k < operands.size(); ++k) {
    const PipelineOperand& p = operands[k];
    const int i = whole_array_operand(p.array, k);
    const OperandDecl& d = spec.operands()[static_cast<size_t>(i)];
    if (p.block.size() != d.shape.size())
      fail("emit_pipeline operand '" + d.name + "' has rank " + std::to_string(d.shape.size()) +
           " but its block has " + std::to_string(p.block.size()) + " dims");
    for (size_t dim = 0; dim < p.block.size(); ++dim)
      if (p.block[dim].is_full())
        fail("emit_pipeline operand '" + d.name + "' block dim " + std::to_string(dim) +
             " is full; a pipeline's blocks have static shapes");
    if (p.staging) {
      spec.stage_in_pipeline(i, p.block, *p.staging);
      pipelined = !spec.direct();
    }
    operand_index.push_back(i);
  }
  return fori(
      first, end, std::move(carry),
      [&](Value step, std::vector<Value> args) {
        auto loop = llvm::cast<mlir::scf::ForOp>(
            llvm::cast<mlir::BlockArgument>(unwrap(step)).getOwner()->getParentOp());
        if (pipelined) loop->setAttr(mlir::pallas::kPipelineAttrName, b().getUnitAttr());
        std::vector<Ref> blocks;
        std::vector<size_t> made;
        for (size_t k = 0; k < operands.size(); ++k) {
          const PipelineOperand& p = operands[k];
          const int i = operand_index[k];
          const OperandDecl& d = spec.operands()[static_cast<size_t>(i)];
          Indices idx = p.index_map(step);
          if (idx.size() != d.shape.size())
            fail("emit_pipeline index map of operand '" + d.name + "' returns " +
                 std::to_string(idx.size()) + " indices; the array has rank " +
                 std::to_string(d.shape.size()));
          llvm::SmallVector<mlir::Value> indices;
          for (const Idx& x : idx) indices.push_back(unwrap(x.value()));
          llvm::SmallVector<int64_t> block_shape, ref_shape;
          llvm::SmallVector<bool> squeezed;
          for (const BlockDim& bd : p.block) {
            block_shape.push_back(bd.size());
            squeezed.push_back(bd.is_squeezed());
            if (!bd.is_squeezed()) ref_shape.push_back(bd.size());
          }
          auto ref_type =
              mlir::pallas::RefType::get(t.context, ref_shape, to_mlir_type(d.dtype, *t.context));
          auto block = mlir::pallas::BlockOp::create(
              b(), loc(), ref_type, t.args[i], indices, block_shape, squeezed, /*staged=*/false,
              /*swizzle=*/nullptr, /*buffers=*/nullptr, /*tiling=*/nullptr, /*multicast=*/false);
          if (p.staging && !spec.direct()) {
            block.setStaged(true);
            block.setSwizzle(p.staging->swizzle);
            if (!p.staging->tiling.empty())
              block.setTiling(
                  tma_copy_box({block_shape.begin(), block_shape.end()}, p.staging->tiling));
            block.setBuffers(p.staging->buffers ? p.staging->buffers : max_concurrent_steps);
            block->setAttr("name", b().getStringAttr(d.name));
          }
          t.refs.push_back(RefState{block, false, i, {}, DType::f32});
          made.push_back(t.refs.size() - 1);
          blocks.emplace_back(&t, static_cast<int>(t.refs.size() - 1));
        }
        std::vector<Value> next = body(step, blocks, std::move(args));
        for (size_t r : made) t.refs[r].ref = nullptr;  // the blocks live in this body only
        return next;
      },
      where);
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

/// A persistent grid's loop (KernelSpec::persistent): program w of W runs
/// steps u in [0, cdiv(P - w, W) * K) of its tiles' arbitrary axis, tile
/// t = w + (u / K) W, step u % K, and sets every axis's program id and
/// extent to the tile's. The tile's indices: the parallel axes before the
/// last two are outermost (t / (R C), row-major), then the R x C tile plane
/// in bands of G = group_rows rows, each swept column by column:
///
///   G = min(group_rows, R), p = t % (R C), band = p / (G C), first = band G,
///   rows = min(R - first, G), q = p - band G C,
///   row = first + q % rows, col = q / rows.
///
/// A stream-K walk (Persistent::stream_k) numbers its tiles t the same way:
/// its whole-tile rounds take u in [0, D K), tile w + (u / K) W, and its run
/// the line's steps v = a_w + u - D K, tile D W + v / K, step v % K (Spec.h's
/// Persistent has the cut and worked examples; where it does not cut, every
/// step is a whole round's). tile_run()'s values come from the runs holding
/// the tile's first and last line steps, q K and q K + K - 1 (q = v / K): the
/// program's own run but in its first and last tiles, whose runs are found
/// before the loop (two more divisions each), so the loop adds no division.
///
/// In clusters of S = cluster_size CTAs (S divides R; the entry point asks
/// for clusters only then) the walk above runs per cluster over a plane of
/// R / S rows, with w the cluster's index (program / S), W the clusters,
/// P the cluster plane's tiles and G = max(group_rows / S, 1); the CTA of
/// rank r takes tile row S row + r. With S = 1 this is the walk above.
///
/// The divisions are 32-bit (index is 64-bit on the GPU, where a 64-bit
/// division is a long call), all by counts of at least 1: divisors are
/// clamped so that the indices of steps past the end, which a pipeline
/// computes for copies it then does not issue, stay finite.
mlir::scf::ForOp persistent_loop(Trace& t) {
  KernelSpec& spec = *t.spec;
  OpBuilder& b = t.builder;
  mlir::Location loc = t.loc;
  auto index_type = b.getIndexType();
  auto i32 = b.getI32Type();
  auto c32 = [&](int64_t v) { return mlir::arith::ConstantIntOp::create(b, loc, i32, v); };
  auto to32 = [&](mlir::Value v) { return mlir::arith::IndexCastUIOp::create(b, loc, i32, v); };
  auto to_index = [&](mlir::Value v) {
    return mlir::arith::IndexCastUIOp::create(b, loc, index_type, v).getResult();
  };
  auto at_least_1 = [&](mlir::Value v) { return mlir::arith::MaxSIOp::create(b, loc, v, c32(1)); };
  auto div = [&](mlir::Value x, mlir::Value y) {
    return mlir::arith::DivUIOp::create(b, loc, x, y);
  };
  auto rem = [&](mlir::Value x, mlir::Value y) {
    return mlir::arith::RemUIOp::create(b, loc, x, y);
  };
  auto mul = [&](mlir::Value x, mlir::Value y) {
    return mlir::arith::MulIOp::create(b, loc, x, y);
  };
  auto add = [&](mlir::Value x, mlir::Value y) {
    return mlir::arith::AddIOp::create(b, loc, x, y);
  };
  auto sub = [&](mlir::Value x, mlir::Value y) {
    return mlir::arith::SubIOp::create(b, loc, x, y);
  };

  std::vector<int> parallel;
  int sequential = -1;
  std::vector<mlir::Value> extents;
  for (int axis = 0; axis < t.grid_rank; ++axis) {
    extents.push_back(materialize(spec.grid_axes()[static_cast<size_t>(axis)]));
    if (spec.semantics(static_cast<size_t>(axis)) == Semantics::kArbitrary)
      sequential = axis;
    else
      parallel.push_back(axis);
  }
  // Before the loop: the tile count and this program's share, and the
  // 32-bit divisors (each at least 1).
  const size_t n = parallel.size();
  const int64_t cluster = spec.persistence()->cluster;
  if (cluster > 1 && n < 2)
    spec.fail("persistent: cluster " + std::to_string(cluster) +
              " needs a tile plane (two parallel grid axes: rows, whose tiles a cluster "
              "splits, and columns); the grid has " +
              std::to_string(n));
  // The walkers: clusters of `size` programs (1 without clusters), and the
  // plane's rows per cluster row.
  mlir::Value size = mlir::arith::ConstantIndexOp::create(b, loc, 1);
  mlir::Value rank = mlir::arith::ConstantIndexOp::create(b, loc, 0);
  if (cluster > 1) {
    size = mlir::pallas::ClusterSizeOp::create(b, loc, index_type);
    rank = mlir::pallas::ClusterRankOp::create(b, loc, index_type);
  }
  mlir::Value worker = mlir::arith::DivUIOp::create(
      b, loc, mlir::pallas::ProgramIdOp::create(b, loc, index_type, 0), size);
  mlir::Value workers = mlir::arith::DivUIOp::create(
      b, loc, mlir::pallas::NumProgramsOp::create(b, loc, index_type, 0), size);
  std::vector<mlir::Value> walked = extents;  // the cluster plane: rows / size
  if (cluster > 1)
    walked[parallel[n - 2]] =
        mlir::arith::CeilDivUIOp::create(b, loc, extents[parallel[n - 2]], size);
  mlir::Value tiles = mlir::arith::ConstantIndexOp::create(b, loc, 1);
  for (int axis : parallel) tiles = mlir::arith::MulIOp::create(b, loc, tiles, walked[axis]);
  mlir::Value steps = extents[static_cast<size_t>(sequential)];
  mlir::Value zero = mlir::arith::ConstantIndexOp::create(b, loc, 0);
  mlir::Value one = mlir::arith::ConstantIndexOp::create(b, loc, 1);
  const bool stream_k = spec.persistence()->stream_k;
  mlir::Value total;           // this program's steps
  mlir::Value whole_steps32;   // stream-K: the steps of whole tiles (D K, or all)
  mlir::Value run_begin32;     // stream-K: a_w, its run's first step on the line
  mlir::Value rounds_tiles32;  // stream-K: D W, the tiles of the whole-tile rounds
  // stream-K: the run's first and last tiles' runs (the only tiles of a run that may be in
  // parts): the run holding the tile's first step, r, and the runs past it holding its steps
  // (parts - 1), packed as r + (parts - 1) 2^16 (r < W: the resident programs, far below 2^16).
  mlir::Value first_tile_runs32, last_tile_runs32;
  if (!stream_k) {
    mlir::Value left = mlir::arith::MaxSIOp::create(
        b, loc, mlir::arith::SubIOp::create(b, loc, tiles, worker), zero);
    mlir::Value mine = mlir::arith::CeilDivSIOp::create(b, loc, left, workers);
    total = mlir::arith::MulIOp::create(b, loc, mine, steps);
  } else {
    // Spec.h's Persistent: D = max(T / W - 1, 0) rounds of whole tiles, then
    // the T' = T - D W tiles left as one line of units, h = min(P, K) a tile
    // (unit i of a tile its steps [i K / h, (i + 1) K / h)), cut into runs of
    // U = cdiv(T' h, W) units (program w's units [w U, w U + U), clamped to
    // the line), where that saves at least an eighth of the plain walk's
    // cdiv(T', W) K steps; else every program walks whole tiles (all its
    // steps "whole"). 64-bit, once; divisors at least 1.
    auto max64 = [&](mlir::Value x, mlir::Value y) {
      return mlir::arith::MaxSIOp::create(b, loc, x, y).getResult();
    };
    auto min64 = [&](mlir::Value x, mlir::Value y) {
      return mlir::arith::MinSIOp::create(b, loc, x, y).getResult();
    };
    auto cdiv64 = [&](mlir::Value x, mlir::Value y) {
      return mlir::arith::CeilDivUIOp::create(b, loc, x, y).getResult();
    };
    auto select64 = [&](mlir::Value c, mlir::Value x, mlir::Value y) {
      return mlir::arith::SelectOp::create(b, loc, c, x, y).getResult();
    };
    auto c64 = [&](int64_t v) { return mlir::arith::ConstantIndexOp::create(b, loc, v); };
    mlir::Value workers1 = max64(workers, one), steps1 = max64(steps, one);
    mlir::Value rounds = max64(sub(div(tiles, workers1), one), zero);
    mlir::Value rounds_tiles = mul(rounds, workers);
    mlir::Value last_tiles = sub(tiles, rounds_tiles);
    // Units of at least one step (h <= K), so that every run has steps and a
    // tile in parts meets every one of them; at most P a tile, so at most P parts.
    mlir::Value units_per_tile = min64(c64(spec.persistence()->stream_k_parts), steps1);
    mlir::Value units = mul(last_tiles, units_per_tile);
    mlir::Value run_units = max64(cdiv64(units, workers1), one);
    mlir::Value cut_run = cdiv64(mul(run_units, steps), units_per_tile);
    mlir::Value plain_run = mul(cdiv64(last_tiles, workers1), steps);
    mlir::Value cutting =
        mlir::arith::CmpIOp::create(b, loc, mlir::arith::CmpIPredicate::uge,
                                    mul(sub(plain_run, cut_run), c64(8)), max64(plain_run, one));
    // Unit boundary x's line step: (x / h) K + (x % h) K / h.
    auto unit_start = [&](mlir::Value x) {
      return add(mul(div(x, units_per_tile), steps),
                 div(mul(rem(x, units_per_tile), steps), units_per_tile));
    };
    auto run_start = [&](mlir::Value w) { return unit_start(min64(mul(w, run_units), units)); };
    mlir::Value begin = select64(cutting, run_start(worker), zero);
    mlir::Value end = select64(cutting, run_start(add(worker, one)), zero);
    mlir::Value plain_total = mul(cdiv64(max64(sub(tiles, worker), zero), workers1), steps);
    mlir::Value whole_steps = select64(cutting, mul(rounds, steps), plain_total);
    total = add(whole_steps, sub(end, begin));
    // Tile q's units are [q h, q h + h): its first run (q h) / U, and the runs past it to its
    // last unit's.
    auto runs_of_tile = [&](mlir::Value q) {
      mlir::Value first_unit = mul(q, units_per_tile);
      mlir::Value first = div(first_unit, run_units);
      mlir::Value more = sub(div(sub(add(first_unit, units_per_tile), one), run_units), first);
      return to32(add(first, mul(more, c64(1 << 16))));
    };
    first_tile_runs32 = runs_of_tile(div(begin, steps1));
    last_tile_runs32 = runs_of_tile(div(sub(max64(end, one), one), steps1));
    whole_steps32 = to32(whole_steps);
    run_begin32 = to32(begin);
    rounds_tiles32 = to32(rounds_tiles);
  }
  const int64_t group = spec.persistence()->group_rows;
  mlir::Value steps32 = at_least_1(to32(steps)), worker32 = to32(worker),
              workers32 = at_least_1(to32(workers));
  std::vector<mlir::Value> extents32;
  for (int axis : parallel) extents32.push_back(at_least_1(to32(walked[axis])));
  // Bands of at most R rows (G * C then stays below the tile count).
  mlir::Value plane, band_tiles, group32;
  if (n > 2) plane = mul(extents32[n - 2], extents32[n - 1]);
  if (n >= 2) {
    mlir::Value rows_per_band = c32(group);
    if (cluster > 1) rows_per_band = at_least_1(div(rows_per_band, at_least_1(to32(size))));
    group32 = mlir::arith::MinSIOp::create(b, loc, rows_per_band, extents32[n - 2]);
    band_tiles = mul(group32, extents32[n - 1]);
  }
  mlir::Value size32 = to32(size), rank32 = to32(rank);
  auto loop = mlir::scf::ForOp::create(b, loc, zero, total, one);
  b.setInsertionPoint(loop.getBody()->getTerminator());

  // In the loop: step u's tile and indices.
  mlir::Value u = to32(loop.getInductionVar());
  mlir::Value tile, k_step;
  if (!stream_k) {
    tile = add(worker32, mul(div(u, steps32), workers32));
    k_step = rem(u, steps32);
  } else {
    // A whole-tile round's step u: tile w + (u / K) W; a run's: the line's
    // step v = a_w + u - D K, tile D W + v / K. One division either way.
    auto cmp = [&](mlir::arith::CmpIPredicate p, mlir::Value x, mlir::Value y) {
      return mlir::arith::CmpIOp::create(b, loc, p, x, y).getResult();
    };
    auto select = [&](mlir::Value c, mlir::Value x, mlir::Value y) {
      return mlir::arith::SelectOp::create(b, loc, c, x, y).getResult();
    };
    using P = mlir::arith::CmpIPredicate;
    mlir::Value whole = cmp(P::ult, u, whole_steps32);
    mlir::Value v = add(run_begin32, sub(u, whole_steps32));
    mlir::Value q = div(select(whole, u, v), steps32);
    k_step = rem(select(whole, u, v), steps32);
    tile = select(whole, add(worker32, mul(q, workers32)), add(rounds_tiles32, q));
    // The runs holding the tile's steps: the run's own (w) but for its first
    // tile (the run began after the tile did: v - k_step < a_w) and its last
    // (the tile ends after the run: u - k_step + K > the program's steps),
    // whose are known before the loop. Only the tile's last step reads them
    // (in matmul, under when(last_step)), so they cost no register in the
    // main loop but the two packed values.
    auto and1 = [&](mlir::Value x, mlir::Value y) {
      return mlir::arith::AndIOp::create(b, loc, x, y).getResult();
    };
    mlir::Value in_run = mlir::arith::XOrIOp::create(
        b, loc, whole, mlir::arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1));
    mlir::Value total32 = to32(total);
    mlir::Value is_first = and1(in_run, cmp(P::ult, sub(v, k_step), run_begin32));
    mlir::Value is_last = and1(in_run, cmp(P::ugt, add(sub(u, k_step), steps32), total32));
    mlir::Value runs =
        select(is_first, first_tile_runs32, select(is_last, last_tile_runs32, worker32));
    mlir::Value first_run = mlir::arith::AndIOp::create(b, loc, runs, c32(0xffff));
    mlir::Value parts = add(mlir::arith::ShRUIOp::create(b, loc, runs, c32(16)), c32(1));
    mlir::Value last_u = sub(total32, c32(1));
    t.tile_run_last_step = mlir::arith::OrIOp::create(
        b, loc, cmp(P::eq, k_step, sub(steps32, c32(1))), cmp(P::eq, u, last_u));
    t.tile_run_parts = to_index(parts);
    t.tile_run_part = to_index(sub(worker32, first_run));
    t.tile_run_split = to_index(select(cmp(P::ugt, parts, c32(1)), first_run, c32(0)));
  }
  t.sequential_ids.assign(static_cast<size_t>(t.grid_rank), mlir::Value());
  t.sequential_extents = extents;
  t.sequential_ids[static_cast<size_t>(sequential)] = to_index(k_step);
  mlir::Value inner = tile;  // the tile's index within its R x C plane (or line)
  if (n > 2) {               // the outer axes, row-major, then the plane
    mlir::Value outer = div(tile, plane);
    inner = rem(tile, plane);
    // The outermost axis takes what is left (no remainder: a tile past the
    // last, which a pipeline indexes for a copy it does not issue, may give
    // an index past its extent).
    for (size_t i = n - 2; i-- > 1;) {
      t.sequential_ids[static_cast<size_t>(parallel[i])] = to_index(rem(outer, extents32[i]));
      outer = div(outer, extents32[i]);
    }
    t.sequential_ids[static_cast<size_t>(parallel[0])] = to_index(outer);
  }
  if (n == 1) t.sequential_ids[static_cast<size_t>(parallel[0])] = to_index(inner);
  if (n >= 2) {
    mlir::Value band = div(inner, band_tiles);
    mlir::Value first = mul(band, group32);
    mlir::Value band_rows = at_least_1(
        mlir::arith::MinSIOp::create(b, loc, sub(to32(walked[parallel[n - 2]]), first), group32));
    mlir::Value q = sub(inner, mul(band, band_tiles));
    mlir::Value row = add(first, rem(q, band_rows));
    if (cluster > 1) row = add(mul(row, size32), rank32);  // the CTA's row of its cluster's
    t.sequential_ids[static_cast<size_t>(parallel[n - 2])] = to_index(row);
    t.sequential_ids[static_cast<size_t>(parallel[n - 1])] = to_index(div(q, band_rows));
    if (cluster > 1) t.cluster_row_id = t.sequential_ids[static_cast<size_t>(parallel[n - 2])];
  }
  return loop;
}

/// Whether any of `values` may be computed from `target`, through the ops
/// that define them. Conservative where the def-use chain does not tell: a
/// result of an op with regions (an scf.if's) or an argument of a block other
/// than `func`'s entry and `loop`'s body counts as dependent.
bool depends_on(llvm::ArrayRef<mlir::Value> values, mlir::Value target, mlir::func::FuncOp func,
                mlir::scf::ForOp loop) {
  llvm::SmallVector<mlir::Value> work(values.begin(), values.end());
  llvm::DenseSet<mlir::Value> seen;
  while (!work.empty()) {
    mlir::Value v = work.pop_back_val();
    if (v == target) return true;
    if (!seen.insert(v).second) continue;
    if (auto arg = llvm::dyn_cast<mlir::BlockArgument>(v)) {
      mlir::Block* owner = arg.getOwner();
      if (owner != &func.getBody().front() && owner != loop.getBody()) return true;
      continue;
    }
    mlir::Operation* def = v.getDefiningOp();
    if (def->getNumRegions() != 0) return true;
    work.append(def->getOperands().begin(), def->getOperands().end());
  }
  return false;
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
  for (const auto& d : ops)
    for (const DimExpr& e : d.shape)
      if (e.reads_programs() && !spec.persistence())
        spec.fail("operand '" + d.name + "' has a dim '" + e.to_string() +
                  "' that reads persistent_programs(), but the grid is not persistent "
                  "(spec.persistent)");
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
    // Loaded blocks are distributed over the threads, or, when they have at
    // most one element per thread (a bias row), loaded whole by every thread
    // (replicated). An output block may be any size: a value with one element
    // per row (replicated) is stored too.
    if (!full && d.role != Role::kOutput && elements > spec.threads() &&
        elements % spec.threads() != 0)
      spec.fail("block of operand '" + d.name + "' has " + std::to_string(elements) +
                " elements, not a multiple of the " + std::to_string(spec.threads()) +
                " threads of a program (nor at most one per thread)");
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
  // The launched grid: the parallel axes, in order, as CUDA's x, y, z.
  std::vector<int> launched_axis;
  int launched = 0;
  for (size_t axis = 0; axis < spec.grid_axes().size(); ++axis)
    launched_axis.push_back(spec.semantics(axis) == Semantics::kArbitrary ? -1 : launched++);
  if (spec.persistence()) {  // one launched axis: the programs walking the tiles
    if (launched_axis.size() - static_cast<size_t>(launched) != 1)
      spec.fail(
          "persistent needs exactly one arbitrary grid axis (each tile's loop); the grid "
          "has " +
          std::to_string(launched_axis.size() - static_cast<size_t>(launched)));
    launched = 1;
  }
  if (launched > 3)
    spec.fail("the grid has " + std::to_string(launched) +
              " parallel axes; at most 3 are launched (CUDA's x, y, z): mark the others "
              "arbitrary or fold them into one axis");
  if (const int max = spec.cluster_first_axis_max(); max > 0) {
    if (spec.persistence())
      spec.fail(
          "cluster_first_axis with persistent(); a persistent grid clusters its walk "
          "(Persistent::cluster)");
    if (launched_axis.empty() || launched_axis[0] != 0)
      spec.fail(
          "cluster_first_axis: grid axis 0 must be parallel (launched as CUDA's x, the "
          "cluster's axis); it is " +
          std::string(launched_axis.empty() ? "missing" : "arbitrary"));
    func->setAttr("pallas.cluster_first_axis", builder.getI64IntegerAttr(max));
  }
  func->setAttr(mlir::pallas::kGridRankAttrName, builder.getI32IntegerAttr(launched));
  func->setAttr("pallas.threads", builder.getI64IntegerAttr(spec.threads()));
  if (spec.max_registers() != 0 && (spec.max_registers() < 24 || spec.max_registers() > 255))
    spec.fail("max_registers(" + std::to_string(spec.max_registers()) +
              "): ptxas takes a register bound between 24 and 255");
  if (int n = spec.run_elements(); n != 0) {
    if (n < 0 || n > 64 || (n & (n - 1)) != 0)
      spec.fail("run_elements(" + std::to_string(n) + "): a power of two from 1 to 64");
    func->setAttr("pallas.run_elements", builder.getI64IntegerAttr(n));
  }
  if (spec.max_registers() > 0)
    func->setAttr("pallas.max_registers", builder.getI64IntegerAttr(spec.max_registers()));
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

  Trace t{&spec, &ctx, builder, loc, {}, {}, {}, static_cast<int>(spec.grid_axes().size()), {}, {}};
  for (size_t i = 0, arg = 0; i < ops.size(); ++i) {
    if (ops[i].role != Role::kScratch) {
      t.args.push_back(entry->getArgument(arg++));
      continue;
    }
    auto type = mlir::MemRefType::get(ops[i].scratch_shape, to_mlir_type(ops[i].dtype, ctx));
    auto scratch = mlir::pallas::ScratchOp::create(t.builder, loc, type, ops[i].accumulator);
    scratch->setAttr("name", mlir::StringAttr::get(&ctx, ops[i].name));
    t.args.push_back(scratch);
  }
  t.refs.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) t.refs[i].operand = static_cast<int>(i);
  t.sequential_ids.resize(t.grid_rank);
  t.sequential_extents.resize(t.grid_rank);
  t.launched_axis = launched_axis;
  Trace* saved = current_trace;
  current_trace = &t;
  struct Restore {
    Trace* saved;
    ~Restore() { current_trace = saved; }
  } restore{saved};

  // Arbitrary grid axes become loops inside the program, outermost first;
  // the body (index maps included) is traced inside the innermost one. With
  // staged blocks the innermost is a pipeline (kPipelineAttrName) whose
  // stages are those blocks.
  OpBuilder::InsertPoint function_end = t.builder.saveInsertionPoint();
  mlir::scf::ForOp innermost;
  if (spec.persistence()) innermost = persistent_loop(t);
  for (int axis = 0; axis < t.grid_rank && !spec.persistence(); ++axis) {
    if (spec.semantics(static_cast<size_t>(axis)) != Semantics::kArbitrary) continue;
    mlir::Value extent = materialize(spec.grid_axes()[static_cast<size_t>(axis)]);
    mlir::Value zero = mlir::arith::ConstantIndexOp::create(t.builder, loc, 0);
    mlir::Value one = mlir::arith::ConstantIndexOp::create(t.builder, loc, 1);
    innermost = mlir::scf::ForOp::create(t.builder, loc, zero, extent, one);
    t.sequential_ids[axis] = innermost.getInductionVar();
    t.sequential_extents[axis] = extent;
    t.builder.setInsertionPoint(innermost.getBody()->getTerminator());
  }
  if (innermost && spec.has_staged_blocks()) {
    innermost->setAttr(mlir::pallas::kPipelineAttrName, builder.getUnitAttr());
    if (const int delay = spec.delay_release(); delay > 0) {
      for (const OperandDecl& d : ops)
        if (d.staged && d.role == Role::kInput &&
            (d.staged->buffers ? d.staged->buffers : spec.max_concurrent_steps()) <= delay)
          spec.fail(
              "delay_release(" + std::to_string(delay) + ") but staged input '" + d.name +
              "' has " +
              std::to_string(d.staged->buffers ? d.staged->buffers : spec.max_concurrent_steps()) +
              " stage buffers; it needs more than the delay (max_concurrent_steps)");
      innermost->setAttr(mlir::pallas::kDelayReleaseAttrName, builder.getI64IntegerAttr(delay));
    }
  }
  if (const auto& ws = spec.warp_specialization(); ws && !spec.direct()) {
    int arbitrary = 0;
    for (size_t axis = 0; axis < spec.grid_axes().size(); ++axis)
      arbitrary += spec.semantics(axis) == Semantics::kArbitrary;
    if (!innermost || !spec.has_staged_blocks() || arbitrary != 1)
      spec.fail(
          "warp_specialize needs one pipelined grid axis (one arbitrary axis and InShared "
          "blocks): the producer warpgroup copies its stages");
    if (spec.threads() % 128 != 0 || spec.threads() > 512)
      spec.fail("warp_specialize with threads(" + std::to_string(spec.threads()) +
                "); the consumers are 1 to 4 whole warpgroups (128 to 512 threads)");
    for (const OperandDecl& d : ops)
      if (d.staged && d.role == Role::kOutput)
        spec.fail("warp_specialize with staged output '" + d.name +
                  "'; the producer copies inputs only (store outputs from registers)");
    // The kernel launches every warpgroup with the mean rounded up to a
    // multiple of 8; setmaxnreg then moves registers from the producer to
    // the W consumer warpgroups within that pool, which must hold what they
    // ask for (setmaxnreg.inc waits for registers the pool does not have: a
    // hang) and fit the SM. Worked example, W = 2: (40 + 2 * 232) / 3 = 168
    // a thread at launch, 3 * 128 * 168 = 64512 of the SM's 65536.
    const int consumers = spec.threads() / 128;
    const int wanted = ws->producer_registers + consumers * ws->consumer_registers;
    const int launch = (wanted + 8 * (consumers + 1) - 1) / (8 * (consumers + 1)) * 8;
    if (launch * (consumers + 1) * 128 > 65536)
      spec.fail("warp_specialize: the producer's " + std::to_string(ws->producer_registers) +
                " and " + std::to_string(consumers) + " consumer warpgroup(s)' " +
                std::to_string(ws->consumer_registers) + " registers a thread launch with " +
                std::to_string(launch) +
                " each: " + std::to_string(launch * (consumers + 1) * 128) +
                " registers, more than the SM's 65536");
    func->setAttr("pallas.max_registers", builder.getI64IntegerAttr(launch));
    innermost->setAttr(
        mlir::pallas::kWarpSpecializedAttrName,
        builder.getDenseI64ArrayAttr({ws->producer_registers, launch, ws->consumer_registers}));
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
    auto block = mlir::pallas::BlockOp::create(
        t.builder, loc, ref_type, t.args[i], indices, block_shape, squeezed, /*staged=*/false,
        /*swizzle=*/nullptr, /*buffers=*/nullptr, /*tiling=*/nullptr, /*multicast=*/false);
    if (d.staged) {  // InShared: the GPU lowering stages it with TMA
      block.setStaged(true);
      // The same block for every CTA of a cluster: loaded once, multicast.
      if (t.cluster_row_id && d.role == Role::kInput &&
          !depends_on(indices, t.cluster_row_id, func, innermost))
        block.setMulticast(true);
      block.setSwizzle(d.staged->swizzle);
      if (!d.staged->tiling.empty())
        block.setTiling(tma_copy_box(d.staged_block, d.staged->tiling));
      if (innermost)  // a stage of the grid's pipeline
        block.setBuffers(d.staged->buffers ? d.staged->buffers : spec.max_concurrent_steps());
      block->setAttr("name", builder.getStringAttr(d.name));
    }
    t.refs[i].ref = block;
    refs.emplace_back(&t, static_cast<int>(i));
  }
  spec.body_fn()(refs);
  // Accumulators start every tile at zero. A program's are zeroed when it
  // starts (the lowerings); a persistent program's again after each tile's
  // last step, where the epilogue has just read them, so their registers die
  // as it does instead of living on beside it.
  if (spec.persistence()) {
    int sequential = 0;
    for (int axis = 0; axis < t.grid_rank; ++axis)
      if (spec.semantics(static_cast<size_t>(axis)) == Semantics::kArbitrary) sequential = axis;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].role != Role::kScratch || !ops[i].accumulator) continue;
      Ref acc(&t, static_cast<int>(i));
      when(program_id(sequential) == num_programs(sequential) - index(1),
           [&] { acc.store(broadcast_to(constant(0, f32), ops[i].scratch_shape)); });
    }
  }
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].role == Role::kOutput && !t.refs[i].stored)
      spec.fail("output '" + ops[i].name + "' is never stored");
  t.builder.restoreInsertionPoint(function_end);
  mlir::func::ReturnOp::create(t.builder, loc);
}

/// What makes a direct twin the kernel it is: its IR with its own name taken
/// out (body, grid, threads, registers, persistence), and what its launcher
/// and metadata read from the spec besides: each operand's role, dtype,
/// shape, aliasing, scalar bound and semaphore scope, and the check messages.
std::string twin_fingerprint(const KernelSpec& spec, mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  const std::string name = spec.instance_name();
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at))
    text.replace(at, name.size(), "@twin");
  text += "\nthreads " + std::to_string(spec.threads()) + " registers " +
          std::to_string(spec.max_registers());
  for (const DimExpr& axis : spec.grid_axes()) text += "\ngrid " + axis.to_string();
  for (const OperandDecl& d : spec.operands()) {
    text += "\noperand " + d.name + " role " + std::to_string(static_cast<int>(d.role)) +
            " dtype " + std::string(edsl::name(d.dtype)) + " aliases " +
            std::to_string(d.aliased_to) + " " + std::to_string(d.aliased_from) + " scope " +
            std::to_string(static_cast<int>(d.semaphore_scope)) + " min " +
            (d.min_value ? std::to_string(*d.min_value) : "-") + " shape";
    for (const DimExpr& e : d.shape) text += " " + e.to_string();
  }
  for (const std::string& m : spec.check_messages()) text += "\ncheck " + m;
  return text;
}

}  // namespace

std::vector<TracedKernel> trace_spec(const char* op, SpecFn spec_fn, mlir::MLIRContext& context) {
  context.loadDialect<mlir::pallas::PallasDialect, mlir::func::FuncDialect,
                      mlir::arith::ArithDialect, mlir::math::MathDialect, mlir::scf::SCFDialect,
                      mlir::vector::VectorDialect, mlir::memref::MemRefDialect>();
  std::vector<TracedKernel> out;
  std::vector<int> radix;  // options per dtype parameter, learned from instance 0
  int count = 1;
  // The direct twins traced so far: (fingerprint, index in `out`).
  std::vector<std::pair<std::string, size_t>> twins;
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
    const bool staged = spec->has_staged_blocks();
    out.push_back(TracedKernel{spec->instance_name(), spec, std::move(module)});
    if (staged) {  // the instance without staging that the entry point falls back to
      auto direct = std::make_shared<KernelSpec>(op, choice);
      direct->set_direct(true);
      mlir::OwningOpRef<mlir::ModuleOp> direct_module(
          mlir::ModuleOp::create(mlir::UnknownLoc::get(&context)));
      mlir::ModuleOp dm = *direct_module;
      direct->set_body_hook([dm](KernelSpec& s) mutable { trace_body(s, dm); });
      spec_fn(*direct);
      direct->set_body_hook(nullptr);
      if (mlir::failed(mlir::verify(dm)))
        direct->fail("internal error: traced kernel IR does not verify");
      // A variant's twin that is another variant's twin kernel for kernel (the
      // same IR and launch shapes, names aside) is not compiled again: the
      // staged instance falls back to the first one.
      std::string key = twin_fingerprint(*direct, dm);
      auto same = std::find_if(twins.begin(), twins.end(), [&](const auto& t) {
        return t.first == key && out[t.second].spec->entry_name() == direct->entry_name();
      });
      if (same != twins.end()) {
        TracedKernel& first = out[same->second];
        first.spec->add_twin_serves(direct->variant_index());
        spec->set_shared_twin(first.instance);
        continue;
      }
      twins.emplace_back(std::move(key), out.size());
      out.push_back(TracedKernel{direct->instance_name(), direct, std::move(direct_module)});
    }
  }
  return out;
}

}  // namespace pallas::edsl
