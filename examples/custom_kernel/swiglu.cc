// A kernel of one's own: fused SwiGLU, y = silu(gate) * up, the feed-forward
// activation of LLaMA-style models. Not a prebuilt op: this file is compiled
// into this project's own codegen by pallas_add_kernel_library (CMakeLists.txt).
//
// gate and up are [rows, d]; in a model they are the two halves of one
// [rows, 2 d] projection, passed as two views with row stride 2 d (main.cc).
// One program per 8 x 256 tile of y; edge tiles are masked.

#include <pallas/EDSL/Spec.h>

using namespace pallas::edsl;

PALLAS_KERNEL(swiglu) {
  DType T = spec.dtype_param("T", {f32, bf16});
  DimExpr rows = spec.dim("rows"), d = spec.dim("d");
  Operand gate = spec.input("gate", T, {rows, d});
  Operand up = spec.input("up", T, {rows, d});
  Operand y = spec.output("y", T, {rows, d});
  spec.grid({cdiv(rows, 8), cdiv(d, 256)});
  auto tile = [](const ProgramIds& p) { return at(p[0], p[1]); };
  for (Operand op : {gate, up, y}) spec.block(op, {Blocked{8}, Blocked{256}}, tile);
  spec.body([T](Ref gate, Ref up, Ref y) {
    Value g = gate.load().cast(f32);
    y.store((g * logistic(g) * up.load().cast(f32)).cast(T));  // computed in f32, rounded once
  });
}
