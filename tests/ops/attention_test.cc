// attention and causal_attention on every backend against a float64
// reference on fresh random data: sequence lengths that are not multiples of
// the 64-row query and key blocks (1, 7, 63, 65, 127, 129, ...), more or
// fewer queries than keys (causal rows that see no key are 0), several
// batch entries and heads, [batch, seq, heads, d] views (strides TMA copies)
// and padded rows it cannot (the direct twin). Outputs are poisoned: every
// element must be written, and the padding after each row must stay.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

struct AttentionShape {
  int64_t batch, heads, sq, skv, d = 64;
  // kBhsd: [batch, heads, seq, d] contiguous. kBshd: the same arrays as views
  // of [batch, seq, heads, d] memory. kPadded: kBhsd with `pad` elements after
  // each row (a row stride TMA cannot copy when pad * sizeof(T) % 16 != 0).
  enum class Layout { kBhsd, kBshd, kPadded } layout = Layout::kBhsd;
  int64_t pad = 0;
  int64_t kv_heads = 0;  // k and v's heads (grouped-query attention); 0: as many as q's
  int64_t kv() const { return kv_heads ? kv_heads : heads; }
};

/// The 4-D strides of a [batch, heads, seq, d] array (seq rows of d) in `layout`.
std::array<int64_t, 4> strides_of(const AttentionShape& s, int64_t heads, int64_t seq) {
  using Layout = AttentionShape::Layout;
  const int64_t row = s.d + (s.layout == Layout::kPadded ? s.pad : 0);
  if (s.layout == Layout::kBshd) return {seq * heads * row, row, heads * row, 1};
  return {heads * seq * row, seq * row, row, 1};
}

