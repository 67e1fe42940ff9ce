// Test-only kernels: together they exercise every body feature of the EDSL
// end to end (math functions, compare/select, static slices with edge
// masking, squeezed dims, iota, program ids, fori with carried blocks, i32
// scalars and arrays). Built into pallas_test_kernels, not the library.

#include <pallas/EDSL/Spec.h>

#include <limits>

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

// The block prefix: out[i] = x[i] + (sum of every element of the blocks
// before i's 1024-element block), in f32. The running total is handed from
// program to program through a workspace, in the order programs take tickets
// from a global counter (so a program only ever waits for one that has
// started): ticket t waits for `ready[t]`, which ticket t-1 signals after
// writing `carry[t]`. Every counter ends at zero: each wait takes its signal,
// and the last ticket returns the ticket counter to zero.
PALLAS_KERNEL(block_prefix_tickets) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  DimExpr programs = cdiv(n, 1024);
  spec.workspace("carry", f32, programs + 1);
  Semaphores tickets = spec.semaphores("tickets", 1);
  Semaphores ready = spec.semaphores("ready", programs);
  spec.grid({programs});
  spec.block(x, {full}, [](const ProgramIds&) { return at(0); });
  spec.block(out, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([=](Ref x, Ref out, Ref carry) {
    Value count = num_programs(0).cast(i32);
    Value ticket = tickets.add(0, constant(1, i32));
    Value t = ticket.cast(DType::index);
    Value block = x.load_at({t * 1024}, {1024});
    when(ticket > 0, [&] { ready.wait(t); });
    Value before = select(ticket > 0, carry.load_scalar({t}), 0.0);
    out.store_at(block + before, {t * 1024});
    carry.store_at(before + sum(block), {t + 1});
    when(ticket + 1 < count, [&] { ready.signal(t + 1); });
    when(ticket + 1 == count, [&] { tickets.add(0, -count); });
  });
}

// The same prefix with program-scoped semaphores in grid order: program p > 0
// waits on its own counter, which program p - 1 signals with signal_program.
PALLAS_KERNEL(block_prefix_chain) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  DimExpr programs = cdiv(n, 1024);
  spec.workspace("carry", f32, programs + 1);
  Semaphores turn = spec.semaphores("turn", 1, SemaphoreScope::kProgram);
  spec.grid({programs});
  spec.block(x, {Blocked{1024}}, block_i);
  spec.block(out, {Blocked{1024}}, block_i);
  spec.body([=](Ref x, Ref out, Ref carry) {
    Value p = program_id(0);
    Value block = x.load();
    when(p > index(0), [&] { turn.wait(0); });
    Value before = select(p > index(0), carry.load_scalar({p}), 0.0);
    out.store(block + before);
    carry.store_at(before + sum(block), {p + 1});
    when(p + 1 < num_programs(0), [&] { turn.signal_program(p + 1, 0, constant(1, i32)); });
  });
}

// Program p waits for program p + 1: fine where programs run concurrently
// (the GPU, the emulator with enough resident programs); on the host backend,
// which runs programs in grid order, the launch fails with a clear status.
PALLAS_KERNEL(wait_for_next) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  Semaphores flags = spec.semaphores("flags", cdiv(n, 128));
  spec.grid({cdiv(n, 128)});
  spec.block(x, {Blocked{128}}, block_i);
  spec.block(out, {Blocked{128}}, block_i);
  spec.body([=](Ref x, Ref out) {
    Value p = program_id(0);
    when(p > index(0), [&] { flags.signal(p - 1); });
    when(p + 1 < num_programs(0), [&] { flags.wait(p); });
    out.store(x.load() + 1.0);
  });
}

// Row sums over an arbitrary (sequential) grid axis: program (r, j) adds
// column block j of row r into a scratch accumulator that persists across j;
// j == 0 clears it and the last j reduces it into out[r].
PALLAS_KERNEL(row_sums_sequential) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand out = spec.output("out", f32, {rows});
  spec.scratch("acc", f32, {512});
  spec.grid({rows, cdiv(cols, 512)});
  spec.dimension_semantics({parallel, arbitrary});
  spec.block(x, {squeezed, Blocked{512}}, [](const ProgramIds& p) { return at(p[0], p[1]); });
  spec.block(out, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([](Ref x, Ref out, Ref acc) {
    Value j = program_id(1);
    when(j == index(0), [&] { acc.store(broadcast_to(constant(0, f32), {512})); });
    acc.store(acc.load() + x.load());
    when(j + 1 == num_programs(1), [&] { out.store_at(sum(acc.load()), {program_id(0)}); });
  });
}

// The sum of n elements in chunks of 2048: the full chunks with
// Ref::load_inside (no row-end test on the GPU), the last partial one with a
// masked load. Its planted twin promises that every chunk is inside, the
// partial one too: the host still masks it (and gets the sum right), the
// emulator reports the read past the end (features_test.cc).
template <bool kOverpromise>
void chunk_sum(KernelSpec& spec) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {1});
  spec.grid({1});
  spec.block(x, {full}, [](const ProgramIds&) { return at(0); });
  spec.block(out, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([](Ref x, Ref out) {
    Value chunks = (x.extent(0) + index(2047)) / index(2048);
    Value whole = kOverpromise ? chunks : x.extent(0) / index(2048);
    auto add = [](bool inside, Ref& x) {
      return [inside, &x](Value c, std::vector<Value> acc) {
        Value v = inside ? x.load_inside({c * 2048}, {2048}) : x.load_at({c * 2048}, {2048});
        return std::vector<Value>{acc[0] + v};
      };
    };
    std::vector<Value> acc =
        fori(index(0), whole, {broadcast_to(constant(0, f32), {2048})}, add(true, x));
    acc = fori(whole, chunks, acc, add(false, x));
    out.store_at(sum(acc[0]), {index(0)});
  });
}
PALLAS_KERNEL(chunk_sum_inside) { chunk_sum<false>(spec); }
PALLAS_KERNEL(chunk_sum_overpromise) { chunk_sum<true>(spec); }  // planted

