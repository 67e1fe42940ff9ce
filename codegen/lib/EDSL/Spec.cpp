//===- Spec.cpp - kernel declarations: dims, operands, blocks, grid -------===//

#include "pallas/EDSL/Spec.h"

#include <algorithm>
#include <map>

namespace pallas::edsl {

const char* name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i1:
      return "i1";
    case DType::index:
      return "index";
  }
  return "?";
}

bool is_float(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

int64_t dtype_bytes(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16 ? 2
         : dtype == DType::i1                        ? 1
         : dtype == DType::index                     ? 8
                                                     : 4;
}

//===----------------------------------------------------------------------===//
// DimExpr
//===----------------------------------------------------------------------===//

DimExpr::DimExpr(int64_t value)
    : node_(std::make_shared<const Node>(Node{Kind::kConst, value, -1, "", nullptr, nullptr})) {}

DimExpr DimExpr::dim(int index, std::string name) {
  return DimExpr(
      std::make_shared<const Node>(Node{Kind::kDim, 0, index, std::move(name), nullptr, nullptr}));
}

DimExpr DimExpr::device_shared_bytes() {
  return DimExpr(std::make_shared<const Node>(
      Node{Kind::kDeviceSharedBytes, 0, -1, "device_shared_bytes", nullptr, nullptr}));
}

DimExpr DimExpr::persistent_programs() {
  return DimExpr(std::make_shared<const Node>(
      Node{Kind::kPrograms, 0, -1, "persistent_programs", nullptr, nullptr}));
}

bool DimExpr::reads_device() const {
  if (node_->kind == Kind::kDeviceSharedBytes) return true;
  return node_->lhs && (lhs().reads_device() || rhs().reads_device());
}

bool DimExpr::reads_programs() const {
  if (node_->kind == Kind::kPrograms) return true;
  return node_->lhs && (lhs().reads_programs() || rhs().reads_programs());
}

DimExpr DimExpr::binary(Kind kind, const DimExpr& a, const DimExpr& b) {
  return DimExpr(std::make_shared<const Node>(Node{kind, 0, -1, "", a.node_, b.node_}));
}

DimExpr operator+(const DimExpr& a, const DimExpr& b) {
  return DimExpr::binary(DimExpr::Kind::kAdd, a, b);
}
DimExpr operator-(const DimExpr& a, const DimExpr& b) {
  return DimExpr::binary(DimExpr::Kind::kSub, a, b);
}
DimExpr operator*(const DimExpr& a, const DimExpr& b) {
  return DimExpr::binary(DimExpr::Kind::kMul, a, b);
}
DimExpr cdiv(const DimExpr& a, const DimExpr& b) {
  return DimExpr::binary(DimExpr::Kind::kCdiv, a, b);
}
DimExpr max(const DimExpr& a, const DimExpr& b) {
  return DimExpr::binary(DimExpr::Kind::kMax, a, b);
}
DimExpr min(const DimExpr& a, const DimExpr& b) {
  return DimExpr::binary(DimExpr::Kind::kMin, a, b);
}

DimExpr le(const DimExpr& a, const DimExpr& b) { return DimExpr::binary(DimExpr::Kind::kLe, a, b); }

std::string DimExpr::print(bool cpp) const {
  const Node& n = *node_;
  auto sub = [](const std::shared_ptr<const Node>& p, bool c) { return DimExpr(p).print(c); };
  switch (n.kind) {
    case Kind::kConst:
      return std::to_string(n.value);
    case Kind::kDim:
      return n.name;
    case Kind::kDeviceSharedBytes:
      return cpp ? "pallas::detail::device_shared_bytes(launch)" : "device_shared_bytes";
    case Kind::kPrograms:  // the entry point's count (Emitter.cpp), before it asks for memory
      return cpp ? "programs" : "persistent_programs";
    case Kind::kAdd:
      return "(" + sub(n.lhs, cpp) + " + " + sub(n.rhs, cpp) + ")";
    case Kind::kSub:
      return "(" + sub(n.lhs, cpp) + " - " + sub(n.rhs, cpp) + ")";
    case Kind::kMul:
      return "(" + sub(n.lhs, cpp) + " * " + sub(n.rhs, cpp) + ")";
    case Kind::kCdiv:
      return std::string(cpp ? "pallas_cdiv(" : "cdiv(") + sub(n.lhs, cpp) + ", " +
             sub(n.rhs, cpp) + ")";
    case Kind::kMax:
      return std::string(cpp ? "std::max<int64_t>(" : "max(") + sub(n.lhs, cpp) + ", " +
             sub(n.rhs, cpp) + ")";
    case Kind::kMin:
      return std::string(cpp ? "std::min<int64_t>(" : "min(") + sub(n.lhs, cpp) + ", " +
             sub(n.rhs, cpp) + ")";
    case Kind::kLe:
      return cpp ? "static_cast<int64_t>(" + sub(n.lhs, cpp) + " <= " + sub(n.rhs, cpp) + ")"
                 : "le(" + sub(n.lhs, cpp) + ", " + sub(n.rhs, cpp) + ")";
  }
  return "?";
}
std::string DimExpr::to_cpp() const { return print(true); }
std::string DimExpr::to_string() const { return print(false); }

//===----------------------------------------------------------------------===//
// KernelSpec
//===----------------------------------------------------------------------===//

KernelSpec::KernelSpec(std::string op, std::vector<int> instance_choice)
    : op_(std::move(op)), instance_choice_(std::move(instance_choice)) {}

std::string KernelSpec::entry_name() const {
  std::string s = op_;
  for (DType d : chosen_) s += std::string("_") + name(d);
  return s;
}

std::string KernelSpec::instance_name() const {
  std::string s = variant_name_.empty() ? entry_name() : entry_name() + "_" + variant_name_;
  return direct_ ? s + "_direct" : s;
}

bool KernelSpec::has_staged_blocks() const {
  for (const OperandDecl& d : operands_)
    if (d.staged) return true;
  return false;
}

void KernelSpec::fail(const std::string& message) const {
  throw SpecError("spec '" + instance_name() + "': " + message);
}

std::vector<DType> KernelSpec::dtype_params(const std::vector<std::string>& names,
                                            std::vector<std::vector<DType>> combinations) {
  if (combinations.empty()) fail("dtype parameter list is empty");
  for (const auto& c : combinations)
    if (c.size() != names.size())
      fail("each dtype combination must have " + std::to_string(names.size()) + " entries");
  int slot = params_seen_++;
  int choice = slot < static_cast<int>(instance_choice_.size()) ? instance_choice_[slot] : 0;
  num_instances_ *= static_cast<int>(combinations.size());
  param_counts_.push_back(static_cast<int>(combinations.size()));
  const std::vector<DType>& picked = combinations.at(choice);
  chosen_.insert(chosen_.end(), picked.begin(), picked.end());
  return picked;
}

int KernelSpec::variant(const std::string& name, std::vector<std::string> options, DimExpr choose) {
  if (options.empty()) fail("variant '" + name + "' has no options");
  if (variant_chooser_) fail("variant '" + name + "': a spec has at most one variant");
  require_no_programs(choose, "variant '" + name + "' chooser");
  int slot = params_seen_++;
  int choice = slot < static_cast<int>(instance_choice_.size()) ? instance_choice_[slot] : 0;
  num_instances_ *= static_cast<int>(options.size());
  param_counts_.push_back(static_cast<int>(options.size()));
  variant_chooser_ = std::move(choose);
  variant_index_ = choice;
  variant_name_ = options.at(choice);
  return choice;
}

DType KernelSpec::dtype_param(const std::string& name, std::vector<DType> options) {
  std::vector<std::vector<DType>> combos;
  for (DType d : options) combos.push_back({d});
  return dtype_params({name}, std::move(combos))[0];
}

DimExpr KernelSpec::dim(const std::string& name) {
  if (std::find(dim_names_.begin(), dim_names_.end(), name) != dim_names_.end())
    fail("dim '" + name + "' is declared twice");
  dim_names_.push_back(name);
  return DimExpr::dim(static_cast<int>(dim_names_.size()) - 1, name);
}

Operand KernelSpec::add_operand(const std::string& name, Role role, DType dtype,
                                std::vector<DimExpr> shape) {
  for (const auto& o : operands_)
    if (o.name == name) fail("operand '" + name + "' is declared twice");
  if (dtype == DType::i1 || dtype == DType::index)
    fail("operand '" + name + "' has dtype " + std::string(edsl::name(dtype)) +
         "; operands are f32, f16, bf16 or i32");
  for (size_t d = 0; d < shape.size(); ++d)
    if (role != Role::kSemaphores && role != Role::kWorkspace && role != Role::kErrors &&
        shape[d].kind() != DimExpr::Kind::kDim && shape[d].kind() != DimExpr::Kind::kConst)
      fail("operand '" + name + "' dim " + std::to_string(d) +
           " must be a dim declared with spec.dim() or a constant, not '" + shape[d].to_string() +
           "'");
  if (role != Role::kScalar && shape.empty())
    fail("operand '" + name + "' must have at least one dim");
  if (shape.size() > 4) fail("operand '" + name + "' has more than 4 dims");
  OperandDecl decl{name, role, dtype, std::move(shape), {}, {}, false, -1, -1};
  operands_.push_back(std::move(decl));
  return Operand{static_cast<int>(operands_.size()) - 1};
}

Operand KernelSpec::input(const std::string& name, DType dtype, std::vector<DimExpr> shape) {
  return add_operand(name, Role::kInput, dtype, std::move(shape));
}
Operand KernelSpec::output(const std::string& name, DType dtype, std::vector<DimExpr> shape) {
  return add_operand(name, Role::kOutput, dtype, std::move(shape));
}
Scalar KernelSpec::scalar(const std::string& name, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::i32)
    fail("scalar '" + name + "' must be f32 or i32, not " + std::string(edsl::name(dtype)));
  return Scalar(add_operand(name, Role::kScalar, dtype, {}).index);
}

