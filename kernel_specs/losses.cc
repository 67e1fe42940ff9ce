// cross_entropy: loss[r] = logsumexp(logits[r, :]) - logits[r, labels[r]], in
// f32, for any vocabulary size. A (rows, P) grid (see rows.h): each program
// folds its segment of a row into (max, sum of exp) in one pass, its chunks
// staged by a TMA pipeline on sm_90 (fold_row_chunks); the row's last program
// combines the P pairs and picks the label's logit.
// A label outside [0, vocab) fails a run-time check (the row's loss is NaN):
// the launch's status on the host and emulator backends, and on the CUDA
// backend what take_device_errors (or Launch::check_device_errors) reports.

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

PALLAS_KERNEL(cross_entropy) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr rows = spec.dim("rows"), vocab = spec.dim("vocab");
  Operand logits = spec.input("logits", T, {rows, vocab});
  Operand labels = spec.input("labels", i32, {rows});
  Check label_in_vocab = spec.check("operand 'labels' element {0} is {1}, outside [0, {2})");
  Operand loss = spec.output("loss", f32, {rows});
  DimExpr split = programs_per_row(rows, vocab);
  spec.workspace("partial_max", f32, rows * split);
  spec.workspace("partial_sum", f32, rows * split);
  Semaphores arrived = spec.semaphores("arrived", rows);
  spec.grid({rows, split});
  spec.block(logits, {full, full}, all_rows);  // the row's chunks: Row (staged or direct)
  spec.block(labels, {full}, whole);
  spec.block(loss, {full}, whole);
  const ChunkSource source = chunk_source(spec);
  spec.body([=](Ref logits, Ref labels, Ref loss, Ref partial_max, Ref partial_sum) {
    Value cols = logits.extent(1);
    std::vector<Value> ml =
        segment_logsumexp(source, Row{logits, program_id(0)}, cols, segment_of_row(cols));
    auto fold = [&] {
      Value m = fold_partials({kNegInf}, [&](Value s, std::vector<Value> acc) {
        return std::vector<Value>{maximum(acc[0], partial_of_row(partial_max, s))};
      })[0];
      Value l = fold_partials({0.0}, [&](Value s, std::vector<Value> acc) {
        Value scale = exp_minus(partial_of_row(partial_max, s), m);
        return std::vector<Value>{acc[0] + partial_of_row(partial_sum, s) * scale};
      })[0];
      return std::vector<Value>{m, l};
    };
    auto finish = [&](std::vector<Value> row_ml) {
      Value m = row_ml[0], l = row_ml[1];
      Value label = labels.load_scalar({program_id(0)});
      Value picked = logits.load_scalar({program_id(0), label.cast(DType::index)}).cast(f32);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      Value outside = select(label < 0, constant(1, DType::i1), label >= cols.cast(i32));
      loss.store_at(select(outside, nan, m + log(l) - picked), {program_id(0)});
      label_in_vocab.fail_if(outside, {program_id(0), label, cols});
    };
    finish_with_row_partials(arrived, {{partial_max, ml[0]}, {partial_sum, ml[1]}}, fold, finish);
  });
}