// 160 KiB of scratch per program (far above the 48 KiB a CUDA program gets
// without opting in): 20 copies of the program's 2048-element block, copy i
// plus i, then 19 reads each straddling two copies, so threads read what
// others wrote: out[j] = 19 x[1024 + j] + 171 for j < 1024, and
// 19 x[j - 1024] + 190 for the rest.
PALLAS_KERNEL(big_scratch) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  spec.scratch("copies", f32, {20 * 2048});
  spec.grid({cdiv(n, 2048)});
  spec.block(x, {Blocked{2048}}, block_i);
  spec.block(out, {Blocked{2048}}, block_i);
  spec.body([](Ref x, Ref out, Ref copies) {
    Value v = x.load();
    fori(index(0), index(20), {}, [&](Value i, std::vector<Value>) {
      copies.store_at(v + i.cast(i32).cast(f32), {i * 2048});
      return std::vector<Value>{};
    });
    Value total =
        fori(index(0), index(19), {broadcast_to(constant(0, f32), {2048})},
             [&](Value i, std::vector<Value> acc) {
               return std::vector<Value>{acc[0] + copies.load_at({i * 2048 + 1024}, {2048})};
             })[0];
    out.store(total);
  });
}

// Scratch read across threads and a while_loop: the block is doubled until
// its largest magnitude reaches 1 (at most 64 times; a loop carrying the
// block and a count, with a reduction in its condition), written to shared
// memory and read back with its two 256-element halves swapped, so each
// thread reads what another wrote. steps[b] is block b's doubling count.
PALLAS_KERNEL(scratch_and_while) {
  DimExpr n = spec.dim("n"), m = spec.dim("m");
  Operand x = spec.input("x", f32, {n});
  Operand out = spec.output("out", f32, {n});
  Operand steps = spec.output("steps", i32, {m});
  spec.scratch("tmp", f32, {512});
  spec.grid({cdiv(n, 512)});
  spec.block(x, {Blocked{512}}, block_i);
  spec.block(out, {Blocked{512}}, block_i);
  spec.block(steps, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([](Ref x, Ref out, Ref steps, Ref tmp) {
    std::vector<Value> r = while_loop(
        [](std::vector<Value> c) {
          return select(max(abs(c[0])) < 1.0, c[1] < 64, constant(0, DType::i1));
        },
        [](std::vector<Value> c) {
          return std::vector<Value>{c[0] * 2.0, c[1] + 1};
        },
        {x.load(), constant(0, i32)});
    tmp.store(r[0]);
    out.store(tmp.load({256}, {256}), {0});
    out.store(tmp.load({0}, {256}), {256});
    steps.store_at(r[1], {program_id(0)});
  });
}

namespace {
// Softmax over rows of a [rows, cols <= C] array, R rows per program: the
// reductions keep the row axis (one value per row, replicated in every
// thread) and broadcast back over the columns. Also writes each row's max.
// The three block shapes take the GPU's three paths for a row reduction.
template <int64_t R, int64_t C>
void tile_softmax(KernelSpec& spec) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand y = spec.output("y", f32, {rows, cols});
  Operand row_max = spec.output("row_max", f32, {rows});
  spec.grid({cdiv(rows, R)});
  auto tile = [](const ProgramIds& p) { return at(p[0], 0); };
  spec.block(x, {Blocked{R}, Blocked{C}}, tile);
  spec.block(y, {Blocked{R}, Blocked{C}}, tile);
  spec.block(row_max, {Blocked{R}}, block_i);
  spec.body([](Ref x, Ref y, Ref row_max) {
    Value in_row = iota({R, C}, 1) < x.extent(1).cast(i32);
    Value v = select(in_row, x.load(), -std::numeric_limits<double>::infinity());
    Value m = max(v, 1, /*keepdims=*/true);
    Value e = select(in_row, exp(v - m), 0.0);
    y.store(e / sum(e, 1, true));
    row_max.store(max(v, 1));
  });
}
}  // namespace

PALLAS_KERNEL(tile_softmax_16x128) { tile_softmax<16, 128>(spec); }  // 32 runs per row
PALLAS_KERNEL(tile_softmax_64x32) { tile_softmax<64, 32>(spec); }    // 8 runs per row
PALLAS_KERNEL(tile_softmax_2x4096) { tile_softmax<2, 4096>(spec); }  // 1024 runs per row

namespace {
// Reductions over the leading axis, with keepdims and without: a softmax down
// each column of every R x C tile, over the tile's rows inside the array.
template <int64_t R, int64_t C>
void tile_column_softmax(KernelSpec& spec) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand y = spec.output("y", f32, {rows, cols});
  spec.grid({cdiv(rows, R), cdiv(cols, C)});
  auto tile = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(x, {Blocked{R}, Blocked{C}}, tile);
  spec.block(y, {Blocked{R}, Blocked{C}}, tile);
  spec.body([](Ref x, Ref y) {
    Value in_rows = iota({R, C}, 0) + (program_id(0) * R).cast(i32) < x.extent(0).cast(i32);
    Value v = select(in_rows, x.load(), -std::numeric_limits<double>::infinity());
    Value m = max(v, 0, /*keepdims=*/true);  // [1, C]
    Value e = select(in_rows, exp(v - m), 0.0);
    y.store(e / sum(e, 0));  // [C], broadcast over the rows
  });
}
}  // namespace

