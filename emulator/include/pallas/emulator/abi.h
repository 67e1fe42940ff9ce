// The calls the emulator lowering (codegen's convert-nvvm-to-emulator) puts in
// place of GPU-specific operations, implemented by the SIMT runtime
// (emulator/src). Shared by both sides; no dependencies, C linkage.
//
// Every call runs on the fiber of one emulated GPU thread; the runtime knows
// which thread, CTA and launch that is.
//
// Names: the runtime's are pallas_emu_<call>; a kernel's, generated, are
// pallas_emu_kernel_<kernel> (argv entry, _shared_bytes) and
// pallas_emu_thread_<kernel>, so that no kernel name can take a runtime
// call's (a kernel named `wgmma_register_a` once did, and its threads called
// its own entry point).
#pragma once

#include <stdint.h>

#ifdef __cplusplus
namespace pallas::emulator {
#endif

/// Special registers read by `pallas_emu_sreg`, named like PTX's %tid.x etc.
// clang-format off
enum SpecialRegister : int32_t {
  kTidX = 0, kTidY, kTidZ,                            // %tid
  kNtidX, kNtidY, kNtidZ,                             // %ntid
  kCtaidX, kCtaidY, kCtaidZ,                          // %ctaid
  kNctaidX, kNctaidY, kNctaidZ,                       // %nctaid
  kLaneId, kWarpId, kNwarpId,                         // %laneid, %warpid, %nwarpid
  // Clusters (LaunchConfig::cluster) run along x:
  kClusterCtaRank, kClusterNctaRank,                  // %cluster_ctarank, %cluster_nctarank
  kClusterCtaidX, kClusterCtaidY, kClusterCtaidZ,     // %cluster_ctaid (x: the rank)
  kClusterNctaidX, kClusterNctaidY, kClusterNctaidZ,  // %cluster_nctaid (x: the size)
  kClusteridX, kClusteridY, kClusteridZ,              // %clusterid
  kNclusteridX, kNclusteridY, kNclusteridZ,           // %nclusterid
};
// clang-format on

/// Access flags of `pallas_emu_access`.
enum AccessFlags : int32_t { kAccessLoad = 0, kAccessStore = 1, kAccessAtomic = 2 };

/// Shuffle modes, numbered as NVVM's ShflKind (bfly, up, down, idx).
enum ShuffleMode : int32_t { kShflBfly = 0, kShflUp = 1, kShflDown = 2, kShflIdx = 3 };

/// Vote modes, numbered as NVVM's VoteSyncKind (any, all, ballot, uni).
enum VoteMode : int32_t { kVoteAny = 0, kVoteAll = 1, kVoteBallot = 2, kVoteUni = 3 };

/// match.sync modes, numbered as NVVM's MatchSyncKind.
enum MatchMode : int32_t { kMatchAny = 0, kMatchAll = 1 };

/// redux.sync operations, numbered as NVVM's ReduxKind.
enum ReduxKind : int32_t {
  kReduxAdd = 1,
  kReduxAnd = 2,
  kReduxMax = 3,
  kReduxMin = 4,
  kReduxOr = 5,
  kReduxUmax = 6,
  kReduxUmin = 7,
  kReduxXor = 8,
};

/// The emulator's TMA descriptor, built by the runtime at launch in the 128
/// bytes a CUDA launch gives a CUtensorMap (pallas::detail::encode_tma).
/// Dims are innermost first, as TMA numbers them.
struct EmuTensorMap {
  uint32_t magic;         // kEmuTensorMapMagic
  uint8_t rank;           // 1..5
  uint8_t element_bytes;  // 2 or 4
  uint16_t swizzle;       // bytes: 0, 32, 64, 128
  const void* base;       // the array's first element
  uint32_t dims[5];       // array extents
  uint16_t box[5];        // box extents
  uint64_t strides[4];    // bytes between consecutive indices of dims 1..rank-1
  const char* name;       // the operand's name, for error messages
  uint8_t is_float;       // how a TMA reduction adds the elements
};
enum : uint32_t { kEmuTensorMapMagic = 0x544d4150 };  // "TMAP"

#ifdef __cplusplus
static_assert(sizeof(EmuTensorMap) <= 128, "an EmuTensorMap must fit a CUtensorMap");
}  // namespace pallas::emulator
extern "C" {
#endif

/// The value of a special register (see SpecialRegister).
int32_t pallas_emu_sreg(int32_t which);
/// bar.sync `id`, `count` threads (0: all threads of the CTA).
void pallas_emu_barrier(int32_t id, int32_t count);
/// shfl.sync: returns the value in the low 32 bits and the PTX predicate
/// (source lane in range) in bit 32. `clamp` is PTX's c operand.
int64_t pallas_emu_shfl(int32_t mode, int32_t member_mask, int32_t value, int32_t lane_or_offset,
                        int32_t clamp);
/// vote.sync: ballot returns the mask, any/all/uni return 0 or 1.
int32_t pallas_emu_vote(int32_t mode, int32_t member_mask, int32_t predicate);
/// match.sync: the lanes of the member mask holding the same value (any), or
/// the member mask if all hold the same value, else 0 (all); bit 32 is the
/// `all` predicate.
int64_t pallas_emu_match(int32_t mode, int32_t member_mask, int64_t value);
/// redux.sync over the i32 values of the member mask.
int32_t pallas_emu_redux(int32_t kind, int32_t member_mask, int32_t value);
/// Checked before every load, store and atomic: the address must have the
/// alignment the access declares (the GPU would fault, or the backend split it
/// had it known less), global accesses must lie in a buffer of the launch, and
/// shared accesses are recorded for race detection.
void pallas_emu_access(const void* address, int64_t bytes, int64_t align, int32_t flags);
/// The current CTA's shared memory (static shared variables first, then dynamic).
void* pallas_emu_shared_base(void);
/// A spin-wait point (nanosleep, failed try-waits): lets other threads run.
void pallas_emu_yield(void);
/// Before an atomic read-modify-write: a yield that counts as progress.
void pallas_emu_yield_rmw(void);
/// setmaxnreg: checks PTX's rules (a multiple of 8 in [24, 256]).
void pallas_emu_setmaxnreg(int32_t count);

/// wgmma.mma_async.m64n{n}k16 (f32 accumulator) for the calling thread's
/// registers `acc` (n / 2 of them, PTX's fragment order): acc = (scale_d ?
/// acc : 0) + A @ B, A (64 x 16) and B (n x 16) read from shared memory
/// through matrix descriptors (swizzled; K-major, or M/N-major where
/// `trans_a`/`trans_b` is 1), `type` 0 for f16, 1 for bf16. Reads are
/// checked like loads.
void pallas_emu_wgmma(float* acc, int32_t n, int64_t desc_a, int64_t desc_b, int32_t type,
                      int32_t trans_a, int32_t trans_b, int32_t scale_d);
/// wgmma.mma_async.m64n{n}k16 with A in registers: `a_words` are the
/// thread's 4 words of A's fragment (PTX's order); the warp's lanes exchange
/// them (a warp collective: every lane of the warp calls it), B is read
/// through its descriptor as above.
void pallas_emu_wgmma_register_a(float* acc, int32_t n, const int32_t* a_words, int64_t desc_b,
                                 int32_t type, int32_t trans_b, int32_t scale_d);
/// wgmma.fence, wgmma.commit_group, wgmma.wait_group: the thread's wgmma
/// groups. The multiplies compute when issued here, but their operands stay
/// in use until a wait completes their group: overwriting one before is a
/// failure (and a descriptor's swizzle must match the TMA copy that wrote
/// the operand).
void pallas_emu_wgmma_fence(void);
/// A read of `count` accumulator registers (f32) in place: their tokens become the values the
/// wgmmas computed (wgmma.cc, "Accumulator tokens"). With `checked` (the load of an
/// accumulator, after its wait) a register whose wgmma group is not complete is a failure.
void pallas_emu_wgmma_read(float* registers, int32_t count, int32_t checked);
/// Before `count` accumulator registers (f32, at `registers`) are overwritten by a store: a
/// register that still holds a token of a wgmma group not yet complete is a failure (the
/// multiply would write it after the store).
void pallas_emu_wgmma_overwrite(const float* registers, int32_t count);
/// fence.proxy.async (.shared::cta or all state spaces): the thread's earlier
/// shared-memory stores become visible to the async proxy; a TMA store or a
/// wgmma reading a thread's store that no such fence followed fails.
void pallas_emu_fence_proxy_async(void);
void pallas_emu_wgmma_commit(void);
void pallas_emu_wgmma_wait(int32_t pending);

/// ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16, warp-wide: `row` is
/// this lane's row address (lanes 8 j .. 8 j + 7 give matrix j's rows, each
/// 16 bytes, 16-byte aligned); out[j] receives this lane's two elements of
/// matrix j (row lane / 4, columns 2 (lane % 4) + {0, 1}; with `trans`, column
/// lane / 4, rows 2 (lane % 4) + {0, 1}), low half first. Reads are checked
/// like loads by this lane.
void pallas_emu_ldmatrix(int32_t num, int32_t trans, const void* row, int32_t* out);
/// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, warp-wide:
/// `frag` is this lane's registers, 4 words of A, 2 of B, then 4 floats of C
/// (as words) and 4 of D written here (PTX's fragment order); `type` 0 for
/// f16, 1 for bf16.
void pallas_emu_mma_sync(int32_t type, int32_t* frag);

/// mbarrier.init: `count` arrivals per phase, phase 0, no transactions.
void pallas_emu_mbarrier_init(void* barrier, int32_t count);
/// mbarrier.inval: the barrier's memory may be initialised again.
void pallas_emu_mbarrier_inval(void* barrier);
/// mbarrier.test_wait.parity: 1 once the phase of parity `parity` has
/// completed; else 0, after letting the other threads run.
int32_t pallas_emu_mbarrier_test_parity(void* barrier, int32_t parity);
/// cp.async (sm_80): copies `src_bytes` of the `bytes` from global `src` to
/// shared `dst`, zero-filling the rest.
void pallas_emu_cp_async(void* dst, const void* src, int32_t bytes, int32_t src_bytes);
/// cp.async.mbarrier.arrive.noinc: the thread's arrival on `barrier` once its
/// earlier cp.async copies have landed (at once here: they land when issued).
void pallas_emu_cp_async_mbarrier_arrive_noinc(void* barrier);
/// cp.async.mbarrier.arrive (without .noinc): the barrier's current phase
/// also waits for the thread's earlier cp.async copies (no arrival of its own).
void pallas_emu_cp_async_mbarrier_arrive(void* barrier);
/// mbarrier.arrive: one arrival, on a barrier of this CTA or (an address
/// from mapa) of another CTA of its cluster; returns the state (unused: 0).
int64_t pallas_emu_mbarrier_arrive(void* barrier);
/// mbarrier.arrive.expect_tx: announce `bytes` of copies, then arrive.
void pallas_emu_mbarrier_arrive_expect_tx(void* barrier, int32_t bytes);
/// mbarrier.try_wait.parity in a loop: returns once the phase of parity
/// `parity` has completed (a spin-wait point; a deadlock names the barrier).
void pallas_emu_mbarrier_wait_parity(void* barrier, int32_t parity);
/// cp.async.bulk.tensor global -> shared: the box at `coords` (innermost
/// first, `rank` of them) of `descriptor` (an EmuTensorMap) into `dst`,
/// swizzled, elements outside the array read as zero; its bytes complete
/// transactions on `barrier`. Bounds-checked against the launch's buffers.
void pallas_emu_tma_load(void* dst, const void* descriptor, void* barrier, int32_t rank, int32_t c0,
                         int32_t c1, int32_t c2, int32_t c3, int32_t c4);
/// The same with .multicast::cluster: the box lands at `dst`'s offset in the
/// shared memory of every CTA of the cluster whose rank is a bit of `mask`,
/// completing transactions on the mbarrier at `barrier`'s offset in each.
void pallas_emu_tma_load_multicast(void* dst, const void* descriptor, void* barrier, int32_t mask,
                                   int32_t rank, int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                   int32_t c4);
/// mapa: the address of `p`'s shared-memory location in the cluster's CTA `rank`.
void* pallas_emu_mapa(const void* p, int32_t rank);
/// barrier.cluster.arrive and .wait: the wait returns once every thread of
/// the cluster that has not exited has arrived.
void pallas_emu_cluster_arrive(void);
void pallas_emu_cluster_wait(void);
/// cp.async.bulk.tensor shared -> global: the box at `coords` from `src`;
/// elements outside the array are not written.
void pallas_emu_tma_store(const void* descriptor, const void* src, int32_t rank, int32_t c0,
                          int32_t c1, int32_t c2, int32_t c3, int32_t c4);
/// cp.reduce.async.bulk.tensor .add shared -> global: adds the box at
/// `coords` from `src` to the array (f32 or i32, from the descriptor).
void pallas_emu_tma_reduce_add(const void* descriptor, const void* src, int32_t rank, int32_t c0,
                               int32_t c1, int32_t c2, int32_t c3, int32_t c4);
/// cp.async.bulk.prefetch.tensor: a hint; checks the descriptor and rank.
void pallas_emu_tma_prefetch(const void* descriptor, int32_t rank, int32_t c0, int32_t c1,
                             int32_t c2, int32_t c3, int32_t c4);
/// cp.async.bulk.commit_group and wait_group(.read) `pending`.
void pallas_emu_bulk_commit(void);
void pallas_emu_bulk_wait(int32_t pending, int32_t read_only);

#ifdef __cplusplus
}
#endif