/// Runs one (causal) attention and compares every output element with
///   o[b, h, r] = sum_c p_c v[b, h, c],  p = softmax_c(scale q[b, h, r] . k[b, h, c])
/// over the keys c the row sees (all, or causally c <= r + skv - sq; none: 0).
/// Tolerance: the kernel rounds p to the input dtype before p @ v (relative
/// 2^-8 for bf16, 2^-11 for f16: at most that of sum p |v|), sums in f32 and
/// uses approximate exp2; the output adds its own rounding.
template <class T>
void check_attention(Backend backend, AttentionShape s, bool causal, float scale,
                     int compute_capability = 90, uint64_t schedule_seed = 0,
                     int64_t shared_bytes_per_block = 0) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(causal ? "causal_attention " : "attention ") + dtype_name<T>() +
               " batch " + std::to_string(s.batch) + " heads " + std::to_string(s.heads) + " sq " +
               std::to_string(s.sq) + " skv " + std::to_string(s.skv) + " d " +
               std::to_string(s.d) + " kv_heads " + std::to_string(s.kv()) + " layout " +
               std::to_string(static_cast<int>(s.layout)) + " pad " + std::to_string(s.pad) +
               " sm_" + std::to_string(compute_capability) + " schedule " +
               std::to_string(schedule_seed) + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto qs = strides_of(s, s.heads, s.sq), ks = strides_of(s, s.kv(), s.skv);
  auto elements = [&](const std::array<int64_t, 4>& st, int64_t seq) {
    (void)seq;
    return static_cast<size_t>(std::max<int64_t>(s.batch * st[0], 1));
  };
  Array<T> q(backend, elements(qs, s.sq)), k(backend, elements(ks, s.skv)),
      v(backend, elements(ks, s.skv)), o(backend, elements(qs, s.sq));
  q.fill_random(rng, -2.0f, 2.0f);
  k.fill_random(rng, -2.0f, 2.0f);
  v.fill_random(rng, -1.0f, 1.0f);
  const T guard = from_float<T>(1234.0f);
  for (T& x : o.host()) x = guard;
  auto at = [](const std::array<int64_t, 4>& st, int64_t b, int64_t h, int64_t r, int64_t c) {
    return static_cast<size_t>(b * st[0] + h * st[1] + r * st[2] + c * st[3]);
  };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t r = 0; r < s.sq; ++r)
        for (int64_t c = 0; c < s.d; ++c)
          o.host()[at(qs, b, h, r, c)] = from_float<T>(std::numeric_limits<float>::quiet_NaN());
  q.upload();
  k.upload();
  v.upload();
  o.upload();
  auto view = [&](Array<T>& a, const std::array<int64_t, 4>& st, int64_t heads, int64_t seq) {
    return TensorView<T, 4>(a.data(), {s.batch, heads, seq, s.d}, {st[0], st[1], st[2], st[3]});
  };
  const uint64_t before = detail::tma_descriptors_handed_out();
  Launch launch{backend,
                nullptr,
                {.schedule_seed = schedule_seed,
                 .compute_capability = compute_capability,
                 .shared_bytes_per_block = shared_bytes_per_block}};
  LaunchRecord record;
  launch.record = &record;
  const TensorView<const T, 4> qv = view(q, qs, s.heads, s.sq), kv = view(k, ks, s.kv(), s.skv),
                               vv = view(v, ks, s.kv(), s.skv);
  const Status status =
      causal ? kernels::causal_attention(qv, kv, vv, view(o, qs, s.heads, s.sq), scale, launch)
             : kernels::attention(qv, kv, vv, view(o, qs, s.heads, s.sq), scale, launch);
  ASSERT_TRUE(status.ok()) << status.message();
  o.download();
  ASSERT_NE(record.instance, nullptr);
  EXPECT_NE(std::string(record.instance).find(s.d <= 64 ? "_d64" : "_d128"), std::string::npos)
      << record.instance << " ran for a head dim of " << s.d;
  if (backend == Backend::kEmulator) {
    // q and k, v through TMA (o is stored from registers) where every row
    // stride is a multiple of 16 bytes and every extent positive.
    const int64_t row = s.d + (s.layout == AttentionShape::Layout::kPadded ? s.pad : 0);
    const bool tma = row * static_cast<int64_t>(sizeof(T)) % 16 == 0;
    const bool expect_tma = tma && s.sq > 0 && s.skv > 0;
    EXPECT_EQ(detail::tma_descriptors_handed_out() - before, expect_tma ? 3u : 0u)
        << record.instance << " ran; " << (record.fallback ? record.fallback : "no fallback");
  }
  const double rtol = std::is_same_v<T, bfloat16> ? 1.0 / 256 : 1.0 / 2048;
  int misses = 0;
  std::vector<double> logits(static_cast<size_t>(s.skv));
  const int64_t group = s.heads / s.kv();  // query heads per key-value head
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t r = 0; r < s.sq && misses < 5; ++r) {
        const int64_t last = causal ? std::min(s.skv - 1, r + s.skv - s.sq) : s.skv - 1;
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c <= last; ++c) {
          double dotp = 0;
          for (int64_t e = 0; e < s.d; ++e)
            dotp += to_float(q.host()[at(qs, b, h, r, e)]) *
                    to_float(k.host()[at(ks, b, h / group, c, e)]);
          logits[static_cast<size_t>(c)] = scale * dotp;
          top = std::max(top, logits[static_cast<size_t>(c)]);
        }
        double total = 0;
        for (int64_t c = 0; c <= last; ++c)
          total += logits[static_cast<size_t>(c)] = std::exp(logits[static_cast<size_t>(c)] - top);
        for (int64_t e = 0; e < s.d && misses < 5; ++e) {
          double want = 0, magnitude = 0;
          for (int64_t c = 0; c <= last; ++c) {
            const double p = logits[static_cast<size_t>(c)] / total;
            const double x = to_float(v.host()[at(ks, b, h / group, c, e)]);
            want += p * x;
            magnitude += p * std::abs(x);
          }
          const double got = to_float(o.host()[at(qs, b, h, r, e)]);
          const double tol = 2 * rtol * magnitude + rtol * std::abs(want) + 1e-5;
          if (!(std::abs(got - want) <= tol)) {
            ADD_FAILURE() << "o[" << b << ", " << h << ", " << r << ", " << e << "] = " << got
                          << ", want " << want << " (tolerance " << tol << ")";
            ++misses;
          }
        }
      }
  // Nothing outside o's elements was written (row padding, the heads' gaps).
  size_t written = 0;
  for (const T& x : o.host())
    if (to_float(x) != to_float(guard)) ++written;
  EXPECT_EQ(written, static_cast<size_t>(s.batch * s.heads * s.sq * s.d))
      << "elements of o's buffer outside its view were written";
}

class AttentionTest : public BackendTest {};

using Layout = AttentionShape::Layout;

/// Lengths around the 64-row blocks, and head dims of both instances (d64:
/// d <= 64; d128: 64 < d <= 128; columns past d are TMA's zero fill); d = 7
/// has rows of 14 bytes, which TMA cannot copy (the direct twin); no queries
/// (nothing to write) and no keys (every row 0). The emulator runs fewer
/// (every thread of every program).
std::vector<AttentionShape> shapes_for(Backend backend) {
  std::vector<AttentionShape> shapes = {
      {1, 1, 1, 1, 64},    {1, 2, 65, 130, 64}, {2, 1, 64, 64, 128}, {1, 1, 7, 200, 32},
      {1, 1, 129, 63, 80}, {1, 1, 20, 70, 7},   {1, 2, 0, 5, 64},    {2, 1, 5, 0, 128}};
  if (backend != Backend::kEmulator)
    shapes.insert(
        shapes.end(),
        {{2, 3, 127, 257, 128}, {1, 2, 255, 255, 64}, {1, 1, 300, 100, 96}, {1, 1, 65, 129, 127}});
  return shapes;
}

