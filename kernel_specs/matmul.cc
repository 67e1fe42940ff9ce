// The matrix products: f16 or bf16 inputs summed in f32. The grid is Pallas'
// matmul grid (i, j, k), each tile of D a K loop (the arbitrary axis)
// pipelined by TMA, the sum kept in registers in an accumulator (Pallas'
// ACC); the tiles schedule is a persistent grid, each program walking
// several tiles with one pipeline (see spec.persistent below):
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
// Split-K (the `splitk` instance of each non-batched product, which the
// entry point picks at run time): when D has few tiles and K is long (a
// decode step: M of 1..128 against a 4096-wide weight gives 16 programs on
// 132 SMs), the grid is (i, j, s, k): split s multiplies K steps
// [s * per, (s + 1) * per), stores its f32 tile to a workspace (the rows D
// has) and adds one to the tile's semaphore; the split that brings it to S
// sums the S partial tiles in order (the result does not depend on which
// finished last), runs the epilogue and stores D, 16 rows at a time, and
// puts the semaphore back to zero (the pattern of sum_all and the split row
// reductions); with S = 1 the program runs the epilogue from its
// accumulator. Steps past K read zeros (TMA's fill, masked loads), so any
// split is exact. With either orientation of B the split instance
// multiplies D^T = B A^T in tiles of 64 rows of D by 128 columns (see
// `split` below): B's 128 rows (columns of a [K, N] B, read M-major through
// a transposed view), not A's few, fill wgmma's 64-row side.
//
// Where the device has room for their pipelines (sm_90) the split instance
// is a deep one: `decode` with at most 16 rows of D (16 rows of D a tile,
// eleven stages, one program an SM), `splitk_deep` with more than 64, or more
// than 16 where its splits meet in a cluster (split-K's tiles in eight stages);
// see `decode` below. They sum a tile's splits in a
// thread-block cluster of its S programs, through distributed shared memory,
// instead of through the workspace (see `finish` below). Their direct twins
// are split-K's.
//
// The entry point runs the split instance where its programs fit one wave
// (fewer than 264 tiles of 128 x 64; S = floor(264 / tiles) where D has at
// most 16 rows, floor(132 / tiles) above: splits_for below) and K has at
// least 5 steps, and either it splits (at most 132
// tiles: S >= 2, each split a fraction of K, against at least one wave of
// all of K in the tiles schedule) or the tiles schedule would fill at most
// half of an H100's 132 SMs (at most 66 tiles of 128 x 256). Between
// 133 and 263 tiles of 128 x 64 the split instance runs S = 1: one wave of
// its small tiles, two programs on most SMs, against the tiles schedule's
// one wave on at most half of them. From 264 tiles it would run S = 1 over
// a full wave and more (two from 265), the tiles schedule with a quarter of
// the tile and no persistence
// (M = N = K = 2048: 128 tiles of 128 x 256 are one wave of the tiles
// schedule, 512 of 128 x 64 two waves of the split instance's two programs
// an SM, each multiplying a quarter of the tile at m64n64, shared-memory
// bound): the tiles schedule runs. A narrow D counts its tiles of 128 x 64
// (M = 16384, N = 64: 128 tiles of 128 x 256 are 128 of 128 x 64, three
// quarters of each wide tile empty: split-K, its 256 tiles of 64 x 128,
// half of each empty, S = 1: the chooser counts the same tiles for every
// instance, and the swap is for few rows of D, not few columns).
// Worked example, M = 16, N = 4096, K = 4096, either orientation of B: 16
// tiles of 128 x 256; the chooser counts 64 tiles of 128 x 64 (the choice
// does not depend on the instance) and 64 K steps: split-K. The decode
// instance runs 32 tiles of 16 x 128: min(cdiv(64, 4), floor(132 / 32)) = 4
// splits (splits_for), 3 where the splits meet in clusters (cluster_splits_for:
// an H100 or H200 holds 39 clusters of 3, 30 of 4), per = cdiv(64, 3) = 22
// steps, S = 3: 96 programs, one wave, instead of 16. K = 4000 (63 steps, the
// last partial): per = 21, S = 3. Where the decode instance
// does not fit (sm_80), split-K's 32 tiles of 64 x 128 take S = min(16,
// floor(264 / 32)) = 8 splits of 8 steps, 256 programs. M = 64, the same N
// and K: 32 tiles of 64 x 128, one wave of 132: S = min(16, floor(132 / 32))
// = 4, splitk_deep's clusters 3 splits of 22 steps, 96 programs. M = 128, N =
// 11008: 172 tiles of 128 x 64 (split-K's: 2 x 86 of 64 x 128), S = 1, 172
// programs (the tiles schedule: 43 of 128 x 256).
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
/// Pipeline stages of the 128 x 256 tiles schedule (48 KiB each, 193 KiB; see the stages
/// below).
constexpr int64_t kWideStages = 4;
/// The `decode` instance: split-K (D^T = B A^T) with 16 rows of D a tile (wgmma's N of 16) and
/// 11 stages of 18 KiB (see the stages below).
constexpr int64_t kDecodeRows = 16;
constexpr int64_t kDecodeStages = 11;
/// The `splitk_deep` instance: split-K's 64 x 128 tiles in 8 stages of 24 KiB (see the stages
/// below).
constexpr int64_t kDeepSplitStages = 8;
/// ... whose cluster sum goes through its partial tile in halves of 32 rows of D (`finish`),
/// so that eight stages fit beside it (seven beside a whole 64-row partial tile).
constexpr int64_t kDeepPartRows = 32;
static_assert(64 % kDeepPartRows == 0 && kDeepPartRows % 16 == 0,
              "a round of the cluster sum is whole 16-row slabs of splitk_deep's 64-row tile");
/// ... for D of at least this many rows (two rows of its tiles), and from kDeepSplitMinRows
/// (above the decode instance's) where its splits meet in a cluster (see the chooser).
constexpr int64_t kDeepSplitAllRows = 65;
constexpr int64_t kDeepSplitMinRows = 17;
/// The deep split instances sum a tile's S partial tiles in a thread-block cluster of its S
/// programs, through distributed shared memory, where S is at most this (CUDA's portable
/// cluster size; see `finish` below).
constexpr int64_t kMaxClusterSplits = 8;
/// Clusters of s programs of one program an SM that the device holds at once, by s (1..8), on
/// an H100 or H200 (132 SMs; cudaOccupancyMaxActiveClusters on an H200, thirty-second session):
/// a cluster's programs share a GPC, and the GPCs' SMs do not divide evenly, so clusters of 4
/// hold 120 programs, of 3 only 117, of 6 102.
constexpr int64_t kResidentClusters[kMaxClusterSplits + 1] = {0, 132, 66, 39, 30, 22, 17, 15, 15};
/// A partial tile's row in shared memory: the accumulator's columns (rows of D) and 8 more
/// floats, so that the accumulator's 8-byte stores are free of bank conflicts (see `finish`).
constexpr int64_t kPartRowPad = 8;

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