void KernelSpec::require(DimExpr holds, std::string what) {
  require_no_device(holds, "require(\"" + what + "\")");
  requirements_.emplace_back(std::move(holds), std::move(what));
}

Check KernelSpec::check(const std::string& message) {
  // "{k}" must name one of the 3 values a check records.
  for (size_t at = message.find('{'); at != std::string::npos; at = message.find('{', at + 1)) {
    const bool placeholder = at + 2 < message.size() && message[at + 2] == '}';
    if (!placeholder || message[at + 1] < '0' || message[at + 1] > '2')
      fail("check(\"" + message + "\"): '{' at " + std::to_string(at) +
           " does not start {0}, {1} or {2}");
  }
  if (errors_operand_ < 0)
    errors_operand_ = add_operand("errors", Role::kErrors, DType::i32, {DimExpr(int64_t{8})}).index;
  checks_.push_back(message);
  return Check(errors_operand_, static_cast<int>(checks_.size()) - 1);
}

Semaphores KernelSpec::semaphores(const std::string& name, DimExpr count, SemaphoreScope scope) {
  if (count.reads_device())
    fail("semaphores '" + name + "' count is '" + count.to_string() +
         "'; device_shared_bytes() may only choose a variant (spec.variant): a kernel and its "
         "launch are shaped by the arrays alone");
  Operand op = add_operand(name, Role::kSemaphores, DType::i32, {std::move(count)});
  operands_[op.index].semaphore_scope = scope;
  return Semaphores(op.index, scope);
}