PALLAS_KERNEL(tile_column_softmax_16x128) { tile_column_softmax<16, 128>(spec); }
PALLAS_KERNEL(tile_column_softmax_8x256) { tile_column_softmax<8, 256>(spec); }

// out = 2 x + j over 32 x 32 tiles, on a (row tiles, column tiles) grid whose
// column axis is arbitrary: each program walks its row of tiles as a TMA
// pipeline (PipelineRules.cpp) with `depth` stage buffers for x and
// `out_buffers` for out (0: the depth), both staged with a 128-byte swizzle.
// Edge tiles rely on TMA's zero fill and clipped stores.
template <int kDepth, int kOutBuffers>
void pipelined_axpb(KernelSpec& spec) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand out = spec.output("out", f32, {rows, cols});
  spec.grid({cdiv(rows, 32), cdiv(cols, 32)});
  spec.dimension_semantics({parallel, arbitrary});
  spec.max_concurrent_steps(kDepth);
  auto map = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(x, {Blocked{32}, Blocked{32}}, map, InShared{.swizzle = 128});
  spec.block(out, {Blocked{32}, Blocked{32}}, map,
             InShared{.swizzle = 128, .buffers = kOutBuffers});
  spec.body([](Ref x, Ref out) { out.store(2.0 * x.load() + program_id(1).cast(f32)); });
}
PALLAS_KERNEL(pipelined_axpb_d1) { pipelined_axpb<1, 0>(spec); }
PALLAS_KERNEL(pipelined_axpb_d2) { pipelined_axpb<2, 0>(spec); }
PALLAS_KERNEL(pipelined_axpb_d3) { pipelined_axpb<3, 1>(spec); }  // out: one buffer
PALLAS_KERNEL(pipelined_axpb_d4) { pipelined_axpb<4, 0>(spec); }

