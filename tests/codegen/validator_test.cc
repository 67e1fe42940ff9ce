// Each malformed spec is rejected with exactly this error, naming the spec,
// the operand and the dim.

#include "pallas/Codegen/DiagnosticCollector.h"
#include "pallas/Codegen/Pipelines.h"
#include "pallas/EDSL/Trace.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <optional>

namespace pallas::edsl {
namespace {

std::string trace_error(const char* op, SpecFn fn) {
  mlir::MLIRContext context;
  try {
    trace_spec(op, fn, context);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "<no error>";
}

Indices first(const ProgramIds& p) { return at(p[0]); }

/// The common valid part of the specs below: f32 x -> out over [n] in
/// 256-element blocks, so each test shows only the mistake it plants.
void declare_x_out(KernelSpec& spec) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  spec.grid({cdiv(n, 256)});
  for (Operand o : {x, out}) spec.block(o, {Blocked{256}}, first);
}

/// f32 x -> out over [rows, cols], one program per whole row.
void declare_row_x_out(KernelSpec& spec) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand out = spec.output("out", f32, {rows, cols});
  spec.grid({rows});
  auto row = [](const ProgramIds& p) { return at(p[0], 0); };
  spec.block(x, {squeezed, full}, row);
  spec.block(out, {squeezed, full}, row);
}

TEST(Validator, BlockRankDiffersFromArrayRank) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    spec.grid({cdiv(n, 256)});
    spec.block(x, {Blocked{128}, Blocked{2}}, first);
  };
  EXPECT_EQ(trace_error("bad_rank", fn),
            "spec 'bad_rank': operand 'x' has rank 1 but its block has 2 dims");
}

TEST(Validator, IndexMapReturnsWrongNumberOfIndices) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    Operand out = spec.output("out", f32, {n});
    spec.grid({cdiv(n, 256)});
    spec.block(x, {Blocked{256}}, [](const ProgramIds& p) { return at(p[0], 0); });
    spec.block(out, {Blocked{256}}, first);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  EXPECT_EQ(trace_error("bad_map", fn),
            "spec 'bad_map': index map of operand 'x' returns 2 indices; the array has rank 1");
}

TEST(Validator, BlockMustDivideAmongThreads) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    Operand out = spec.output("out", f32, {n});
    spec.grid({cdiv(n, 200)});
    spec.block(x, {Blocked{200}}, first);
    spec.block(out, {Blocked{200}}, first);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  EXPECT_EQ(trace_error("bad_block", fn),
            "spec 'bad_block': block of operand 'x' has 200 elements, not a multiple of the 128 "
            "threads of a program (nor at most one per thread)");
}

// A block of at most one element per thread (a bias row) is loaded whole by
// every thread instead (AssignLayouts' replicated loads).
TEST(Validator, SmallBlockIsLoadedWhole) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    Operand out = spec.output("out", f32, {n});
    spec.grid({cdiv(n, 100)});
    spec.block(x, {Blocked{100}}, first);
    spec.block(out, {Blocked{100}}, first);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  EXPECT_EQ(trace_error("small_block", fn), "<no error>");
}

TEST(Validator, DtypeMismatchInBody) {
  auto fn = [](KernelSpec& spec) {
    DType T = spec.dtype_param("T", {f32, f16});
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    Operand y = spec.input("y", T, {n});
    Operand out = spec.output("out", f32, {n});
    spec.grid({cdiv(n, 256)});
    for (Operand o : {x, y, out}) spec.block(o, {Blocked{256}}, first);
    spec.body([](Ref x, Ref y, Ref out) { out.store(x.load() + y.load()); });
  };
  // The f32 instance is fine; the f16 one mixes dtypes.
  EXPECT_EQ(trace_error("mixed", fn),
            "spec 'mixed_f16': dtype mismatch in add: f32 and f16 (cast one operand first)");
}

TEST(Validator, StoreOfWrongDtype) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    Operand out = spec.output("out", bf16, {n});
    spec.grid({cdiv(n, 256)});
    for (Operand o : {x, out}) spec.block(o, {Blocked{256}}, first);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  EXPECT_EQ(trace_error("bad_store", fn),
            "spec 'bad_store': store of a f32 value to output 'out' of dtype bf16 (cast first)");
}

TEST(Validator, TranscendentalNeedsF32) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f16, {n});
    Operand out = spec.output("out", f16, {n});
    spec.grid({cdiv(n, 256)});
    for (Operand o : {x, out}) spec.block(o, {Blocked{256}}, first);
    spec.body([](Ref x, Ref out) { out.store(tanh(x.load())); });
  };
  EXPECT_EQ(trace_error("half_tanh", fn),
            "spec 'half_tanh': tanh needs f32 operands, got f16 (cast to f32 first)");
}

TEST(Validator, OutputNeverStored) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref x, Ref) { (void)x.load(); });
  };
  EXPECT_EQ(trace_error("no_store", fn), "spec 'no_store': output 'out' is never stored");
}

TEST(Validator, BodyArityMustMatchOperands) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref out) { out.store(constant(1, f32)); });
  };
  EXPECT_EQ(trace_error("arity", fn),
            "spec 'arity': body takes 1 refs but the spec declares 2 array operands (x, out)");
}

TEST(Validator, EveryOperandNeedsABlock) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    spec.output("out", f32, {n});
    spec.grid({cdiv(n, 256)});
    spec.block(x, {Blocked{256}}, first);
    spec.body([](Ref, Ref) {});
  };
  EXPECT_EQ(trace_error("no_block", fn),
            "spec 'no_block': operand 'out' has no block spec (spec.block)");
}

TEST(Validator, ProgramIdAxisOutOfRange) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store(x.load() + program_id(1).cast(f32)); });
  };
  EXPECT_EQ(trace_error("axis", fn), "spec 'axis': program_id(1) but the grid has 1 axes");
}

TEST(Validator, AliasNeedsMatchingDtypes) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand y = spec.input("y", f32, {n});
    Operand out = spec.output("out", f16, {n});
    spec.alias(y, out);
  };
  EXPECT_EQ(trace_error("alias", fn),
            "spec 'alias': alias of input 'y' to output 'out': dtypes differ (f32 vs f16)");
}