Operand KernelSpec::scratch(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  std::vector<DimExpr> dims;
  std::vector<BlockDim> block;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 0)
      fail("scratch '" + name + "' dim " + std::to_string(d) + " is " + std::to_string(shape[d]) +
           "; scratch dims are positive constants");
    dims.emplace_back(shape[d]);
    block.emplace_back(Blocked{shape[d]});
  }
  Operand op = add_operand(name, Role::kScratch, dtype, std::move(dims));
  OperandDecl& d = operands_[op.index];
  d.scratch_shape = std::move(shape);
  d.block = std::move(block);
  d.index_map = [rank = d.shape.size()](const ProgramIds&) { return Indices(rank, Idx(0)); };
  d.has_block = true;
  return op;
}

Operand KernelSpec::accumulator(const std::string& name, std::vector<int64_t> shape) {
  if (shape.size() != 2)
    fail("accumulator '" + name + "' has " + std::to_string(shape.size()) +
         " dims; an accumulator is a 2-D [M, N] matrix");
  if (shape[0] <= 0 || shape[0] % 64 != 0)
    fail("accumulator '" + name + "' dim 0 is " + std::to_string(shape[0]) +
         "; the WGMMA accumulator layout needs a positive multiple of 64 rows");
  if (shape[1] <= 0 || shape[1] % 8 != 0)
    fail("accumulator '" + name + "' dim 1 is " + std::to_string(shape[1]) +
         "; the WGMMA accumulator layout needs a positive multiple of 8 columns");
  Operand op = scratch(name, f32, std::move(shape));
  operands_[op.index].accumulator = true;
  return op;
}

