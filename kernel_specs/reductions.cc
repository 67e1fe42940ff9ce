// Whole-array reductions in one launch: sum_all and max_all of a 1-D array
// (f32 accumulation) into out[0]. Each program reduces its block of
// kBlockElements and writes the partial to a workspace, then bumps a
// semaphore; the program that bumps it last combines every partial, writes
// the result and returns the semaphore to zero. No second launch, no host
// round trip.
//
// A block is 4 chunks, 8192 elements: 64 a thread, read as 8 (16-bit) or 16
// (f32) independent 16-byte loads. With blocks of one chunk (2048), a 16M
// array was 8192 programs, each paying a fence, an atomic on the one
// semaphore and a barrier for 4 or 8 KiB: on an H200 every dtype took 25 to
// 32 us (f16 and bf16 at 31 % of the copy's bandwidth, f32 at 50 %, 1.09 to
// 1.12x PyTorch's time), the mark of a per-program cost rather than of
// bytes. (Reasoned from that run; the 8192-element blocks are not measured
// yet.) Worked example: n = 1000003 is cdiv(n, 8192) = 123 programs; the last
// has 579 elements in the array and 7613 that load as the identity.

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

namespace {

constexpr int64_t kBlockElements = 4 * kChunk;

/// `partial(block)` for each program's block (as f32, `identity` past the
/// array end: a padded load, no per-element mask); `combine(partials,
/// count)` for the last program to finish.
template <class Partial, class Combine>
void whole_array_reduction(KernelSpec& spec, double identity, Partial partial, Combine combine) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", T, {n});
  Operand out = spec.output("out", T, {1});
  // At least one program, so that an empty array still gets its result.
  DimExpr programs = max(cdiv(n, kBlockElements), 1);
  spec.workspace("partials", f32, programs);
  Semaphores arrived = spec.semaphores("arrived", 1);
  spec.grid({programs});
  spec.block(x, {Blocked{kBlockElements}}, [](const ProgramIds& p) { return at(p[0]); });
  spec.block(out, {full}, whole);
  spec.body([=](Ref x, Ref out, Ref partials) {
    Value block = x.load_at({index(0)}, {kBlockElements}, identity).cast(f32);
    partials.store_at(partial(block), {program_id(0)});
    Value programs_i32 = num_programs(0).cast(i32);
    Value before = arrived.add(0, constant(1, i32));
    when(before == programs_i32 - 1, [&] {  // every other program has written its partial
      out.store_at(combine(partials, num_programs(0)).cast(T), {0});
      arrived.add(0, -programs_i32);  // back to zero for the next launch
    });
  });
}

}  // namespace

PALLAS_KERNEL(sum_all) {
  whole_array_reduction(
      spec, 0.0, [](const Value& v) { return sum(v); },
      [](const Ref& partials, const Value& count) {
        return fold_chunks(count, 0.0,
                           [&](Value c, Value acc) { return acc + sum(chunk_f32(partials, c)); });
      });
}

// NaN propagates; an empty array gives -inf.
PALLAS_KERNEL(max_all) {
  whole_array_reduction(
      spec, kNegInf, [](const Value& v) { return max(v); },
      [](const Ref& partials, const Value& count) {
        return fold_chunks(count, kNegInf, [&](Value c, Value acc) {
          return maximum(acc, max(chunk_f32(partials, c, 1, kNegInf)));
        });
      });
}