/// How the K axis is scheduled: one program per tile of D looping over all
/// of K, or split-K (see the file comment). A kernel instance each.
enum class Schedule { kTiles, kSplitK };

/// About this many programs in all for a split-K launch (two per SM of an
/// H100), and at most cdiv(K steps, kMinStepsPerSplit) splits (K steps of 64).
constexpr int64_t kSmCount = 132;  // an H100 SXM's
constexpr int64_t kSplitTargetPrograms = 2 * kSmCount;
constexpr int64_t kMinStepsPerSplit = 4;

/// Split-K's K steps per split and splits S for `tiles` tiles of D and
/// `k_steps` steps of K (S = 1: no split), at most cdiv(k_steps,
/// kMinStepsPerSplit) splits (10 steps: 3 splits of 4, 4 and 2; fewer than 5
/// steps: no split). The programs fill one wave: S = floor(target / tiles),
/// since a second, partial wave costs a whole split's time for a few
/// programs (target 264, 64 tiles: S = 4 is 256 programs, one wave of 16
/// steps; S = 5 would be 320, two waves of 13; 133 tiles: S = 1 is one wave
/// of all of K, S = 2 would be 266 programs, two waves of half of it, the
/// second of 2 programs streaming their B with no others to hide DRAM's
/// latency). floor(a / b) is written cdiv(a + 1, b) - 1.
///
/// The target is kSplitTargetPrograms (two programs an SM) where D has at
/// most 16 rows, and one an SM above: the split that completes a tile sums
/// the S partial tiles 16 rows of D at a time, four splits' loads in flight
/// (one warpgroup's registers), so its time grows with S times the rows.
/// On an H100 (twenty-third session) M = 64, N = K = 4096 (32 tiles of 64 x
/// 128, S = 8 of 8 steps) ran 10 us longer than M = 1 (the same tiles and
/// splits; ncu: SMs active 54 % of the kernel's 32.9 us, the last splits'
/// sums alone in the tail), at 1.77x cuBLASLt's time, whose kernel does not
/// split at all. One an SM: S = 4 there, 128 programs of 16 steps.
///
/// The `decode` instance (below) holds one program an SM (its pipeline fills the shared
/// memory), so its target is kSmCount whatever M.
struct Splits {
  DimExpr per, count;
};
DimExpr split_target(const DimExpr& m) {
  return DimExpr(kSmCount) + DimExpr(kSplitTargetPrograms - kSmCount) * le(m, 16);
}
Splits splits_for(const DimExpr& tiles, const DimExpr& k_steps, const DimExpr& target) {
  const DimExpr one_wave = max(cdiv(target + 1, max(tiles, 1)) - 1, 1);
  DimExpr wanted = max(min(cdiv(k_steps, kMinStepsPerSplit), one_wave), 1);
  DimExpr per = max(cdiv(k_steps, wanted), 1);
  return {per, max(cdiv(k_steps, per), 1)};
}
/// The deep split instances' splits (splits_for's, target 132), fewer where that lets the
/// splits meet in clusters: the launch asks for clusters only where the device holds every
/// cluster of the grid at once (launch.cc; else the sum goes through the workspace), so where
/// S is 2..8 it becomes the largest s <= S whose `tiles` clusters an H100 or H200 holds
/// (kResidentClusters). Worked example: 32 tiles (M = 1..64, N = 4096), 64 K steps: S = 4 of 16
/// steps would need 32 clusters of 4 (the device holds 30); S = 3 of 22 steps (39 clusters of
/// 3 fit), 96 programs. 16 tiles: S = 8 -> 6 (17 of 6 fit, 15 of 7 or 8). 64 tiles: S = 2 (66).
///
/// The decode instance (`few_rows`: 16 rows a tile) takes fewer splits only up to
/// kDecodeClusterSteps K steps. Its workspace sum is one slab of 16 rows, about 5 us more than
/// the cluster sum, while three splits instead of four lengthen every split by about K steps /
/// 12, ~0.46 us a step: on an H200 (thirty-second session, back to back) 1 x 4096 x 4096 (64
/// steps) went from 18.0 to 15.9 us, 16 x 4096 x 11008 (172 steps) from 30.3 to 32.5.
/// splitk_deep's 64 rows (four slabs through the workspace) gained at both lengths: 64 x 4096 x
/// 4096 20.4 -> 19.5 us, gemm_bt 64 x 4096 x 11008 39.8 -> 35.0.
constexpr int64_t kDecodeClusterSteps = 128;
Splits cluster_splits_for(const DimExpr& tiles, const DimExpr& k_steps, bool few_rows) {
  const Splits one_wave = splits_for(tiles, k_steps, DimExpr(kSmCount));
  DimExpr fitting(1);  // the largest s whose clusters all fit: kResidentClusters falls with s
  for (int64_t s = 2; s <= kMaxClusterSplits; ++s)
    fitting = fitting + le(tiles, kResidentClusters[s]);
  DimExpr in_clusters =
      (DimExpr(1) - le(one_wave.count, 1)) * le(one_wave.count, kMaxClusterSplits);
  if (few_rows) in_clusters = in_clusters * le(k_steps, kDecodeClusterSteps);
  const DimExpr wanted =
      one_wave.count - in_clusters * (one_wave.count - min(one_wave.count, fitting));
  const DimExpr per = max(cdiv(k_steps, wanted), 1);
  return {per, max(cdiv(k_steps, per), 1)};
}