void KernelSpec::dimension_semantics(std::vector<Semantics> semantics) {
  if (semantics.size() != grid_.size())
    fail("dimension_semantics has " + std::to_string(semantics.size()) +
         " entries but the grid has " + std::to_string(grid_.size()) +
         " axes (declare the grid first)");
  semantics_ = std::move(semantics);
}

Operand KernelSpec::workspace(const std::string& name, DType dtype, DimExpr count) {
  return workspace(name, dtype, std::vector<DimExpr>{std::move(count)});
}

Operand KernelSpec::workspace(const std::string& name, DType dtype, std::vector<DimExpr> shape) {
  if (shape.empty()) fail("workspace '" + name + "' has no dims");
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d].reads_device())
      fail("workspace '" + name + "' dim " + std::to_string(d) + " is '" + shape[d].to_string() +
           "'; device_shared_bytes() may only choose a variant (spec.variant): a kernel and its "
           "launch are shaped by the arrays alone");
  const size_t rank = shape.size();
  Operand op = add_operand(name, Role::kWorkspace, dtype, std::move(shape));
  operands_[op.index].block = std::vector<BlockDim>(rank, BlockDim(full));
  operands_[op.index].index_map = [rank](const ProgramIds&) {
    return Indices(rank, Idx(int64_t{0}));
  };
  operands_[op.index].has_block = true;
  return op;
}

Scalar KernelSpec::scalar(const std::string& name, DType dtype, double min) {
  Scalar s = scalar(name, dtype);
  operands_[s.index()].min_value = min;
  return s;
}

const OperandDecl& KernelSpec::decl(Operand op, const char* what) const {
  if (op.index < 0 || op.index >= static_cast<int>(operands_.size()))
    fail(std::string(what) + ": not an operand of this spec");
  return operands_[op.index];
}

void KernelSpec::alias(Operand input, Operand output) {
  const OperandDecl& in = decl(input, "alias");
  const OperandDecl& out = decl(output, "alias");
  if (in.role != Role::kInput || out.role != Role::kOutput)
    fail("alias('" + in.name + "', '" + out.name + "') needs an input then an output");
  if (in.dtype != out.dtype)
    fail("alias of input '" + in.name + "' to output '" + out.name + "': dtypes differ (" +
         name(in.dtype) + " vs " + name(out.dtype) + ")");
  bool same_dims = in.shape.size() == out.shape.size();
  for (size_t d = 0; same_dims && d < in.shape.size(); ++d)
    same_dims = in.shape[d].dim_index() == out.shape[d].dim_index();
  if (!same_dims)
    fail("alias of input '" + in.name + "' to output '" + out.name + "': shapes differ");
  if (in.aliased_to >= 0 || out.aliased_from >= 0)
    fail("operand '" + in.name + "' or '" + out.name + "' is already aliased");
  operands_[input.index].aliased_to = output.index;
  operands_[output.index].aliased_from = input.index;
}

void KernelSpec::require_no_device(const DimExpr& e, const std::string& what) const {
  if (e.reads_device())
    fail(what + " is '" + e.to_string() +
         "'; device_shared_bytes() may only choose a variant (spec.variant): a kernel and its "
         "launch are shaped by the arrays alone");
  require_no_programs(e, what);
}

void KernelSpec::require_no_programs(const DimExpr& e, const std::string& what) const {
  if (e.reads_programs())
    fail(what + " is '" + e.to_string() +
         "'; persistent_programs() may only count a workspace's elements or semaphores (a "
         "persistent grid's slots per program)");
}