TEST_P(AttentionTest, BF16) {
  for (AttentionShape s : shapes_for(GetParam()))
    check_attention<bfloat16>(GetParam(), s, false, 0.125f);
}
TEST_P(AttentionTest, CausalBF16) {
  for (AttentionShape s : shapes_for(GetParam()))
    check_attention<bfloat16>(GetParam(), s, true, 0.125f);
}
TEST_P(AttentionTest, F16) {
  for (AttentionShape s : shapes_for(GetParam())) check_attention<half>(GetParam(), s, false, 0.2f);
}
TEST_P(AttentionTest, CausalF16) {
  for (AttentionShape s : shapes_for(GetParam())) check_attention<half>(GetParam(), s, true, 0.2f);
}

// [batch, seq, heads, d] in memory (the layout a fused QKV projection
// writes), through TMA; padded rows of 8 bytes more, which TMA cannot copy:
// the direct twin.
// Grouped-query attention: query head h reads key-value head h / (heads /
// kv_heads); one key-value head for all (multi-query), in both layouts.
TEST_P(AttentionTest, GroupedQueryHeads) {
  for (bool causal : {false, true}) {
    check_attention<bfloat16>(GetParam(), {2, 4, 65, 100, 64, Layout::kBhsd, 0, 2}, causal, 0.125f);
    // Groups of 4 over 2 kv heads: h / kv_heads would read the wrong head.
    check_attention<bfloat16>(GetParam(), {1, 8, 30, 70, 64, Layout::kBhsd, 0, 2}, causal, 0.125f);
    check_attention<half>(GetParam(), {1, 6, 20, 50, 64, Layout::kPadded, 4, 2}, causal, 0.125f);
    check_attention<half>(GetParam(), {1, 3, 30, 70, 128, Layout::kBshd, 0, 1}, causal, 0.125f);
  }
}

// kv_heads must divide heads (and be at least 1): refused before anything runs.
TEST_P(AttentionTest, KvHeadsThatDoNotDivideHeadsAreRefused) {
  Array<bfloat16> q(GetParam(), 6 * 64), kv(GetParam(), 4 * 64), o(GetParam(), 6 * 64);
  TensorView<const bfloat16, 4> qv(q.data(), {1, 6, 1, 64}), kvv(kv.data(), {1, 4, 1, 64});
  const Status s = kernels::attention(
      qv, kvv, kvv, TensorView<bfloat16, 4>(o.data(), {1, 6, 1, 64}), 0.1f, launch());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "attention_bf16: the query heads 'heads' (dim 1 of q and o) must be a multiple of the "
            "key-value heads 'kv_heads' (dim 1 of k and v), which must be at least 1; heads is 6, "
            "kv_heads is 4");
  TensorView<const bfloat16, 4> none(kv.data(), {1, 0, 1, 64});
  EXPECT_EQ(kernels::attention(qv, none, none, TensorView<bfloat16, 4>(o.data(), {1, 6, 1, 64}),
                               0.1f, launch())
                .code(),
            StatusCode::kInvalidArgument);
  // No heads at all: nothing to do, whatever kv_heads is.
  TensorView<const bfloat16, 4> no_q(q.data(), {1, 0, 1, 64});
  const Status empty = kernels::attention(
      no_q, none, none, TensorView<bfloat16, 4>(o.data(), {1, 0, 1, 64}), 0.1f, launch());
  EXPECT_TRUE(empty.ok()) << empty.message();
}

TEST_P(AttentionTest, ViewsAndStrides) {
  for (bool causal : {false, true}) {
    check_attention<bfloat16>(GetParam(), {2, 3, 70, 90, 64, Layout::kBshd}, causal, 0.125f);
    check_attention<half>(GetParam(), {1, 2, 40, 70, 128, Layout::kBshd}, causal, 0.125f);
    check_attention<bfloat16>(GetParam(), {1, 2, 65, 100, 64, Layout::kPadded, 4}, causal, 0.125f);
    check_attention<half>(GetParam(), {1, 2, 33, 77, 64, Layout::kPadded, 4}, causal, 0.125f);
  }
}

