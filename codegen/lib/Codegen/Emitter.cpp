//===- Emitter.cpp - generated C++ for one op ------------------------------===//
//
// The entry point's parameters follow the declaration order of the spec (the
// ABI, as with Halide generators): arrays as TensorViews (const for inputs),
// scalars by value; an input aliased to an output appears once, mutable, in
// the input's position. The kernel parameters are the MLIR memref
// descriptors of the arrays, expanded (allocated, aligned, offset, sizes...,
// strides...), followed by the scalars, in the same order.
//
//===----------------------------------------------------------------------===//

#include "pallas/Codegen/Emitter.h"

#include <algorithm>
#include <functional>
#include <sstream>

namespace pallas::codegen {

using edsl::DType;
using edsl::OperandDecl;
using edsl::Role;

namespace {

const char* cppType(DType d) {
  switch (d) {
    case DType::f32:
      return "float";
    case DType::f16:
      return "pallas::half";
    case DType::bf16:
      return "pallas::bfloat16";
    case DType::i32:
      return "int32_t";
    default:
      return "void";
  }
}

const char* runtimeDType(DType d) {
  switch (d) {
    case DType::f32:
      return "pallas::DType::kF32";
    case DType::f16:
      return "pallas::DType::kF16";
    case DType::bf16:
      return "pallas::DType::kBF16";
    default:
      return "pallas::DType::kI32";
  }
}

/// The entry point parameters: operand indices, aliased outputs dropped.
std::vector<int> entryParams(const edsl::KernelSpec& spec) {
  std::vector<int> params;
  for (size_t i = 0; i < spec.operands().size(); ++i) {
    const OperandDecl& d = spec.operands()[i];
    if (d.aliased_from < 0 && d.role != Role::kSemaphores && d.role != Role::kWorkspace &&
        d.role != Role::kScratch && d.role != Role::kErrors)
      params.push_back(static_cast<int>(i));
  }
  return params;
}

/// The view an operand's data comes from (an aliased output reads its input's).
int viewOf(const edsl::KernelSpec& spec, int operand) {
  int from = spec.operands()[operand].aliased_from;
  return from >= 0 ? from : operand;
}

std::string paramType(const OperandDecl& d) {
  if (d.role == Role::kScalar) return cppType(d.dtype);
  bool mutable_view = d.role == Role::kOutput || d.aliased_to >= 0;
  return "pallas::TensorView<" + std::string(mutable_view ? "" : "const ") + cppType(d.dtype) +
         ", " + std::to_string(d.shape.size()) + ">";
}

/// The typed entry point's declaration, named `fn` (the op unless given).
std::string signature(const edsl::KernelSpec& spec, bool with_default, std::string fn = "") {
  std::string s = "pallas::Status " + (fn.empty() ? spec.op() : fn) + "(";
  for (int i : entryParams(spec)) {
    const OperandDecl& d = spec.operands()[i];
    s += paramType(d) + " " + d.name + ", ";
  }
  return s + "const pallas::Launch& launch" + (with_default ? " = {}" : "") + ")";
}

std::string shapeText(const OperandDecl& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.shape.size(); ++i) s += (i ? ", " : "") + d.shape[i].to_string();
  s += "], block [";
  for (size_t i = 0; i < d.block.size(); ++i)
    s += (i ? ", " : "") + (d.block[i].is_squeezed() ? std::string("squeezed")
                            : d.block[i].is_full()   ? std::string("full")
                                                     : std::to_string(d.block[i].size()));
  return s + "]";
}

/// "[rows, arbitrary cdiv(cols, 512)]": arbitrary axes run in order inside a program.
std::string gridText(const edsl::KernelSpec& spec) {
  std::string s = spec.persistence() ? "persistent [" : "[";
  for (size_t i = 0; i < spec.grid_axes().size(); ++i)
    s += (i ? ", " : "") +
         std::string(spec.semantics(i) == edsl::Semantics::kArbitrary ? "arbitrary " : "") +
         spec.grid_axes()[i].to_string();
  return s + "]";
}

/// The extent of launched axis `a` (CUDA's x, y, z) as C++: the a-th parallel
/// grid axis (arbitrary axes loop inside the kernel); "1" past the last one.
/// A persistent grid launches one axis of programs, at most its tiles (the
/// product of the parallel axes), which launch_kernel caps at what the
/// device keeps resident.
std::string launchedExtent(const edsl::KernelSpec& spec, size_t a) {
  if (spec.persistence()) {
    if (a != 0) return "1";
    std::string tiles = "int64_t{1}";
    for (size_t axis = 0; axis < spec.grid_axes().size(); ++axis)
      if (spec.semantics(axis) != edsl::Semantics::kArbitrary)
        tiles += " * (" + spec.grid_axes()[axis].to_cpp() + ")";
    return tiles;
  }
  size_t launched = 0;
  for (size_t axis = 0; axis < spec.grid_axes().size(); ++axis) {
    if (spec.semantics(axis) == edsl::Semantics::kArbitrary) continue;
    if (launched++ == a) return spec.grid_axes()[axis].to_cpp();
  }
  return "1";
}

/// The instance a staged kernel falls back to: the same, traced without
/// staging (or another variant's identical twin, KernelSpec::direct_twin_name).
std::string directName(const edsl::KernelSpec& spec) { return spec.direct_twin_name(); }

/// `text` as a C++ string literal.
std::string cppString(const std::string& text) {
  std::string s = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  return s + "\"";
}

}  // namespace

