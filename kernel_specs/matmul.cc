// The matrix products: f16 or bf16 inputs summed in f32. The grid is Pallas'
// matmul grid (i, j, k), one program per tile of D, its K axis a sequential
// (arbitrary) loop pipelined by TMA, the sum kept in registers in an
// accumulator (Pallas' ACC):
//
//   acc  = 0                              at k == 0
//   acc += A[i, k] @ B[k, j]              one warpgroup MMA per step
//   D[i, j] = epilogue(acc)               at the last k, cast to D's dtype
//
// The ops, one kernel each (the epilogue runs on the accumulator's registers:
// no extra pass over D):
//
//   matmul(a, b, d)                 D = A @ B                    B is [K, N]
//   matmul_bt(a, b, d)              D = A @ B^T                  B is [N, K]
//   gemm(a, b, c, d, alpha, beta)   D = alpha A @ B + beta C     B is [K, N]
//   gemm_bt(...)                    D = alpha A @ B^T + beta C   B is [N, K]
//   linear_bias(x, w, bias, y)      Y = X @ W^T + bias           W is [N, K]
//   linear_bias_gelu(...)           Y = gelu(X @ W^T + bias)     (tanh form)
//   linear_bias_silu(...)           Y = silu(X @ W^T + bias)
//   linear_residual(x, w, r, y)     Y = X @ W^T + R
//   batched_matmul(a, b, d)         D[s] = A[s] @ B[s]           [batch, ., .] each
//   batched_matmul_bt(a, b, d)      D[s] = A[s] @ B[s]^T
//
// A batched product adds a leading batch axis to the grid, (s, i, j, k),
// and a squeezed leading dim to every block; each matrix has its own batch
// stride (any multiple of 16 bytes keeps the TMA path).
//
// `linear_*` take the weight as a linear layer stores it, [N, K], and keep
// the activations' dtype; bias is one value per column of Y. As in BLAS, gemm
// does not read C when beta is 0 (C may hold NaNs then).
//
// On sm_90a both tiles are staged by TMA in 128-byte-swizzled shared
// memory, which wgmma reads in place: A and a [N, K] B K-major (rows of 64
// elements of K: one swizzle span), a [K, N] B N-major from a stage tiled
// [64, 64] (Pallas' TilingTransform: one swizzle span of N per tile).
// Edge tiles need no masks on that path: TMA reads zero outside the
// arrays, so a partial K block adds nothing. Arrays TMA cannot copy run the
// `_direct` instance (blocks loaded into registers, masked, 64 x 64 tiles
// stored into wgmma's layout by the threads). sm_80 stages with cp.async
// and multiplies with ldmatrix (.trans for a [K, N] B) + mma.sync m16n8k16.

#include <pallas/EDSL/Spec.h>

#include "activations.h"

using namespace pallas::edsl;

namespace {

constexpr int64_t kTileK = 64;

/// What the last K step does with the accumulator before D is stored.
enum class Epilogue {
  kNone,        // D = acc
  kAlphaBetaC,  // D = alpha acc + beta C (C not read when beta == 0)
  kBias,        // D = acc + bias[col]
  kBiasGelu,    // D = gelu(acc + bias[col])
  kBiasSilu,    // D = silu(acc + bias[col])
  kResidual,    // D = acc + R
};

/// The epilogue's extra operand: none, an [M, N] array (C, R) or a bias row.
enum class Extra { kNone, kMatrix, kBiasRow };

Extra extra_operand(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return Extra::kNone;
    case Epilogue::kAlphaBetaC:
    case Epilogue::kResidual:
      return Extra::kMatrix;
    default:
      return Extra::kBiasRow;
  }
}

struct Names {
  const char* a;
  const char* b;
  const char* extra;
  const char* d;
};

/// Which product: B's orientation and whether every operand has a leading
/// batch dim (its own stride; one product per batch entry).
struct Form {
  bool b_transposed;
  bool batched = false;
};