TEST(Validator, ValidSpecTracesOneKernelPerInstance) {
  auto fn = [](KernelSpec& spec) {
    std::vector<DType> t = spec.dtype_params({"A", "B"}, {{f32, f16}, {f16, f32}, {bf16, f32}});
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", t[0], {n});
    Operand out = spec.output("out", t[1], {n});
    spec.grid({cdiv(n, 256)});
    for (Operand o : {x, out}) spec.block(o, {Blocked{256}}, first);
    spec.body([t](Ref x, Ref out) { out.store(x.load().cast(t[1])); });
  };
  mlir::MLIRContext context;
  auto kernels = trace_spec("conv", fn, context);
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[0].instance, "conv_f32_f16");
  EXPECT_EQ(kernels[1].instance, "conv_f16_f32");
  EXPECT_EQ(kernels[2].instance, "conv_bf16_f32");
}

// A variant multiplies the instances (dtype-major), names them after its
// options, and lets each declare its own grid; the chooser is kept for the
// entry point.
TEST(Validator, VariantsAreInstancesWithTheirOwnGrid) {
  auto fn = [](KernelSpec& spec) {
    DType T = spec.dtype_param("T", {f32, bf16});
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", T, {n});
    Operand out = spec.output("out", T, {n});
    int path = spec.variant("path", {"small", "large"}, DimExpr(1) - le(n, 256));
    const int64_t block = path == 0 ? 256 : 1024;
    spec.grid({cdiv(n, block)});
    for (Operand o : {x, out}) spec.block(o, {Blocked{block}}, first);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  mlir::MLIRContext context;
  auto kernels = trace_spec("copy", fn, context);
  ASSERT_EQ(kernels.size(), 4u);
  EXPECT_EQ(kernels[0].instance, "copy_f32_small");
  EXPECT_EQ(kernels[1].instance, "copy_f32_large");
  EXPECT_EQ(kernels[3].instance, "copy_bf16_large");
  EXPECT_EQ(kernels[3].spec->entry_name(), "copy_bf16");
  EXPECT_EQ(kernels[3].spec->variant_index(), 1);
  EXPECT_EQ(kernels[1].spec->grid_axes()[0].to_string(), "cdiv(n, 1024)");
  ASSERT_TRUE(kernels[0].spec->variant_chooser());
}

// Staged variants whose direct twins are the same kernel share one twin (the
// first), which serves both options; twins that differ stay apart.
TEST(Validator, VariantsShareIdenticalDirectTwins) {
  auto fn = [](KernelSpec& spec) {
    DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
    Operand x = spec.input("x", f32, {rows, cols});
    Operand out = spec.output("out", f32, {rows, cols});
    // deep: a deeper pipeline (staging only, so the twins agree); wide: 64-row blocks;
    // worded: another check message (the same IR: the twins' launchers differ).
    const int option = spec.variant("path", {"shallow", "deep", "wide", "worded"}, le(rows, 64));
    Check check = spec.check(option == 3 ? "program {0} is negative" : "program {0} < 0");
    const int64_t block_rows = option == 2 ? 64 : 32;
    spec.grid({cdiv(rows, block_rows), cdiv(cols, 32)});
    spec.dimension_semantics({parallel, arbitrary});
    spec.max_concurrent_steps(option == 1 ? 3 : 2);
    auto map = [](const ProgramIds& p) { return at(p[0], p[1]); };
    spec.block(x, {Blocked{block_rows}, Blocked{32}}, map, InShared{.swizzle = 128});
    spec.block(out, {Blocked{block_rows}, Blocked{32}}, map);
    spec.body([=](Ref x, Ref out) {
      check.fail_if(program_id(0) < index(0), {program_id(0)});
      out.store(2.0 * x.load());
    });
  };
  mlir::MLIRContext context;
  auto kernels = trace_spec("twins", fn, context);
  std::vector<std::string> names;
  for (const auto& k : kernels) names.push_back(k.instance);
  EXPECT_EQ(names, (std::vector<std::string>{"twins_shallow", "twins_shallow_direct", "twins_deep",
                                             "twins_wide", "twins_wide_direct", "twins_worded",
                                             "twins_worded_direct"}));
  ASSERT_EQ(kernels.size(), 7u);
  EXPECT_EQ(kernels[2].spec->direct_twin_name(), "twins_shallow_direct");
  EXPECT_EQ(kernels[1].spec->twin_serves(), (std::vector<int>{0, 1}));
  EXPECT_EQ(kernels[3].spec->direct_twin_name(), "twins_wide_direct");
  EXPECT_EQ(kernels[4].spec->twin_serves(), (std::vector<int>{2}));
}

TEST(Validator, OneVariantPerSpec) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.variant("a", {"x", "y"}, 0);
    spec.variant("b", {"x", "y"}, 0);
  };
  EXPECT_EQ(trace_error("two_variants", fn),
            "spec 'two_variants_x': variant 'b': a spec has at most one variant");
}

// The device's shared memory may choose a variant (the entry point reads it),
// but not shape a kernel: not its grid, workspaces or semaphores.
TEST(Validator, DeviceSharedBytesOnlyChoosesAVariant) {
  auto chooser = [](KernelSpec& spec) {
    spec.variant("tile", {"big", "small"}, le(KernelSpec::device_shared_bytes(), 150000));
    declare_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  mlir::MLIRContext context;
  auto kernels = trace_spec("by_device", chooser, context);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].spec->variant_chooser()->to_string(), "le(device_shared_bytes, 150000)");
  EXPECT_EQ(kernels[0].spec->variant_chooser()->to_cpp(),
            "static_cast<int64_t>(pallas::detail::device_shared_bytes(launch) <= 150000)");

  EXPECT_EQ(trace_error("device_grid",
                        [](KernelSpec& spec) {
                          declare_x_out(spec);
                          spec.grid({cdiv(KernelSpec::device_shared_bytes(), 1024)});
                        }),
            "spec 'device_grid': grid axis 0 is 'cdiv(device_shared_bytes, 1024)'; "
            "device_shared_bytes() may only choose a variant (spec.variant): a kernel and its "
            "launch are shaped by the arrays alone");
  EXPECT_EQ(trace_error("device_workspace",
                        [](KernelSpec& spec) {
                          declare_x_out(spec);
                          spec.workspace("w", f32, {KernelSpec::device_shared_bytes()});
                        }),
            "spec 'device_workspace': workspace 'w' dim 0 is 'device_shared_bytes'; "
            "device_shared_bytes() may only choose a variant (spec.variant): a kernel and its "
            "launch are shaped by the arrays alone");
}