std::string cubinSymbol(const std::string& instance, const std::string& arch) {
  return "pallas_cubin_" + instance + "_" + arch;
}

namespace {

void emitInstance(std::ostringstream& os, const CompiledInstance& inst) {
  const edsl::KernelSpec& spec = *inst.kernel->spec;
  const std::string& name = inst.kernel->instance;
  const auto& ops = spec.operands();

  os << "// ---- " << name << " ----\n\n";
  if (inst.host_form)
    os << "extern \"C\" void pallas_host_" << name
       << "(void** args, int64_t grid0, int64_t grid1, int64_t grid2);\n";
  os << "extern \"C\" void pallas_emu_kernel_" << name << "(void** args);\n"
     << "extern \"C\" const int64_t pallas_emu_kernel_" << name << "_shared_bytes;\n";
  const bool staged = inst.sm80_form;
  if (staged)  // its sm_80 form: cp.async copies, dots without wgmma (Driver.cpp)
    os << "extern \"C\" void pallas_emu_kernel_" << name << "_cp_async(void** args);\n"
       << "extern \"C\" const int64_t pallas_emu_kernel_" << name << "_cp_async_shared_bytes;\n";
  for (const GpuBinary& bin : inst.gpu)
    os << "// " << bin.arch << ": " << bin.cubin.size() << " bytes, " << bin.registers
       << " registers, " << bin.spill_stores << " bytes spill stores, " << bin.spill_loads
       << " bytes spill loads.\n"
       << "extern \"C\" const unsigned char " << cubinSymbol(name, bin.arch) << "[];\n";
  os << "\nnamespace {\n\n";
  os << "constexpr pallas::OperandMetadata " << name << "_operands[] = {\n";
  const std::vector<int> params = entryParams(spec);
  for (size_t o = 0; o < ops.size(); ++o) {
    const OperandDecl& d = ops[o];
    if (d.role == Role::kScratch) continue;  // in shared memory, not a kernel parameter
    const char* role = d.role == Role::kScalar       ? "kScalar"
                       : d.role == Role::kSemaphores ? "kSemaphores"
                       : d.role == Role::kWorkspace  ? "kWorkspace"
                       : d.role == Role::kErrors     ? "kErrors"
                       : d.aliased_to >= 0           ? "kInOut"
                       : d.role == Role::kInput      ? "kInput"
                                                     : "kOutput";
    os << "    {\"" << d.name << "\", pallas::OperandRole::" << role << ", "
       << runtimeDType(d.dtype) << ", " << d.shape.size() << ", {";
    for (size_t i = 0; i < 4; ++i)
      os << (i ? ", " : "")
         << (i < d.block.size() ? (d.block[i].is_squeezed() ? -1
                                   : d.block[i].is_full()   ? -2
                                                            : d.block[i].size())
                                : 0);
    const auto param = std::find(params.begin(), params.end(), static_cast<int>(o));
    os << "}, " << (param == params.end() ? -1 : param - params.begin()) << ", {";
    for (size_t i = 0; i < 4; ++i)
      os << (i ? ", " : "")
         << (i >= d.shape.size()                                ? std::string("0")
             : d.shape[i].kind() == edsl::DimExpr::Kind::kConst ? d.shape[i].to_string()
                                                                : std::string("-1"));
    os << "}},\n";
  }
  os << "};\n\n";
  // (An instance built for no target, a staged one when only pre-sm_90 targets are
  // built, gets empty spans; C++ has no zero-length arrays.)
  const std::string targets = inst.gpu.empty() ? "{}" : name + "_targets";
  const std::string cubins = inst.gpu.empty() ? "{}" : name + "_cubins";
  if (!inst.gpu.empty()) os << "constexpr pallas::TargetMetadata " << name << "_targets[] = {\n";
  for (const GpuBinary& bin : inst.gpu)
    os << "    {\"" << bin.arch << "\", " << bin.sm << ", "
       << (bin.arch_specific ? "true" : "false") << ", " << bin.registers << ", "
       << bin.spill_stores << ", " << bin.spill_loads << ", " << bin.shared_bytes << ", "
       << bin.cubin.size() << ", " << bin.threads << "},\n";
  if (!inst.gpu.empty()) os << "};\n\n";
  // The messages of spec.check(), by check number (see pallas.check).
  os << "constexpr const char* " << name << "_checks[] = {";
  for (const std::string& message : spec.check_messages()) os << cppString(message) << ", ";
  os << "nullptr};\n\n";
  os << "constexpr pallas::KernelMetadata " << name << "_metadata_value = {\"" << name << "\", \""
     << spec.op() << "\", \"" << gridText(spec) << "\", " << spec.launch_threads() << ", " << name
     << "_operands, " << targets << ", std::span<const char* const>(" << name << "_checks, "
     << spec.check_messages().size() << "), \"" << spec.entry_name() << "\"};\n\n";
  if (!inst.gpu.empty()) os << "constexpr pallas::detail::Cubin " << name << "_cubins[] = {\n";
  for (const GpuBinary& bin : inst.gpu)
    os << "    {" << bin.sm << ", " << (bin.arch_specific ? "true" : "false") << ", "
       << cubinSymbol(name, bin.arch) << ", " << bin.cubin.size() << ", " << bin.threads << ", "
       << (bin.waits_for_prerequisite_grids ? "true" : "false") << "},\n";
  if (!inst.gpu.empty()) os << "};\n\n";
  // One launch size for every target: the largest plan (a staged kernel's
  // sm_80 form needs no buffers for its outputs).
  int dynamicShared = 0;
  for (const GpuBinary& bin : inst.gpu)
    dynamicShared = std::max(dynamicShared, bin.dynamic_shared_bytes);
  os << "const pallas::detail::KernelImage " << name << "_image = {&" << name
     << "_metadata_value, \"" << name << "\", " << cubins << ", "
     << (inst.host_form ? "&pallas_host_" + name : std::string("nullptr")) << ", "
     << spec.launch_threads() << ", " << dynamicShared << ", &pallas_emu_kernel_" << name
     << ", &pallas_emu_kernel_" << name << "_shared_bytes";
  if (staged)
    os << ", &pallas_emu_kernel_" << name << "_cp_async, &pallas_emu_kernel_" << name
       << "_cp_async_shared_bytes, " << spec.launch_threads(/*tma_copies=*/false);
  else
    os << ", nullptr, nullptr, 0";
  // A stream-K walk of three parts a tile cuts runs down to a third of a tile: up to three
  // programs per tile.
  const bool third_tiles =
      spec.persistence() && spec.persistence()->stream_k && spec.persistence()->stream_k_parts == 3;
  os << ", " << (spec.persistence() ? "true" : "false") << ", " << (third_tiles ? 3 : 1)
     << "};\n\n}  // namespace\n\n";

  // The typed entry point.
  // An instance of a variant is launched by the op's entry point (emitDispatch).
  // A variant, or the direct twin of a staged kernel, is launched by another entry point.
  const bool internal = spec.variant_chooser() || spec.direct();
  const std::string fn = internal ? name + "_launch" : spec.op();
  os << "namespace pallas::kernels {\n\n";
  if (spec.has_staged_blocks())  // falls back to its direct twin, emitted after it
    os << "static " << signature(spec, false, directName(spec) + "_launch") << ";\n\n";
  os << (internal ? "static " : "") << signature(spec, false, fn) << " {\n";
  // Messages name what the user called: the dtype instance, not the variant.
  os << "  constexpr const char* kKernel = \"" << spec.entry_name() << "\";\n";
  // Outputs and in-place operands are written: only they must not alias themselves or
  // (check_no_overlap below) another operand.
  auto writable = [&](const OperandDecl& d) {
    return d.role == Role::kOutput || d.aliased_to >= 0;
  };
  for (int i : entryParams(spec)) {
    const OperandDecl& d = ops[i];
    if (d.role == Role::kScalar) continue;
    os << "  if (pallas::Status s = pallas::detail::check_operand(kKernel, \"" << d.name << "\", "
       << d.name << ".data(), sizeof(" << cppType(d.dtype) << "), " << d.shape.size() << ", "
       << d.name << ".shape().data(), " << d.name << ".strides().data(), "
       << (writable(d) ? "true" : "false") << "); !s.ok())\n"
       << "    return s;\n"
       << "  if (pallas::Status s = pallas::detail::check_storage(kKernel, \"" << d.name << "\", "
       << d.shape.size() << ", " << d.name << ".shape().data(), " << d.name << ".strides().data(), "
       << d.name << ".storage_elements()); !s.ok())\n"
       << "    return s;\n"
       << "  if (pallas::Status s = pallas::detail::check_index_range(kKernel, \"" << d.name
       << "\", " << d.shape.size() << ", " << d.name << ".shape().data(), " << d.name
       << ".strides().data()); !s.ok())\n"
       << "    return s;\n";
  }
  // Outputs share no memory with any other operand: only a declared alias
  // (one in-place parameter) may (check_no_overlap says what counts).
  for (int w : entryParams(spec)) {
    if (!writable(ops[w])) continue;
    for (int p : entryParams(spec)) {
      if (p == w || ops[p].role == Role::kScalar || (writable(ops[p]) && p < w)) continue;
      const OperandDecl& a = ops[w];
      const OperandDecl& b = ops[p];
      os << "  if (pallas::Status s = pallas::detail::check_no_overlap(kKernel, \"" << a.name
         << "\", " << a.name << ".data(), sizeof(" << cppType(a.dtype) << "), " << a.shape.size()
         << ", " << a.name << ".shape().data(), " << a.name << ".strides().data(), \"" << b.name
         << "\", " << b.name << ".data(), sizeof(" << cppType(b.dtype) << "), " << b.shape.size()
         << ", " << b.name << ".shape().data(), " << b.name << ".strides().data()); !s.ok())\n"
         << "    return s;\n";
    }
  }
  // Scalars with a lower bound (NaN fails the comparison too).
  for (int i : entryParams(spec)) {
    const OperandDecl& d = ops[i];
    if (d.role != Role::kScalar || !d.min_value) continue;
    os << "  if (!(" << d.name << " >= " << *d.min_value << "))\n"
       << "    return pallas::Status::Error(pallas::StatusCode::kInvalidArgument,\n"
       << "        std::string(kKernel) + \": scalar '" << d.name
       << "' is \" + pallas::detail::number_text(" << d.name << ") + \", it must be at least "
       << *d.min_value << "\");\n";
  }
  // Bind each run-time dim from its first operand; check every other use.
  std::vector<std::pair<int, int>> bound(spec.dim_names().size(), {-1, -1});
  for (int i : entryParams(spec)) {
    const OperandDecl& d = ops[i];
    for (size_t k = 0; k < d.shape.size(); ++k) {
      if (d.shape[k].kind() == edsl::DimExpr::Kind::kConst) {
        const std::string want = d.shape[k].to_string();
        os << "  if (" << d.name << ".shape(" << k << ") != " << want << ")\n"
           << "    return pallas::Status::Error(pallas::StatusCode::kShapeMismatch,\n"
           << "        std::string(kKernel) + \": operand '" << d.name << "' dim " << k
           << " is \" + std::to_string(" << d.name << ".shape(" << k << ")) + \", but must be "
           << want << "\");\n";
        continue;
      }
      int dim = d.shape[k].dim_index();
      const std::string& dn = spec.dim_names()[dim];
      if (bound[dim].first < 0) {
        bound[dim] = {i, static_cast<int>(k)};
        os << "  [[maybe_unused]] const int64_t " << dn << " = " << d.name << ".shape(" << k
           << ");\n";
      } else {
        const OperandDecl& by = ops[bound[dim].first];
        os << "  if (pallas::Status s = pallas::detail::check_dim(kKernel, \"" << d.name << "\", "
           << k << ", " << d.name << ".shape(" << k << "), \"" << dn << "\", " << dn << ", \""
           << by.name << "\", " << bound[dim].second << "); !s.ok())\n    return s;\n";
      }
    }
  }
  for (size_t dim = 0; dim < bound.size(); ++dim)
    if (bound[dim].first < 0) os << "  // dim '" << spec.dim_names()[dim] << "' is unused\n";
  // Shapes no instance serves (KernelSpec::require), named with the dims the condition reads.
  for (const auto& [holds, what] : spec.requirements()) {
    std::vector<int> dims;  // the dims `holds` reads, in declaration order (sorted below)
    std::function<void(const edsl::DimExpr&)> collect = [&](const edsl::DimExpr& e) {
      if (e.kind() == edsl::DimExpr::Kind::kDim) {
        if (std::find(dims.begin(), dims.end(), e.dim_index()) == dims.end())
          dims.push_back(e.dim_index());
      } else if (e.kind() != edsl::DimExpr::Kind::kConst &&
                 e.kind() != edsl::DimExpr::Kind::kDeviceSharedBytes &&
                 e.kind() != edsl::DimExpr::Kind::kPrograms) {
        collect(e.lhs());
        collect(e.rhs());
      }
    };
    collect(holds);
    std::sort(dims.begin(), dims.end());
    for (int dim : dims)  // only the dims of operands' shapes are bound above
      if (bound[dim].first < 0)
        os << "#error \"spec '" << name << "': a require() condition reads dim '"
           << spec.dim_names()[dim] << "', which no operand's shape has\"\n";
    os << "  if ((" << holds.to_cpp() << ") == 0)\n"
       << "    return pallas::Status::Error(pallas::StatusCode::kInvalidArgument,\n"
       << "        std::string(kKernel) + " << cppString(": " + what);
    for (size_t i = 0; i < dims.size(); ++i) {
      const std::string& dn = spec.dim_names()[dims[i]];
      os << " + " << cppString((i ? ", " : "; ") + dn + " is ") << " + std::to_string(" << dn
         << ")";
    }
    os << ");\n";
  }
  // A variant's instance serves the shapes its chooser gives it (the op's entry
  // point picks it by them); its argv form may be called with any others, for
  // which its grid and index arithmetic are not made (a split row of 8 columns
  // divides by zero).
  // A direct twin serves its instance's option and those of the instances sharing it.
  if (spec.variant_chooser()) {
    const std::vector<int> serves =
        spec.direct() ? spec.twin_serves() : std::vector<int>{spec.variant_index()};
    std::string test, options;
    for (size_t i = 0; i < serves.size(); ++i) {
      test += (i ? " && variant != " : "variant != ") + std::to_string(serves[i]);
      options += (i == 0 ? "" : i + 1 == serves.size() ? " or " : ", ") + std::to_string(serves[i]);
    }
    os << "  if (const int64_t variant = " << spec.variant_chooser()->to_cpp() << "; " << test
       << ")\n"
       << "    return pallas::Status::Error(pallas::StatusCode::kInvalidArgument,\n"
       << "        std::string(kKernel) + "
       << cppString(": instance '" + name + "' runs the shapes for which " +
                    spec.variant_chooser()->to_string() + " is " + options + "; these give ")
       << " + std::to_string(variant) + \" (the entry point picks the instance by the "
       << (spec.variant_chooser()->reads_device() ? "shapes and the device" : "shapes")
       << ")\");\n";
  }
  // Semaphores, workspaces and the error record: memory from the runtime for this launch.
  std::vector<int> pooled;
  int errors_slot = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].role == Role::kErrors) errors_slot = static_cast<int>(pooled.size());
    if (ops[i].role == Role::kSemaphores || ops[i].role == Role::kWorkspace ||
        ops[i].role == Role::kErrors)
      pooled.push_back(static_cast<int>(i));
  }
  // (Emitted after a staged instance's fallback to its direct twin, which asks for its own.)
  std::ostringstream rs;
  // A count that reads persistent_programs(): the programs the launch will have.
  bool reads_programs = false;
  for (int i : pooled)
    for (const edsl::DimExpr& e : ops[i].shape) reads_programs |= e.reads_programs();
  if (reads_programs)
    rs << "  int64_t programs = 0;\n"
       << "  if (pallas::Status s = pallas::detail::persistent_programs(" << name << "_image, "
       << launchedExtent(spec, 0) << ", launch, programs); !s.ok())\n    return s;\n";
  if (!pooled.empty()) {
    rs << "  pallas::detail::LaunchResources resources;\n";
    for (int i : pooled) {
      // A workspace of several dims: the product of its extents (row-major).
      rs << "  const int64_t count_" << ops[i].name << " = ";
      for (size_t k = 0; k < ops[i].shape.size(); ++k)
        rs << (k ? " * " : "") << "int64_t{" << ops[i].shape[k].to_cpp() << "}";
      if (ops[i].role == Role::kSemaphores &&
          ops[i].semaphore_scope == edsl::SemaphoreScope::kProgram)  // a slice per program
        for (size_t a = 0; a < 3; ++a) rs << " * (" << launchedExtent(spec, a) << ")";
      rs << ";\n";
    }
    rs << "  const pallas::detail::ResourceRequest requests[] = {";
    for (int i : pooled)
      rs << "{static_cast<uint64_t>(count_" << ops[i].name << ") * sizeof(" << cppType(ops[i].dtype)
         << "), pallas::detail::ResourceKind::"
         << (ops[i].role == Role::kSemaphores ? "kSemaphores"
             : ops[i].role == Role::kErrors   ? "kErrors"
                                              : "kWorkspace")
         << "}, ";
    rs << "};\n";
    rs << "  if (pallas::Status s = pallas::detail::acquire_resources(" << name
       << "_image, launch, requests, resources); !s.ok())\n    return s;\n";
  }
  // Staged blocks: the TMA descriptors, or the direct twin when TMA cannot run here.
  std::string tmaArgs;
  if (!spec.has_staged_blocks()) os << rs.str();
  if (spec.has_staged_blocks()) {
    std::string params;
    for (int i : entryParams(spec)) params += ops[i].name + ", ";
    // Why the direct twin runs, if it does: the first rule broken (Launch::record says).
    std::string why =
        "  const char* fallback_operand = nullptr;\n"
        "  const char* fallback = pallas::detail::tma_path_unavailable(" +
        name + "_image, launch);\n";
    for (size_t i = 0; i < ops.size(); ++i) {
      const OperandDecl& d = ops[i];
      if (!d.staged) continue;
      // The box of one TMA copy: the tiling, or the block cut at 256 elements a dim.
      std::vector<int64_t> box = edsl::tma_copy_box(d.staged_block, d.staged->tiling);
      os << "  const int64_t box_" << d.name << "[] = {";
      for (size_t k = 0; k < box.size(); ++k) os << (k ? ", " : "") << box[k];
      os << "};\n  const pallas::detail::TmaOperand tma_" << d.name << "{\"" << d.name << "\", "
         << d.name << ".data(), " << edsl::dtype_bytes(d.dtype) << ", " << d.shape.size() << ", "
         << d.name << ".shape().data(), " << d.name << ".strides().data(), box_" << d.name << ", "
         << d.staged->swizzle << ", pallas::detail::TmaOperand::Element::"
         << (d.dtype == edsl::DType::f32    ? "kF32"
             : d.dtype == edsl::DType::f16  ? "kF16"
             : d.dtype == edsl::DType::bf16 ? "kBF16"
                                            : "kI32")
         << ", " << (writable(d) ? "true" : "false") << "};\n";
      why += "  if (fallback == nullptr && (fallback = pallas::detail::tma_rule_broken(tma_" +
             d.name + ")) != nullptr)\n    fallback_operand = \"" + d.name + "\";\n";
    }
    os << why << "  if (fallback != nullptr) {\n    pallas::Status s = " << directName(spec)
       << "_launch(" << params << "launch);\n"
       << "    if (s.ok() && launch.record != nullptr) {\n"
       << "      launch.record->fallback = fallback;\n"
       << "      launch.record->fallback_operand = fallback_operand;\n    }\n"
       << "    return s;\n  }\n";
    os << rs.str();
    for (size_t i = 0; i < ops.size(); ++i) {
      const OperandDecl& d = ops[i];
      if (!d.staged) continue;
      os << "  pallas::detail::TmaDescriptor d_" << d.name << ";\n"
         << "  if (pallas::Status s = pallas::detail::encode_tma(kKernel, tma_" << d.name
         << ", launch, d_" << d.name << "); !s.ok())\n    return s;\n";
      tmaArgs += "&d_" + d.name + ", ";
    }
  }
  // Kernel parameters: memref descriptors and scalars in declaration order,
  // then the TMA descriptors of staged operands (ConvertPallasToGPU.cpp).
  std::string args;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OperandDecl& d = ops[i];
    if (d.role == Role::kScratch) continue;
    std::string var = "p_" + d.name;
    if (d.role == Role::kScalar) {
      os << "  " << cppType(d.dtype) << " " << var << " = " << d.name << ";\n";
      args += "&" + var + ", ";
      continue;
    }
    if (d.role == Role::kSemaphores || d.role == Role::kWorkspace || d.role == Role::kErrors) {
      size_t slot = std::find(pooled.begin(), pooled.end(), static_cast<int>(i)) - pooled.begin();
      std::string extents = "count_" + d.name;  // 1-D; else each dim, row-major
      if (d.shape.size() > 1) {
        extents.clear();
        for (size_t k = 0; k < d.shape.size(); ++k)
          extents += (k ? ", " : "") + std::string("int64_t{") + d.shape[k].to_cpp() + "}";
      }
      os << "  auto " << var << " = descriptor(pallas::TensorView<" << cppType(d.dtype) << ", "
         << d.shape.size() << ">(static_cast<" << cppType(d.dtype) << "*>(resources.data(" << slot
         << ")), {" << extents << "}));\n";
    } else {
      os << "  auto " << var << " = descriptor(" << ops[viewOf(spec, static_cast<int>(i))].name
         << ");\n";
    }
    args += "&" + var + ".allocated, &" + var + ".aligned, &" + var + ".offset, ";
    for (size_t k = 0; k < d.shape.size(); ++k)
      args += "&" + var + ".sizes[" + std::to_string(k) + "], ";
    for (size_t k = 0; k < d.shape.size(); ++k)
      args += "&" + var + ".strides[" + std::to_string(k) + "], ";
  }
  args += tmaArgs;
  args.resize(args.size() - 2);
  os << "  void* args[] = {" << args << "};\n";
  os << "  const std::array<int64_t, 3> grid = {";
  for (size_t a = 0; a < 3; ++a) os << (a ? ", " : "") << launchedExtent(spec, a);
  os << "};\n";
  if (spec.persistence()) {  // its programs count tiles x steps in 32 bits
    std::string steps;
    for (size_t axis = 0; axis < spec.grid_axes().size(); ++axis)
      if (spec.semantics(axis) == edsl::Semantics::kArbitrary)
        steps = spec.grid_axes()[axis].to_cpp();
    os << "  if (const int64_t steps = " << steps << "; steps > 0 && grid[0] > INT32_MAX / steps)\n"
       << "    return pallas::Status::Error(pallas::StatusCode::kInvalidArgument, "
          "std::string(kKernel) + \": a persistent grid of \" + std::to_string(grid[0]) + "
          "\" tiles x \" + std::to_string(steps) + \" steps; its programs count at most \" "
          "+ std::to_string(INT32_MAX) + \" steps (32-bit)\");\n";
  }
  // A persistent grid in clusters (its staged instance; the direct twin
  // multicasts nothing) asks for them when its tile rows (the second-to-last
  // parallel axis) divide by the cluster size.
  std::string cluster;
  if (spec.persistence() && spec.persistence()->cluster > 1 && !spec.direct()) {
    std::vector<size_t> parallel;
    for (size_t axis = 0; axis < spec.grid_axes().size(); ++axis)
      if (spec.semantics(axis) != edsl::Semantics::kArbitrary) parallel.push_back(axis);
    const std::string size = std::to_string(spec.persistence()->cluster);
    os << "  const int cluster = (" << spec.grid_axes()[parallel[parallel.size() - 2]].to_cpp()
       << ") % " << size << " == 0 ? " << size << " : 1;\n";
    cluster = ", cluster";
  } else if (const int max = spec.cluster_first_axis_max(); max > 0) {
    // Clusters along x (KernelSpec::cluster_first_axis): the whole axis, where it fits one.
    os << "  const int cluster = grid[0] >= 2 && grid[0] <= " << max
       << " ? static_cast<int>(grid[0]) : 1;\n";
    cluster = ", cluster";
  }
  if (errors_slot < 0) {
    os << "  return pallas::detail::launch_kernel(" << name << "_image, args, grid, launch"
       << cluster << ");\n}\n\n";
  } else {  // failed checks become the status (see pallas::detail::report_checks)
    os << "  if (pallas::Status s = pallas::detail::launch_kernel(" << name
       << "_image, args, grid, launch" << cluster << "); !s.ok())\n    return s;\n"
       << "  return pallas::detail::report_checks(" << name << "_image, launch, resources.data("
       << errors_slot << "));\n}\n\n";
  }

  // argv form and metadata.
  os << "pallas::Status " << name << "_argv(void* const* args, const pallas::Launch& launch) {\n"
     << "  return " << fn << "(";
  int k = 0;
  for (int i : entryParams(spec))
    os << "*static_cast<const " << paramType(ops[i]) << "*>(args[" << k++ << "]), ";
  os << "launch);\n}\n\n";
  os << "const pallas::KernelMetadata& " << name << "_metadata() { return " << name
     << "_metadata_value; }\n\n}  // namespace pallas::kernels\n\n";
}

