// Every entry point against bad views, driven by the metadata: walks every instance of every
// prebuilt op (kernels::all_entry_points) and calls it through its argv form, first with
// good views (every dim kExtent, contiguous), then with one bad view at a time for each
// array parameter: null, misaligned, a negative extent, 2^31 elements, a view past its
// container, an output extent that disagrees, an output over an input. Each bad call must return
// the status class for it, with a message naming what the user called and the operand, and
// leave every output untouched. Inputs whose extent disagrees may be accepted (a dim only
// they set); then they must still run cleanly.
#include <pallas/kernels.h>

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <vector>

namespace pallas {

// A container of the test's own whose size the view keeps: for the view-past-its-container
// case.
template <class T>
struct SizedBuffer {
  T* data;
  int64_t size;
};
template <class T>
struct StorageTraits<SizedBuffer<T>> {
  static T* data(SizedBuffer<T>& b) { return b.data; }
  static int64_t size(const SizedBuffer<T>& b) { return b.size; }
};

namespace {

constexpr int64_t kExtent = 8;  // every dim of the good views
constexpr unsigned char kPoison = 0xAB;

/// Room for any TensorView the entry points take (the layout does not depend on T).
struct AnyView {
  alignas(TensorView<float, 4>) unsigned char bytes[sizeof(TensorView<float, 4>)];
};

/// The view a parameter gets: data, extents, strides, and (>= 0) its container's size.
struct ViewSpec {
  void* data = nullptr;
  std::vector<int64_t> shape, strides;
  int64_t storage = -1;
};

template <class T, int R>
void emplace_typed(AnyView& out, bool writable, const ViewSpec& v) {
  std::array<int64_t, R> shape{}, strides{};
  for (int d = 0; d < R; ++d) {
    shape[d] = v.shape[d];
    strides[d] = v.strides[d];
  }
  auto* p = static_cast<T*>(v.data);
  if (writable) {
    SizedBuffer<T> b{p, v.storage};
    if (v.storage >= 0)
      new (out.bytes) TensorView<T, R>(b, shape, strides);
    else
      new (out.bytes) TensorView<T, R>(p, shape, strides);
  } else {
    SizedBuffer<const T> b{p, v.storage};
    if (v.storage >= 0)
      new (out.bytes) TensorView<const T, R>(b, shape, strides);
    else
      new (out.bytes) TensorView<const T, R>(p, shape, strides);
  }
}

template <class T>
void emplace_rank(AnyView& out, int rank, bool writable, const ViewSpec& v) {
  switch (rank) {
    case 0:
      return emplace_typed<T, 0>(out, writable, v);
    case 1:
      return emplace_typed<T, 1>(out, writable, v);
    case 2:
      return emplace_typed<T, 2>(out, writable, v);
    case 3:
      return emplace_typed<T, 3>(out, writable, v);
    case 4:
      return emplace_typed<T, 4>(out, writable, v);
  }
  FAIL() << "rank " << rank;
}

void emplace(AnyView& out, DType dtype, int rank, bool writable, const ViewSpec& v) {
  switch (dtype) {
    case DType::kF32:
      return emplace_rank<float>(out, rank, writable, v);
    case DType::kF16:
      return emplace_rank<half>(out, rank, writable, v);
    case DType::kBF16:
      return emplace_rank<bfloat16>(out, rank, writable, v);
    case DType::kI32:
      return emplace_rank<int32_t>(out, rank, writable, v);
  }
}

/// One instance's parameters in argv order, with buffers for the good views.
class Call {
 public:
  explicit Call(const KernelMetadata& m) : m_(m) {
    for (const OperandMetadata& op : m.operands)
      if (op.argument >= 0) params_.resize(std::max<size_t>(params_.size(), op.argument + 1));
    for (const OperandMetadata& op : m.operands) {
      if (op.argument < 0) continue;
      Param& p = params_[static_cast<size_t>(op.argument)];
      p.op = &op;
      if (op.role == OperandRole::kScalar) continue;
      p.good.shape.assign(static_cast<size_t>(op.rank), kExtent);
      for (int d = 0; d < op.rank; ++d)
        if (op.fixed_shape[d] >= 0) p.good.shape[d] = op.fixed_shape[d];
      p.good.strides.assign(static_cast<size_t>(op.rank), 1);
      for (int d = op.rank - 2; d >= 0; --d)
        p.good.strides[d] = p.good.strides[d + 1] * p.good.shape[d + 1];
      int64_t n = 1;
      for (int64_t e : p.good.shape) n *= e;
      // 16-byte aligned (TMA's rule, so staged instances keep their path), one element spare.
      p.buffer.assign(static_cast<size_t>(n + 1) * size_of(op.dtype) / 16 + 2, Block{});
      p.good.data = p.buffer.data();
    }
  }