TEST(Validator, EveryDimIsBoundByAnOperand) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n"), k = spec.dim("k");
    Operand x = spec.input("x", f32, {n});
    Operand out = spec.output("out", f32, {n});
    spec.grid({cdiv(k, 256)});
    for (Operand o : {x, out}) spec.block(o, {Blocked{256}}, first);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  EXPECT_EQ(trace_error("unbound", fn),
            "spec 'unbound': dim 'k' is not the dim of any operand, so no run-time value binds it");
}

TEST(Validator, FullDimBlocksNeedSlices) {
  auto fn = [](KernelSpec& spec) {
    declare_row_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store_at(x.load(), {0}); });
  };
  EXPECT_EQ(trace_error("full", fn),
            "spec 'full': load of 'x': its block has a full (run-time) dim; load static-size "
            "slices of it with load_at");
}

TEST(Validator, ReductionOfAScalar) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store(broadcast_to(sum(sum(x.load())), {256})); });
  };
  EXPECT_EQ(trace_error("scalar_sum", fn),
            "spec 'scalar_sum': sum of a scalar; reductions take blocks");
}

TEST(Validator, ReductionAxisOutOfRange) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store(max(x.load(), 1, true)); });
  };
  EXPECT_EQ(trace_error("axis1", fn), "spec 'axis1': max over axis 1 of a rank-1 block");
}

TEST(Validator, FullDimBlocksNeedSliceStores) {
  auto fn = [](KernelSpec& spec) {
    declare_row_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store(x.load_at({0}, {256})); });
  };
  EXPECT_EQ(trace_error("full_store", fn),
            "spec 'full_store': store to 'out': its block has a full (run-time) dim; store "
            "static-size slices of it with store_at");
}

TEST(Validator, DimensionSemanticsNeedsOneEntryPerAxis) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.dimension_semantics({parallel, arbitrary});
  };
  EXPECT_EQ(trace_error("bad_semantics", fn),
            "spec 'bad_semantics': dimension_semantics has 2 entries but the grid has 1 axes "
            "(declare the grid first)");
}

// Four axes are fine when one is arbitrary (a batched product's grid); four
// parallel ones are not: CUDA launches three.
void declare_four_axes(KernelSpec& spec, Semantics fourth) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  spec.grid({cdiv(n, 256), DimExpr(2), DimExpr(3), DimExpr(4)});
  spec.dimension_semantics({parallel, parallel, parallel, fourth});
  spec.block(x, {Blocked{256}}, first);
  spec.block(out, {Blocked{256}}, first);
  spec.body([](Ref x, Ref out) { out.store(x.load()); });
}

TEST(Validator, AtMostThreeParallelGridAxes) {
  EXPECT_EQ(trace_error("four_axes", [](KernelSpec& spec) { declare_four_axes(spec, arbitrary); }),
            "<no error>");
  EXPECT_EQ(
      trace_error("four_parallel", [](KernelSpec& spec) { declare_four_axes(spec, parallel); }),
      "spec 'four_parallel': the grid has 4 parallel axes; at most 3 are launched (CUDA's "
      "x, y, z): mark the others arbitrary or fold them into one axis");
}

// wgmma's operands: an accumulator, and blocks staged in shared memory; a
// pipeline delaying its releases needs more buffers than the delay.
void declare_wgmma(KernelSpec& spec, bool stage_b, int delay,
                   std::function<void(Ref, Ref, Ref, Ref)> body = {}) {
  DimExpr m = spec.dim("m"), k = spec.dim("k");
  Operand a = spec.input("a", bf16, {m, k});
  Operand b = spec.input("b", bf16, {m, k});
  Operand d = spec.output("d", f32, {m, m});
  spec.accumulator("acc", {64, 64});
  spec.grid({cdiv(m, 64), cdiv(k, 64)});
  spec.dimension_semantics({parallel, arbitrary});
  spec.max_concurrent_steps(2);
  spec.delay_release(delay);
  auto rows = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(a, {Blocked{64}, Blocked{64}}, rows, InShared{.swizzle = 128});
  if (stage_b)
    spec.block(b, {Blocked{64}, Blocked{64}}, rows, InShared{.swizzle = 128});
  else
    spec.block(b, {Blocked{64}, Blocked{64}}, rows);
  spec.block(d, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[0]); });
  if (body) return spec.body(body);
  spec.body([](Ref a, Ref b, Ref d, Ref acc) {
    wgmma(acc, a, b, {.transpose_b = true});
    d.store(acc.load());
  });
}

TEST(Validator, WgmmaOperandsAreStagedBlocks) {
  EXPECT_EQ(trace_error("unstaged_b", [](KernelSpec& spec) { declare_wgmma(spec, false, 0); }),
            "spec 'unstaged_b': wgmma operand b 'b' is not staged in shared memory; declare its "
            "block with InShared");
}

// A transposed view (Ref::transposed) is of a 2-D block; wgmma takes one as
// operand a or b (read MN-major), not as its accumulator, and a value
// operand a (registers) is never transposed.
TEST(Validator, TransposedViewsAreOf2DBlocksAndWgmmaOperands) {
  auto view_of_a = [](KernelSpec& spec) {  // the direct twin multiplies the loaded values
    const bool staged = !spec.direct();
    declare_wgmma(spec, true, 0, [staged](Ref a, Ref b, Ref d, Ref acc) {
      if (staged)
        wgmma(acc, a.transposed(), b, {.transpose_b = true});
      else
        acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_a = true, .transpose_b = true}));
      d.store(acc.load());
    });
  };
  EXPECT_EQ(trace_error("view_of_a", view_of_a), "<no error>");
  auto view_of_acc = [](KernelSpec& spec) {
    declare_wgmma(spec, true, 0, [](Ref a, Ref b, Ref d, Ref acc) {
      wgmma(acc.transposed(), a, b, {.transpose_b = true});
      d.store(acc.load());
    });
  };
  EXPECT_EQ(trace_error("view_of_acc", view_of_acc),
            "spec 'view_of_acc': wgmma accumulator 'acc' is a transposed view; wgmma takes views "
            "as operands a and b only");
  auto value_a = [](KernelSpec& spec) {
    declare_wgmma(spec, true, 0, [](Ref a, Ref b, Ref d, Ref acc) {
      wgmma(acc, a.load(), b, {.transpose_a = true, .transpose_b = true});
      d.store(acc.load());
    });
  };
  EXPECT_EQ(trace_error("value_a", value_a),
            "spec 'value_a': wgmma with transpose_a of a value operand a; registers are read [M, "
            "K] (transpose the value, or stage the block and pass its ref)");
  auto one_d = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store(x.transposed().load()); });
  };
  EXPECT_EQ(trace_error("view_1d", one_d),
            "spec 'view_1d': transposed view of 'x', whose block has 1 dims; a view transposes a "
            "2-D block");
}