// The sum of x[0, n) (and the sum of i * x[i], which depends on each chunk's
// step) in chunks of 2048 through emit_pipeline with `depth` stage buffers:
// each chunk is 8 TMA boxes of 256 elements; the last chunk reads TMA's zero
// fill past n.
template <int kDepth>
void pipelined_chunk_sum(KernelSpec& spec) {
  DType T = spec.dtype_param("T", {f32, bf16});
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", T, {n});
  Operand out = spec.output("out", f32, {2});
  spec.grid({1});
  spec.block(x, {full}, [](const ProgramIds&) { return at(0); });
  spec.block(out, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([](Ref x, Ref out) {
    Value chunks = (x.extent(0) + index(2047)) / index(2048);
    Value zero = broadcast_to(constant(0, f32), {2048});
    std::vector<Value> acc = emit_pipeline(
        index(0), chunks,
        {PipelineOperand{
            x, {Blocked{2048}}, [](const Value& c) { return at(c); }, InShared{.swizzle = 0}}},
        {zero, zero},
        [](Value c, std::vector<Ref> blocks, std::vector<Value> acc) {
          Value v = blocks[0].load().cast(f32);
          Value i = (iota({2048}, 0) + (c * 2048).cast(i32)).cast(f32);
          return std::vector<Value>{acc[0] + v, acc[1] + i * v};
        },
        kDepth);
    out.store_at(sum(acc[0]), {index(0)});
    out.store_at(sum(acc[1]), {index(1)});
  });
}
PALLAS_KERNEL(pipelined_chunk_sum_d1) { pipelined_chunk_sum<1>(spec); }
PALLAS_KERNEL(pipelined_chunk_sum_d2) { pipelined_chunk_sum<2>(spec); }
PALLAS_KERNEL(pipelined_chunk_sum_d3) { pipelined_chunk_sum<3>(spec); }
PALLAS_KERNEL(pipelined_chunk_sum_d4) { pipelined_chunk_sum<4>(spec); }
PALLAS_KERNEL(pipelined_chunk_sum_d6) { pipelined_chunk_sum<6>(spec); }

// y's even chunks of 512 copied from x's, the odd ones never read: a step
// whose body reads its stage only under a `when` that it skips. Before the
// buffer is refilled the skipped step's copy must still have landed and
// completed its barrier's phase (PipelineRules.cpp: a stage that a step may
// not read waits for its phase at the step's end), or the refill's copy and
// arrival race it. `_ws`: the same over a grid axis whose pipeline is
// warp-specialized (a producer warpgroup refills the stage), 4 buffers;
// `_d2`: emit_pipeline with 2.
Value even(const Value& step) { return step - (step / index(2)) * index(2) == index(0); }
PALLAS_KERNEL(pipelined_even_chunks_d2) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand y = spec.output("y", f32, {n});
  spec.grid({1});
  spec.block(x, {full}, [](const ProgramIds&) { return at(0); });
  spec.block(y, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([](Ref x, Ref y) {
    Value chunks = (x.extent(0) + index(511)) / index(512);
    emit_pipeline(
        index(0), chunks,
        {PipelineOperand{
            x, {Blocked{512}}, [](const Value& c) { return at(c); }, InShared{.swizzle = 0}}},
        {}, [&](Value c, std::vector<Ref> blocks, std::vector<Value> none) {
          when(even(c), [&] { y.store_at(blocks[0].load(), {c * index(512)}); });
          return none;
        });
  });
}
PALLAS_KERNEL(pipelined_even_chunks_ws) {
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", f32, {n});
  Operand y = spec.output("y", f32, {n});
  spec.grid({1, cdiv(n, 512)});
  spec.dimension_semantics({parallel, arbitrary});
  spec.max_concurrent_steps(4);
  spec.warp_specialize({.producer_registers = 40, .consumer_registers = 232});
  spec.block(
      x, {Blocked{512}}, [](const ProgramIds& p) { return at(p[1]); }, InShared{.swizzle = 0});
  spec.block(y, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([](Ref x, Ref y) {
    when(even(program_id(1)), [&] { y.store_at(x.load(), {program_id(1) * index(512)}); });
  });
}

// out[r] = sum(x[r, :] * y[r, :]) in one program that runs an emit_pipeline
// per row (so its barriers are invalidated and initialised again for each
// row), x with three stage buffers and y with the pipeline's two, over
// chunks of 512 (two TMA boxes each).
PALLAS_KERNEL(pipelined_row_dots) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand y = spec.input("y", f32, {rows, cols});
  Operand out = spec.output("out", f32, {rows});
  spec.grid({1});
  auto whole = [](const ProgramIds&) { return at(0, 0); };
  spec.block(x, {full, full}, whole);
  spec.block(y, {full, full}, whole);
  spec.block(out, {full}, [](const ProgramIds&) { return at(0); });
  spec.body([](Ref x, Ref y, Ref out) {
    Value chunks = (x.extent(1) + index(511)) / index(512);
    fori(index(0), x.extent(0), {}, [&](Value r, std::vector<Value>) {
      auto chunk = [r](const Value& c) { return at(r, c); };
      std::vector<Value> acc = emit_pipeline(
          index(0), chunks,
          {PipelineOperand{
               x, {squeezed, Blocked{512}}, chunk, InShared{.swizzle = 0, .buffers = 3}},
           PipelineOperand{y, {squeezed, Blocked{512}}, chunk, InShared{.swizzle = 0}}},
          {broadcast_to(constant(0, f32), {512})},
          [](Value, std::vector<Ref> b, std::vector<Value> acc) {
            return std::vector<Value>{acc[0] + b[0].load() * b[1].load()};
          });
      out.store_at(sum(acc[0]), {r});
      return std::vector<Value>{};
    });
  });
}

// Thread-block clusters along grid axis 0 (KernelSpec::cluster_first_axis): the grid is
// (4, cdiv(rows, 4)), program (s, i) owns row 4 i + s. Each stores its row to scratch `part`,
// the cluster meets, each adds the part of the program of the next rank (its peer's scratch,
// distributed shared memory) to its own row, and the cluster meets again before exiting.
// In a cluster of one (the host, sm_80, too few resident programs) the next rank is the
// program itself: out = 2 x. In clusters of 4: out[4 i + s] = x[4 i + s] + x[4 i + (s + 1) % 4].
// Planted twins each misplace one cluster barrier:
//   kUnordered       meets before storing its part instead of after: a peer's read races
//                    the store (with no barrier at all, its mapa would come before the
//                    cluster is known to have started, which the emulator reports too),
//   kNoLastBarrier   exits while a peer may still read its part.
enum class ClusterPlant { kNone, kUnordered, kNoLastBarrier };
template <ClusterPlant kPlant>
void cluster_ring_sum(KernelSpec& spec) {
  DimExpr rows = spec.dim("rows");
  Operand x = spec.input("x", f32, {rows, DimExpr(256)});
  Operand out = spec.output("out", f32, {rows, DimExpr(256)});
  spec.scratch("part", f32, {256});
  spec.grid({DimExpr(4), cdiv(rows, 4)});
  spec.cluster_first_axis(4);
  auto row = [](const ProgramIds& p) { return at(p[1] * index(4) + p[0], 0); };
  spec.block(x, {squeezed, Blocked{256}}, row);
  spec.block(out, {squeezed, Blocked{256}}, row);
  spec.body([](Ref x, Ref out, Ref part) {
    Value mine = x.load();
    if (kPlant == ClusterPlant::kUnordered) cluster_barrier();
    part.store(mine);
    if (kPlant != ClusterPlant::kUnordered) cluster_barrier();
    Value next = cluster_rank() + index(1);
    next = next - next / cluster_size() * cluster_size();  // (rank + 1) mod size
    out.store(mine + part.in_cluster_program(next).load());
    if (kPlant != ClusterPlant::kNoLastBarrier) cluster_barrier();
  });
}
PALLAS_KERNEL(cluster_ring_sum) { cluster_ring_sum<ClusterPlant::kNone>(spec); }
PALLAS_KERNEL(cluster_ring_sum_unordered) {  // planted
  cluster_ring_sum<ClusterPlant::kUnordered>(spec);
}
PALLAS_KERNEL(cluster_ring_sum_nolastbarrier) {  // planted
  cluster_ring_sum<ClusterPlant::kNoLastBarrier>(spec);
}

// Hand-written double buffering with explicit copies and barriers (Spec.h's
// worked example): program j owns the 32-column strip at 32j and walks its
// [32, 32] row blocks k = 0, 1, ...; block k is copied into buffer k % 2 on
// ready[k % 2], block k + 1 into the other one while block k is read, and
// block k + 2 is prefetched into L2. Each block goes out twice: 2x + 1
// through buffer `y` to `out`, and x itself added into `total`'s strip
// (copy_smem_to_gmem with add): total[r, c] += sum over k of x[32k + r, c].
// `ready` barriers expect two arrivals a phase: the copy, and the program's
// barrier_arrive right after issuing it. Planted twins each drop one step:
//   kNoWait       reads a buffer without waiting for its copy,
//   kNoStoreWait  rewrites `y` before the copy out of it has read it,
//   kNoArrive     never makes the second arrival (the wait deadlocks).
enum class ExplicitPlant { kNone, kNoWait, kNoStoreWait, kNoArrive };
template <ExplicitPlant kPlant>
void explicit_row_blocks(KernelSpec& spec) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand out = spec.output("out", f32, {rows, cols});
  Operand total = spec.output("total", f32, {32, cols});
  spec.grid({cdiv(cols, 32)});
  auto whole = [](const ProgramIds&) { return at(0, 0); };
  spec.block(x, {full, full}, whole);
  spec.block(out, {full, full}, whole);
  spec.block(total, {full, full}, whole);
  spec.body([](Ref x, Ref out, Ref total) {
    Value col = program_id(0) * 32;
    Value blocks = (x.extent(0) + index(31)) / index(32);
    run_scoped({{"even", f32, {32, 32}}, {"odd", f32, {32, 32}}, {"y", f32, {32, 32}}},
               {{"ready", 2, 2}}, [&](std::vector<Ref> buf, std::vector<Barriers> bars) {
                 const Barriers& ready = bars[0];
                 auto request = [&](const Value& k, int b) {
                   copy_gmem_to_smem(x, at(k * 32, col), buf[b], ready[b]);
                   if (kPlant != ExplicitPlant::kNoArrive) barrier_arrive(ready[b]);
                 };
                 request(index(0), 0);
                 fori(index(0), blocks, {}, [&](Value k, std::vector<Value>) {
                   Value odd = k - (k / index(2)) * index(2);
                   for (int b = 0; b < 2; ++b)
                     when(odd == index(b), [&] {
                       // The copies out of the last block have read `y` and the other buffer.
                       if (kPlant != ExplicitPlant::kNoStoreWait) wait_smem_to_gmem(0, true);
                       when(k + index(1) < blocks, [&] { request(k + index(1), 1 - b); });
                       when(k + index(2) < blocks,
                            [&] { async_prefetch(x, at((k + index(2)) * 32, col)); });
                       if (kPlant != ExplicitPlant::kNoWait) barrier_wait(ready[b]);
                       Value v = buf[b].load();
                       buf[2].store(2.0 * v + 1.0);
                       commit_smem();  // y's writes for the copies; buf[b] released by every thread
                       copy_smem_to_gmem(buf[2], out, at(k * 32, col));
                       copy_smem_to_gmem(buf[b], total, at(index(0), col), {.add = true});
                     });
                   return std::vector<Value>{};
                 });
               });
  });
}
PALLAS_KERNEL(explicit_row_blocks) { explicit_row_blocks<ExplicitPlant::kNone>(spec); }
PALLAS_KERNEL(explicit_row_blocks_nowait) {  // planted
  explicit_row_blocks<ExplicitPlant::kNoWait>(spec);
}
PALLAS_KERNEL(explicit_row_blocks_nostorewait) {  // planted
  explicit_row_blocks<ExplicitPlant::kNoStoreWait>(spec);
}
PALLAS_KERNEL(explicit_row_blocks_noarrive) {  // planted
  explicit_row_blocks<ExplicitPlant::kNoArrive>(spec);
}