/// The entry point of an op with variants (KernelSpec::variant): binds the
/// dims, evaluates the chooser and launches the chosen instance, which checks
/// its arguments itself.
void emitDispatch(std::ostringstream& os, const std::vector<const CompiledInstance*>& group) {
  const edsl::KernelSpec& spec = *group.front()->kernel->spec;
  const auto& ops = spec.operands();
  os << "namespace pallas::kernels {\n\n" << signature(spec, false) << " {\n";
  std::vector<bool> bound(spec.dim_names().size(), false);
  for (int i : entryParams(spec))
    for (size_t k = 0; k < ops[i].shape.size(); ++k) {
      if (ops[i].shape[k].kind() != edsl::DimExpr::Kind::kDim) continue;
      int dim = ops[i].shape[k].dim_index();
      if (bound[dim]) continue;
      bound[dim] = true;
      os << "  [[maybe_unused]] const int64_t " << spec.dim_names()[dim] << " = " << ops[i].name
         << ".shape(" << k << ");\n";
    }
  std::string params;
  for (int i : entryParams(spec)) params += ops[i].name + ", ";
  os << "  switch (" << spec.variant_chooser()->to_cpp() << ") {\n";
  for (const CompiledInstance* inst : group)
    if (!inst->kernel->spec->direct())  // a staged instance launches its twin itself
      os << "    case " << inst->kernel->spec->variant_index() << ":\n      return "
         << inst->kernel->instance << "_launch(" << params << "launch);\n";
  os << "  }\n  return pallas::Status::Error(pallas::StatusCode::kInvalidArgument,\n"
     << "      \"" << spec.op() << ": no variant for these shapes (internal error)\");\n}\n\n"
     << "}  // namespace pallas::kernels\n\n";
}