// Warp specialization with W consumer warpgroups: threads(128 W), and
// registers that fit the pool the kernel launches with (else the consumers'
// setmaxnreg.inc would wait forever). An accumulator is read whole or in
// column slices of whole rows.
void declare_ws(KernelSpec& spec, int threads, int consumer_registers,
                std::vector<int64_t> slice = {}) {
  DimExpr m = spec.dim("m"), k = spec.dim("k");
  Operand a = spec.input("a", bf16, {m, k});
  Operand b = spec.input("b", bf16, {m, k});
  Operand d = spec.output("d", f32, {m, m});
  spec.threads(threads);
  spec.accumulator("acc", {128, 64});
  spec.grid({cdiv(m, 128), cdiv(k, 64)});
  spec.dimension_semantics({parallel, arbitrary});
  spec.max_concurrent_steps(2);
  spec.warp_specialize({.producer_registers = 40, .consumer_registers = consumer_registers});
  auto rows = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(a, {Blocked{128}, Blocked{64}}, rows, InShared{.swizzle = 128});
  spec.block(b, {Blocked{64}, Blocked{64}}, rows, InShared{.swizzle = 128});
  spec.block(d, {Blocked{128}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[0]); });
  const bool direct = spec.direct();
  spec.body([slice, direct](Ref a, Ref b, Ref d, Ref acc) {
    if (direct)
      acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_b = true}));
    else
      wgmma(acc, a, b, {.transpose_b = true});
    if (slice.empty()) return d.store(acc.load());
    d.store(acc.load({0, slice[0]}, {128, slice[1]}), {0, slice[0]});
  });
}

TEST(Validator, WarpSpecializationFitsWholeWarpgroupsAndTheRegisterPool) {
  EXPECT_EQ(trace_error("two", [](KernelSpec& spec) { declare_ws(spec, 256, 232); }), "<no error>");
  EXPECT_EQ(trace_error("odd", [](KernelSpec& spec) { declare_ws(spec, 1024, 232); }),
            "spec 'odd': warp_specialize with threads(1024); the consumers are 1 to 4 whole "
            "warpgroups (128 to 512 threads)");
  // 40 + 2 * 224 = 488 fits a launch of 168 (504) a thread.
  EXPECT_EQ(trace_error("roomy", [](KernelSpec& spec) { declare_ws(spec, 256, 224); }),
            "<no error>");
  EXPECT_EQ(trace_error("pool", [](KernelSpec& spec) { declare_ws(spec, 256, 240); }),
            "spec 'pool': warp_specialize: the producer's 40 and 2 consumer warpgroup(s)' 240 "
            "registers a thread launch with 176 each: 67584 registers, more than the SM's "
            "65536");
}

// A persistent grid fuses the tiles with one arbitrary axis: none, or two,
// is an error, as is a band of no rows, a cluster size other than 1, 2, 4,
// and clusters without a tile plane to split (this grid has one parallel
// axis). (Axis 0 is parallel unless both are arbitrary; axis 1 is arbitrary
// unless none is.)
template <int kArbitrary, int kGroupRows, int kCluster = 1>
void declare_persistent(KernelSpec& spec) {
  DimExpr m = spec.dim("m");
  Operand x = spec.input("x", f32, {m, m});
  Operand out = spec.output("out", f32, {m, m});
  spec.grid({cdiv(m, 16), cdiv(m, 16)});
  spec.dimension_semantics(
      {kArbitrary == 2 ? arbitrary : parallel, kArbitrary == 0 ? parallel : arbitrary});
  spec.persistent({.group_rows = kGroupRows, .cluster = kCluster});
  auto tile = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(x, {Blocked{16}, Blocked{16}}, tile);
  spec.block(out, {Blocked{16}, Blocked{16}}, tile);
  spec.body([](Ref x, Ref out) { out.store(x.load()); });
}

TEST(Validator, PersistentGridsHaveOneArbitraryAxis) {
  EXPECT_EQ(trace_error("one", declare_persistent<1, 4>), "<no error>");
  EXPECT_EQ(trace_error("none", declare_persistent<0, 4>),
            "spec 'none': persistent needs exactly one arbitrary grid axis (each tile's loop); "
            "the grid has 0");
  EXPECT_EQ(trace_error("two", declare_persistent<2, 4>),
            "spec 'two': persistent needs exactly one arbitrary grid axis (each tile's loop); "
            "the grid has 2");
  EXPECT_EQ(trace_error("band", declare_persistent<1, 0>),
            "spec 'band': persistent: group_rows 0; bands of at least 1 row");
  EXPECT_EQ(trace_error("three", declare_persistent<1, 4, 3>),
            "spec 'three': persistent: cluster 3; clusters of 1, 2 or 4 CTAs (at most 8 are "
            "portable, and the tile rows must divide by it)");
  EXPECT_EQ(trace_error("plane", declare_persistent<1, 4, 2>),
            "spec 'plane': persistent: cluster 2 needs a tile plane (two parallel grid axes: "
            "rows, whose tiles a cluster splits, and columns); the grid has 1");
}

// Clusters along grid axis 0 (cluster_first_axis): 2 to 8 programs, axis 0 parallel, not a
// persistent grid. A cluster peer's view (in_cluster_program) is of a scratch block, takes an
// index rank and is read-only. kCase: 0 valid, 1 a size of 9, 2 axis 0 arbitrary, 3 persistent,
// 4 a peer of an input, 5 a store through a peer, 6 an i32 rank.
template <int kCase>
void declare_cluster_sum(KernelSpec& spec) {
  DimExpr m = spec.dim("m");
  Operand x = spec.input("x", f32, {m, DimExpr(256)});
  Operand out = spec.output("out", f32, {m, DimExpr(256)});
  Operand part = spec.scratch("part", f32, {256});
  (void)part;
  spec.grid({DimExpr(2), cdiv(m, 2)});
  spec.dimension_semantics({kCase == 2 ? arbitrary : parallel, kCase == 3 ? arbitrary : parallel});
  if (kCase == 3) spec.persistent({});
  spec.cluster_first_axis(kCase == 1 ? 9 : 8);
  auto row = [](const ProgramIds& p) { return at(p[1] * index(2) + p[0], 0); };
  spec.block(x, {squeezed, Blocked{256}}, row);
  spec.block(out, {squeezed, Blocked{256}}, row);
  spec.body([](Ref x, Ref out, Ref part) {
    part.store(x.load());
    cluster_barrier();
    Value peer = cluster_size() - index(1) - cluster_rank();
    if (kCase == 4) (void)x.in_cluster_program(peer);
    if (kCase == 5) part.in_cluster_program(peer).store(x.load());
    if (kCase == 6) peer = constant(0, i32);
    out.store(part.in_cluster_program(peer).load());
    cluster_barrier();
  });
}