void KernelSpec::grid(std::vector<DimExpr> axes) {
  if (axes.empty()) fail("grid has no axes; declare at least one");
  for (size_t a = 0; a < axes.size(); ++a)
    require_no_device(axes[a], "grid axis " + std::to_string(a));
  grid_ = std::move(axes);
  semantics_.clear();
}

void KernelSpec::block(Operand operand, std::vector<BlockDim> block_shape, IndexMap index_map) {
  const OperandDecl& d = decl(operand, "block");
  if (d.role == Role::kScalar || d.role == Role::kSemaphores || d.role == Role::kWorkspace ||
      d.role == Role::kScratch || d.role == Role::kErrors)
    fail("operand '" + d.name + "' cannot have a block spec");
  if (d.has_block) fail("operand '" + d.name + "' has two block specs");
  if (block_shape.size() != d.shape.size())
    fail("operand '" + d.name + "' has rank " + std::to_string(d.shape.size()) +
         " but its block has " + std::to_string(block_shape.size()) + " dims");
  bool any_blocked = false;
  for (size_t i = 0; i < block_shape.size(); ++i) {
    if (!block_shape[i].is_squeezed() && !block_shape[i].is_full() && block_shape[i].size() <= 0)
      fail("operand '" + d.name + "' block dim " + std::to_string(i) + " is " +
           std::to_string(block_shape[i].size()) + "; block dims must be positive");
    any_blocked |= !block_shape[i].is_squeezed();
  }
  if (!any_blocked) fail("operand '" + d.name + "' block squeezes every dim");
  OperandDecl& m = operands_[operand.index];
  m.block = std::move(block_shape);
  m.index_map = std::move(index_map);
  m.has_block = true;
}

void KernelSpec::block(Operand operand, std::vector<BlockDim> block_shape, IndexMap index_map,
                       InShared staging) {
  block(operand, block_shape, std::move(index_map));
  check_staging(operand.index, block_shape, staging);
  if (direct_) return;
  OperandDecl& d = operands_[operand.index];
  d.staged = staging;
  d.staged_block.clear();
  for (const BlockDim& bd : block_shape) d.staged_block.push_back(bd.size());
}