// The head dim is a block dim of at most 128: a longer one is refused before
// anything runs, naming the dim and its value; o stays untouched.
TEST_P(AttentionTest, HeadDimOver128IsRefused) {
  Array<bfloat16> q(GetParam(), 160), o(GetParam(), 160);
  for (bfloat16& x : o.host()) x = from_float<bfloat16>(7.0f);
  o.upload();
  TensorView<const bfloat16, 4> in(q.data(), {1, 1, 1, 160});
  for (bool causal : {false, true}) {
    const Status s =
        causal ? kernels::causal_attention(
                     in, in, in, TensorView<bfloat16, 4>(o.data(), {1, 1, 1, 160}), 0.1f, launch())
               : kernels::attention(in, in, in, TensorView<bfloat16, 4>(o.data(), {1, 1, 1, 160}),
                                    0.1f, launch());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), std::string(causal ? "causal_attention_bf16" : "attention_bf16") +
                               ": the head dim 'd' (dim 3 of q, k, v and o) must be at most "
                               "128; d is 160");
  }
  o.download();
  for (bfloat16 x : o.host()) ASSERT_EQ(to_float(x), 7.0f) << "o was written";
}

// The sm_80 form (cp.async stages, ldmatrix + mma.sync) on the emulator.
TEST_P(AttentionTest, Sm80Form) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the emulator chooses the form";
  check_attention<bfloat16>(GetParam(), {1, 2, 65, 130, 64}, true, 0.125f, 80);
  check_attention<half>(GetParam(), {1, 1, 64, 200, 128}, false, 0.125f, 80);
  check_attention<bfloat16>(GetParam(), {1, 4, 40, 70, 64, Layout::kBhsd, 0, 1}, true, 0.125f, 80);
}

// d128 (two K/V stages, 80 KiB) on every device that runs it: an sm_90 part with its 227 KiB
// a block or less (here 200 KiB), and sm_80's 163 KiB; d 65..128 takes it, d 64 the d64.
TEST_P(AttentionTest, HeadDim128InstanceOnEveryDevice) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the emulator stands for the devices";
  struct Case {
    int cc;
    int64_t shared, d;
    const char* instance;
  };
  for (Case c :
       {Case{90, 0, 128, "attention_bf16_d128"}, Case{90, 200 * 1024, 128, "attention_bf16_d128"},
        Case{80, 0, 128, "attention_bf16_d128"}, Case{90, 0, 96, "attention_bf16_d128"},
        Case{90, 0, 64, "attention_bf16_d64"}}) {
    SCOPED_TRACE("sm_" + std::to_string(c.cc) + " shared " + std::to_string(c.shared) + " d " +
                 std::to_string(c.d));
    Array<bfloat16> x(GetParam(), 64 * c.d), o(GetParam(), 64 * c.d);
    x.upload();
    LaunchRecord record;
    Launch launch{
        GetParam(), nullptr, {.compute_capability = c.cc, .shared_bytes_per_block = c.shared}};
    launch.record = &record;
    const TensorView<const bfloat16, 4> xv(x.data(), {1, 1, 64, c.d});
    const Status st = kernels::attention(
        xv, xv, xv, TensorView<bfloat16, 4>(o.data(), {1, 1, 64, c.d}), 0.125f, launch);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_NE(record.instance, nullptr);
    EXPECT_STREQ(record.instance, c.instance);
  }
  // d128 over 5 key blocks (each of its two stages refilled twice) against the reference (the
  // other emulator shapes have at most 2 key blocks), and with 200 KiB of shared memory.
  check_attention<bfloat16>(GetParam(), {1, 1, 65, 257, 128}, true, 0.125f);
  check_attention<half>(GetParam(), {1, 2, 64, 300, 96}, false, 0.2f);
  check_attention<bfloat16>(GetParam(), {1, 2, 129, 200, 128}, true, 0.125f, 90, 0, 200 * 1024);
  check_attention<half>(GetParam(), {1, 1, 65, 130, 96}, false, 0.2f, 90, 0, 200 * 1024);
}

// The emulator's threads in random orders (EmulatorOptions::schedule_seed)
// instead of round-robin: the key pipeline's stage reuse, the row shuffles
// and the exit wait for Q's copy (programs that see no key), both forms.
TEST_P(AttentionTest, SchedulesInRandomOrders) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "only the emulator reorders threads";
  for (uint64_t schedule : {7u, 1234u, 99u}) {
    check_attention<bfloat16>(GetParam(), {1, 2, 129, 200, 64}, true, 0.125f, 90, schedule);
    check_attention<half>(GetParam(), {1, 1, 100, 63, 128, Layout::kBhsd, 0, 1}, true, 0.125f, 90,
                          schedule);
    check_attention<bfloat16>(GetParam(), {1, 2, 70, 130, 64}, false, 0.125f, 80, schedule);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

}  // namespace
}  // namespace pallas::testing