TEST(Validator, ClustersAlongTheFirstAxisAndPeerViews) {
  EXPECT_EQ(trace_error("ring", declare_cluster_sum<0>), "<no error>");
  EXPECT_EQ(trace_error("nine", declare_cluster_sum<1>),
            "spec 'nine': cluster_first_axis(9): clusters of 2 to 8 programs (8 is CUDA's "
            "portable cluster size)");
  EXPECT_EQ(trace_error("loop", declare_cluster_sum<2>),
            "spec 'loop': cluster_first_axis: grid axis 0 must be parallel (launched as CUDA's "
            "x, the cluster's axis); it is arbitrary");
  EXPECT_EQ(trace_error("walk", declare_cluster_sum<3>),
            "spec 'walk': cluster_first_axis with persistent(); a persistent grid clusters its "
            "walk (Persistent::cluster)");
  auto has = [](const std::string& error, const char* text) {
    return error.find(text) != std::string::npos;
  };
  EXPECT_PRED2(has, trace_error("input", declare_cluster_sum<4>),
               "in_cluster_program of 'x'; a cluster peer's view is of a scratch operand "
               "(spec.scratch: shared memory), not of an input");
  EXPECT_PRED2(has, trace_error("store", declare_cluster_sum<5>),
               "store through a cluster peer's view of 'part' (Ref::in_cluster_program); a "
               "peer's scratch is read-only");
  EXPECT_PRED2(has, trace_error("rank", declare_cluster_sum<6>),
               "in_cluster_program of 'part': the rank must be an index value");
}

// A stream-K walk runs without clusters; tile_run() needs one; only a
// workspace's or semaphores' count may read persistent_programs(), and only in
// a persistent grid.
template <bool kStreamK, int kCluster, bool kTileRun, int kParts = 2>
void declare_stream_k(KernelSpec& spec) {
  DimExpr m = spec.dim("m");
  Operand x = spec.input("x", f32, {m, m});
  Operand out = spec.output("out", f32, {m, m});
  spec.grid({cdiv(m, 16), cdiv(m, 16), cdiv(m, 16)});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.persistent(
      {.group_rows = 2, .cluster = kCluster, .stream_k = kStreamK, .stream_k_parts = kParts});
  auto tile = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(x, {Blocked{16}, Blocked{16}}, tile);
  spec.block(out, {Blocked{16}, Blocked{16}}, tile);
  spec.body([](Ref x, Ref out) {
    if (kTileRun) when(tile_run().last_step, [&] { out.store(x.load()); });
    if (!kTileRun) out.store(x.load());
  });
}

TEST(Validator, StreamKWalksAndTheirProgramCount) {
  EXPECT_EQ(trace_error("walk", declare_stream_k<true, 1, true>), "<no error>");
  EXPECT_EQ(trace_error("thirds", declare_stream_k<true, 1, true, 3>), "<no error>");
  EXPECT_EQ(trace_error("quarters", declare_stream_k<true, 1, true, 4>),
            "spec 'quarters': persistent: stream_k_parts 4; a stream-K walk cuts a tile into at "
            "most 2 or 3 parts");
  EXPECT_EQ(trace_error("cluster", declare_stream_k<true, 2, true>),
            "spec 'cluster': persistent: stream_k with cluster 2; a stream-K walk runs without "
            "clusters (the CTAs of a cluster share their copies, so they must walk the same "
            "steps)");
  EXPECT_EQ(trace_error("plain", declare_stream_k<false, 1, true>),
            "spec 'plain': tile_run() needs a stream-K persistent grid (spec.persistent with "
            "stream_k)");
  EXPECT_EQ(
      trace_error("grid", [](KernelSpec& spec) { spec.grid({KernelSpec::persistent_programs()}); }),
      "spec 'grid': grid axis 0 is 'persistent_programs'; persistent_programs() may only "
      "count a workspace's elements or semaphores (a persistent grid's slots per program)");
  EXPECT_EQ(trace_error("chooser",
                        [](KernelSpec& spec) {
                          spec.variant("v", {"a", "b"}, KernelSpec::persistent_programs());
                        }),
            "spec 'chooser': variant 'v' chooser is 'persistent_programs'; persistent_programs() "
            "may only count a workspace's elements or semaphores (a persistent grid's slots per "
            "program)");
  EXPECT_EQ(trace_error("unpersistent",
                        [](KernelSpec& spec) {
                          declare_x_out(spec);
                          spec.workspace("w", f32, KernelSpec::persistent_programs() * 4);
                          spec.body([](Ref x, Ref out, Ref) { out.store(x.load()); });
                        }),
            "spec 'unpersistent': operand 'w' has a dim '(persistent_programs * 4)' that reads "
            "persistent_programs(), but the grid is not persistent (spec.persistent)");
}

TEST(Validator, WorkspacesHaveDims) {
  EXPECT_EQ(trace_error("nodims",
                        [](KernelSpec& spec) { spec.workspace("w", f32, std::vector<DimExpr>{}); }),
            "spec 'nodims': workspace 'w' has no dims");
}

TEST(Validator, AccumulatorSlicesAreWholeRowsOfEightColumns) {
  EXPECT_EQ(trace_error("cols",
                        [](KernelSpec& spec) {
                          declare_ws(spec, 256, 232, {32, 32});
                        }),
            "<no error>");
  EXPECT_EQ(trace_error("odd_cols",
                        [](KernelSpec& spec) {
                          declare_ws(spec, 256, 232, {4, 8});
                        }),
            "spec 'odd_cols': load of accumulator 'acc': slice [0:128, 4:12]; its registers "
            "hold whole rows, columns in multiples of 8 (a slice [0:128, c0:c0 + n], c0 and n "
            "multiples of 8)");
}