// out[r, :] = 2 x[r, :] + c in chunks c of 512 through emit_pipeline with
// both sides staged (Pallas' in_specs and out_specs): step c's output block
// is written to its stage buffer and copied out by TMA while the next steps
// run; each chunk is two TMA boxes of 256, the last one clipped at the row's end.
PALLAS_KERNEL(pipelined_row_scale) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand out = spec.output("out", f32, {rows, cols});
  spec.grid({rows});
  auto whole = [](const ProgramIds&) { return at(0, 0); };
  spec.block(x, {full, full}, whole);
  spec.block(out, {full, full}, whole);
  spec.body([](Ref x, Ref out) {
    Value r = program_id(0);
    auto chunk = [r](const Value& c) { return at(r, c); };
    emit_pipeline(index(0), (x.extent(1) + index(511)) / index(512),
                  {PipelineOperand{x, {squeezed, Blocked{512}}, chunk, InShared{.swizzle = 0}},
                   PipelineOperand{out, {squeezed, Blocked{512}}, chunk, InShared{.swizzle = 0}}},
                  {}, [](Value c, std::vector<Ref> b, std::vector<Value> carry) {
                    b[1].store(2.0 * b[0].load() + c.cast(f32));
                    return carry;
                  });
  });
}

// Pallas' pipelined wgmma (the form kernel_specs/matmul.cc uses on sm_90a):
// d = a @ b^T, bf16 in, f32 out, 64 x 64 tiles, K in steps of 64 staged in
// three buffers. Step k's multiply stays in flight while step k + 1 waits
// for its tiles (wgmma_wait(1)), so step k's buffers are released one step
// late (delay_release(1)). Planted twin: `_nodelay` refills step k's buffers
// at the end of step k, while its multiply may still read them. `_ws` is
// warp-specialized: a producer warpgroup issues the copies, waiting for the
// consumer's releases on mbarriers. `_ws2` has two consumer warpgroups
// (256 threads, CUTLASS's cooperative schedule): a 128 x 64 tile, each
// warpgroup multiplying its 64 rows. The direct instance (strides TMA cannot
// copy) multiplies loaded blocks with dot.
template <bool kDelay, bool kWarpSpecialized = false, int kConsumers = 1>
void pipelined_wgmma(KernelSpec& spec) {
  constexpr int64_t kTileM = 64 * kConsumers;
  DimExpr m = spec.dim("m"), n = spec.dim("n"), k = spec.dim("k");
  Operand a = spec.input("a", bf16, {m, k});
  Operand b = spec.input("b", bf16, {n, k});
  Operand d = spec.output("d", f32, {m, n});
  spec.threads(128 * kConsumers);
  spec.accumulator("acc", {kTileM, 64});
  spec.grid({cdiv(m, kTileM), cdiv(n, 64), cdiv(k, 64)});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.max_concurrent_steps(3);
  if (kDelay) spec.delay_release(1);
  if (kWarpSpecialized) spec.warp_specialize({.producer_registers = 40, .consumer_registers = 232});
  const InShared swizzled{.swizzle = 128};
  spec.block(
      a, {Blocked{kTileM}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[2]); },
      swizzled);
  spec.block(
      b, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[1], p[2]); }, swizzled);
  spec.block(d, {Blocked{kTileM}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[1]); });
  const bool staged = !spec.direct();
  spec.body([staged](Ref a, Ref b, Ref d, Ref acc) {
    when(program_id(2) == index(0), [&] {
      acc.store(broadcast_to(constant(0, f32), {kTileM, 64}));
    });
    if (staged) {
      // The [64 K, 64 N] view of b's [N, K] tile (Pallas' transpose_ref):
      // a @ view = a @ b^T, read in place K-major. The _ws forms say the
      // same with {.transpose_b}.
      if (kWarpSpecialized)
        wgmma(acc, a, b, {.transpose_b = true});
      else
        wgmma(acc, a, b.transposed());
      wgmma_wait(1);
    } else {
      acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_b = true}));
    }
    when(program_id(2) == num_programs(2) - index(1), [&] { d.store(acc.load()); });
  });
}
PALLAS_KERNEL(pipelined_wgmma) { pipelined_wgmma<true>(spec); }
PALLAS_KERNEL(pipelined_wgmma_nodelay) { pipelined_wgmma<false>(spec); }  // planted
PALLAS_KERNEL(pipelined_wgmma_ws) { pipelined_wgmma<true, true>(spec); }
PALLAS_KERNEL(pipelined_wgmma_ws_nodelay) { pipelined_wgmma<false, true>(spec); }  // planted
PALLAS_KERNEL(pipelined_wgmma_ws2) { pipelined_wgmma<true, true, 2>(spec); }

