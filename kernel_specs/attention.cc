// Attention (FlashAttention's forward pass, as Pallas' Mosaic GPU attention
// example writes it): per batch entry b and head h,
//
//   O[b, h] = softmax(scale * Q[b, h] @ K[b, h]^T + mask) @ V[b, h]
//
// Q, O are [batch, heads, Sq, D], K, V [batch, kv_heads, Skv, D] (any strides:
// [batch, seq, heads, D] in memory is a view with strides {S H D, D, H D, 1}).
// Grouped-query attention: heads is a multiple of kv_heads, and query head h
// reads K and V head h / (heads / kv_heads) (Llama's 32 query heads over 8
// key-value heads: heads 0..3 read kv head 0); kv_heads == heads is
// multi-head attention.
// One program per 64 rows of Q (grid (b, h, i)) walks the blocks of 64 keys
// with an emit_pipeline, keeping the online softmax in registers: the row
// maximum m and sum l of exp(s - m) so far, and acc, the unnormalized
// output (all f32, in the WGMMA accumulator layout):
//
//   s     = Q_i @ K_j^T * scale * log2(e)   (masked entries -inf)
//   m'    = max(m, rowmax(s))
//   p     = exp2(s - m')                     cast to Q's dtype
//   acc   = acc * exp2(m - m') + p @ V_j     (p from registers on sm_90a)
//   l     = l * exp2(m - m') + rowsum(p)
//   O_i   = acc / l                          after the last block
//
// Q's block is staged once by TMA; K and V blocks are pipelined through
// shared memory (TMA on sm_90a, cp.async on sm_80), read in place by wgmma
// (sm_90a) or ldmatrix + mma.sync (sm_80), two stages.
//
// Masks: keys past Skv (TMA's zero fill, or the direct twin's masked loads)
// are -inf. `causal_attention` adds FlashAttention's causal mask aligned to
// the bottom right: query row r attends key c when c <= r + Skv - Sq (the
// queries are the last Sq positions of the Skv keys: a decode step's one
// query sees every key; Sq == Skv is the usual lower triangle), and a
// program walks only the key blocks its rows can see. A row that sees no
// key (r < Sq - Skv) is 0, as is every row when Skv is 0.
//
// Worked example, causal, Sq = 100, Skv = 300, program i = 1 (rows 64..99):
// row 99 sees keys 0..299, row 64 keys 0..264; the program walks key blocks
// 0..min(cdiv(64 + 64 + 200, 64), cdiv(300, 64)) - 1 = 0..4 (block 4, keys
// 256..319, the last, partial), and masks keys c > r + 200 in them. Program
// 0 (rows 0..63, which see keys up to 263) walks 0..min(cdiv(64 + 200, 64),
// 5) - 1 = 0..4 too; with Sq = Skv = 300 it would walk 0 only.

#include <pallas/EDSL/Spec.h>

#include <limits>

using namespace pallas::edsl;