TEST(Validator, DelayedReleaseNeedsMoreBuffersThanTheDelay) {
  EXPECT_EQ(trace_error("delay_two", [](KernelSpec& spec) { declare_wgmma(spec, true, 2); }),
            "spec 'delay_two': delay_release(2) but staged input 'a' has 2 stage buffers; it "
            "needs more than the delay (max_concurrent_steps)");
}

TEST(Validator, ScratchDimsArePositive) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.scratch("acc", f32, {8, 0});
  };
  EXPECT_EQ(trace_error("bad_scratch", fn),
            "spec 'bad_scratch': scratch 'acc' dim 1 is 0; scratch dims are positive constants");
}

TEST(Validator, ScratchHasNoBlockSpec) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    Operand acc = spec.scratch("acc", f32, {256});
    spec.block(acc, {Blocked{256}}, first);
  };
  EXPECT_EQ(trace_error("scratch_block", fn),
            "spec 'scratch_block': operand 'acc' cannot have a block spec");
}

TEST(Validator, SignalProgramNeedsProgramScope) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    Semaphores flags = spec.semaphores("flags", 1);
    spec.body([=](Ref x, Ref out) {
      flags.signal_program(index(0), 0, constant(1, i32));
      out.store(x.load());
    });
  };
  EXPECT_EQ(trace_error("signal_global", fn),
            "spec 'signal_global': signal_program on 'flags', whose scope is global (use signal)");
}

TEST(Validator, SemaphoreValuesAreI32Scalars) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    Semaphores flags = spec.semaphores("flags", 1);
    spec.body([=](Ref x, Ref out) {
      flags.wait(0, constant(1, f32));
      out.store(x.load());
    });
  };
  EXPECT_EQ(trace_error("wait_f32", fn),
            "spec 'wait_f32': semaphore wait on 'flags' needs an i32 scalar value");
}

TEST(Validator, WhileLoopConditionIsAScalarPredicate) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref x, Ref out) {
      std::vector<Value> r = while_loop([](std::vector<Value> c) { return c[0]; },
                                        [](std::vector<Value> c) { return c; }, {x.load()});
      out.store(r[0]);
    });
  };
  EXPECT_EQ(trace_error("while_block", fn),
            "spec 'while_block': while_loop condition must be a scalar i1 (a comparison of "
            "scalars)");
}

TEST(Validator, CheckMessagePlaceholdersNameThreeValues) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.check("x is {3}");
  };
  EXPECT_EQ(trace_error("check_placeholder", fn),
            "spec 'check_placeholder': check(\"x is {3}\"): '{' at 5 does not start {0}, {1} or "
            "{2}");
}

TEST(Validator, CheckRecordsEveryValueItsMessageNames) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    Check positive = spec.check("x[{0}] is {1}");
    spec.body([=](Ref x, Ref out) {
      positive.fail_if(program_id(0) < index(0), {program_id(0)});
      out.store(x.load());
    });
  };
  EXPECT_EQ(trace_error("check_values", fn),
            "spec 'check_values': check \"x[{0}] is {1}\" names {1} but fail_if records 1 "
            "values");
}

TEST(Validator, CheckConditionIsAScalarPredicate) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    Check finite = spec.check("not finite");
    spec.body([=](Ref x, Ref out) {
      finite.fail_if(x.load() < constant(0.0, f32));
      out.store(x.load());
    });
  };
  EXPECT_EQ(trace_error("check_block", fn),
            "spec 'check_block': check \"not finite\": fail_if needs a scalar i1 condition");
}

TEST(Validator, GpuTuningKnobsAreChecked) {
  auto runs = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.run_elements(12);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  EXPECT_EQ(trace_error("odd_runs", runs),
            "spec 'odd_runs': run_elements(12): a power of two from 1 to 64");
  auto regs = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.max_registers(300);
    spec.body([](Ref x, Ref out) { out.store(x.load()); });
  };
  EXPECT_EQ(trace_error("many_regs", regs),
            "spec 'many_regs': max_registers(300): ptxas takes a register bound between 24 and "
            "255");
}

TEST(Validator, ReshapeKeepsTheElementCount) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);
    spec.body([](Ref x, Ref out) { out.store(reshape(reshape(x.load(), {3, 128}), {256})); });
  };
  EXPECT_EQ(trace_error("bad_reshape", fn),
            "spec 'bad_reshape': reshape [256] to [3, 128]: 256 elements into 384");
}

// Every traced op carries the spec line that made it, and a lowering error
// (here the GPU's: its reductions combine 32-bit values) names that line.
// --- Blocks staged in shared memory and pipelines ---------------------------

/// f32 x -> out over [n], one program, both whole: emit_pipeline's operands.
void declare_whole_x_out(KernelSpec& spec) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  spec.grid({1});
  for (Operand o : {x, out}) spec.block(o, {full}, [](const ProgramIds&) { return at(0); });
}

TEST(Validator, StagedBlockLongerThanABoxIsAMultipleOfIt) {
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    spec.grid({cdiv(n, 300)});
    spec.block(x, {Blocked{300}}, first, InShared{.swizzle = 0});
  };
  EXPECT_EQ(trace_error("long_box", fn),
            "spec 'long_box': operand 'x' block dim 0 is 300; a TMA box has at most 256 "
            "elements a dim, so a longer staged block dim is copied as boxes of 256 and must be "
            "a multiple of it");
}

// Pallas' TilingTransform: tiles divide the block, each is one TMA box
// (rows within the swizzle, copies keeping the buffer aligned).
InShared tiled_b_staging;  // how declare_tiled_b stages its block

void declare_tiled_b(KernelSpec& spec) {
  DimExpr k = spec.dim("k"), n = spec.dim("n");
  Operand b = spec.input("b", bf16, {k, n});
  spec.grid({cdiv(k, 64), cdiv(n, 128)});
  spec.block(
      b, {Blocked{64}, Blocked{128}}, [](const ProgramIds& p) { return at(p[0], p[1]); },
      tiled_b_staging);
}