/// Instances grouped by their entry point (the same signature: variants).
std::vector<std::vector<const CompiledInstance*>> entryGroups(
    const std::vector<CompiledInstance>& instances) {
  std::vector<std::vector<const CompiledInstance*>> groups;
  std::vector<std::string> keys;
  for (const CompiledInstance& inst : instances) {
    std::string key = signature(*inst.kernel->spec, false);
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      groups.push_back({&inst});
    } else {
      groups[it - keys.begin()].push_back(&inst);
    }
  }
  return groups;
}

}  // namespace

std::string emitHeader(const std::string& op, const std::string& spec_file,
                       const std::vector<CompiledInstance>& instances) {
  std::ostringstream os;
  os << "// Generated by pallas-codegen from " << spec_file << " (op '" << op
     << "'). Do not edit.\n#pragma once\n\n"
     << "#include <pallas/dtype.h>\n#include <pallas/launch.h>\n#include <pallas/metadata.h>\n"
     << "#include <pallas/status.h>\n#include <pallas/tensor_view.h>\n\n"
     << "namespace pallas::kernels {\n\n";
  std::vector<std::string> declared;
  for (const CompiledInstance& inst : instances) {
    const edsl::KernelSpec& spec = *inst.kernel->spec;
    const std::string& name = inst.kernel->instance;
    os << "/// " << name << ": grid " << gridText(spec) << ", " << spec.launch_threads()
       << " threads per program";
    if (spec.launch_threads(/*tma_copies=*/false) != spec.launch_threads())
      os << " (" << spec.launch_threads(false) << " in its sm_80 form: no producer warpgroup)";
    if (spec.variant_chooser()) {
      os << "; launched when " << spec.variant_chooser()->to_string() << " is";
      for (int v : spec.direct() ? spec.twin_serves() : std::vector<int>{spec.variant_index()})
        os << " " << v;
    }
    os << ".\n";
    for (const OperandDecl& d : spec.operands()) {
      if (d.role == Role::kScratch) continue;
      os << "///   " << d.name << ": " << edsl::name(d.dtype) << " ";
      if (d.role == Role::kScalar)
        os << "scalar\n";
      else
        os << (d.aliased_to >= 0        ? "input, updated in place"
               : d.role == Role::kInput ? "input"
                                        : "output")
           << " " << shapeText(d) << "\n";
    }
    if (std::string typed = signature(spec, true);
        std::find(declared.begin(), declared.end(), typed) == declared.end()) {
      declared.push_back(typed);
      os << "[[nodiscard]] " << typed << ";\n";
    }
    os << "/// args[i] points at the i-th parameter of the typed entry point.\n";
    os << "[[nodiscard]] pallas::Status " << name
       << "_argv(void* const* args, const pallas::Launch& launch = {});\n";
    os << "const pallas::KernelMetadata& " << name << "_metadata();\n\n";
  }
  os << "/// Every instance of " << op << ", for harnesses that walk the library.\n"
     << "inline constexpr pallas::EntryPoint " << op << "_entry_points[] = {\n";
  for (const CompiledInstance& inst : instances) {
    const std::string& name = inst.kernel->instance;
    os << "    {&" << name << "_metadata, &" << name << "_argv},\n";
  }
  os << "};\n\n}  // namespace pallas::kernels\n";
  return os.str();
}

