// Test-only kernels: together they exercise every body feature of the EDSL
// end to end (math functions, compare/select, static slices with edge
// masking, squeezed dims, iota, program ids, fori with carried blocks, i32
// scalars and arrays). Built into pallas_test_kernels, not the library.

#include <pallas/EDSL/Spec.h>

using namespace pallas::edsl;

namespace {
Indices block_i(const ProgramIds& p) { return at(p[0]); }
}  // namespace

// Every math function, a comparison and a select, in one expression.
PALLAS_KERNEL(math_zoo) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  spec.grid({cdiv(n, 1024)});
  spec.block(x, {Blocked{1024}}, block_i);
  spec.block(out, {Blocked{1024}}, block_i);
  spec.body([](Ref x, Ref out) {
    Value v = x.load();
    Value a = exp(v * 0.5) + log(abs(v) + 1.0);
    Value b = exp2(v * 0.25) - rsqrt(abs(v) + 0.5);
    Value s = select(v > 0.0, a, b);
    Value t = sqrt(abs(v)) * erf(v) + logistic(v) * tanh(v);
    out.store(s + t + maximum(v, -v * 0.5) * minimum(v, 1.0) - v / (abs(v) + 1.0));
  });
}

// out[r, c] = 2 x[r, c] + c + r * rows: one program per row (squeezed) and
// 512-column block; the column index comes from iota and program_id(1).
PALLAS_KERNEL(coordinates) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand out = spec.output("out", f32, {rows, cols});
  spec.grid({rows, cdiv(cols, 512)});
  auto map = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(x, {squeezed, Blocked{512}}, map);
  spec.block(out, {squeezed, Blocked{512}}, map);
  spec.body([](Ref x, Ref out) {
    Value col = (iota({512}, 0) + (program_id(1) * 512).cast(i32)).cast(f32);
    Value row = program_id(0).cast(f32) * num_programs(0).cast(f32);
    out.store(2.0 * x.load() + col + row);
  });
}

// Swaps the two 128-element halves of every 256-element block with static
// slices; past the array edge, loads read 0 and stores are dropped.
PALLAS_KERNEL(swap_halves) {
  DType T = spec.dtype_param("T", {f32, bf16});
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", T, {n});
  Operand out = spec.output("out", T, {n});
  spec.grid({cdiv(n, 256)});
  spec.block(x, {Blocked{256}}, block_i);
  spec.block(out, {Blocked{256}}, block_i);
  spec.body([](Ref x, Ref out) {
    out.store(x.load({128}, {128}), {0});
    out.store(x.load({0}, {128}), {128});
  });
}

// out = x^k by a fori loop carrying a block; k is an i32 scalar.
PALLAS_KERNEL(power) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Scalar k = spec.scalar("k", i32);
  Operand out = spec.output("out", f32, {n});
  spec.grid({cdiv(n, 512)});
  spec.block(x, {Blocked{512}}, block_i);
  spec.block(out, {Blocked{512}}, block_i);
  spec.body([k](Ref x, Ref out) {
    Value v = x.load();
    std::vector<Value> acc =
        fori(index(0), Value(k).cast(DType::index), {broadcast_to(constant(1, f32), {512})},
             [&](Value, std::vector<Value> carry) { return std::vector<Value>{carry[0] * v}; });
    out.store(acc[0]);
  });
}

// Integer arithmetic on i32 arrays.
PALLAS_KERNEL(int_mix) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", i32, {n});
  Operand y = spec.input("y", i32, {n});
  Operand out = spec.output("out", i32, {n});
  spec.grid({cdiv(n, 1024)});
  for (Operand o : {x, y, out}) spec.block(o, {Blocked{1024}}, block_i);
  spec.body([](Ref x, Ref y, Ref out) {
    Value a = x.load(), b = y.load();
    out.store(maximum(a, b) * 3 - minimum(a, b) / 2 + abs(a - b) + select(a < b, a, -b));
  });
}

// out[i] = sum(x_block) + 2 max(x_block) - min(x_block) for the 1024-element
// block holding element i: reductions of a whole block to scalars. Elements
// past the array edge load as 0 and take part (mask them with iota and select
// where that matters).
PALLAS_KERNEL(block_stats) {
  DType T = spec.dtype_param("T", {f32, i32});
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", T, {n});
  Operand out = spec.output("out", T, {n});
  spec.grid({cdiv(n, 1024)});
  spec.block(x, {Blocked{1024}}, block_i);
  spec.block(out, {Blocked{1024}}, block_i);
  spec.body([](Ref x, Ref out) {
    Value v = x.load();
    out.store(broadcast_to(sum(v) + 2 * max(v) - min(v), {1024}));
  });
}