  std::span<const std::pair<int, const OperandMetadata*>> arrays() const { return arrays_; }
  const KernelMetadata& metadata() const { return m_; }
  bool writable(const OperandMetadata& op) const {
    return op.role == OperandRole::kOutput || op.role == OperandRole::kInOut;
  }

  /// Zero inputs (valid labels, finite values), poisoned outputs.
  void reset() {
    for (Param& p : params_) {
      if (!p.op || p.op->role == OperandRole::kScalar) continue;
      std::memset(p.buffer.data(), writable(*p.op) ? kPoison : 0, p.buffer.size() * sizeof(Block));
    }
  }
  bool outputs_untouched() const {
    for (const Param& p : params_) {
      if (!p.op || !writable(*p.op)) continue;
      const auto* b = reinterpret_cast<const unsigned char*>(p.buffer.data());
      for (size_t i = 0; i < p.buffer.size() * sizeof(Block); ++i)
        if (b[i] != kPoison) return false;
    }
    return true;
  }

  /// Calls with the good views, except `bad` for parameter `argument` (-1: none).
  Status run(int argument, const ViewSpec* bad) {
    std::vector<AnyView> views(params_.size());
    std::vector<void*> args(params_.size());
    float f32_scalar = 1e-3f;  // eps > 0, alpha; beta 1e-3 reads C (zeros)
    int32_t i32_scalar = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const OperandMetadata& op = *params_[i].op;
      if (op.role == OperandRole::kScalar) {
        args[i] = op.dtype == DType::kI32 ? static_cast<void*>(&i32_scalar)
                                          : static_cast<void*>(&f32_scalar);
        continue;
      }
      const ViewSpec& v = static_cast<int>(i) == argument ? *bad : params_[i].good;
      emplace(views[i], op.dtype, op.rank, writable(op), v);
      args[i] = views[i].bytes;
    }
    return argv_(args.data(), Launch{Backend::kHost});
  }

  void set_argv(Status (*argv)(void* const*, const Launch&)) { argv_ = argv; }
  const ViewSpec& good(int argument) const { return params_[static_cast<size_t>(argument)].good; }
  void* first_input_data() const {
    for (const Param& p : params_)
      if (p.op && p.op->role == OperandRole::kInput) return p.good.data;
    return nullptr;
  }
  void index_arrays() {
    for (const Param& p : params_)
      if (p.op->role != OperandRole::kScalar && p.op->rank > 0)
        arrays_.emplace_back(p.op->argument, p.op);
  }

