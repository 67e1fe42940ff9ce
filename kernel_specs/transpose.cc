// y = x^T for a 2-D array of any shape and row stride: one program per tile
// of 128 x 128 bytes (32 x 32 f32 or i32, 64 x 64 f16 or bf16).
//
// On sm_90a both tiles are staged in shared memory by TMA (InShared): the
// input tile is copied in with one cp.async.bulk.tensor completing on an
// mbarrier, each thread reads its 16-byte runs of rows, the transpose moves
// them between threads through a shared buffer, and the output tile is
// written to shared memory and copied out by one TMA store. The 128-byte
// swizzle keeps the runs of a warp on distinct banks. Edge tiles need no
// masks: TMA reads zero outside the array and clips what it writes.
//
// Arrays TMA cannot copy (data not 16-byte aligned, a row stride that is not
// a multiple of 16 bytes) and GPUs before sm_90 run the same body with the
// blocks in registers (the `_direct` instance), masked at the edges.

#include <pallas/EDSL/Spec.h>

using namespace pallas::edsl;

PALLAS_KERNEL(transpose) {
  DType T = spec.dtype_param("T", {f32, f16, bf16, i32});
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", T, {rows, cols});
  Operand y = spec.output("y", T, {cols, rows});
  const int64_t tile = 128 / dtype_bytes(T);  // a row of 128 bytes: the swizzle's span
  spec.grid({cdiv(rows, tile), cdiv(cols, tile)});
  spec.block(
      x, {Blocked{tile}, Blocked{tile}}, [](const ProgramIds& p) { return at(p[0], p[1]); },
      InShared{.swizzle = 128});
  spec.block(
      y, {Blocked{tile}, Blocked{tile}}, [](const ProgramIds& p) { return at(p[1], p[0]); },
      InShared{.swizzle = 128});
  spec.body([](Ref x, Ref y) { y.store(transpose(x.load())); });
}