namespace {

constexpr int64_t kBlockQ = 64;  // rows of Q per program: one warpgroup's wgmma M
constexpr double kLog2e = 1.4426950408889634;

enum class Mask { kNone, kCausal };

void declare_attention(KernelSpec& spec, Mask mask) {
  DType T = spec.dtype_param("T", {bf16, f16});
  DimExpr batch = spec.dim("batch"), heads = spec.dim("heads"), kv_heads = spec.dim("kv_heads");
  DimExpr sq = spec.dim("sq"), skv = spec.dim("skv"), d = spec.dim("d");
  // The head dim is a block dim: one instance for d <= 64, one for d <= 128
  // (columns past d read TMA's zero fill, or the direct twin's masked zeros,
  // so they add nothing to Q K^T, and their columns of O are not stored).
  //
  // Two K/V stages. A third (d128_deep, twenty-first session: 112 KiB, still two programs an
  // SM on sm_90) ran as fast or slower on an H100 (twenty-third session, bench/RESULTS.md):
  // non-causal d128 at 16K tokens x 2048, seq 2048: 193 against 219 TFLOP/s, seq 4096: 283
  // against 339; equal at the other lengths and causal. So the refill was not what a d128
  // step waits on, and the instance is gone.
  const int path = spec.variant("head_dim", {"d64", "d128"}, DimExpr(1) - le(d, 64));
  spec.require(le(d, 128), "the head dim 'd' (dim 3 of q, k, v and o) must be at most 128");
  // kv_heads >= 1 divides heads (cdiv(heads, kv) kv == heads; max() keeps the
  // check itself from dividing by 0); with no heads at all, kv_heads may be 0.
  const DimExpr kv_divisor = max(kv_heads, 1);
  spec.require(le(1, kv_heads + le(heads, 0)) * le(cdiv(heads, kv_divisor) * kv_divisor, heads),
               "the query heads 'heads' (dim 1 of q and o) must be a multiple of the key-value "
               "heads 'kv_heads' (dim 1 of k and v), which must be at least 1");
  const int64_t kD = path == 0 ? 64 : 128;
  // Keys per pipeline step. The direct twin of d128 loads Q, K and V blocks
  // into registers before storing them for the MMA: 32 keys a step, and Q K^T
  // in two halves of the head dim, keep it from spilling (64 keys spilled
  // 272 bytes on sm_90a, and 224 with the halves).
  const int64_t kBlockKv = spec.direct() && kD == 128 ? 32 : 64;
  // A row of 128 bf16 is two swizzle spans: tiles of 64 columns, each one
  // span wide (wgmma reads Q and K K-major from them, V N-major).
  const InShared q_tiles{.swizzle = 128, .tiling = {kBlockQ, 64}};
  const InShared kv_tiles{.swizzle = 128, .tiling = {kBlockKv, 64}};
  Operand q = spec.input("q", T, {batch, heads, sq, d});
  Operand k = spec.input("k", T, {batch, kv_heads, skv, d});
  Operand v = spec.input("v", T, {batch, kv_heads, skv, d});
  Operand o = spec.output("o", T, {batch, heads, sq, d});
  Scalar scale = spec.scalar("scale", f32);
  spec.grid({batch, heads, cdiv(sq, kBlockQ)});
  spec.max_registers(255);
  auto q_map = [](const ProgramIds& p) { return at(p[0], p[1], p[2], 0); };
  const std::vector<BlockDim> q_block = {squeezed, squeezed, Blocked{kBlockQ}, Blocked{kD}};
  spec.block(q, q_block, q_map, q_tiles);
  spec.block(o, q_block, q_map);
  auto whole = [](const ProgramIds&) { return at(0, 0, 0, 0); };
  spec.block(k, {full, full, full, full}, whole);
  spec.block(v, {full, full, full, full}, whole);
  const bool spec_direct = spec.direct();
  spec.body([=](Ref q, Ref k, Ref v, Ref o) {
    Value b = program_id(0), h = program_id(1), i = program_id(2);
    Value rows_q = q.extent(0), keys = k.extent(2);  // q's block drops the squeezed dims
    Value blocks = (keys + index(kBlockKv - 1)) / index(kBlockKv);
    // Causal: the last key this program's last row sees is
    // (i + 1) 64 - 1 + keys - rows_q; blocks past it are skipped.
    Value end = blocks;
    if (mask == Mask::kCausal) {
      Value reach = (i + index(1)) * index(kBlockQ) + keys;  // > rows_q: some key is seen
      Value seen = select(reach > rows_q, (reach - rows_q + index(kBlockKv - 1)) / index(kBlockKv),
                          index(0));
      end = select(seen < blocks, seen, blocks);
    }
    // Key blocks every row of the program sees whole (no mask): those inside
    // the array, and causally those before the first row's last key,
    // i 64 + keys - rows_q (a block j with (j + 1) 64 - 1 <= it).
    Value whole = keys / index(kBlockKv);
    if (mask == Mask::kCausal) {
      Value first_reach =
          i * index(kBlockQ) + index(1) + keys;  // first row's last key + 1 + rows_q
      Value seen_whole =
          select(first_reach > rows_q, (first_reach - rows_q) / index(kBlockKv), index(0));
      whole = select(seen_whole < whole, seen_whole, whole);
    }
    const double log2_scale = kLog2e;
    Value qk_scale = Value(scale) * log2_scale;
    Value row = iota({kBlockQ, kBlockKv}, 0) + (i * index(kBlockQ)).cast(i32);
    Value col0 = iota({kBlockQ, kBlockKv}, 1);
    Value neg_inf = constant(-std::numeric_limits<double>::infinity(), f32);
    // Grouped-query attention: this head's key-value head.
    Value kv_head = h / (num_programs(1) / k.extent(1));
    auto kv = [b, kv_head](const Value& j) { return at(b, kv_head, j, 0); };
    std::vector<Value> carry = {
        broadcast_to(neg_inf, {kBlockQ, 1}),
        broadcast_to(constant(0, f32), {kBlockQ, 1}),
        broadcast_to(constant(0, f32), {kBlockQ, kD}),
    };
    std::vector<Value> out = emit_pipeline(
        index(0), end,
        {PipelineOperand{k, {squeezed, squeezed, Blocked{kBlockKv}, Blocked{kD}}, kv, kv_tiles},
         PipelineOperand{v, {squeezed, squeezed, Blocked{kBlockKv}, Blocked{kD}}, kv, kv_tiles}},
        carry,
        [&](Value j, std::vector<Ref> kv_blocks, std::vector<Value> c) {
          // Q is read where TMA put it (sm_90a), or loaded at each step (the
          // direct twin: not held in registers across the loop).
          Value s;
          if (spec_direct && kD == 128) {  // in halves of the head dim: fewer registers live
            Ref kb = kv_blocks[0];
            s = dot(q.load({0, 0}, {kBlockQ, 64}), kb.load({0, 0}, {kBlockKv, 64}),
                    {.transpose_b = true});
            s = dot(q.load({0, 64}, {kBlockQ, 64}), kb.load({0, 64}, {kBlockKv, 64}), s,
                    {.transpose_b = true});
          } else {
            s = dot(q.load(), kv_blocks[0].load(), {.transpose_b = true});
          }
          s = s * qk_scale;
          // Only blocks from `whole` on have keys some row must not see: the
          // mask runs in a loop of one trip there and none before (a branch
          // that carries s), so the other blocks skip its ~60 instructions.
          Value masked = select(j < whole, index(0), index(1));
          s = fori(index(0), masked, {s}, [&](Value, std::vector<Value> sm) {
            Value col = col0 + (j * index(kBlockKv)).cast(i32);
            // The last key each row sees: keys - 1, or causally r + keys - rows_q.
            Value last = broadcast_to(keys.cast(i32) - 1, {kBlockQ, kBlockKv});
            if (mask == Mask::kCausal)
              last = minimum(last, row + (keys.cast(i32) - rows_q.cast(i32)));
            return std::vector<Value>{select(col <= last, sm[0], neg_inf)};
          })[0];
          Value m = maximum(c[0], max(s, 1, true));
          // A row with no visible key so far keeps m = -inf: subtract 0 instead
          // (its p and correction are then exp2(-inf) = 0, not NaN).
          Value m_safe = select(m == neg_inf, constant(0, f32), m);
          Value p = exp2(s - m_safe);
          Value correction = exp2(c[0] - m_safe);
          Value l = c[1] * correction + sum(p, 1, true);
          Value acc = dot(p.cast(T), kv_blocks[1].load(), c[2] * correction);
          return std::vector<Value>{m, l, acc};
        },
        kDefaultPipelineDepth);
    Value l = out[1];
    o.store((out[2] * select(l > 0.0, 1.0 / l, constant(0, f32))).cast(T));
  });
}

}  // namespace

PALLAS_KERNEL(attention) { declare_attention(spec, Mask::kNone); }
PALLAS_KERNEL(causal_attention) { declare_attention(spec, Mask::kCausal); }