TEST(Validator, StagedBlockTilingDividesTheBlockAndFitsTheSwizzle) {
  auto staged = [](InShared staging) {
    tiled_b_staging = std::move(staging);
    return declare_tiled_b;
  };
  EXPECT_EQ(trace_error("wide_rows", staged(InShared{.swizzle = 128})),
            "spec 'wide_rows': operand 'b': the block's last dim is 256 bytes, more than its "
            "128-byte swizzle (TMA's rule); use a narrower block, a tiling or a wider swizzle");
  EXPECT_EQ(trace_error("wide_tile", staged(InShared{.swizzle = 128, .tiling = {64, 128}})),
            "spec 'wide_tile': operand 'b': the tile's last dim is 256 bytes, more than its "
            "128-byte swizzle (TMA's rule); use a narrower block, a tiling or a wider swizzle");
  EXPECT_EQ(trace_error("narrow_tile", staged(InShared{.swizzle = 128, .tiling = {64, 32}})),
            "spec 'narrow_tile': operand 'b': the tile's last dim is 64 bytes, less than its "
            "128-byte swizzle; a swizzled row is one swizzle span (Pallas' rule): use the 64-byte "
            "swizzle or a wider block or tiling");
  EXPECT_EQ(trace_error("thin_tile", staged(InShared{.swizzle = 32, .tiling = {64, 8}})),
            "spec 'thin_tile': operand 'b': the tile's last dim is 16 bytes, less than its "
            "32-byte swizzle; a swizzled row is one swizzle span (Pallas' rule): use no swizzle "
            "or a wider block or tiling");
  EXPECT_EQ(trace_error("uneven_tile", staged(InShared{.swizzle = 128, .tiling = {48, 64}})),
            "spec 'uneven_tile': operand 'b' block dim 0 is 64; its tile of 48 must divide it "
            "and be 1 to 256 elements (one TMA box)");
  EXPECT_EQ(trace_error("deep_tiling", staged(InShared{.swizzle = 128, .tiling = {1, 64, 64}})),
            "spec 'deep_tiling': operand 'b': a tiling of 3 dims for a block of 2");
  EXPECT_EQ(trace_error("small_tile", staged(InShared{.swizzle = 128, .tiling = {4, 64}})),
            "spec 'small_tile': operand 'b': its TMA copies are 512 bytes each; the copies of a "
            "block must each be a multiple of 1024 bytes (the staged buffer's alignment)");
}

TEST(Validator, StageBuffersAndPipelineDepthAreOneToSixteen) {
  auto buffers = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f32, {n});
    spec.grid({cdiv(n, 256)});
    spec.block(x, {Blocked{256}}, first, InShared{.swizzle = 0, .buffers = 17});
  };
  EXPECT_EQ(
      trace_error("seventeen_buffers", buffers),
      "spec 'seventeen_buffers': operand 'x': 17 stage buffers; a pipelined block has 1 to 16 "
      "(0: the pipeline's depth)");
  auto depth = [](KernelSpec& spec) { spec.max_concurrent_steps(0); };
  EXPECT_EQ(trace_error("no_depth", depth),
            "spec 'no_depth': max_concurrent_steps(0): a pipeline keeps 1 to 16 steps");
  auto deep = [](KernelSpec& spec) { spec.max_concurrent_steps(17); };
  EXPECT_EQ(trace_error("too_deep", deep),
            "spec 'too_deep': max_concurrent_steps(17): a pipeline keeps 1 to 16 steps");
}

TEST(Validator, EmitPipelineOperandIsAWholeArray) {
  auto fn = [](KernelSpec& spec) {
    declare_x_out(spec);  // 256-element blocks, not the whole array
    spec.body([](Ref x, Ref out) {
      emit_pipeline(index(0), index(2),
                    {PipelineOperand{x, {Blocked{128}}, [](const Value& s) { return at(s); }}}, {},
                    [](Value, std::vector<Ref>, std::vector<Value> c) { return c; });
      out.store(x.load());
    });
  };
  EXPECT_EQ(trace_error("pipeline_of_a_block", fn),
            "spec 'pipeline_of_a_block': emit_pipeline operand 0 ('x'): its block must be the "
            "whole array (every dim full); the pipeline copies blocks of it");
  // A row of a matrix ({squeezed, full}) is not the whole array either: the pipeline's
  // index maps index the array, not the row.
  auto row = [](KernelSpec& spec) {
    declare_row_x_out(spec);
    spec.body([](Ref x, Ref out) {
      emit_pipeline(
          index(0), index(2),
          {PipelineOperand{x, {squeezed, Blocked{128}}, [](const Value& s) { return at(0, s); }}},
          {}, [](Value, std::vector<Ref>, std::vector<Value> c) { return c; });
      out.store_at(x.load_at({index(0)}, {128}), {index(0)});
    });
  };
  EXPECT_EQ(trace_error("pipeline_of_a_row", row),
            "spec 'pipeline_of_a_row': emit_pipeline operand 0 ('x'): its block must be the "
            "whole array (every dim full); the pipeline copies blocks of it");
}

// --- Explicit copies and barriers ---------------------------------------------

/// A body in a run_scoped region with buffers 'buf' [256] and 'wide' [512]
/// (f32, unswizzled) and barriers 'ready' (2 of them), over declare_whole_x_out.
using ScopeBody = void (*)(Ref x, Ref out, std::vector<Ref> buf, std::vector<Barriers> bars);
ScopeBody scope_body = nullptr;
void declare_scope(KernelSpec& spec) {
  declare_whole_x_out(spec);
  spec.body([](Ref x, Ref out) {
    run_scoped(
        {{"buf", f32, {256}, 0}, {"wide", f32, {512}, 0}}, {{"ready", 1, 2}},
        [&](std::vector<Ref> buf, std::vector<Barriers> bars) { scope_body(x, out, buf, bars); });
    out.store_at(x.load_at({index(0)}, {128}), {index(0)});
  });
}
std::string scope_error(const char* op, ScopeBody body) {
  scope_body = body;
  return trace_error(op, declare_scope);
}