// A persistent grid (spec.persistent) over the warp-specialized pipeline of
// _ws2: d += a @ b^T in place (d is also the input c, so a tile done twice
// or never shows), each program walking tiles in bands of 2 tile rows with
// one pipeline across them: the producer copies the next tile's first steps
// while the consumers finish this one. The body never zeroes the
// accumulator: it is zero when each tile starts (spec.accumulator).
//
// persistent_wgmma_cluster runs it in clusters of 2 (where the tile rows are
// even): the CTAs of a cluster take tiles of rows 2 r and 2 r + 1 of a
// column, whose b block is the same, and load it once, multicast, each CTA
// one of its two copies (tiling [32, 64]).
void persistent_wgmma(KernelSpec& spec, int cluster, bool stream_k = false) {
  constexpr int64_t kTileM = 128, kTileN = 64;
  DimExpr m = spec.dim("m"), n = spec.dim("n"), k = spec.dim("k");
  Operand a = spec.input("a", bf16, {m, k});
  Operand b = spec.input("b", bf16, {n, k});
  Operand c = spec.input("c", f32, {m, n});
  Operand d = spec.output("d", f32, {m, n});
  spec.alias(c, d);
  Semaphores met;  // stream-K (persistent_wgmma_stream_k, below): two slots per program
  if (stream_k) {
    spec.workspace("partials", f32, {KernelSpec::persistent_programs() * 2 * kTileM, kTileN});
    met = spec.semaphores("met", KernelSpec::persistent_programs());
  }
  spec.threads(256);
  spec.accumulator("acc", {kTileM, kTileN});
  spec.grid({cdiv(m, kTileM), cdiv(n, kTileN), cdiv(k, 64)});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.persistent({.group_rows = 2,
                   .cluster = cluster,
                   .stream_k = stream_k,
                   .stream_k_parts = stream_k ? 3 : 2});
  spec.max_concurrent_steps(3);
  spec.delay_release(1);
  spec.warp_specialize({.producer_registers = 40, .consumer_registers = 232});
  const InShared swizzled{.swizzle = 128};
  auto tile = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(
      a, {Blocked{kTileM}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[2]); },
      swizzled);
  spec.block(
      b, {Blocked{kTileN}, Blocked{64}}, [](const ProgramIds& p) { return at(p[1], p[2]); },
      cluster > 1 ? InShared{.swizzle = 128, .tiling = {kTileN / 2, 64}} : swizzled);
  spec.block(c, {Blocked{kTileM}, Blocked{kTileN}}, tile);
  spec.block(d, {Blocked{kTileM}, Blocked{kTileN}}, tile);
  const bool staged = !spec.direct();
  auto multiply = [staged](Ref& a, Ref& b, Ref& acc) {
    if (staged) {
      wgmma(acc, a, b, {.transpose_b = true});
      wgmma_wait(1);
    } else {
      acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_b = true}));
    }
  };
  if (!stream_k) {
    spec.body([multiply](Ref a, Ref b, Ref c, Ref d, Ref acc) {
      multiply(a, b, acc);
      when(program_id(2) == num_programs(2) - index(1), [&] { d.store(c.load() + acc.load()); });
    });
    return;
  }
  // Stream-K: a cut tile's parts meet (persistent_wgmma_stream_k's comment).
  spec.body([multiply, met](Ref a, Ref b, Ref c, Ref d, Ref partials, Ref acc) {
    multiply(a, b, acc);
    const TileRun run = tile_run();
    // Part p's slot: its run's (split + p) end, 2 (split + p) + 1 for part 0 (the run's last
    // tile), 2 (split + p) for a later part (the run's first).
    auto slot = [&](const Value& part) {
      return (index(2) * (run.split + part) + (part == index(0)).cast(DType::index)) *
             index(kTileM);
    };
    when(run.last_step, [&] {
      when(run.parts == index(1), [&] { d.store(c.load() + acc.load()); });
      when(run.parts != index(1), [&] {
        partials.store_at(acc.load(), {slot(run.part), index(0)});
        const Value last = run.parts.cast(i32) - constant(1, i32);
        when(met.add(run.split, constant(1, i32)) == last, [&] {
          const Value sum =
              fori(index(0), run.parts, {broadcast_to(constant(-0.0, f32), {kTileM, kTileN})},
                   [&](Value part, std::vector<Value> s) {
                     s[0] = s[0] + partials.load_at({slot(part), index(0)}, {kTileM, kTileN});
                     return s;
                   })[0];
          d.store(c.load() + sum);
          met.add(run.split, constant(0, i32) - run.parts.cast(i32));
        });
      });
    });
  });
}
PALLAS_KERNEL(persistent_wgmma) { persistent_wgmma(spec, 1); }
PALLAS_KERNEL(persistent_wgmma_cluster) { persistent_wgmma(spec, 2); }