void declare_product(KernelSpec& spec, Form form, Epilogue epilogue,
                     std::vector<std::vector<DType>> dtypes, Names names) {
  std::vector<DType> t = spec.dtype_params({"T", "Out"}, std::move(dtypes));
  const DType in = t[0], out = t[1];
  const bool b_transposed = form.b_transposed;
  DimExpr m = spec.dim("m"), n = spec.dim("n"), k = spec.dim("k");
  // The schedule, chosen from the shape by the entry point (batched
  // products have no split instance: their grid has no parallel axis left
  // for the splits; they choose only between tiles and tiles128): the
  // split instance where its programs fit one wave and either split or
  // beat a tiles schedule that would fill at most half the SMs (see the
  // file comment). The chooser counts in-place tiles (128 x 256 for the
  // tiles schedule, 128 x 64 for the split) for every instance, so
  // that a direct twin agrees with its TMA instance.
  //
  // The tiles schedule's tiles are 128 x 256 (below); it has a third instance,
  // `tiles128`, for devices whose shared memory per block cannot hold the
  // 128 x 256 pipeline (four stages of 48 KiB, 193 KiB: sm_90's 227 KiB
  // does, sm_80's 163 KiB and sm_86 / sm_89's 99 KiB do not). It tiles
  // 128 x 128 (three stages of 32 KiB) and keeps those devices on a staged, pipelined tensor-core
  // path instead of the direct twin. (Before the fourth stage sm_80 ran 128 x 256 in three; its 128
  // x 128 is not measured. Its multiply is a quarter of sm_90's rate, so its steps last longer than
  // a stage's refill takes and three stages keep it busy: reasoned, see the stages below.)
  //
  //
  // The products with C or R (gemm, gemm_bt, linear_residual) tiled 128 x 128 until the
  // twenty-third session, in three stages or six (`tiles_deep`), for an epilogue that held a
  // tile of C beside the accumulator. On an H100 they ran at 0.51..0.58x of cuBLASLt
  // (8192^3: 0.675 us a K step for half the multiply of matmul_bt's 0.87) and the six stages
  // gained 3 % on three. Their epilogue now reads C 16 columns at a time (below), so they
  // take the 128 x 256 tiles like every other product, with no spill.
  Schedule schedule = Schedule::kTiles;
  bool narrow = false;  // the tiles128 instance
  bool decode = false;  // the decode instance (its direct twin is split-K's)
  bool deep = false;    // the splitk_deep instance (likewise)
  const int64_t kWidePlanBytes = kWideStages * (128 + 256) * kTileK * 2 + 1024;  // + barriers
  // The deep split instances' stages, the sum's [128, 16] f32 transposition buffer, the
  // partial tile for the cluster's sum ([128, part_rows + kPartRowPad] f32), barriers.
  auto split_plan_bytes = [](int64_t stages, int64_t rows, int64_t part_rows) {
    return stages * (128 + rows) * kTileK * 2 + 128 * 16 * 4 + 128 * (part_rows + kPartRowPad) * 4 +
           1024;
  };
  const int64_t kDecodePlanBytes = split_plan_bytes(kDecodeStages, kDecodeRows, kDecodeRows);
  const int64_t kDeepSplitPlanBytes = split_plan_bytes(kDeepSplitStages, 64, kDeepPartRows);
  const DimExpr too_small = le(KernelSpec::device_shared_bytes(), kWidePlanBytes - 1);
  if (form.batched) {
    narrow = spec.variant("schedule", {"tiles", "tiles128"}, too_small) == 1;
  } else {
    const DimExpr schedule_tiles = cdiv(m, 128) * cdiv(n, 256);
    const DimExpr split_tiles = cdiv(m, 128) * cdiv(n, 64);
    const DimExpr long_k = DimExpr(1) - le(cdiv(k, kTileK), kMinStepsPerSplit);  // 5+ steps
    const DimExpr fits_one_wave = le(split_tiles, kSplitTargetPrograms - 1);
    const DimExpr splits = le(split_tiles, kSmCount);  // S >= 2 (a long K)
    const DimExpr half_idle = le(schedule_tiles, kSmCount / 2);
    const DimExpr split_wanted = long_k * fits_one_wave * max(splits, half_idle);
    const DimExpr choose = split_wanted + DimExpr(2) * too_small * (DimExpr(1) - split_wanted);
    // Deep split instances where the device holds their pipelines (sm_90's 227 KiB a block):
    // `decode` for D of at most 16 rows, `splitk_deep` from 65, or 17 (see `decode` below).
    auto fits = [](int64_t bytes) {
      return DimExpr(1) - le(KernelSpec::device_shared_bytes(), bytes - 1);
    };
    // One program an SM: splitk_deep only where its 64 x 128 tiles fit one wave of 132 (from
    // 133, S = 1 would run two waves where split-K's four stages run one of two an SM: M = 128,
    // N = 11008, 172 tiles). decode's tiles always do (at most 16832 / 128 columns, above).
    // From kDeepSplitAllRows (65) rows of D; from kDeepSplitMinRows (17), where the decode
    // instance ends, only where its S splits meet in a cluster (2 to kMaxClusterSplits: the
    // deep instances sum them there, `finish` below, which the four-stage split-K, sm_80's and
    // small shared memories', does not). Eight stages against four at 64 rows, before the
    // cluster sum: on an H100 (twenty-sixth session) 2..7 % slower (64 x 11008 x 4096: 86 tiles,
    // S = 1, which stays on the four stages), on an H200 (twenty-seventh) equal within 1 %
    // but 6..8 % faster at 64 x 11008 x 4096 [N, K] (bench/RESULTS.md); 128 and 256 rows
    // 3..4 % faster on the H100. Worked example: M = 64, N = K = 4096: 32 tiles of 64 x 128,
    // S = min(cdiv(64, 4), floor(132 / 32)) = 4: splitk_deep (which runs 3, the splits that
    // meet in clusters: cluster_splits_for); N = 11008: 86 tiles, S = 1:
    // splitk.
    const DimExpr few_rows = le(m, kDecodeRows);
    const DimExpr deep_tiles = cdiv(m, 64) * cdiv(n, 128);  // splitk_deep's tiles of D
    const DimExpr deep_splits = splits_for(deep_tiles, cdiv(k, kTileK), DimExpr(kSmCount)).count;
    const DimExpr splits_meet =
        (DimExpr(1) - le(deep_splits, 1)) * le(deep_splits, kMaxClusterSplits);
    const DimExpr deep_rows =
        DimExpr(1) - le(m, kDeepSplitAllRows - 1) +
        le(m, kDeepSplitAllRows - 1) * (DimExpr(1) - le(m, kDeepSplitMinRows - 1)) * splits_meet;
    const DimExpr deep_one_wave = le(deep_tiles, kSmCount);
    const int option = spec.variant(
        "schedule", {"tiles", "splitk", "tiles128", "decode", "splitk_deep"},
        choose +
            split_wanted * (DimExpr(2) * few_rows * fits(kDecodePlanBytes) +
                            DimExpr(3) * deep_rows * deep_one_wave * fits(kDeepSplitPlanBytes)));
    schedule = option == 1 || option >= 3 ? Schedule::kSplitK : Schedule::kTiles;
    narrow = option == 2;
    // Their direct twins are split-K's (the same kernel: the codegen compiles it once).
    decode = option == 3 && !spec.direct();
    deep = option == 4 && !spec.direct();
  }
  const bool split = schedule == Schedule::kSplitK;
  // The deep split instances keep a multiply in flight across steps (see the stages below)
  // and sum a tile's splits in a cluster (see `finish` below).
  const bool deep_split_pipelined = decode || deep;
  const bool cluster_sum = decode || deep;
  // Split-K swaps the operands (cuBLAS's decode kernels do): it multiplies D^T = B A^T, so
  // that N, not a decode step's few rows of A, fills wgmma's 64-row side and A's rows are
  // wgmma's narrow N. A tile is 64 rows of D by 128 columns, its accumulator [128, 64]
  // (D^T's tile); a stage holds 16 KiB of B and 8 KiB of A. A [N, K] B is wgmma's operand a
  // K-major; a [K, N] B's block, staged N-major in [64, 64] tiles as the tiles schedule
  // stages it, is read through its transposed view, M-major (imm-trans-a). Before the swap
  // (the twenty-second session for [N, K], the twenty-fifth for [K, N]) a stage held 16 KiB
  // of A (128 rows, for M = 1 all but one of them TMA's zero fill) and 8 KiB of B: an H200
  // streamed a [N, K] B at 1.2 TB/s (ncu: 25 % of DRAM's peak) where cuBLASLt's swapped
  // kernel reached 3.45. The partial tiles keep D^T's orientation; the split that completes
  // a tile transposes 16 of its columns at a time (through shared memory) into rows of D for
  // the epilogue.
  // The `decode` instance is that split-K with 16 rows of D a tile instead of 64 (D^T's
  // tile [128, 16]: wgmma m64n16k16) for D of at most 16 rows, where the device holds its
  // deeper pipeline (sm_90). A stage is 16 KiB of B and 2 KiB of A, not 8 KiB of A of which a
  // decode step's 1..16 rows are all there is (the rest TMA's zero fill, which costs no DRAM
  // traffic but shared memory), so eleven stages fit beside the cluster sum's partial tile
  // (219 KiB in all): one program an SM with ten steps, 160 KiB of B, in flight, against two
  // programs of three steps (96 KiB) with 64 rows. (Twelve until the cluster sum.)
  // cuBLASLt's decode kernels keep 8 to 16 stages of one unsplit pipeline per CTA (bench/
  // RESULTS.md, twenty-third session). One program an SM, its splits fill one wave of 132
  // (splits_for), not 264: M = 1, N = K = 4096 runs 32 tiles in 3 splits of 22 steps (96
  // programs in clusters of 3, cluster_splits_for; 4 of 16 before the cluster sum), not 8 of 8. On
  // an H100 (twenty-sixth session) it ran 0..5 % faster than split-K's four stages at M = 1..16 (16
  // x 14336 x 4096: 57.0 us against 60.2, three runs); both stayed ~5 us above cuBLASLt at every N
  // (bench/RESULTS.md).
  //
  // `splitk_deep` is split-K's 64-row instance in eight stages (192 KiB; 221 KiB a block with
  // half of the cluster sum's partial tile; seven stages from the twenty-ninth session to the
  // thirty-second) for D above 64 rows (above 16 where its 2..8 splits meet in
  // a cluster) and at most 132 tiles, where split-K
  // runs one program an SM anyway (splits_for's target of 132) with four stages, 98 KiB of the
  // 227: seven steps (112 KiB of B) in flight instead of three. The same programs and splits. In
  // eight stages, before the cluster sum, on an H100 (twenty-sixth session) 128 and 256 rows
  // ran 3..4 % faster than in four stages on average, 64 rows 2..7 % slower (M = 64, N =
  // 11008: 49..53 us against 46; ncu: DRAM 67 % busy against 70 %, the same 86 programs); on
  // an H200 (twenty-seventh) 64 rows equal within 1 %, 6..8 % faster at N = 11008 [N, K].
  // From 17 rows where its splits meet in a cluster since the cluster sum (kDeepSplitMinRows):
  // not yet measured.
  // The accumulator's registers decide the tile (no spills on any target;
  // the instance also serves sm_80, whose mma.sync form holds the same
  // accumulator plus a and b fragments):
  //  - 128 x 256 over two consumer warpgroups (CUTLASS's cooperative
  //    schedule: each multiplies its 64 rows by all 256 columns, 128
  //    registers a thread) where wgmma reads both tiles in place:
  //    m64n256k16, wgmma's widest (17 % fewer shared-memory bytes per
  //    multiply-add than m64n128k16), and 25 % fewer global bytes per flop
  //    than 128 x 128;
  //  - 128 x 128 over two consumer warpgroups (64 accumulator registers a
  //    thread) when the device has too little shared memory for 128 x 256
  //    (tiles128, batched products too; they tiled 128 x 128 everywhere
  //    until the twenty-fourth session, at 2.0..2.2x cuBLASLt's time on an
  //    H100: 779 ns a K step at 8 x 2048^3, the 128 x 256 step's time for half
  //    its work);
  //  - 64 x 128 on one warpgroup for split-K, swapped (its [128, 64]
  //    accumulator is D^T's tile; decode shapes gain programs; the sm_80 form
  //    spilled at 128 x 128 on one warpgroup), 16 x 128 in the decode instance;
  //  - 64 x 64 where the threads first store the operands into wgmma's
  //    layout (the direct twin).
  const bool in_place = !spec.direct();
  const bool two_consumers = in_place && !split;
  const bool wide = two_consumers && !narrow;
  const int64_t kTileM = decode ? kDecodeRows : split || !in_place ? 64 : 128;
  const int64_t kTileN = split ? (in_place ? 128 : 64) : wide ? 256 : two_consumers ? 128 : 64;
  if (two_consumers) spec.threads(256);
  // Batched: a leading dim on every matrix and on the grid, (batch, i, j, k);
  // blocks squeeze it. `mat` prefixes it to a shape, `blk` a squeezed dim to
  // a block, `idx` the program's batch entry to an index map's result.
  std::vector<DimExpr> batch;
  if (form.batched) batch.push_back(spec.dim("batch"));
  const int o = form.batched ? 1 : 0;  // grid axes: [batch,] i, j, k
  // Split-K's grid axes are s, i, j, k: a tile's splits first, neighbours along CUDA's x (the
  // deep instances' clusters).
  const int i_axis = split ? 1 : o, j_axis = split ? 2 : o + 1;
  auto mat = [&](std::vector<DimExpr> dims) {
    dims.insert(dims.begin(), batch.begin(), batch.end());
    return dims;
  };
  auto blk = [&](std::vector<BlockDim> dims) {
    if (form.batched) dims.insert(dims.begin(), BlockDim(squeezed));
    return dims;
  };
  auto tile = [=](const ProgramIds& p) {
    return o ? at(p[0], p[i_axis], p[j_axis]) : at(p[i_axis], p[j_axis]);
  };
  Operand a = spec.input(names.a, in, mat({m, k}));
  Operand b = spec.input(names.b, in, mat(b_transposed ? std::vector{n, k} : std::vector{k, n}));
  const Extra extra = extra_operand(epilogue);
  Operand e;
  if (extra == Extra::kMatrix) e = spec.input(names.extra, out, mat({m, n}));
  if (extra == Extra::kBiasRow) e = spec.input(names.extra, out, {n});
  Operand d = spec.output(names.d, out, mat({m, n}));
  Operand acc = spec.accumulator(
      "acc", split ? std::vector<int64_t>{kTileN, kTileM} : std::vector<int64_t>{kTileM, kTileN});
  (void)acc;
  Scalar alpha, beta;
  if (epilogue == Epilogue::kAlphaBetaC) {
    alpha = spec.scalar("alpha", f32);
    beta = spec.scalar("beta", f32);
  }
  // Every instance declares the same operands: split-K's partial tiles in a workspace and its
  // semaphores (S per tile of D, a semaphore per tile), none of either in the tiles schedule.
  DimExpr tiles = cdiv(m, kTileM) * cdiv(n, kTileN);
  // (splitk_deep's m is above 16, so its target is split_target's 132 too.)
  Splits splits = cluster_sum ? cluster_splits_for(tiles, cdiv(k, kTileK), decode)
                              : splits_for(tiles, cdiv(k, kTileK), split_target(m));
  // With K = 0 the product is zero and D is still its epilogue (BLAS's
  // D = beta C): the direct twin, which the entry point runs then (TMA needs
  // positive extents), takes one K step of blocks past the array. (The TMA
  // instances keep cdiv: one more max in their index math made the 128 x 128
  // sm_80 forms spill.)
  const DimExpr k_steps = spec.direct() ? max(cdiv(k, kTileK), 1) : cdiv(k, kTileK);
  // The partial tiles of D^T one under the other, [S tiles x 128, min(M rounded up to 4,
  // 64)]: tile t's split s is rows [(t S + s) 128, + 128). Columns past M (a decode step's M
  // of 1..63) are past the workspace's second extent: stores skip them and loads read 0, so
  // they cost no traffic. Rounded up, a row is whole 16-byte runs (M = 1: 4 floats, the
  // last three zero, since A's rows past M are TMA's zero fill), so the sum's loads are 16
  // bytes wide instead of one float each.
  if (split)
    spec.workspace("partials", f32, {splits.count * tiles * kTileN, min(cdiv(m, 4) * 4, kTileM)});
  else
    spec.workspace("partials", f32, {DimExpr(0), DimExpr(kTileN)});
  Semaphores arrived = spec.semaphores("arrived", split ? tiles : DimExpr(0));
  // The deep split instances: this split's partial tile, for its cluster's sum (`finish`).
  if (cluster_sum) {
    spec.scratch("part", f32, {kTileN, (deep ? kDeepPartRows : kTileM) + kPartRowPad});
    spec.cluster_first_axis(kMaxClusterSplits);
  }
  std::vector<DimExpr> grid = mat({cdiv(m, kTileM), cdiv(n, kTileN), k_steps});
  if (split) grid = {splits.count, cdiv(m, kTileM), cdiv(n, kTileN), splits.per};
  std::vector<Semantics> semantics(grid.size(), parallel);
  semantics.back() = arbitrary;
  spec.grid(std::move(grid));
  spec.dimension_semantics(std::move(semantics));
  spec.max_registers(255);  // instances without warp specialization may take every register
  // The tiles schedule is persistent (CUTLASS's persistent tile scheduler):
  // one program per resident CTA walks tiles, so the next tile's first K
  // steps are copied while this tile's last multiply and epilogue run, and
  // the 132 tiles in flight at once are grouped: bands of G tile rows swept
  // column by column share rows of A and columns of B in L2. Per K step the
  // programs in flight read distinct A and B tiles from DRAM: with 128 x 256
  // tiles (B's twice A's) and N = 8192, row-major order (one band of 1)
  // reads 5 A + 32 B tiles = 1.1 MiB; G = 16 reads 16 A + 9 B = 544 KiB
  // (G = 8: 672 KiB). Square 128 x 128 tiles take G = 8 (8 A + 17 B tiles of 16 KiB).
  // (Split-K has few tiles and many short programs: not persistent.)
  //
  // The programs run in clusters of two CTAs where the tile rows are even (CUTLASS's 2 x 1
  // cluster shape, cuBLASLt's `_1x2_` kernels): the pair takes tiles (2 r, c) and (2 r + 1, c),
  // whose B block is the same, and each CTA loads one of its two copies (B's two tiles of rows,
  // or of a [K, N] B two of its four 64-column tiles), multicast to both: a 128 x 256 K step
  // reads 16 + 32 / 2 KiB from L2 per SM instead of 48 (Spec.h's Persistent; odd rows, sm_80
  // and the host run clusters of 1). On an H100 (twenty-fourth session) that was 6 to 11 %
  // faster on every tiles-schedule shape of matmul_bt measured (8192^3: 1.62 -> 1.44..1.47 ms,
  // 747..765 TFLOP/s, 0.96x cuBLASLt's time; 4096^3 -11 %): an ncu profile of 8192^3 without
  // clusters had the consumers waiting on full barriers for a quarter of their stall samples,
  // with L2 74 % busy (132 SMs x 48 KiB per 0.83 us step: 7.6 TB/s). On an H200 with three
  // stages (nineteenth session) clusters had been 2 to 5 % slower; with four they are not
  // measured there.
  //
  // Clusters replace the stream-K walk (Spec.h's Persistent, which runs without clusters): the
  // last, partial round of tiles (1024 x 14336 x 4096: 448 tiles on 132 SMs, 3.4 rounds) was
  // cut into runs of half tiles that met at a semaphore (224 K steps a program instead of 256).
  // In the same H100 run the clusters' plain walk (256 steps) was 6 % faster than that cut walk
  // without clusters, and every other shape measured faster too. The walk's history:
  // bench/RESULTS.md (twenty-third and twenty-fourth sessions). Batched products walk their
  // batch entries' tile planes one after the other (the batch index outermost).
  if (!split) spec.persistent({.group_rows = wide ? 16 : 8, .cluster = in_place ? 2 : 1});
  if (in_place) {
    // Pallas' pipelined wgmma: step k's multiply stays in flight while step
    // k + 1 waits for its tiles (wgmma_wait(1)), so step k's stage buffers
    // are released one step later (delay_release) and refilled with step
    // k + depth - 1: a stage's refill (the release, the producer's TMA, L2 or
    // DRAM, the full barrier) has depth - 1 steps' multiplies to hide in.
    //
    // On an H200 three stages made the tiles schedule refill-bound: a K step
    // took 0.8 us at 128 x 256 (a 4.2 MFLOP multiply, 0.6 us at the tensor
    // cores' rate) and 0.72 us at 128 x 128 (tiles128: 2.1 MFLOP, 0.3 us),
    // the same time for half the work: a refill of ~1.5 us over two steps.
    // 8192^3 ran at 73 % of the SMs' throughput (ncu; its issue rate and L1
    // hits suggest consumers polling full barriers, not profiled as such).
    // So 128 x 256 takes four stages (193 KiB of sm_90's 227; three steps,
    // ~1.8 us, to hide a refill in; CUTLASS's stage count for this tile on
    // sm_90). On an H100 (twenty-third session) 8192^3 then took 0.80..0.87
    // us a K step: not the gain reasoned for, and six stages of 128 x 128
    // (tiles_deep, since removed) gained 3 % on three, so the refill is not
    // what bounds a step. tiles128 keeps three stages, for sm_86 / sm_89's
    // 99 KiB.
    //
    // Split-K streams B from DRAM (a decode step's A is a few rows), so what
    // bounds it is the bytes in flight per SM: at ~3 TB/s over 132 SMs and
    // ~0.7 us of DRAM latency, about 16 KiB of B. Its 128 x 64 accumulator is
    // 64 registers a consumer thread, so the consumers take 168 (not 232):
    // (40 + 168) x 128 = 26624 registers a program, two programs an SM
    // (kSplitTargetPrograms' two per SM), each four stages of 24 KiB (192
    // KiB an SM) keeping three steps (24 KiB of B) ahead: 48 KiB of B in
    // flight per SM instead of 16 (one program of three stages: at 232,
    // 34816 registers a program, one fit).
    //
    // A four-stage split-K step's multiply (eight m64n64k16) is short beside its 16 KiB of B from
    // DRAM, so the step waits for it (wgmma_wait(0)) and releases its stage at once: three
    // steps (48 KiB of B) ahead instead of two. (Measured on an H200 with the delayed release:
    // 2.46 TB/s at M = 1, N = 11008, where cuBLASLt kept 11 stages of 16 KiB in flight.)
    //
    // The decode instance (above) keeps eleven stages of 18 KiB: 202752 bytes, 224020 with the
    // sum's transposition buffer, the cluster sum's partial tile and the barriers (sm_90 allows
    // 232448 a block); splitk_deep eight of 24 KiB (225988 in all, its partial tile in halves).
    // With that many stages one fewer ahead costs little, and the wait for the multiply did cost:
    // on an H200 (twenty-seventh session, ncu, M = 1, N = 11008: 86 programs, 33.2 us, 2.79 TB/s)
    // the consumer warps spent 16 % of their samples at that wait (WARPGROUP.DEPBAR) and 20 % at
    // the full barriers, where cuBLASLt's kernel of the same 86 CTAs (3.49 TB/s) waited on its
    // barriers only: its loop never waits for a multiply. So the deep instances pipeline their
    // multiplies as the tiles schedule does (wgmma_wait(1), the stage released a step later:
    // `deep_split_pipelined`).
    spec.max_concurrent_steps(decode  ? kDecodeStages
                              : deep  ? kDeepSplitStages
                              : split ? 4
                              : wide  ? kWideStages
                                      : 3);
    spec.delay_release(split && !deep_split_pipelined ? 0 : 1);
    spec.warp_specialize({.producer_registers = 40, .consumer_registers = split ? 168 : 232});
  }
  // Grid axes, after the batch: i (rows of D), j (columns), k; split-K: 0 = s (the split),
  // 1 = i, 2 = j, 3 = k within the split, K step s * per + k.
  const int k_axis = o + (split ? 3 : 2);
  auto k_step = [split, k_axis](const ProgramIds& p) -> Value {
    return split ? p[0] * num_programs(k_axis) + p[3] : p[k_axis];
  };
  auto a_map = [=](const ProgramIds& p) {
    return o ? at(p[0], p[i_axis], k_step(p)) : at(p[i_axis], k_step(p));
  };
  auto b_map = [=](const ProgramIds& p) {
    if (b_transposed) return o ? at(p[0], p[j_axis], k_step(p)) : at(p[j_axis], k_step(p));
    return o ? at(p[0], k_step(p), p[j_axis]) : at(k_step(p), p[j_axis]);
  };
  spec.block(a, blk({Blocked{kTileM}, Blocked{kTileK}}), a_map, InShared{.swizzle = 128});
  // B in two copies (two tiles of rows of B^T; [K, N]: four of 64 columns):
  // the same layout as one copy, which wgmma reads in place. (Split-K runs no clusters: its
  // [N, K] B is one [128, 64] copy, wgmma's operand a K-major.)
  if (split && b_transposed)
    spec.block(b, blk({Blocked{kTileN}, Blocked{kTileK}}), b_map, InShared{.swizzle = 128});
  else if (b_transposed)
    spec.block(b, blk({Blocked{kTileN}, Blocked{kTileK}}), b_map,
               InShared{.swizzle = 128, .tiling = {kTileN / 2, kTileK}});
  else  // N-major: tiles of one swizzle span (64 elements) of N (split-K: wgmma's a, M-major)
    spec.block(b, blk({Blocked{kTileK}, Blocked{kTileN}}), b_map,
               InShared{.swizzle = 128, .tiling = {kTileK, 64}});
  if (extra == Extra::kMatrix) spec.block(e, blk({Blocked{kTileM}, Blocked{kTileN}}), tile);
  if (extra == Extra::kBiasRow)
    spec.block(e, {Blocked{kTileN}}, [=](const ProgramIds& p) { return at(p[j_axis]); });
  spec.block(d, blk({Blocked{kTileM}, Blocked{kTileN}}), tile);

  // Rows [r0, r0 + rows) and columns [c0, c0 + cols) of D = epilogue(r),
  // r that part of the product.
  auto store_part = [=](const Value& r, const Ref* e, const Ref& d, int64_t r0, int64_t rows,
                        int64_t c0, int64_t cols) {
    auto extra_f32 = [&] {
      return (extra == Extra::kMatrix ? e->load({r0, c0}, {rows, cols}) : e->load({c0}, {cols}))
          .cast(f32);
    };
    Value y = r;
    switch (epilogue) {
      case Epilogue::kAlphaBetaC:
        y = Value(alpha) * r + select(Value(beta) != 0.0, Value(beta) * extra_f32(), 0.0);
        break;
      case Epilogue::kResidual:
      case Epilogue::kBias:
        y = r + extra_f32();
        break;
      case Epilogue::kBiasGelu:
        y = activations::gelu_tanh(r + extra_f32());
        break;
      case Epilogue::kBiasSilu:
        y = activations::silu(r + extra_f32());
        break;
      case Epilogue::kNone:
        break;
    }
    d.store(y.cast(out), {r0, c0});
  };
  auto store_rows = [=](const Value& r, const Ref* e, const Ref& d, int64_t r0, int64_t rows) {
    store_part(r, e, d, r0, rows, 0, kTileN);
  };
  // The tiles schedule's epilogue reads the accumulator in column chunks
  // (slices of its registers). In a persistent program the epilogue is
  // inside the K loop, so the loop's invariants (the sm_80 form's ldmatrix
  // addresses) stay live through it: the sm_80 forms, at 255 registers
  // (128 of them accumulator), spilled 116 bytes with a bias epilogue in
  // chunks of 128 columns and 8-12 bytes without one. Chunks of 64 columns
  // (16 values a thread), 32 with a bias (whose values and masks ride
  // beside them) spill nothing (sass.no_spills checks every instance). With
  // C or R, 16 (a chunk of C loaded beside the accumulator's; until the
  // twenty-fourth session a stream-K meeting's chunk of a partial tile too):
  // at 32 the 128 x 256 gemm_bt bf16 -> bf16 consumers spilled 16 bytes
  // (ptxas 13.0, sm_90a).
  // Batched, 16 too: their addresses carry a batch entry's offsets, and at
  // 128 x 256 the f16 / bf16 consumers spilled 4 bytes with chunks of 32 (8
  // with 64; the f32 forms fit at 32).
  const int64_t kEpilogueCols = !two_consumers                            ? kTileN
                                : extra == Extra::kMatrix || form.batched ? 16
                                : extra == Extra::kBiasRow                ? 32
                                                                          : 64;
  // D = epilogue(acc), chunk by chunk.
  auto store_tile = [=](const Ref& acc, const Ref* e, const Ref& d) {
    for (int64_t c0 = 0; c0 < kTileN; c0 += kEpilogueCols)
      store_part(acc.load({0, c0}, {kTileM, kEpilogueCols}), e, d, 0, kTileM, c0, kEpilogueCols);
  };
  // Split-K: the tile's product is complete for this split (its accumulator `acc`), whose
  // part is summed with the tile's other splits' in split order, in one of two ways:
  //  - through the workspace: every split stores its part there and adds one to the tile's
  //    semaphore; the split that brings it to S sums the S parts (L2 round trips: the stores
  //    and their fence, the semaphore, then S loads per slab) and stores the whole tile;
  //  - in a thread-block cluster of the tile's S splits (the deep instances where S is at
  //    most 8 and the launch placed the clusters, cluster_size() == S): every split stores its
  //    part to its shared memory (`part_tile`; splitk_deep half its rows at a time, in two
  //    rounds), the cluster meets, and split r sums pieces r, r + S, ... of the tile from the
  //    S programs' shared memory (distributed shared memory, no L2 round trip) and stores
  //    them, then the cluster meets again so that no program overwrites its part or exits
  //    while another reads it. The tile's epilogue is spread over its S programs'
  //    SMs instead of run by one. Worked example, M = 64, N = K = 4096 (splitk_deep; 32 tiles
  //    of 64 x 128, S = 3 (cluster_splits_for), 96 programs in 32 clusters of 3): each tile's
  //    sum is 4 pieces, its slabs of 16 rows of D ([128, 16] of D^T), program r of the
  //    cluster sums pieces r and r + 3 (program 0 two, the others one), three loads of 8 KiB
  //    a piece, one from each program's shared memory. The decode instance's tile (16 rows of
  //    D, one slab) is 4 pieces of 32 of its columns.
  // Both sum in split order, so the result does not depend on which path or program ran it.
  auto finish = [=](const Ref& acc, const Ref* e, const Ref& d, const Ref* partials,
                    const Ref* part_tile) {
    const int64_t slab = 16;
    Value tile = program_id(i_axis) * num_programs(j_axis) + program_id(j_axis);
    Value count = num_programs(0);
    // This split's part goes to the workspace at `at`; the split that brings the tile's
    // semaphore to S sums every part (sum_parts) and puts the semaphore back to zero for the
    // next launch.
    auto store_then_last_sums = [&](const std::vector<Idx>& at, auto&& sum_parts) {
      partials->store_at(acc.load(), at);
      Value before = arrived.add(tile, constant(1, i32));
      when(before == count.cast(i32) - 1, [&] {  // every other split has stored its part
        sum_parts();
        arrived.add(tile, -count.cast(i32));
      });
    };
    // The sum over the S splits of one slab of the tile (`part(s)`: split s's slab, of
    // `shape`), in split order, with four splits' loads in flight together: the loads of an
    // iteration are independent, so it waits one L2 latency, not four. A quad past the last
    // split reloads the last one (inside this tile's parts, all stored) and adds 0 instead.
    // (One split an iteration made the last split's sum a chain of S L2 round trips per
    // slab: with 8 splits of 8 K steps, M = 1, N = K = 4096 took 29.9 us on an H200 against
    // cuBLASLt's 12.5, its DRAM 24 % busy. Reasoned, not yet measured: 16 round trips
    // before, 2 now.)
    auto sum_splits = [&](auto&& part, std::vector<int64_t> shape) {
      const int64_t at_once = 4;
      Value last = count - index(1);
      return fori(index(0), (count + index(at_once - 1)) / index(at_once),
                  {broadcast_to(constant(0, f32), shape)}, [&](Value quad, std::vector<Value> acc) {
                    std::vector<Value> parts;
                    for (int64_t u = 0; u < at_once; ++u) {
                      Value s = quad * index(at_once) + index(u);
                      parts.push_back(select(s < count, part(minimum(s, last)), 0.0));
                    }
                    for (const Value& p : parts) acc[0] = acc[0] + p;
                    return acc;
                  })[0];
    };
    // The sum runs over slabs of 16 rows of D (a decode step's M of 1..16 is one slab), each
    // a [kTileN, 16] slab of D^T's tile (16 of its columns), transposed through shared memory
    // into D's rows for the epilogue.
    Value rows = d.extent(0) - program_id(i_axis) * index(kTileM);  // of D in this tile, > 0
    // One split (S = 1: a wave of whole tiles, e.g. M = 64, N = 14336: 112 tiles of 64 x 128):
    // the tile is this program's alone, so its epilogue reads the accumulator, as the tiles
    // schedule's does, without the workspace's round trip, 16 columns of D^T at a time,
    // transposed as the sum's slabs are.
    when(count == index(1), [&] {
      for (int64_t r0 = 0; r0 < kTileM; r0 += slab)
        when(index(r0) < rows, [&] {
          store_rows(transpose(acc.load({0, r0}, {kTileN, slab})), e, d, r0, slab);
        });
    });
    auto through_workspace = [&] {
      store_then_last_sums({(tile * count + program_id(0)) * index(kTileN), index(0)}, [&] {
        for (int64_t r0 = 0; r0 < kTileM; r0 += slab)
          when(index(r0) < rows, [&] {  // a slab with rows of D
            Value sum = sum_splits(
                [&](const Value& s) {
                  return partials->load_at({(tile * count + s) * index(kTileN), index(r0)},
                                           {kTileN, slab});
                },
                {kTileN, slab});
            store_rows(transpose(sum), e, d, r0, slab);
          });
      });
    };
    // The cluster's sum: pieces of [piece_n, 16] of D^T's tile (piece q: columns n0 = (q %
    // pieces_n) piece_n of D, rows r0 = (q / pieces_n) 16), piece q summed by split q % S.
    // The part is stored in D^T's orientation, kPartRowPad more floats a row: element (n, m)
    // at float n (part_rows + 8) + m. A half-warp's 8-byte accumulator stores (lanes 4 r + c:
    // row n = r of 0..3, columns m = 2 c, 2 c + 1) start at float r (part_rows + 8) + 2 c:
    // with rows of 24 or 40 floats (24 r or 8 r mod 32) the four rows take four distinct
    // groups of 8 banks, where rows of 16 or 32 floats (0 mod 16) would put rows 0 and 2 on
    // the same. splitk_deep's part holds half of its 64 rows of D (kDeepPartRows), so the sum
    // runs in two rounds, each: store that half, meet, sum its pieces, meet (no split
    // overwrites or exits while another reads its part). Worked example, S = 3: round 0
    // stores columns 0..31 of the accumulator (rows 0..31 of D), programs 0 and 1 sum pieces 0
    // and 1 (rows 0..15, 16..31); round 1 stores columns 32..63, programs 2 and 0 sum pieces 2
    // and 3.
    auto in_cluster = [&] {
      const int64_t part_rows = part_tile->shape()[1] - kPartRowPad;
      const int64_t piece_n = kTileM == kDecodeRows ? 32 : kTileN;
      const int64_t pieces_n = kTileN / piece_n;
      Value me = program_id(0);  // split s is the cluster's rank s (the cluster is axis 0)
      // A round runs where the tile has rows of D in it (`rows` is the tile's, the same in
      // every program of the cluster, so all meet at the same barriers): M = 17..32 skips
      // splitk_deep's second round.
      for (int64_t h0 = 0; h0 < kTileM; h0 += part_rows)
        when(index(h0) < rows, [&] {
          part_tile->store(acc.load({0, h0}, {kTileN, part_rows}), {0, 0});
          cluster_barrier();  // every split's part stored
          for (int64_t q = h0 / slab * pieces_n; q < (h0 + part_rows) / slab * pieces_n; ++q) {
            const int64_t n0 = (q % pieces_n) * piece_n, r0 = (q / pieces_n) * slab;
            Value owner = index(q) - index(q) / count * count;  // q mod S
            when(index(r0) < rows, [&] {                        // a piece with rows of D
              when(owner == me, [&] {
                Value sum = sum_splits(
                    [&](const Value& s) {
                      return part_tile->in_cluster_program(s).load_at({index(n0), index(r0 - h0)},
                                                                      {piece_n, slab});
                    },
                    {piece_n, slab});
                store_part(transpose(sum), e, d, r0, slab, n0, piece_n);
              });
            });
          }
          cluster_barrier();  // no split overwrites its part or exits while another reads it
        });
    };
    when(count != index(1), [&] {
      if (!part_tile) return through_workspace();
      when(cluster_size() == count, in_cluster);
      when(cluster_size() != count, through_workspace);
    });
  };

  // One K step's multiply, acc += a @ b (split-K: acc, D^T's tile, += B^T @ A^T: B's [N, K]
  // block as it is, or the [N, K] view of its [K, N] block, and A's block read transposed).
  // The accumulator starts every tile at zero (spec.accumulator; a persistent program's is
  // reset after each tile's epilogue, where its registers die, and on sm_90a no zeros are
  // written: the tile's first wgmma ignores the accumulator (scale-d 0, MatmulRules.cpp). A
  // zeroing branch at each tile's first step instead kept the registers live beside the
  // epilogue, and the sm_80 forms spilled).
  auto multiply = [=](const Ref& a, const Ref& b, const Ref& acc) {
    if (in_place) {  // both tiles are read where TMA put them
      if (split)
        wgmma(acc, b_transposed ? b : b.transposed(), a, {.transpose_b = true});
      else
        wgmma(acc, a, b, {.transpose_b = b_transposed});
      // Four-stage split-K: done reading the stage, which is released at once. Otherwise
      // the previous step's multiply is done: its buffers may be refilled.
      wgmma_wait(split && !deep_split_pipelined ? 0 : 1);
    } else if (split) {
      acc.store(
          dot(b.load(), a.load(), acc.load(), {.transpose_a = !b_transposed, .transpose_b = true}));
    } else {
      acc.store(dot(a.load(), b.load(), acc.load(), {.transpose_b = b_transposed}));
    }
  };
  // A K step: at the last one (of the tile, or of split-K's split) the product is finished
  // (loading the accumulator waits for every multiply in flight; `done` reads it): the tiles
  // schedule's epilogue, or split-K's finish.
  auto step = [=](Ref a, Ref b, Ref acc, auto&& done) {
    multiply(a, b, acc);
    when(program_id(k_axis) == num_programs(k_axis) - index(1), [&] { done(acc); });
  };
  auto tile_done = [=](const Ref* e, const Ref& d) {
    return [=](const Ref& r) { store_tile(r, e, d); };
  };
  if (form.batched) {  // no epilogue operand, no split
    spec.body([=](Ref a, Ref b, Ref d, Ref acc, Ref) { step(a, b, acc, tile_done(nullptr, d)); });
  } else if (extra == Extra::kNone && cluster_sum) {
    spec.body([=](Ref a, Ref b, Ref d, Ref acc, Ref partials, Ref part) {
      step(a, b, acc, [&](const Ref& r) { finish(r, nullptr, d, &partials, &part); });
    });
  } else if (extra == Extra::kNone) {
    spec.body([=](Ref a, Ref b, Ref d, Ref acc, Ref partials) {
      if (!split) return step(a, b, acc, tile_done(nullptr, d));
      step(a, b, acc, [&](const Ref& r) { finish(r, nullptr, d, &partials, nullptr); });
    });
  } else if (cluster_sum) {
    spec.body([=](Ref a, Ref b, Ref e, Ref d, Ref acc, Ref partials, Ref part) {
      step(a, b, acc, [&](const Ref& r) { finish(r, &e, d, &partials, &part); });
    });
  } else {
    spec.body([=](Ref a, Ref b, Ref e, Ref d, Ref acc, Ref partials) {
      if (!split) return step(a, b, acc, tile_done(&e, d));
      step(a, b, acc, [&](const Ref& r) { finish(r, &e, d, &partials, nullptr); });
    });
  }
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
