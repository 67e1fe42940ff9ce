// D = A @ B with f16 or bf16 inputs summed in f32: the grid is Pallas' matmul
// grid (i, j, k), one program per 128 x 128 tile of D, its K axis a
// sequential (arbitrary) loop pipelined by TMA, the sum kept in registers in
// an accumulator (Pallas' ACC):
//
//   acc  = 0                              at k == 0
//   acc += A[i, k] @ B[k, j]              one warpgroup MMA per step
//   D[i, j] = acc                         at the last k, cast to D's dtype
//
// `matmul` takes B as [K, N]; `matmul_bt` takes it as [N, K] (D = A @ B^T,
// the layout of a linear layer's weight). On sm_90a the A tile, and B's in
// matmul_bt, are staged by TMA in 128-byte-swizzled shared memory, which
// wgmma reads in place (rows of 64 elements of K: one swizzle span); matmul's
// [K, N] B tile is staged unswizzled and stored into wgmma's layout by the
// threads (a transposing copy: correct, slower). Edge tiles need no masks on
// that path: TMA reads zero outside the arrays, so a partial K block adds
// nothing. Arrays TMA cannot copy run the `_direct` instance (blocks loaded
// into registers, masked). sm_80 multiplies with FMAs for now (no mma.sync
// rule yet): correct, not fast.

#include <pallas/EDSL/Spec.h>

using namespace pallas::edsl;

namespace {

constexpr int64_t kTileK = 64;

void declare_matmul(KernelSpec& spec, bool b_transposed) {
  std::vector<DType> t = spec.dtype_params({"T", "Out"}, {{bf16, bf16}, {f16, f32}});
  const DType in = t[0], out = t[1];
  // The accumulator's registers decide the tile (no spills on any target):
  // 128 x 64 (64 registers a thread) where wgmma reads both tiles in place;
  // 64 x 64 where the threads first store the operands into wgmma's layout
  // (B as [K, N], the direct twin). The instance also serves sm_80, whose
  // FMA form holds the operand fragments too, so 128 x 128 waits for its
  // mma.sync rule.
  const bool in_place = b_transposed && !spec.direct();
  const int64_t kTileM = in_place ? 128 : 64, kTileN = 64;
  DimExpr m = spec.dim("m"), n = spec.dim("n"), k = spec.dim("k");
  Operand a = spec.input("a", in, {m, k});
  Operand b = b_transposed ? spec.input("b", in, {n, k}) : spec.input("b", in, {k, n});
  Operand d = spec.output("d", out, {m, n});
  Operand acc = spec.accumulator("acc", {kTileM, kTileN});
  (void)acc;
  spec.grid({cdiv(m, kTileM), cdiv(n, kTileN), cdiv(k, kTileK)});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.max_registers(255);  // one program of 128 threads per SM: the 128-register accumulator fits
  spec.block(
      a, {Blocked{kTileM}, Blocked{kTileK}}, [](const ProgramIds& p) { return at(p[0], p[2]); },
      InShared{.swizzle = 128});
  if (b_transposed)
    spec.block(
        b, {Blocked{kTileN}, Blocked{kTileK}}, [](const ProgramIds& p) { return at(p[1], p[2]); },
        InShared{.swizzle = 128});
  else
    spec.block(
        b, {Blocked{kTileK}, Blocked{kTileN}}, [](const ProgramIds& p) { return at(p[2], p[1]); },
        InShared{.swizzle = 0});
  spec.block(d, {Blocked{kTileM}, Blocked{kTileN}},
             [](const ProgramIds& p) { return at(p[0], p[1]); });
  spec.body([b_transposed, kTileM, kTileN](Ref a, Ref b, Ref d, Ref acc) {
    when(program_id(2) == index(0), [&] {
      acc.store(broadcast_to(constant(0, f32), {kTileM, kTileN}));
    });
    acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_b = b_transposed}));
    when(program_id(2) == num_programs(2) - index(1), [&] { d.store(acc.load().cast(d.dtype())); });
  });
}

}  // namespace

PALLAS_KERNEL(matmul) { declare_matmul(spec, /*b_transposed=*/false); }

PALLAS_KERNEL(matmul_bt) { declare_matmul(spec, /*b_transposed=*/true); }