// The stream-K walk itself (Persistent::stream_k in up to three parts a tile,
// tile rows in bands of 1):
// each step writes what tile_run() says of it into out[row, col, k]:
// last_step + 2 (parts - 1) + 8 part + 32 (split + 1) where the tile is in
// parts (features_test.cc computes the same from Spec.h's description of the
// walk).
PALLAS_KERNEL(stream_k_walk) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols"), steps = spec.dim("steps");
  Operand out = spec.output("out", i32, {rows, cols, steps});
  spec.grid({rows, cols, steps});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.persistent({.group_rows = 1, .stream_k = true, .stream_k_parts = 3});
  spec.block(out, {full, full, full}, [](const ProgramIds&) { return at(0, 0, 0); });
  spec.body([](Ref out) {
    const TileRun run = tile_run();
    const Value parts = run.parts.cast(i32) - constant(1, i32);  // 0: whole
    const Value in_parts = (run.parts != index(1)).cast(i32);
    const Value what = run.last_step.cast(i32) + parts * 2 + run.part.cast(i32) * 8 +
                       (run.split.cast(i32) + 1) * 32 * in_parts;
    out.store_at(what, {program_id(0), program_id(1), program_id(2)});
  });
}

// persistent_wgmma in a stream-K walk (Persistent::stream_k, up to three
// parts a tile): the last tiles' K steps are cut evenly between the
// programs, so a tile may be run in two or three parts. Each part ends by
// storing its partial accumulator in its slot (two per program: one for each
// end of its run) and meeting the others at the tile's first cut's
// semaphore; the last to arrive sums every part's partial in part order (the
// same bits whichever came last), finishes the tile, and puts the semaphore
// back to zero. A part summed twice or never shows in d, as does a tile done
// twice.
PALLAS_KERNEL(persistent_wgmma_stream_k) { persistent_wgmma(spec, 1, true); }

// Two products chained through registers, wgmma's `a` a value (attention's
// P @ V, a fused MLP's down-projection): for each chunk c of 64 hidden units,
//   p = bf16(silu(x @ w1[c]^T))   computed in the accumulator layout,
//   d += p @ w2[c]                wgmma reading p from the registers,
// x [m, 64] bf16, w1 [h, 64] (a row per hidden unit), w2 [h, n] read in
// place N-major, d [m, n] f32; grid (m / 64, n / 64, h / 64), the hidden
// chunks a pipelined arbitrary axis. Hidden units past h read zeros (TMA's
// fill), so p and their w2 rows are 0. The direct instance multiplies
// loaded blocks with dot.
PALLAS_KERNEL(wgmma_register_a) {
  DimExpr m = spec.dim("m"), h = spec.dim("h"), n = spec.dim("n");
  Operand x = spec.input("x", bf16, {m, 64});
  Operand w1 = spec.input("w1", bf16, {h, 64});
  Operand w2 = spec.input("w2", bf16, {h, n});
  Operand d = spec.output("d", f32, {m, n});
  spec.accumulator("s", {64, 64});
  spec.accumulator("acc", {64, 64});
  spec.grid({cdiv(m, 64), cdiv(n, 64), cdiv(h, 64)});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.block(
      x, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], 0); },
      InShared{.swizzle = 128});
  spec.block(
      w1, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[2], 0); },
      InShared{.swizzle = 128});
  spec.block(
      w2, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[2], p[1]); },
      InShared{.swizzle = 128, .tiling = {64, 64}});
  spec.block(d, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[1]); });
  const bool staged = !spec.direct();
  spec.body([staged](Ref x, Ref w1, Ref w2, Ref d, Ref s, Ref acc) {
    const Value zeros = broadcast_to(constant(0, f32), {64, 64});
    when(program_id(2) == index(0), [&] { acc.store(zeros); });
    auto silu = [](const Value& v) { return v / (1.0 + exp(-v)); };
    if (staged) {
      s.store(zeros);
      wgmma(s, x, w1, {.transpose_b = true});
      Value p = silu(s.load()).cast(bf16);  // the load waits for the multiply
      wgmma(acc, p, w2);
      wgmma_wait(0);
    } else {
      Value p = silu(dot(x.load(), w1.load(), {.transpose_b = true})).cast(bf16);
      acc.store(dot(p, w2.load(), acc.load()));
    }
    when(program_id(2) == num_programs(2) - index(1), [&] { d.store(acc.load()); });
  });
}