TEST(Validator, ExplicitCopiesNameTheBufferOperandAndBarrier) {
  // A copy's array side is an operand's whole-array Ref, its buffer side a run_scoped buffer.
  EXPECT_EQ(scope_error("copy_into_operand",
                        [](Ref x, Ref out, std::vector<Ref>, std::vector<Barriers> bars) {
                          copy_gmem_to_smem(x, at(index(0)), out, bars[0]);
                        }),
            "spec 'copy_into_operand': copy_gmem_to_smem: 'out' is an operand's block; the buffer "
            "side of a copy is a run_scoped buffer");
  EXPECT_EQ(scope_error("copy_from_buffer",
                        [](Ref, Ref, std::vector<Ref> buf, std::vector<Barriers> bars) {
                          copy_gmem_to_smem(buf[1], at(index(0)), buf[0], bars[0]);
                        }),
            "spec 'copy_from_buffer': copy_gmem_to_smem: 'wide' is a run_scoped buffer where the "
            "operand's whole-array Ref belongs");
  // One TMA descriptor per array: one box shape for all its copies.
  EXPECT_EQ(scope_error("two_boxes",
                        [](Ref x, Ref, std::vector<Ref> buf, std::vector<Barriers> bars) {
                          copy_gmem_to_smem(x, at(index(0)), buf[0], bars[0]);
                          copy_gmem_to_smem(x, at(index(256)), buf[1], bars[1]);
                        }),
            "spec 'two_boxes': operand 'x' is copied with buffers of two shapes or swizzles; an "
            "array has one TMA descriptor, so every copy of it uses buffers of one shape and "
            "swizzle");
  EXPECT_EQ(scope_error("copy_out_to_input",
                        [](Ref x, Ref, std::vector<Ref> buf, std::vector<Barriers>) {
                          copy_smem_to_gmem(buf[0], x, at(index(0)));
                        }),
            "spec 'copy_out_to_input': copy_smem_to_gmem: 'x' is not an output; copies write "
            "outputs only");
  EXPECT_EQ(scope_error("barrier_out_of_range",
                        [](Ref, Ref, std::vector<Ref>, std::vector<Barriers> bars) {
                          barrier_wait(bars[0][2]);
                        }),
            "spec 'barrier_out_of_range': barrier_wait of barrier 2 of 'ready', an array of 2");
  EXPECT_EQ(scope_error("bad_offsets",
                        [](Ref x, Ref, std::vector<Ref> buf, std::vector<Barriers> bars) {
                          copy_gmem_to_smem(x, at(index(0), index(0)), buf[0], bars[0]);
                        }),
            "spec 'bad_offsets': copy_gmem_to_smem of 'x': 2 offsets for an array of rank 1");
  // Buffers and barriers live in their run_scoped body only.
  auto escaped = [](KernelSpec& spec) {
    declare_whole_x_out(spec);
    spec.body([](Ref x, Ref out) {
      std::optional<Ref> kept;
      run_scoped({{"buf", f32, {256}, 0}}, {},
                 [&](std::vector<Ref> buf, std::vector<Barriers>) { kept = buf[0]; });
      out.store_at(kept->load(), {index(0)});
      (void)x;
    });
  };
  EXPECT_EQ(trace_error("escaped", escaped),
            "spec 'escaped': buffer 'buf' was used after the run_scoped body it was given to");
  // TMA's rules for the box: rows of a multiple of 16 bytes.
  auto narrow = [](KernelSpec& spec) {
    declare_whole_x_out(spec);
    spec.body([](Ref x, Ref out) {
      run_scoped({{"buf", f32, {6}, 0}}, {{"ready", 1, 1}},
                 [&](std::vector<Ref> buf, std::vector<Barriers> bars) {
                   copy_gmem_to_smem(x, at(index(0)), buf[0], bars[0]);
                 });
      out.store_at(x.load_at({index(0)}, {128}), {index(0)});
    });
  };
  EXPECT_EQ(trace_error("narrow", narrow),
            "spec 'narrow': operand 'x': the block's last dim is 24 bytes; TMA moves rows of a "
            "multiple of 16 bytes");
}

TEST(Validator, PipelineBlockRefLivesInItsBody) {
  auto fn = [](KernelSpec& spec) {
    declare_whole_x_out(spec);
    spec.body([](Ref x, Ref out) {
      std::optional<Ref> kept;
      emit_pipeline(
          index(0), index(2),
          {PipelineOperand{
              x, {Blocked{256}}, [](const Value& s) { return at(s); }, InShared{.swizzle = 0}}},
          {}, [&](Value, std::vector<Ref> blocks, std::vector<Value> c) {
            kept = blocks[0];
            return c;
          });
      out.store_at(kept->load(), {index(0)});
    });
  };
  EXPECT_EQ(trace_error("escaped_block", fn),
            "spec 'escaped_block': a block Ref of operand 'x' was used after the emit_pipeline "
            "body it was given to");
}

TEST(Validator, LoweringErrorsNameTheSpecLine) {
  static int body_line = 0;
  auto fn = [](KernelSpec& spec) {
    DimExpr n = spec.dim("n");
    Operand x = spec.input("x", f16, {n});
    Operand out = spec.output("out", f16, {n});
    spec.grid({cdiv(n, 256)});
    for (Operand o : {x, out}) spec.block(o, {Blocked{256}}, first);
    spec.body([](Ref x, Ref out) {
      Value v = x.load();
      body_line = __LINE__ + 1;
      out.store(v - max(v));  // max of an f16 block: the GPU lowering rejects it
    });
  };
  mlir::DialectRegistry registry;
  codegen::registerPipelineDependencies(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::vector<TracedKernel> kernels = trace_spec("located", fn, context);
  ASSERT_EQ(kernels.size(), 1u);
  // The traced reduction is at the body's line.
  bool found = false;
  kernels[0].module->walk([&](mlir::vector::MultiDimReductionOp red) {
    auto at = mlir::dyn_cast<mlir::FileLineColLoc>(red.getLoc());
    ASSERT_TRUE(at) << "the reduction has no file location";
    EXPECT_EQ(at.getFilename().getValue(), "tests/codegen/validator_test.cc");
    EXPECT_EQ(static_cast<int>(at.getLine()), body_line);
    found = true;
  });
  EXPECT_TRUE(found);
  codegen::DiagnosticCollector diagnostics(&context);
  mlir::PassManager pm(&context);
  ASSERT_TRUE(mlir::succeeded(mlir::parsePassPipeline(codegen::gpuToNVVMPipeline(), pm)));
  EXPECT_TRUE(mlir::failed(pm.run(*kernels[0].module)));
  EXPECT_NE(
      diagnostics.text().find("tests/codegen/validator_test.cc:" + std::to_string(body_line) + ":"),
      std::string::npos)
      << diagnostics.text();
  EXPECT_NE(diagnostics.text().find("GPU reductions combine 32-bit values"), std::string::npos)
      << diagnostics.text();
}

}  // namespace
}  // namespace pallas::edsl
