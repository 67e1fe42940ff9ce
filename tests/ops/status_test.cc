// Bad input through the generated entry points: each case gets a status that
// names what is wrong. Also the metadata every kernel exposes.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

#include <array>
#include <type_traits>

namespace pallas::testing {
namespace {

TEST(Status, ShapeMismatchNamesOperandAndDim) {
  std::vector<float> x(100), y(99), out(100);
  Status s = kernels::add(TensorView<const float, 1>(x.data(), {100}),
                          TensorView<const float, 1>(y.data(), {99}),
                          TensorView<float, 1>(out.data(), {100}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_EQ(s.message(),
            "add_f32: operand 'y' dim 0 is 99, but dim 'n' is 100 (set by operand 'x' dim 0)");
}

TEST(Status, ShapeMismatchInSecondDim) {
  std::vector<float> x(12), bias(5), out(12);
  Status s = kernels::bias_gelu(TensorView<const float, 2>(x.data(), {3, 4}),
                                TensorView<const float, 1>(bias.data(), {5}),
                                TensorView<float, 2>(out.data(), {3, 4}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_EQ(
      s.message(),
      "bias_gelu_f32: operand 'bias' dim 0 is 5, but dim 'cols' is 4 (set by operand 'x' dim 1)");
}

TEST(Status, NullPointer) {
  std::vector<float> out(10);
  Status s = kernels::gelu(TensorView<const float, 1>(nullptr, {10}),
                           TensorView<float, 1>(out.data(), {10}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kNullPointer);
  EXPECT_EQ(s.message(), "gelu_f32: operand 'x' is a null pointer");
}

TEST(Status, MisalignedPointer) {
  std::vector<float> x(11), out(10);
  auto* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x.data()) + 1);
  Status s = kernels::silu(TensorView<const float, 1>(odd, {10}),
                           TensorView<float, 1>(out.data(), {10}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kMisaligned);
  EXPECT_NE(s.message().find("silu_f32: operand 'x' is not aligned to its 4-byte element size"),
            std::string::npos)
      << s.message();
}

TEST(Status, NonUnitInnerStride) {
  std::vector<float> x(24), bias(4), out(12);
  Status s = kernels::bias_gelu(TensorView<const float, 2>(x.data(), {3, 4}, {8, 2}),
                                TensorView<const float, 1>(bias.data(), {4}),
                                TensorView<float, 2>(out.data(), {3, 4}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("operand 'x' dim 1 has stride 2"), std::string::npos) << s.message();
}

TEST(Status, OverlappingRows) {
  std::vector<float> x(12), bias(4), out(12);
  Status s = kernels::bias_gelu(
      TensorView<const float, 2>(x.data(), {3, 4}), TensorView<const float, 1>(bias.data(), {4}),
      TensorView<float, 2>(out.data(), {3, 4}, {3, 1}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("operand 'out' dim 0 has stride 3"), std::string::npos) << s.message();
}

TEST(Status, EmptyArraysLaunchNothing) {
  Status s = kernels::add(TensorView<const float, 1>(nullptr, {0}),
                          TensorView<const float, 1>(nullptr, {0}),
                          TensorView<float, 1>(nullptr, {0}), Launch{Backend::kHost});
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(Status, NoCudaDevice) {
  if (cuda_device_available()) GTEST_SKIP() << "a CUDA device is present";
  std::vector<float> x(10), out(10);
  Status s = kernels::gelu(TensorView<const float, 1>(x.data(), {10}),
                           TensorView<float, 1>(out.data(), {10}), Launch{Backend::kCuda});
  EXPECT_EQ(s.code(), StatusCode::kNoDevice);
  EXPECT_NE(s.message().find("gelu_f32"), std::string::npos) << s.message();
}

TEST(Status, NoCudaDeviceForDeviceErrors) {
  if (cuda_device_available()) GTEST_SKIP() << "a CUDA device is present";
  Status s = take_device_errors();
  EXPECT_EQ(s.code(), StatusCode::kNoDevice);
  EXPECT_TRUE(s.message().starts_with("take_device_errors: no usable CUDA device")) << s.message();
}

// The run-time check's message is in the kernel's metadata, by check number.
TEST(Metadata, RunTimeChecks) {
  const KernelMetadata& m = kernels::cross_entropy_f32_metadata();
  ASSERT_EQ(m.checks.size(), 1u);
  EXPECT_STREQ(m.checks[0], "operand 'labels' element {0} is {1}, outside [0, {2})");
  EXPECT_TRUE(kernels::softmax_f32_row2048_metadata().checks.empty());
  bool has_record = false;
  for (const OperandMetadata& op : m.operands) has_record |= op.role == OperandRole::kErrors;
  EXPECT_TRUE(has_record);
}

// Unsupported dtypes are rejected when the call is compiled: there is no i32 gelu.
template <class T>
concept HasGelu = requires(TensorView<const T, 1> x, TensorView<T, 1> y) {
  kernels::gelu(x, y);
};
static_assert(HasGelu<float> && HasGelu<half> && HasGelu<bfloat16>);
static_assert(!HasGelu<int32_t>, "gelu must not accept i32 tensors");

// Every kernel of the library: cubins for sm_90a and sm_80, assembled without spills.
TEST(Metadata, EveryKernelHasSpillFreeCubinsForBothTargets) {
  const KernelMetadata* all[] = {
      &kernels::add_f32_metadata(),
      &kernels::add_f16_metadata(),
      &kernels::add_bf16_metadata(),
      &kernels::mul_f32_metadata(),
      &kernels::mul_f16_metadata(),
      &kernels::mul_bf16_metadata(),
      &kernels::axpy_f32_metadata(),
      &kernels::axpy_f16_metadata(),
      &kernels::axpy_bf16_metadata(),
      &kernels::gelu_f32_metadata(),
      &kernels::gelu_f16_metadata(),
      &kernels::gelu_bf16_metadata(),
      &kernels::silu_f32_metadata(),
      &kernels::silu_f16_metadata(),
      &kernels::silu_bf16_metadata(),
      &kernels::bias_gelu_f32_metadata(),
      &kernels::bias_gelu_f16_metadata(),
      &kernels::bias_gelu_bf16_metadata(),
      &kernels::cast_f32_f16_metadata(),
      &kernels::cast_f32_bf16_metadata(),
      &kernels::cast_f16_f32_metadata(),
      &kernels::cast_bf16_f32_metadata(),
      &kernels::rms_norm_f32_tile16_metadata(),
      &kernels::rms_norm_f32_tile4_metadata(),
      &kernels::rms_norm_f32_row2048_metadata(),
      &kernels::rms_norm_f32_row4096_metadata(),
      &kernels::rms_norm_f32_long_metadata(),
      &kernels::rms_norm_f32_split_metadata(),
      &kernels::rms_norm_f16_tile16_metadata(),
      &kernels::rms_norm_f16_tile4_metadata(),
      &kernels::rms_norm_f16_row2048_metadata(),
      &kernels::rms_norm_f16_row4096_metadata(),
      &kernels::rms_norm_f16_long_metadata(),
      &kernels::rms_norm_f16_split_metadata(),
      &kernels::rms_norm_bf16_tile16_metadata(),
      &kernels::rms_norm_bf16_tile4_metadata(),
      &kernels::rms_norm_bf16_row2048_metadata(),
      &kernels::rms_norm_bf16_row4096_metadata(),
      &kernels::rms_norm_bf16_long_metadata(),
      &kernels::rms_norm_bf16_split_metadata(),
      &kernels::rms_norm_residual_f32_tile16_metadata(),
      &kernels::rms_norm_residual_f32_tile4_metadata(),
      &kernels::rms_norm_residual_f32_row2048_metadata(),
      &kernels::rms_norm_residual_f32_row4096_metadata(),
      &kernels::rms_norm_residual_f32_long_metadata(),
      &kernels::rms_norm_residual_f32_split_metadata(),
      &kernels::rms_norm_residual_f16_tile16_metadata(),
      &kernels::rms_norm_residual_f16_tile4_metadata(),
      &kernels::rms_norm_residual_f16_row2048_metadata(),
      &kernels::rms_norm_residual_f16_row4096_metadata(),
      &kernels::rms_norm_residual_f16_long_metadata(),
      &kernels::rms_norm_residual_f16_split_metadata(),
      &kernels::rms_norm_residual_bf16_tile16_metadata(),
      &kernels::rms_norm_residual_bf16_tile4_metadata(),
      &kernels::rms_norm_residual_bf16_row2048_metadata(),
      &kernels::rms_norm_residual_bf16_row4096_metadata(),
      &kernels::rms_norm_residual_bf16_long_metadata(),
      &kernels::rms_norm_residual_bf16_split_metadata(),
      &kernels::layer_norm_f32_tile16_metadata(),
      &kernels::layer_norm_f32_tile4_metadata(),
      &kernels::layer_norm_f32_row2048_metadata(),
      &kernels::layer_norm_f32_row4096_metadata(),
      &kernels::layer_norm_f32_long_metadata(),
      &kernels::layer_norm_f32_split_metadata(),
      &kernels::layer_norm_f16_tile16_metadata(),
      &kernels::layer_norm_f16_tile4_metadata(),
      &kernels::layer_norm_f16_row2048_metadata(),
      &kernels::layer_norm_f16_row4096_metadata(),
      &kernels::layer_norm_f16_long_metadata(),
      &kernels::layer_norm_f16_split_metadata(),
      &kernels::layer_norm_bf16_tile16_metadata(),
      &kernels::layer_norm_bf16_tile4_metadata(),
      &kernels::layer_norm_bf16_row2048_metadata(),
      &kernels::layer_norm_bf16_row4096_metadata(),
      &kernels::layer_norm_bf16_long_metadata(),
      &kernels::layer_norm_bf16_split_metadata(),
      &kernels::layer_norm_residual_f32_tile16_metadata(),
      &kernels::layer_norm_residual_f32_tile4_metadata(),
      &kernels::layer_norm_residual_f32_row2048_metadata(),
      &kernels::layer_norm_residual_f32_row4096_metadata(),
      &kernels::layer_norm_residual_f32_long_metadata(),
      &kernels::layer_norm_residual_f32_split_metadata(),
      &kernels::layer_norm_residual_f16_tile16_metadata(),
      &kernels::layer_norm_residual_f16_tile4_metadata(),
      &kernels::layer_norm_residual_f16_row2048_metadata(),
      &kernels::layer_norm_residual_f16_row4096_metadata(),
      &kernels::layer_norm_residual_f16_long_metadata(),
      &kernels::layer_norm_residual_f16_split_metadata(),
      &kernels::layer_norm_residual_bf16_tile16_metadata(),
      &kernels::layer_norm_residual_bf16_tile4_metadata(),
      &kernels::layer_norm_residual_bf16_row2048_metadata(),
      &kernels::layer_norm_residual_bf16_row4096_metadata(),
      &kernels::layer_norm_residual_bf16_long_metadata(),
      &kernels::layer_norm_residual_bf16_split_metadata(),
      &kernels::softmax_f32_tile16_metadata(),
      &kernels::softmax_f32_tile4_metadata(),
      &kernels::softmax_f32_row2048_metadata(),
      &kernels::softmax_f32_row4096_metadata(),
      &kernels::softmax_f32_long_metadata(),
      &kernels::softmax_f32_split_metadata(),
      &kernels::softmax_f16_tile16_metadata(),
      &kernels::softmax_f16_tile4_metadata(),
      &kernels::softmax_f16_row2048_metadata(),
      &kernels::softmax_f16_row4096_metadata(),
      &kernels::softmax_f16_long_metadata(),
      &kernels::softmax_f16_split_metadata(),
      &kernels::softmax_bf16_tile16_metadata(),
      &kernels::softmax_bf16_tile4_metadata(),
      &kernels::softmax_bf16_row2048_metadata(),
      &kernels::softmax_bf16_row4096_metadata(),
      &kernels::softmax_bf16_long_metadata(),
      &kernels::softmax_bf16_split_metadata(),
      &kernels::log_softmax_f32_tile16_metadata(),
      &kernels::log_softmax_f32_tile4_metadata(),
      &kernels::log_softmax_f32_row2048_metadata(),
      &kernels::log_softmax_f32_row4096_metadata(),
      &kernels::log_softmax_f32_long_metadata(),
      &kernels::log_softmax_f32_split_metadata(),
      &kernels::log_softmax_f16_tile16_metadata(),
      &kernels::log_softmax_f16_tile4_metadata(),
      &kernels::log_softmax_f16_row2048_metadata(),
      &kernels::log_softmax_f16_row4096_metadata(),
      &kernels::log_softmax_f16_long_metadata(),
      &kernels::log_softmax_f16_split_metadata(),
      &kernels::log_softmax_bf16_tile16_metadata(),
      &kernels::log_softmax_bf16_tile4_metadata(),
      &kernels::log_softmax_bf16_row2048_metadata(),
      &kernels::log_softmax_bf16_row4096_metadata(),
      &kernels::log_softmax_bf16_long_metadata(),
      &kernels::log_softmax_bf16_split_metadata(),
      &kernels::row_sum_f32_tile16_metadata(),
      &kernels::row_sum_f32_tile4_metadata(),
      &kernels::row_sum_f32_rows_direct_metadata(),
      &kernels::row_sum_f16_tile16_metadata(),
      &kernels::row_sum_f16_tile4_metadata(),
      &kernels::row_sum_f16_rows_direct_metadata(),
      &kernels::row_sum_bf16_tile16_metadata(),
      &kernels::row_sum_bf16_tile4_metadata(),
      &kernels::row_sum_bf16_rows_direct_metadata(),
      &kernels::row_max_f32_tile16_metadata(),
      &kernels::row_max_f32_tile4_metadata(),
      &kernels::row_max_f32_rows_direct_metadata(),
      &kernels::row_max_f16_tile16_metadata(),
      &kernels::row_max_f16_tile4_metadata(),
      &kernels::row_max_f16_rows_direct_metadata(),
      &kernels::row_max_bf16_tile16_metadata(),
      &kernels::row_max_bf16_tile4_metadata(),
      &kernels::row_max_bf16_rows_direct_metadata(),
      &kernels::sum_all_f32_metadata(),
      &kernels::sum_all_f16_metadata(),
      &kernels::sum_all_bf16_metadata(),
      &kernels::max_all_f32_metadata(),
      &kernels::max_all_f16_metadata(),
      &kernels::max_all_bf16_metadata(),
  };
  for (const KernelMetadata* m : all) {
    SCOPED_TRACE(m->name);
    // rows.h row_path_threads: 256 threads for a 4096-element row held in
    // registers in f32 or by a norm, and for the chunk loops of the norms in
    // f32 and of the residual norms; else 128.
    const std::string name = m->name;
    const bool f32 = name.find("_f32") != std::string::npos;
    const bool norm = name.find("norm_") != std::string::npos;
    const bool loop = name.ends_with("_long") || name.ends_with("_split");
    const bool wide = (name.ends_with("_row4096") && (f32 || norm)) ||
                      (loop && norm && (f32 || name.find("_residual_") != std::string::npos));
    EXPECT_EQ(m->threads_per_program, wide ? 256 : 128);
    ASSERT_EQ(m->targets.size(), 2u);
    EXPECT_STREQ(m->targets[0].arch, "sm_90a");
    EXPECT_TRUE(m->targets[0].arch_specific);
    EXPECT_STREQ(m->targets[1].arch, "sm_80");
    for (const TargetMetadata& t : m->targets) {
      EXPECT_GT(t.registers, 0) << t.arch;
      EXPECT_LE(t.registers, 96) << t.arch;  // 5+ programs of 128 threads per SM
      EXPECT_EQ(t.spill_stores, 0) << t.arch;
      EXPECT_EQ(t.spill_loads, 0) << t.arch;
      EXPECT_GT(t.cubin_bytes, 1000u) << t.arch;
    }
  }
  // The TMA instances (blocks staged in shared memory, pipelines) copy with TMA on
  // sm_90a and with cp.async on sm_80 (a lowering of their own); their `_direct` twins
  // (above) serve arrays neither can copy.
  const KernelMetadata* staged[] = {
      &kernels::row_sum_f32_rows_metadata(),   &kernels::row_sum_f16_rows_metadata(),
      &kernels::row_sum_bf16_rows_metadata(),  &kernels::row_max_f32_rows_metadata(),
      &kernels::row_max_f16_rows_metadata(),   &kernels::row_max_bf16_rows_metadata(),
      &kernels::cross_entropy_f32_metadata(),  &kernels::cross_entropy_f16_metadata(),
      &kernels::cross_entropy_bf16_metadata(), &kernels::transpose_f32_metadata(),
      &kernels::transpose_f16_metadata(),      &kernels::transpose_bf16_metadata(),
      &kernels::transpose_i32_metadata(),
  };
  for (const KernelMetadata* m : staged) {
    SCOPED_TRACE(m->name);
    ASSERT_EQ(m->targets.size(), 2u);
    EXPECT_STREQ(m->targets[0].arch, "sm_90a");
    EXPECT_STREQ(m->targets[1].arch, "sm_80");
    for (const TargetMetadata& t : m->targets) {
      EXPECT_GT(t.registers, 0) << t.arch;
      EXPECT_LE(t.registers, 96) << t.arch;
      EXPECT_EQ(t.spill_stores, 0) << t.arch;
      EXPECT_EQ(t.spill_loads, 0) << t.arch;
    }
  }
  // Each cubin says the block it launches with: the warp-specialized matmul (two consumer
  // warpgroups) adds its producer warpgroup where TMA copies (sm_90a), not on sm_80; its
  // direct twin is one warpgroup everywhere.
  {
    const KernelMetadata& m = kernels::matmul_bt_bf16_bf16_tiles128_metadata();
    EXPECT_EQ(m.threads_per_program, 384);
    ASSERT_EQ(m.targets.size(), 2u);
    EXPECT_EQ(m.targets[0].threads, 384);
    EXPECT_EQ(m.targets[1].threads, 256);
    for (const TargetMetadata& t : kernels::matmul_bt_bf16_bf16_tiles_direct_metadata().targets)
      EXPECT_EQ(t.threads, 128) << t.arch;
  }
  // A staged form no target part could launch is not built: the 128 x 256 tiles in four
  // stages (196704 bytes of shared memory) have no sm_80 cubin, since no sm_8x part has
  // more than 163 KiB a block (Driver.cpp); such a device runs tiles128, which has both. Nor
  // has the decode instance's eleven stages (224020 bytes) or splitk_deep's eight (225988; sm_8x
  // runs splitk).
  for (const KernelMetadata* m : {&kernels::matmul_bt_bf16_bf16_tiles_metadata(),
                                  &kernels::gemm_bt_bf16_bf16_tiles_metadata(),
                                  &kernels::matmul_bt_bf16_bf16_decode_metadata(),
                                  &kernels::linear_bias_gelu_f16_f16_decode_metadata(),
                                  &kernels::matmul_bf16_f32_splitk_deep_metadata()}) {
    SCOPED_TRACE(m->name);
    ASSERT_EQ(m->targets.size(), 1u);
    EXPECT_STREQ(m->targets[0].arch, "sm_90a");
    EXPECT_GT(m->targets[0].shared_bytes, 163 * 1024);
  }
  EXPECT_EQ(kernels::gemm_bt_bf16_bf16_tiles128_metadata().targets.size(), 2u);
  // Messages name what the user called, not the instance.
  EXPECT_STREQ(kernels::row_sum_f32_rows_metadata().entry, "row_sum_f32");
  EXPECT_STREQ(kernels::row_sum_f32_rows_direct_metadata().entry, "row_sum_f32");
  EXPECT_STREQ(kernels::cross_entropy_bf16_direct_metadata().entry, "cross_entropy_bf16");
  EXPECT_STREQ(kernels::bias_gelu_bf16_metadata().grid, "[cdiv(rows, 8), cdiv(cols, 256)]");
  EXPECT_EQ(kernels::axpy_f32_metadata().operands[2].role, OperandRole::kInOut);
  EXPECT_EQ(kernels::bias_gelu_f16_metadata().operands[1].block_shape[0], 256);
}

TEST(Argv, CallsTheTypedEntryPoint) {
  std::vector<float> x = {1, 2, 3}, y = {10, 20, 30}, out(3);
  TensorView<const float, 1> xv(x.data(), {3}), yv(y.data(), {3});
  TensorView<float, 1> ov(out.data(), {3});
  void* args[] = {&xv, &yv, &ov};
  ASSERT_TRUE(kernels::add_f32_argv(args, Launch{Backend::kHost}).ok());
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
}

// Views made from containers (std::vector here, Thrust's vectors with <pallas/thrust.h>)
// know their container's size: a view reaching past it is rejected before anything runs,
// naming the operand; views inside it work as views from pointers do.
TEST(Status, ViewPastItsContainerIsRejected) {
  for (Backend backend : {Backend::kHost, Backend::kEmulator}) {
    SCOPED_TRACE(to_string(backend));
    std::vector<float> x(1000, 1.0f), y(1000, 2.0f), out(999, -7.0f);
    Status s =
        kernels::add(TensorView<const float, 1>(x, {1000}), TensorView<const float, 1>(y, {1000}),
                     TensorView<float, 1>(out, {1000}), Launch{backend});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(
        s.message(),
        "add_f32: operand 'out' reaches element 999 of its storage, which holds 999 elements");
    EXPECT_EQ(out, std::vector<float>(999, -7.0f));  // untouched
    // Strided: rows of 3 with a row stride of 4 over 11 elements reach element 10; over
    // 10 elements they do not fit.
    std::vector<float> m(10, 1.0f), bias(3, 0.0f), o(12, -7.0f);
    s = kernels::bias_gelu(TensorView<const float, 2>(m, {3, 3}, {4, 1}),
                           TensorView<const float, 1>(bias, {3}), TensorView<float, 2>(o, {3, 3}),
                           Launch{backend});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "bias_gelu_f32: operand 'x' reaches element 10 of its storage, which holds 10 "
              "elements");
    // Inside their containers: the result, as from pointers.
    std::vector<float> sum(1000, -7.0f);
    s = kernels::add(TensorView<const float, 1>(x, {1000}), TensorView<const float, 1>(y, {1000}),
                     TensorView<float, 1>(sum, {1000}), Launch{backend});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(sum, std::vector<float>(1000, 3.0f));
  }
}

// An output may share memory with no other operand the spec does not declare
// in-place: the entry point rejects the call and leaves the output untouched.
TEST(Status, OutputOverlappingAnInputIsRejected) {
  for (Backend backend : {Backend::kHost, Backend::kEmulator}) {
    SCOPED_TRACE(to_string(backend));
    std::vector<float> x(101, 1.0f), y(100, 2.0f);
    const std::string want =
        "add_f32: output 'out' overlaps operand 'x' in memory (only an operand the kernel "
        "declares in-place may share memory with an output)";
    // In place over x, and shifted by one element.
    for (int64_t shift : {0, 1}) {
      Status s = kernels::add(TensorView<const float, 1>(x.data(), {100}),
                              TensorView<const float, 1>(y.data(), {100}),
                              TensorView<float, 1>(x.data() + shift, {100}), Launch{backend});
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), want);
      EXPECT_EQ(x, std::vector<float>(101, 1.0f));  // untouched
    }
    // Two outputs on the same memory: rms_norm_residual's y and h.
    std::vector<float> a(8, 1.0f), r(8, 1.0f), w(4, 1.0f), yh(8, -7.0f);
    Status s = kernels::rms_norm_residual(
        TensorView<const float, 2>(a.data(), {2, 4}), TensorView<const float, 2>(r.data(), {2, 4}),
        TensorView<const float, 1>(w.data(), {4}), 1e-5f, TensorView<float, 2>(yh.data(), {2, 4}),
        TensorView<float, 2>(yh.data(), {2, 4}), Launch{backend});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "rms_norm_residual_f32: output 'y' overlaps operand 'h' in memory (only an operand "
              "the kernel declares in-place may share memory with an output)");
    // A loss written over its labels.
    std::vector<int32_t> labels(3, 0);
    std::vector<float> logits(30, 0.5f);
    s = kernels::cross_entropy(TensorView<const float, 2>(logits.data(), {3, 10}),
                               TensorView<const int32_t, 1>(labels.data(), {3}),
                               TensorView<float, 1>(reinterpret_cast<float*>(labels.data()), {3}),
                               Launch{backend});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(labels, std::vector<int32_t>(3, 0));
  }
}

// Column blocks of one matrix share no byte: out = cols [4, 8) of m, x = cols [0, 4);
// the result equals the one written to separate memory. A declared in-place operand
// (axpy's y) still works.
TEST(Status, DisjointViewsOfOneMatrixAndDeclaredAliasesAreAccepted) {
  std::vector<float> m(4 * 8), bias(4, 0.5f), separate(16, 0.0f);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i) / 8.0f;
  TensorView<const float, 2> x(m.data(), {4, 4}, {8, 1});
  TensorView<const float, 1> b(bias.data(), {4});
  ASSERT_TRUE(kernels::bias_gelu(x, b, TensorView<float, 2>(separate.data(), {4, 4}),
                                 Launch{Backend::kHost})
                  .ok());
  Status s = kernels::bias_gelu(x, b, TensorView<float, 2>(m.data() + 4, {4, 4}, {8, 1}),
                                Launch{Backend::kHost});
  ASSERT_TRUE(s.ok()) << s.message();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(m[r * 8 + 4 + c], separate[r * 4 + c]);
  std::vector<float> xs(16, 2.0f), ys(16, 1.0f);
  s = kernels::axpy(3.0f, TensorView<const float, 1>(xs.data(), {16}),
                    TensorView<float, 1>(ys.data(), {16}), Launch{Backend::kHost});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(ys, std::vector<float>(16, 7.0f));
}

// Operands of 2^31 elements or more are rejected before anything is read: the kernels
// index and mask in 32 bits. (The views are never dereferenced, so a small buffer serves.)
TEST(Status, OperandsPastThirtyTwoBitIndexingAreRejected) {
  std::vector<float> x(16), y(16), out(16);
  const int64_t big = int64_t{1} << 31;
  Status s = kernels::add(TensorView<const float, 1>(x.data(), {big}),
                          TensorView<const float, 1>(y.data(), {big}),
                          TensorView<float, 1>(out.data(), {big}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "add_f32: operand 'x' spans 2147483648 elements; its kernel indexes in 32 bits, at "
            "most 2147483647");
  // rows * cols past the limit though each dim is below it; and a padded row stride.
  s = kernels::row_sum(TensorView<const float, 2>(x.data(), {65536, 32768}),
                       TensorView<float, 1>(out.data(), {65536}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "row_sum_f32: operand 'x' spans 2147483648 elements; its kernel indexes in 32 bits, "
            "at most 2147483647");
  s = kernels::row_sum(TensorView<const float, 2>(x.data(), {2, 8}, {(int64_t{1} << 31) - 7, 1}),
                       TensorView<float, 1>(out.data(), {2}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // Just below the limit the checks pass (the launch itself is not run here).
  EXPECT_TRUE(detail::check_index_range("add_f32", "x", 1, std::array<int64_t, 1>{big - 1}.data(),
                                        std::array<int64_t, 1>{1}.data())
                  .ok());
}

}  // namespace
}  // namespace pallas::testing