void KernelSpec::check_staging(int index, const std::vector<BlockDim>& block_shape,
                               const InShared& staging) const {
  const OperandDecl& d = operands_[static_cast<size_t>(index)];
  if (d.role != Role::kInput && d.role != Role::kOutput)
    fail("operand '" + d.name + "': only input and output blocks can be staged in shared memory");
  if (d.aliased_to >= 0 || d.aliased_from >= 0)
    fail("operand '" + d.name + "': an aliased operand cannot be staged in shared memory");
  if (staging.swizzle != 0 && staging.swizzle != 32 && staging.swizzle != 64 &&
      staging.swizzle != 128)
    fail("operand '" + d.name + "': swizzle " + std::to_string(staging.swizzle) +
         "; TMA swizzles 0, 32, 64 or 128 bytes");
  if (staging.buffers < 0 || staging.buffers > kMaxPipelineDepth)
    fail("operand '" + d.name + "': " + std::to_string(staging.buffers) +
         " stage buffers; a pipelined block has 1 to " + std::to_string(kMaxPipelineDepth) +
         " (0: the pipeline's depth)");
  if (block_shape.size() > 5)
    fail("operand '" + d.name + "': TMA copies arrays of rank 1 to 5, not " +
         std::to_string(block_shape.size()));
  for (size_t i = 0; i < block_shape.size(); ++i) {
    if (block_shape[i].is_full())
      fail("operand '" + d.name + "' block dim " + std::to_string(i) +
           " is full; a staged block has a static shape");
    const int64_t extent = block_shape[i].size();
    if (extent > kTmaMaxBoxDim && extent % kTmaMaxBoxDim != 0)
      fail("operand '" + d.name + "' block dim " + std::to_string(i) + " is " +
           std::to_string(extent) + "; a TMA box has at most " + std::to_string(kTmaMaxBoxDim) +
           " elements a dim, so a longer staged block dim is copied as boxes of " +
           std::to_string(kTmaMaxBoxDim) + " and must be a multiple of it");
  }
  if (block_shape.back().is_squeezed())
    fail("operand '" + d.name + "': the last dim of a staged block cannot be squeezed");
  // Pallas' TilingTransform: tiles of the trailing dims, each one TMA copy.
  const std::vector<int64_t>& tiling = staging.tiling;
  if (tiling.size() > block_shape.size())
    fail("operand '" + d.name + "': a tiling of " + std::to_string(tiling.size()) +
         " dims for a block of " + std::to_string(block_shape.size()));
  for (size_t t = 0; t < tiling.size(); ++t) {
    const size_t dim = block_shape.size() - tiling.size() + t;
    const int64_t extent = block_shape[dim].size();
    if (tiling[t] < 1 || tiling[t] > kTmaMaxBoxDim || extent % tiling[t] != 0)
      fail("operand '" + d.name + "' block dim " + std::to_string(dim) + " is " +
           std::to_string(extent) + "; its tile of " + std::to_string(tiling[t]) +
           " must divide it and be 1 to " + std::to_string(kTmaMaxBoxDim) +
           " elements (one TMA box)");
  }
  const int64_t last = tiling.empty() ? block_shape.back().size() : tiling.back();
  const std::string what = tiling.empty() ? "the block's last dim" : "the tile's last dim";
  const int64_t row_bytes = last * dtype_bytes(d.dtype);
  if (row_bytes % 16 != 0)
    fail("operand '" + d.name + "': " + what + " is " + std::to_string(row_bytes) +
         " bytes; TMA moves rows of a multiple of 16 bytes");
  if (staging.swizzle != 0 && row_bytes > staging.swizzle)
    fail("operand '" + d.name + "': " + what + " is " + std::to_string(row_bytes) +
         " bytes, more than its " + std::to_string(staging.swizzle) +
         "-byte swizzle (TMA's rule); use a narrower block, a tiling or a wider swizzle");
  // A row narrower than the span (TMA allows it) is refused as Pallas refuses
  // it ("minor tiling dimension does not fit swizzle"): where the copy puts a
  // short row under a wider pattern is what the descriptors, the emulator and
  // the thread layouts would have to agree on, and no kernel needs it.
  if (staging.swizzle != 0 && row_bytes < staging.swizzle)
    fail("operand '" + d.name + "': " + what + " is " + std::to_string(row_bytes) +
         " bytes, less than its " + std::to_string(staging.swizzle) +
         "-byte swizzle; a swizzled row is one swizzle span (Pallas' rule): use " +
         (row_bytes == 32 || row_bytes == 64 ? "the " + std::to_string(row_bytes) + "-byte swizzle"
                                             : std::string("no swizzle")) +
         " or a wider block or tiling");
  // Several copies land one after another: each must keep the next aligned
  // to the swizzle pattern's period (TMA's rule for its destination).
  std::vector<int64_t> extents;
  for (const BlockDim& bd : block_shape) extents.push_back(bd.size());
  int64_t block_bytes = dtype_bytes(d.dtype), copy_bytes = dtype_bytes(d.dtype);
  for (int64_t e : extents) block_bytes *= e;
  for (int64_t e : tma_copy_box(extents, tiling)) copy_bytes *= e;
  const int64_t align = staging.swizzle == 0 ? 128 : 8 * staging.swizzle;
  if (copy_bytes != block_bytes && copy_bytes % align != 0)
    fail("operand '" + d.name + "': its TMA copies are " + std::to_string(copy_bytes) +
         " bytes each; the copies of a block must each be a multiple of " + std::to_string(align) +
         " bytes (the staged buffer's alignment)");
}

void KernelSpec::stage_in_pipeline(int operand, const std::vector<BlockDim>& block,
                                   InShared staging) {
  check_staging(operand, block, staging);
  OperandDecl& d = operands_[static_cast<size_t>(operand)];
  std::vector<int64_t> extents;
  for (const BlockDim& bd : block) extents.push_back(bd.size());
  // One TMA descriptor per array: every pipeline staging it agrees on the box.
  if (d.staged && (d.staged_block != extents || d.staged->swizzle != staging.swizzle ||
                   d.staged->tiling != staging.tiling))
    fail("operand '" + d.name +
         "' is staged by two pipelines with different block shapes, swizzles or tilings; an "
         "array has "
         "one TMA descriptor");
  if (direct_) return;
  d.staged = staging;
  d.staged_block = std::move(extents);
}

