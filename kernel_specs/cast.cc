// cast: converts a 1-D array between f32 and f16/bf16 (round to nearest even).

#include <pallas/EDSL/Spec.h>

using namespace pallas::edsl;

PALLAS_KERNEL(cast) {
  constexpr int64_t kBlock = 2048;
  std::vector<DType> types =
      spec.dtype_params({"From", "To"}, {{f32, f16}, {f32, bf16}, {f16, f32}, {bf16, f32}});
  DType to = types[1];
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", types[0], {n});
  Operand out = spec.output("out", to, {n});
  spec.grid({cdiv(n, kBlock)});
  auto block_i = [](const ProgramIds& p) { return at(p[0]); };
  spec.block(x, {Blocked{kBlock}}, block_i);
  spec.block(out, {Blocked{kBlock}}, block_i);
  spec.body([to](Ref x, Ref out) { out.store(x.load().cast(to)); });
}