 private:
  struct alignas(16) Block {
    unsigned char b[16];
  };
  struct Param {
    const OperandMetadata* op = nullptr;
    std::vector<Block> buffer;
    ViewSpec good;
  };
  const KernelMetadata& m_;
  std::vector<Param> params_;
  std::vector<std::pair<int, const OperandMetadata*>> arrays_;
  Status (*argv_)(void* const*, const Launch&) = nullptr;
};

/// The status a bad call must get: `code`, a message naming what the user called and the
/// operand (and containing `words`), the outputs untouched.
void expect_rejected(Call& call, const Status& s, StatusCode code, const OperandMetadata& op,
                     const char* words, const std::string& what) {
  const KernelMetadata& m = call.metadata();
  const std::string entry = m.entry ? m.entry : m.name;
  EXPECT_EQ(s.code(), code) << what << ": " << s.message();
  EXPECT_EQ(s.message().rfind(entry + ": ", 0), 0u) << what << ": " << s.message();
  EXPECT_NE(s.message().find("'" + std::string(op.name) + "'"), std::string::npos)
      << what << ": " << s.message();
  EXPECT_NE(s.message().find(words), std::string::npos) << what << ": " << s.message();
  EXPECT_TRUE(call.outputs_untouched()) << what << ": an output was written";
}

TEST(BadInput, EveryEntryPointRejectsEveryBadViewByName) {
  int instances = 0, calls = 0, unchosen = 0;
  for (std::span<const EntryPoint> op : kernels::all_entry_points)
    for (const EntryPoint& e : op) {
      const KernelMetadata& m = e.metadata();
      SCOPED_TRACE(m.name);
      ++instances;
      Call call(m);
      call.set_argv(e.argv);
      call.index_arrays();
      call.reset();
      // A variant's instance runs only the shapes its op's entry point gives it, and says so
      // for others (after checking the views).
      Status good = call.run(-1, nullptr);
      const bool chosen = good.ok();
      if (!chosen) {
        EXPECT_EQ(good.code(), StatusCode::kInvalidArgument) << good.message();
        ASSERT_NE(good.message().find("runs the shapes for which"), std::string::npos)
            << "good views: " << good.message();
        ++unchosen;
      }
      for (auto [argument, op_meta] : call.arrays()) {
        const OperandMetadata& op = *op_meta;
        const ViewSpec& g = call.good(argument);
        const bool output = call.writable(op);
        auto bad = [&](ViewSpec v, StatusCode code, const char* words, const char* what) {
          call.reset();
          ++calls;
          expect_rejected(call, call.run(argument, &v), code, op, words,
                          std::string(what) + " '" + op.name + "'");
        };
        ViewSpec v = g;
        v.data = nullptr;
        bad(v, StatusCode::kNullPointer, "null pointer", "null");
        if (size_of(op.dtype) > 1) {
          v = g;
          v.data = static_cast<char*>(g.data) + 1;
          bad(v, StatusCode::kMisaligned, "aligned", "misaligned");
        }
        v = g;
        v.shape[0] = -1;
        bad(v, StatusCode::kInvalidArgument, "negative extent", "negative extent");
        v = g;
        v.shape[0] = (int64_t{1} << 31) / (g.strides[0]) + 1;  // 2^31 elements and more
        bad(v, StatusCode::kInvalidArgument, "2147483647", "2^31 elements");
        v = g;
        v.storage = 1;
        for (int64_t s : g.shape) v.storage *= s;
        v.storage -= 1;  // one element short
        bad(v, StatusCode::kInvalidArgument, "of its storage", "past its container");
        // One row (dim 0) fewer (or two for a fixed [1]): an output must agree with the inputs that
        // set its dims; an input may set a dim alone (then the call runs).
        v = g;
        v.shape[0] = g.shape[0] > 1 ? g.shape[0] - 1 : 2;
        call.reset();
        ++calls;
        Status s = call.run(argument, &v);
        const bool other_variant =
            !chosen && s.message().find("runs the shapes") != std::string::npos;
        if (output || !(s.ok() || other_variant))
          expect_rejected(call, s, StatusCode::kShapeMismatch, op, "dim", "extent");
        if (output && call.first_input_data()) {
          v = g;
          v.data = call.first_input_data();
          bad(v, StatusCode::kInvalidArgument, "overlaps", "over an input");
        }
        // Dim 0 with stride 0: every row (or batch entry) the first one. An input broadcasts
        // (the call runs); an output, or an operand updated in place, is refused.
        if (op.rank >= 2 && g.shape[0] > 1) {
          v = g;
          v.strides[0] = 0;
          if (output) {
            bad(v, StatusCode::kInvalidArgument, "smaller than", "broadcast output");
          } else {
            call.reset();
            ++calls;
            Status b = call.run(argument, &v);
            EXPECT_TRUE(b.ok() ||
                        (!chosen && b.message().find("runs the shapes") != std::string::npos))
                << "broadcast input '" << op.name << "': " << b.message();
          }
        }
      }
    }
  EXPECT_GT(instances, 200);  // every dtype, variant and path instance of every op (252)
  std::printf("%d instances (%d variants not chosen for %lld in every dim), %d bad calls\n",
              instances, unchosen, static_cast<long long>(kExtent), calls);
}

}  // namespace
}  // namespace pallas
