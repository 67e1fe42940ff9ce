// Whole-array reductions in one launch: sum_all and max_all of a 1-D array
// (f32 accumulation) into out[0]. Each program reduces its 2048-element block
// and writes the partial to a workspace, then bumps a semaphore; the program
// that bumps it last combines every partial, writes the result and returns
// the semaphore to zero. No second launch, no host round trip.

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

namespace {

/// `combine(partials)` for the last program to finish; `partial(block)` for each.
template <class Partial, class Combine>
void whole_array_reduction(KernelSpec& spec, Partial partial, Combine combine) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", T, {n});
  Operand out = spec.output("out", T, {1});
  // At least one program, so that an empty array still gets its result.
  DimExpr programs = max(cdiv(n, kChunk), 1);
  spec.workspace("partials", f32, programs);
  Semaphores arrived = spec.semaphores("arrived", 1);
  spec.grid({programs});
  spec.block(x, {Blocked{kChunk}}, [](const ProgramIds& p) { return at(p[0]); });
  spec.block(out, {full}, whole);
  spec.body([=](Ref x, Ref out, Ref partials) {
    Value in_array = iota({kChunk}, 0) + (program_id(0) * kChunk).cast(i32) < x.extent(0).cast(i32);
    partials.store_at(partial(x.load().cast(f32), in_array), {program_id(0)});
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
      spec, [](const Value& v, const Value&) { return sum(v); },
      [](const Ref& partials, const Value& count) {
        return fold_chunks(count, 0.0,
                           [&](Value c, Value acc) { return acc + sum(chunk_f32(partials, c)); });
      });
}

// NaN propagates; an empty array gives -inf.
PALLAS_KERNEL(max_all) {
  whole_array_reduction(
      spec, [](const Value& v, const Value& in_array) { return max(select(in_array, v, kNegInf)); },
      [](const Ref& partials, const Value& count) {
        return fold_chunks(count, kNegInf, [&](Value c, Value acc) {
          return maximum(acc, max(select(in_row(c, count), chunk_f32(partials, c), kNegInf)));
        });
      });
}