void declare_product(KernelSpec& spec, Form form, Epilogue epilogue,
                     std::vector<std::vector<DType>> dtypes, Names names) {
  std::vector<DType> t = spec.dtype_params({"T", "Out"}, std::move(dtypes));
  const DType in = t[0], out = t[1];
  const bool b_transposed = form.b_transposed;
  // The accumulator's registers decide the tile (no spills on any target;
  // the instance also serves sm_80, whose mma.sync form holds the same
  // accumulator plus a and b fragments):
  //  - 128 x 128 (128 registers a thread) where wgmma reads both tiles in
  //    place and the warp-specialized consumer has 232 registers;
  //  - 128 x 64 there when the epilogue also holds an [M, N] tile of C or R
  //    in registers, or the product is batched (its sm_80 form spills at
  //    128 x 128);
  //  - 64 x 64 where the threads first store the operands into wgmma's
  //    layout (the direct twin).
  const bool in_place = !spec.direct();
  const bool wide = in_place && extra_operand(epilogue) != Extra::kMatrix && !form.batched;
  const int64_t kTileM = in_place ? 128 : 64, kTileN = wide ? 128 : 64;
  DimExpr m = spec.dim("m"), n = spec.dim("n"), k = spec.dim("k");
  // Batched: a leading dim on every matrix and on the grid, (batch, i, j, k);
  // blocks squeeze it. `mat` prefixes it to a shape, `blk` a squeezed dim to
  // a block, `idx` the program's batch entry to an index map's result.
  std::vector<DimExpr> batch;
  if (form.batched) batch.push_back(spec.dim("batch"));
  const int o = form.batched ? 1 : 0;  // grid axes: [batch,] i, j, k
  auto mat = [&](std::vector<DimExpr> dims) {
    dims.insert(dims.begin(), batch.begin(), batch.end());
    return dims;
  };
  auto blk = [&](std::vector<BlockDim> dims) {
    if (form.batched) dims.insert(dims.begin(), BlockDim(squeezed));
    return dims;
  };
  auto tile = [o](int row_axis, int col_axis) {
    return [=](const ProgramIds& p) {
      return o ? at(p[0], p[o + row_axis], p[o + col_axis]) : at(p[row_axis], p[col_axis]);
    };
  };
  Operand a = spec.input(names.a, in, mat({m, k}));
  Operand b = spec.input(names.b, in, mat(b_transposed ? std::vector{n, k} : std::vector{k, n}));
  const Extra extra = extra_operand(epilogue);
  Operand e;
  if (extra == Extra::kMatrix) e = spec.input(names.extra, out, mat({m, n}));
  if (extra == Extra::kBiasRow) e = spec.input(names.extra, out, {n});
  Operand d = spec.output(names.d, out, mat({m, n}));
  Operand acc = spec.accumulator("acc", {kTileM, kTileN});
  (void)acc;
  Scalar alpha, beta;
  if (epilogue == Epilogue::kAlphaBetaC) {
    alpha = spec.scalar("alpha", f32);
    beta = spec.scalar("beta", f32);
  }
  std::vector<DimExpr> grid = mat({cdiv(m, kTileM), cdiv(n, kTileN), cdiv(k, kTileK)});
  std::vector<Semantics> semantics(grid.size(), parallel);
  semantics.back() = arbitrary;
  spec.grid(std::move(grid));
  spec.dimension_semantics(std::move(semantics));
  spec.max_registers(255);  // instances without warp specialization may take every register
  if (in_place) {
    // Pallas' pipelined wgmma: step k's multiply stays in flight while step
    // k + 1 waits for its tiles (wgmma_wait(1)), so step k's stage buffers
    // are released one step later (delay_release) and refilled with step
    // k + 3 - 1: three buffers keep two steps' copies ahead.
    spec.max_concurrent_steps(3);
    spec.delay_release(1);
    spec.warp_specialize({.producer_registers = 40, .consumer_registers = 232});
  }
  // Grid axes, after the batch: 0 = i (rows of D), 1 = j (columns), 2 = k.
  spec.block(a, blk({Blocked{kTileM}, Blocked{kTileK}}), tile(0, 2), InShared{.swizzle = 128});
  if (b_transposed)
    spec.block(b, blk({Blocked{kTileN}, Blocked{kTileK}}), tile(1, 2), InShared{.swizzle = 128});
  else  // N-major: tiles of one swizzle span (64 elements) of N
    spec.block(b, blk({Blocked{kTileK}, Blocked{kTileN}}), tile(2, 1),
               InShared{.swizzle = 128, .tiling = {kTileK, 64}});
  if (extra == Extra::kMatrix) spec.block(e, blk({Blocked{kTileM}, Blocked{kTileN}}), tile(0, 1));
  if (extra == Extra::kBiasRow)
    spec.block(e, {Blocked{kTileN}}, [o](const ProgramIds& p) { return at(p[o + 1]); });
  spec.block(d, blk({Blocked{kTileM}, Blocked{kTileN}}), tile(0, 1));
  const int k_axis = o + 2;

  // One K step: acc += a @ b; at the last step D = epilogue(acc) (loading
  // the accumulator waits for every multiply in flight).
  auto step = [=](Ref a, Ref b, Ref acc, auto&& finish) {
    when(program_id(k_axis) == index(0), [&] {
      acc.store(broadcast_to(constant(0, f32), {kTileM, kTileN}));
    });
    if (in_place) {  // both tiles are read where TMA put them
      wgmma(acc, a, b, {.transpose_b = b_transposed});
      wgmma_wait(1);  // the previous step's multiply is done: its buffers may be refilled
    } else {
      acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_b = b_transposed}));
    }
    when(program_id(k_axis) == num_programs(k_axis) - index(1), [&] { finish(acc.load()); });
  };
  if (extra == Extra::kNone) {
    spec.body([=](Ref a, Ref b, Ref d, Ref acc) {
      step(a, b, acc, [&](const Value& r) { d.store(r.cast(out)); });
    });
    return;
  }
  spec.body([=](Ref a, Ref b, Ref e, Ref d, Ref acc) {
    step(a, b, acc, [&](const Value& r) {
      Value y;
      switch (epilogue) {
        case Epilogue::kAlphaBetaC: {
          Value c = e.load().cast(f32);
          y = Value(alpha) * r + select(Value(beta) != 0.0, Value(beta) * c, 0.0);
          break;
        }
        case Epilogue::kResidual:
          y = r + e.load().cast(f32);
          break;
        case Epilogue::kBias:
          y = r + e.load().cast(f32);
          break;
        case Epilogue::kBiasGelu:
          y = activations::gelu_tanh(r + e.load().cast(f32));
          break;
        case Epilogue::kBiasSilu:
          y = activations::silu(r + e.load().cast(f32));
          break;
        case Epilogue::kNone:
          break;
      }
      d.store(y.cast(out));
    });
  });
}