std::string emitSource(const std::string& op, const std::string& spec_file,
                       const std::vector<CompiledInstance>& instances) {
  std::ostringstream os;
  os << "// Generated by pallas-codegen from " << spec_file << " (op '" << op
     << "'). Do not edit.\n\n"
     << "#include \"pallas/kernels/" << op << ".h\"\n\n#include <pallas/detail/kernel_image.h>\n\n"
     << "#include <algorithm>\n#include <array>\n#include <cstdint>\n#include <string>\n\n"
     << "namespace {\n\n"
     << "// The MLIR memref descriptor: what the kernels' array parameters expand to.\n"
     << "template <int Rank>\nstruct MemRefDescriptor {\n  void* allocated;\n  void* aligned;\n"
     << "  int64_t offset;\n  int64_t sizes[Rank];\n  int64_t strides[Rank];\n};\n\n"
     << "template <class T, int Rank>\nMemRefDescriptor<Rank> descriptor(const "
        "pallas::TensorView<T, Rank>& v) {\n"
     << "  MemRefDescriptor<Rank> d{};\n"
     << "  d.allocated = d.aligned = const_cast<void*>(static_cast<const void*>(v.data()));\n"
     << "  for (int i = 0; i < Rank; ++i) {\n    d.sizes[i] = v.shape(i);\n"
     << "    d.strides[i] = v.stride(i);\n  }\n  return d;\n}\n\n"
     << "[[maybe_unused]] constexpr int64_t pallas_cdiv(int64_t a, int64_t b) { return (a + b - 1) "
        "/ b; }\n\n}  // namespace\n\n";
  for (const CompiledInstance& inst : instances) emitInstance(os, inst);
  for (const auto& group : entryGroups(instances))
    if (group.front()->kernel->spec->variant_chooser()) emitDispatch(os, group);
  return os.str();
}

}  // namespace pallas::codegen
