//===- TraceAsync.cpp - tracing explicit async copies and barriers --------===//
//
// run_scoped, copy_gmem_to_smem, copy_smem_to_gmem, async_prefetch and the
// barrier operations of Spec.h, traced into `pallas.run_scoped` and the
// copy and barrier ops of PallasDialect.td. The checks here name the buffer,
// the operand and the dim; the GPU lowering (AsyncCopyRules.cpp) assumes them.
//
//===----------------------------------------------------------------------===//

#include "TraceState.h"

namespace pallas::edsl {

using namespace trace_state;

mlir::Type to_mlir_type(DType dtype, mlir::MLIRContext& context);  // Trace.cpp

namespace {

BarrierState& barrier_state(const Barriers& bars) {
  auto* t = static_cast<Trace*>(bars.impl());
  if (t != current_trace) throw SpecError("Barriers were used outside the body they were given to");
  BarrierState& s = t->barriers[static_cast<size_t>(bars.id())];
  if (!s.value)
    fail("barriers '" + s.name + "' were used after the run_scoped body they belong to");
  return s;
}

/// The !pallas.barriers value and the index of `ref`'s barrier, checked
/// against the array's extent when it is a constant.
std::pair<mlir::Value, mlir::Value> barrier_of(const BarrierRef& ref, const char* what) {
  BarrierState& s = barrier_state(*ref.array);
  mlir::Value index = unwrap(ref.index.value());
  if (auto c = index.getDefiningOp<mlir::arith::ConstantIndexOp>())
    if (c.value() < 0 || c.value() >= s.count)
      fail(std::string(what) + " of barrier " + std::to_string(c.value()) + " of '" + s.name +
           "', an array of " + std::to_string(s.count));
  return {s.value, index};
}

/// The operand behind a whole-array Ref (every dim full), for a copy.
int copied_operand(const Ref& ref, const char* what) {
  const RefState& s = RefAccess::state(ref);
  if (s.operand < 0)
    fail(std::string(what) + ": '" + ref.name() +
         "' is a run_scoped buffer where the operand's whole-array Ref belongs");
  const OperandDecl& d = trace().spec->operands()[static_cast<size_t>(s.operand)];
  if (ref.shape().size() != d.shape.size())
    fail(std::string(what) + ": the block of '" + d.name +
         "' must be the whole array (every dim full); its copies take element offsets");
  for (size_t dim = 0; dim < ref.shape().size(); ++dim)
    if (ref.shape()[dim] >= 0)
      fail(std::string(what) + ": the block of '" + d.name + "' dim " + std::to_string(dim) +
           " is not full; a copy's array is the whole-array Ref (every dim full)");
  return s.operand;
}

/// The run_scoped buffer behind `ref`.
mlir::Value copied_buffer(const Ref& ref, const char* what) {
  const RefState& s = RefAccess::state(ref);
  if (s.operand >= 0)
    fail(std::string(what) + ": '" + ref.name() +
         "' is an operand's block; the buffer side of a copy is a run_scoped buffer");
  return s.ref.getDefiningOp<mlir::pallas::BlockOp>().getArray();
}

/// Element offsets into operand `operand`, one per array dim.
llvm::SmallVector<mlir::Value> copy_offsets(const std::vector<Idx>& offsets, int operand,
                                            const char* what) {
  const OperandDecl& d = trace().spec->operands()[static_cast<size_t>(operand)];
  if (offsets.size() != d.shape.size())
    fail(std::string(what) + " of '" + d.name + "': " + std::to_string(offsets.size()) +
         " offsets for an array of rank " + std::to_string(d.shape.size()));
  llvm::SmallVector<mlir::Value> out;
  for (const Idx& o : offsets) out.push_back(unwrap(o.value()));
  return out;
}

/// The buffer's box, after checking it copies with operand `operand`: same
/// rank and dtype, and TMA's rules for the box (Spec.cpp check_staging).
std::vector<int64_t> copy_box(mlir::Value buffer, int operand, const char* what) {
  const OperandDecl& d = trace().spec->operands()[static_cast<size_t>(operand)];
  auto type = llvm::cast<mlir::MemRefType>(buffer.getType());
  auto scope = llvm::cast<mlir::BlockArgument>(buffer);
  if (type.getRank() != static_cast<int64_t>(d.shape.size()))
    fail(std::string(what) + ": a rank-" + std::to_string(type.getRank()) +
         " buffer with operand '" + d.name + "' of rank " + std::to_string(d.shape.size()) +
         "; a buffer has the rank of the arrays it is copied with");
  if (dtype_of(type.getElementType()) != d.dtype)
    fail(std::string(what) + ": a " + edsl::name(dtype_of(type.getElementType())) +
         " buffer with operand '" + d.name + "' of dtype " + edsl::name(d.dtype));
  std::vector<int64_t> box(type.getShape().begin(), type.getShape().end());
  const int64_t swizzle = *mlir::pallas::RunScopedOp::swizzleOf(scope);
  trace().spec->stage_for_copies(operand, box, static_cast<int>(swizzle));
  return box;
}

}  // namespace

BarrierRef::BarrierRef(const Barriers& array, Idx index) : array(&array), index(std::move(index)) {}

int Barriers::count() const { return barrier_state(*this).count; }

void run_scoped(
    std::vector<SharedBuffer> buffers, std::vector<Barrier> barriers,
    const std::function<void(std::vector<Ref> buffers, std::vector<Barriers> barriers)>& body,
    std::source_location where) {
  Located here(where);
  Trace& t = trace();
  llvm::SmallVector<mlir::Type> types;
  llvm::SmallVector<int64_t> swizzles;
  for (const SharedBuffer& buf : buffers) {
    const std::string what = "run_scoped buffer '" + buf.name + "'";
    if (buf.shape.empty() || buf.shape.size() > 5)
      fail(what + " has rank " + std::to_string(buf.shape.size()) +
           "; a copy buffer has 1 to 5 dims");
    for (size_t d = 0; d < buf.shape.size(); ++d)
      if (buf.shape[d] <= 0)
        fail(what + " dim " + std::to_string(d) + " is " + std::to_string(buf.shape[d]) +
             "; buffer dims are positive");
    if (buf.swizzle != 0 && buf.swizzle != 32 && buf.swizzle != 64 && buf.swizzle != 128)
      fail(what + ": swizzle " + std::to_string(buf.swizzle) +
           "; TMA swizzles 0, 32, 64 or 128 bytes");
    if (buf.dtype == DType::i1 || buf.dtype == DType::index)
      fail(what + " has dtype " + edsl::name(buf.dtype) + "; buffers hold operand dtypes");
    types.push_back(mlir::MemRefType::get(buf.shape, to_mlir_type(buf.dtype, *t.context)));
    swizzles.push_back(buf.swizzle);
  }
  for (const Barrier& bar : barriers) {
    if (bar.count < 1 || bar.count > 32)
      fail("run_scoped barriers '" + bar.name + "': " + std::to_string(bar.count) +
           " barriers; an array has 1 to 32");
    if (bar.arrivals < 1)
      fail("run_scoped barriers '" + bar.name + "': " + std::to_string(bar.arrivals) +
           " arrivals; a barrier needs at least 1");
    types.push_back(mlir::pallas::BarriersType::get(t.context, bar.count, bar.arrivals));
  }
  auto scope = mlir::pallas::RunScopedOp::create(b(), loc(), swizzles);
  mlir::Block* block = new mlir::Block();
  scope.getBody().push_back(block);
  for (mlir::Type type : types) block->addArgument(type, loc());
  OpBuilder::InsertionGuard guard(b());
  b().setInsertionPointToStart(block);
  std::vector<Ref> refs;
  std::vector<size_t> made_refs;
  for (size_t k = 0; k < buffers.size(); ++k) {
    auto type = llvm::cast<mlir::MemRefType>(types[k]);
    llvm::SmallVector<mlir::Value> zeros(type.getRank(),
                                         mlir::arith::ConstantIndexOp::create(b(), loc(), 0));
    auto ref_type = mlir::pallas::RefType::get(t.context, type.getShape(), type.getElementType());
    auto blk = mlir::pallas::BlockOp::create(
        b(), loc(), ref_type, block->getArgument(k), zeros, type.getShape(),
        llvm::SmallVector<bool>(type.getRank(), false), /*staged=*/false, /*swizzle=*/nullptr,
        /*buffers=*/nullptr, /*tiling=*/nullptr, /*multicast=*/false);
    blk->setAttr("name", b().getStringAttr(buffers[k].name));
    t.refs.push_back(RefState{blk, false, -1, buffers[k].name, buffers[k].dtype});
    made_refs.push_back(t.refs.size() - 1);
    refs.emplace_back(&t, static_cast<int>(t.refs.size() - 1));
  }
  std::vector<Barriers> bars;
  std::vector<size_t> made_bars;
  for (size_t k = 0; k < barriers.size(); ++k) {
    t.barriers.push_back(
        BarrierState{block->getArgument(buffers.size() + k), barriers[k].name, barriers[k].count});
    made_bars.push_back(t.barriers.size() - 1);
    bars.emplace_back(&t, static_cast<int>(t.barriers.size() - 1));
  }
  body(std::move(refs), std::move(bars));
  for (size_t r : made_refs) t.refs[r].ref = nullptr;  // they live in this body only
  for (size_t r : made_bars) t.barriers[r].value = nullptr;
}

void copy_gmem_to_smem(const Ref& src, const std::vector<Idx>& offsets, const Ref& dst,
                       const BarrierRef& barrier, std::source_location where) {
  Located here(where);
  const char* what = "copy_gmem_to_smem";
  const int operand = copied_operand(src, what);
  mlir::Value buffer = copied_buffer(dst, what);
  copy_box(buffer, operand, what);
  auto at = copy_offsets(offsets, operand, what);
  auto [bars, index] = barrier_of(barrier, what);
  mlir::pallas::CopyToSharedOp::create(b(), loc(), trace().args[operand], at, buffer, bars, index,
                                       trace().spec->direct());
}

void copy_smem_to_gmem(const Ref& src, const Ref& dst, const std::vector<Idx>& offsets,
                       CopyOutOptions options, std::source_location where) {
  Located here(where);
  const char* what = "copy_smem_to_gmem";
  const int operand = copied_operand(dst, what);
  const OperandDecl& d = trace().spec->operands()[static_cast<size_t>(operand)];
  if (d.role != Role::kOutput)
    fail(std::string(what) + ": '" + d.name + "' is not an output; copies write outputs only");
  mlir::Value buffer = copied_buffer(src, what);
  copy_box(buffer, operand, what);
  if (options.add && d.dtype != DType::f32 && d.dtype != DType::i32)
    fail(std::string(what) + " with add to '" + d.name + "' of dtype " + edsl::name(d.dtype) +
         "; the add reduction is for f32 and i32");
  auto at = copy_offsets(offsets, operand, what);
  trace().refs[static_cast<size_t>(operand)].stored = true;
  mlir::pallas::CopyToGlobalOp::create(b(), loc(), buffer, trace().args[operand], at, options.add,
                                       !options.commit_group, trace().spec->direct());
}

void async_prefetch(const Ref& array, const std::vector<Idx>& offsets, std::source_location where) {
  Located here(where);
  const char* what = "async_prefetch";
  const int operand = copied_operand(array, what);
  const OperandDecl& d = trace().spec->operands()[static_cast<size_t>(operand)];
  // The prefetch uses the array's TMA descriptor, whose box its copies set.
  if (d.staged_block.empty() && !trace().spec->direct())
    fail(std::string(what) + " of '" + d.name +
         "' before any copy of it; a prefetch fetches the box of the array's copies");
  auto at = copy_offsets(offsets, operand, what);
  mlir::pallas::PrefetchOp::create(b(), loc(), trace().args[operand], at, d.staged_block,
                                   trace().spec->direct());
}

void barrier_wait(const BarrierRef& barrier, std::source_location where) {
  Located here(where);
  auto [bars, index] = barrier_of(barrier, "barrier_wait");
  mlir::pallas::BarrierWaitOp::create(b(), loc(), bars, index);
}

void barrier_arrive(const BarrierRef& barrier, std::source_location where) {
  Located here(where);
  auto [bars, index] = barrier_of(barrier, "barrier_arrive");
  mlir::pallas::BarrierArriveOp::create(b(), loc(), bars, index);
}

void commit_smem(std::source_location where) {
  Located here(where);
  mlir::pallas::CommitSharedOp::create(b(), loc());
}

void commit_smem_to_gmem_group(std::source_location where) {
  Located here(where);
  mlir::pallas::CommitCopiesToGlobalOp::create(b(), loc());
}

void wait_smem_to_gmem(int n, bool wait_read_only, std::source_location where) {
  Located here(where);
  if (n < 0) fail("wait_smem_to_gmem(" + std::to_string(n) + "): a count of groups, at least 0");
  mlir::pallas::WaitCopiesToGlobalOp::create(b(), loc(), n, wait_read_only);
}

}  // namespace pallas::edsl