// Inputs -> D: every pair the matmul and gemm entry points take.
const std::vector<std::vector<DType>> kProductDtypes = {
    {bf16, bf16}, {bf16, f32}, {f16, f16}, {f16, f32}};
// A linear layer keeps its activations' dtype.
const std::vector<std::vector<DType>> kLinearDtypes = {{bf16, bf16}, {f16, f16}};

constexpr Names kMatmulNames{"a", "b", "", "d"};
constexpr Names kGemmNames{"a", "b", "c", "d"};
constexpr Names kLinearBiasNames{"x", "w", "bias", "y"};
constexpr Names kLinearResidualNames{"x", "w", "residual", "y"};

}  // namespace

PALLAS_KERNEL(matmul) {
  declare_product(spec, Form{.b_transposed = false}, Epilogue::kNone, kProductDtypes, kMatmulNames);
}

PALLAS_KERNEL(matmul_bt) {
  declare_product(spec, Form{.b_transposed = true}, Epilogue::kNone, kProductDtypes, kMatmulNames);
}

PALLAS_KERNEL(gemm) {
  declare_product(spec, Form{.b_transposed = false}, Epilogue::kAlphaBetaC, kProductDtypes,
                  kGemmNames);
}

PALLAS_KERNEL(gemm_bt) {
  declare_product(spec, Form{.b_transposed = true}, Epilogue::kAlphaBetaC, kProductDtypes,
                  kGemmNames);
}

PALLAS_KERNEL(linear_bias) {
  declare_product(spec, Form{.b_transposed = true}, Epilogue::kBias, kLinearDtypes,
                  kLinearBiasNames);
}

PALLAS_KERNEL(linear_bias_gelu) {
  declare_product(spec, Form{.b_transposed = true}, Epilogue::kBiasGelu, kLinearDtypes,
                  kLinearBiasNames);
}

PALLAS_KERNEL(linear_bias_silu) {
  declare_product(spec, Form{.b_transposed = true}, Epilogue::kBiasSilu, kLinearDtypes,
                  kLinearBiasNames);
}

PALLAS_KERNEL(linear_residual) {
  declare_product(spec, Form{.b_transposed = true}, Epilogue::kResidual, kLinearDtypes,
                  kLinearResidualNames);
}

PALLAS_KERNEL(batched_matmul) {
  declare_product(spec, Form{.b_transposed = false, .batched = true}, Epilogue::kNone,
                  kProductDtypes, kMatmulNames);
}

PALLAS_KERNEL(batched_matmul_bt) {
  declare_product(spec, Form{.b_transposed = true, .batched = true}, Epilogue::kNone,
                  kProductDtypes, kMatmulNames);
}