// b as [K, N], read in place by wgmma N-major (the form matmul uses for a
// [K, N] B) from stages with three tilings (Pallas' TilingTransform):
// d = a @ b, bf16 in, f32 out, 64 x 128 tiles, K in steps of 64 through a
// pipelined arbitrary axis, multiplied with `dot`. b's [64, 128] block is
// tiled {64, 64} with swizzle 128 (one tile per 64 columns: the
// descriptor's LBO steps tiles), {8, 64} with swizzle 128 (tiles of 8 rows
// of K: its SBO steps a whole row of tiles) or {64, 32} with swizzle 64.
template <int kSwizzle, int64_t kTileK>
void dot_n_major(KernelSpec& spec) {
  DimExpr m = spec.dim("m"), n = spec.dim("n"), k = spec.dim("k");
  Operand a = spec.input("a", bf16, {m, k});
  Operand b = spec.input("b", bf16, {k, n});
  Operand d = spec.output("d", f32, {m, n});
  spec.accumulator("acc", {64, 128});
  spec.grid({cdiv(m, 64), cdiv(n, 128), cdiv(k, 64)});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.block(
      a, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[2]); },
      InShared{.swizzle = 128});
  spec.block(
      b, {Blocked{64}, Blocked{128}}, [](const ProgramIds& p) { return at(p[2], p[1]); },
      InShared{.swizzle = kSwizzle, .tiling = {kTileK, kSwizzle / 2}});
  spec.block(d, {Blocked{64}, Blocked{128}}, [](const ProgramIds& p) { return at(p[0], p[1]); });
  spec.body([](Ref a, Ref b, Ref d, Ref acc) {
    when(program_id(2) == index(0), [&] { acc.store(broadcast_to(constant(0, f32), {64, 128})); });
    acc.store(dot(a.load(), b.load(), acc.load()));
    when(program_id(2) == num_programs(2) - index(1), [&] { d.store(acc.load()); });
  });
}
// Pallas' TransposeTransform on refs (Ref::transposed): every output is
// x^T, 32 x 32 f32 tiles. y1 is stored through a transposed view of its
// block; y2 is loaded through a view of x's, its top half as a static
// slice, its bottom half with load_at / store_at at run-time offsets.
PALLAS_KERNEL(transposed_views) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", f32, {rows, cols});
  Operand y1 = spec.output("y1", f32, {cols, rows});
  Operand y2 = spec.output("y2", f32, {cols, rows});
  spec.grid({cdiv(rows, 32), cdiv(cols, 32)});
  spec.block(x, {Blocked{32}, Blocked{32}}, [](const ProgramIds& p) { return at(p[0], p[1]); });
  for (Operand y : {y1, y2})
    spec.block(y, {Blocked{32}, Blocked{32}}, [](const ProgramIds& p) { return at(p[1], p[0]); });
  spec.body([](Ref x, Ref y1, Ref y2) {
    y1.transposed().store(x.load());
    Ref xt = x.transposed();
    y2.store(xt.load({0, 0}, {16, 32}), {0, 0});
    y2.store_at(xt.load_at({index(16), index(0)}, {16, 32}), {index(16), index(0)});
  });
}

PALLAS_KERNEL(dot_n_major_t64) { dot_n_major<128, 64>(spec); }
PALLAS_KERNEL(dot_n_major_t8) { dot_n_major<128, 8>(spec); }
PALLAS_KERNEL(dot_n_major_s64) { dot_n_major<64, 64>(spec); }

// a as [K, M], read in place by wgmma M-major through a transposed view
// (imm-trans-a; the form matmul's swapped split-K uses for a [K, N] B, whose
// tiles are wgmma's operand a there): d = a^T @ b^T, a [K, M] and b [N, K]
// bf16, f32 out, 128 x 64 tiles over two consumer warpgroups (warpgroup w
// reads a's columns 64 w.., the second tile of 64 M columns: MatmulRules'
// fromRow), K in steps of 64 through a warp-specialized pipeline. a's [64,
// 128] block is tiled {64, 64} or {8, 64} with swizzle 128. The direct twin
// multiplies the loaded blocks with dot's transpose_a; the sm_80 form reads
// a's fragments with ldmatrix.trans.
template <int64_t kTileK>
void wgmma_m_major_a(KernelSpec& spec) {
  DimExpr m = spec.dim("m"), n = spec.dim("n"), k = spec.dim("k");
  Operand a = spec.input("a", bf16, {k, m});
  Operand b = spec.input("b", bf16, {n, k});
  Operand d = spec.output("d", f32, {m, n});
  spec.threads(256);
  spec.accumulator("acc", {128, 64});
  spec.grid({cdiv(m, 128), cdiv(n, 64), cdiv(k, 64)});
  spec.dimension_semantics({parallel, parallel, arbitrary});
  spec.max_concurrent_steps(3);
  spec.delay_release(1);
  spec.warp_specialize({.producer_registers = 40, .consumer_registers = 232});
  spec.block(
      a, {Blocked{64}, Blocked{128}}, [](const ProgramIds& p) { return at(p[2], p[0]); },
      InShared{.swizzle = 128, .tiling = {kTileK, 64}});
  spec.block(
      b, {Blocked{64}, Blocked{64}}, [](const ProgramIds& p) { return at(p[1], p[2]); },
      InShared{.swizzle = 128});
  spec.block(d, {Blocked{128}, Blocked{64}}, [](const ProgramIds& p) { return at(p[0], p[1]); });
  const bool staged = !spec.direct();
  spec.body([staged](Ref a, Ref b, Ref d, Ref acc) {
    when(program_id(2) == index(0), [&] { acc.store(broadcast_to(constant(0, f32), {128, 64})); });
    if (staged) {
      wgmma(acc, a.transposed(), b, {.transpose_b = true});  // [M, K] view of a's [K, M] block
      wgmma_wait(1);
    } else {
      acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_a = true, .transpose_b = true}));
    }
    when(program_id(2) == num_programs(2) - index(1), [&] { d.store(acc.load()); });
  });
}
PALLAS_KERNEL(wgmma_m_major_a_t64) { wgmma_m_major_a<64>(spec); }
PALLAS_KERNEL(wgmma_m_major_a_t8) { wgmma_m_major_a<8>(spec); }