void KernelSpec::stage_for_copies(int operand, const std::vector<int64_t>& box, int swizzle) {
  std::vector<BlockDim> block;
  for (int64_t e : box) block.push_back(Blocked{e});
  check_staging(operand, block, InShared{.swizzle = swizzle});
  OperandDecl& d = operands_[static_cast<size_t>(operand)];
  // One TMA descriptor per array: every copy of it agrees on the box.
  if (d.staged && (d.staged_block != box || d.staged->swizzle != swizzle))
    fail("operand '" + d.name +
         "' is copied with buffers of two shapes or swizzles; an array has one TMA descriptor, "
         "so every copy of it uses buffers of one shape and swizzle");
  if (direct_) return;
  d.staged = InShared{.swizzle = swizzle};
  d.staged_block = box;
}

void KernelSpec::warp_specialize(WarpSpecialization ws) {
  for (int regs : {ws.producer_registers, ws.consumer_registers})
    if (regs < 24 || regs > 256 || regs % 8 != 0)
      fail("warp_specialize: " + std::to_string(regs) +
           " registers; setmaxnreg takes a multiple of 8 from 24 to 256");
  if (ws.producer_registers >= ws.consumer_registers)
    fail("warp_specialize: the producer (" + std::to_string(ws.producer_registers) +
         " registers) gives registers to the consumer (" + std::to_string(ws.consumer_registers) +
         "); it needs fewer");
  ws_ = ws;
}

void KernelSpec::persistent(Persistent p) {
  if (p.group_rows < 1)
    fail("persistent: group_rows " + std::to_string(p.group_rows) + "; bands of at least 1 row");
  if (p.cluster != 1 && p.cluster != 2 && p.cluster != 4)
    fail("persistent: cluster " + std::to_string(p.cluster) +
         "; clusters of 1, 2 or 4 CTAs (at most 8 are portable, and the tile rows must "
         "divide by it)");
  if (p.stream_k && p.cluster != 1)
    fail("persistent: stream_k with cluster " + std::to_string(p.cluster) +
         "; a stream-K walk runs without clusters (the CTAs of a cluster share their copies, "
         "so they must walk the same steps)");
  if (p.stream_k_parts != 2 && p.stream_k_parts != 3)
    fail("persistent: stream_k_parts " + std::to_string(p.stream_k_parts) +
         "; a stream-K walk cuts a tile into at most 2 or 3 parts");
  persistent_ = p;
}

void KernelSpec::cluster_first_axis(int max_programs) {
  if (max_programs < 2 || max_programs > 8)
    fail("cluster_first_axis(" + std::to_string(max_programs) +
         "): clusters of 2 to 8 programs (8 is CUDA's portable cluster size)");
  cluster_first_axis_max_ = max_programs;
}

void KernelSpec::delay_release(int steps) {
  if (steps < 0 || steps > 3)
    fail("delay_release(" + std::to_string(steps) + "): a pipeline delays 0 to 3 steps");
  delay_release_ = steps;
}

void KernelSpec::max_concurrent_steps(int steps) {
  if (steps < 1 || steps > kMaxPipelineDepth)
    fail("max_concurrent_steps(" + std::to_string(steps) + "): a pipeline keeps 1 to " +
         std::to_string(kMaxPipelineDepth) + " steps");
  max_concurrent_steps_ = steps;
}

std::vector<int64_t> tma_copy_box(const std::vector<int64_t>& extents,
                                  const std::vector<int64_t>& tiling) {
  std::vector<int64_t> box;
  for (int64_t e : extents) box.push_back(e < kTmaMaxBoxDim ? e : kTmaMaxBoxDim);
  std::copy(tiling.begin(), tiling.end(), box.end() - static_cast<std::ptrdiff_t>(tiling.size()));
  return box;
}

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

static std::map<std::string, Registration>& registry() {
  static std::map<std::string, Registration> r;
  return r;
}

Registrar::Registrar(const char* op, SpecFn fn, const char* file) {
  registry().emplace(op, Registration{op, fn, file});
}

std::vector<Registration> registered_specs() {
  std::vector<Registration> out;
  for (auto& [name, reg] : registry()) out.push_back(reg);
  return out;
}

}  // namespace pallas::edsl
