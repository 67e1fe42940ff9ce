// cross_entropy: loss[r] = logsumexp(logits[r, :]) - logits[r, labels[r]], in
// f32, for any vocabulary size (one program per row, walking it in chunks).
// Labels outside [0, vocab) are a status on backends whose memory the entry
// point can read (host, emulator); on the CUDA backend their loss is NaN.

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

PALLAS_KERNEL(cross_entropy) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr rows = spec.dim("rows"), vocab = spec.dim("vocab");
  Operand logits = spec.input("logits", T, {rows, vocab});
  Operand labels = spec.input("labels", i32, {rows});
  spec.values_in(labels, 0, vocab);
  Operand loss = spec.output("loss", f32, {rows});
  spec.grid({rows});
  spec.block(logits, {squeezed, full}, row_i);
  spec.block(labels, {full}, whole);
  spec.block(loss, {full}, whole);
  spec.body([](Ref logits, Ref labels, Ref loss) {
    Value cols = logits.extent(0);
    Value m = row_maximum(logits, cols);
    Value logsumexp = m + log(row_exp_sum(logits, cols, m));
    Value label = labels.load_scalar({program_id(0)});
    Value picked = logits.load_scalar({label.cast(DType::index)}).cast(f32);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Value in_vocab = select(label >= 0, label < cols.cast(i32), constant(0, DType::i1));
    loss.store_at(select(in_vocab, logsumexp - picked, nan), {program_id(0)});
  });
}
