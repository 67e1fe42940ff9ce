// Internal state of the SIMT runtime: CTAs, threads (fibers), barriers, warp
// collectives and shared-memory shadow state, and the running launch.
#pragma once

#include "pallas/emulator/simt.h"

#include <boost/context/detail/fcontext.hpp>

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pallas::emulator::detail {

using boost::context::detail::fcontext_t;

/// Why a thread is not running.
enum class Wait { kRunnable, kBarrier, kCollective, kSpin, kDone };

/// One accumulator register's value from a wgmma, and the wgmma group that computed it
/// (wgmma.cc, "Accumulator tokens").
struct WgmmaResult {
  uint32_t token = 0;  // the bits the register holds meanwhile
  float value = 0;
  uint64_t group = 0;
};

struct Thread {
  int linear = 0;  // x + y * ntid.x + z * ntid.x * ntid.y
  int x = 0, y = 0, z = 0;
  fcontext_t context = nullptr;
  std::byte* stack_low = nullptr;
  std::byte* stack_high = nullptr;
  Wait wait = Wait::kRunnable;
  int barrier_id = -1;
  uint64_t wait_generation = 0;  // of the barrier or collective waited on
  std::string spin_on;           // what a spinning thread waits for (mbarrier waits)
  /// Per mbarrier (by shared offset): how many of its phases this thread has
  /// seen complete (mbarrier.try_wait.parity); it may read what copies
  /// completing those phases wrote (tma.cc).
  std::map<int64_t, uint32_t> phases_seen;
  /// Bulk async-groups (TMA stores): groups committed, and groups known
  /// complete (cp.async.bulk.wait_group.read); a store belongs to group
  /// `bulk_committed` until the next commit.
  uint64_t bulk_committed = 0, bulk_completed = 0;
  /// wgmma groups, the same way: a wgmma.mma_async belongs to group
  /// `wgmma_committed` until wgmma.commit_group; wgmma.wait_group(n) completes
  /// all but the newest n committed groups (wgmma.cc).
  uint64_t wgmma_committed = 0, wgmma_completed = 0;
  /// The results of this thread's wgmmas, which its accumulator registers hold as tokens
  /// until read (wgmma.cc, "Accumulator tokens"): a ring, allocated at the first wgmma.
  std::vector<WgmmaResult> wgmma_results;
  uint32_t wgmma_result_serial = 0;  // of the last result handed out (0: none yet)
  /// Shared offsets this thread's cp.async copies wrote that no
  /// cp.async.mbarrier.arrive tracks yet.
  std::vector<int64_t> cp_async_untracked;
  /// barrier.cluster: arrived (and not yet waited), in the cluster barrier's
  /// generation `cluster_generation`.
  bool cluster_arrived = false;
  uint64_t cluster_generation = 0;
  /// Has waited on barrier.cluster at least once: the cluster's other CTAs
  /// have started (CUDA guarantees no more), so it may reach their shared memory.
  bool cluster_started = false;
  /// fence.proxy.async (generic -> async proxy) executed so far: the
  /// thread's earlier shared-memory stores are visible to TMA stores and
  /// wgmma once it has fenced after them.
  uint32_t proxy_fences = 0;
};

/// One bar.sync id of a CTA.
struct Barrier {
  int arrived = 0;
  int expected = 0;
  uint64_t generation = 0;
};

/// The warp collective (shfl.sync or vote.sync) a warp's lanes are meeting at.
struct Collective {
  // kGather: every lane receives every lane's value (ldmatrix's row
  // addresses; kWgmmaA: two words of wgmma's A registers); kMma: `value`
  // points at each lane's mma.sync registers.
  enum Kind { kShuffle, kVote, kMatch, kRedux, kGather, kWgmmaA, kMma } kind = kShuffle;
  bool active = false;
  int32_t mode = 0;
  uint32_t member_mask = 0;
  uint32_t arrived = 0;
  std::array<int64_t, 32> value{};
  std::array<int32_t, 32> operand{}, clamp{};
  std::array<int64_t, 32> result{};
  std::array<int64_t*, 32> gather{};  // kGather: where each lane wants the 32 values
  uint64_t generation = 0;
};

/// An mbarrier object in shared memory (PTX ISA, "mbarrier"): a phase
/// completes when every expected arrival has arrived and the transaction
/// count (bytes announced by expect-tx minus bytes copied) is back at zero.
struct MBarrier {
  int32_t expected = 0;  // arrivals per phase
  int32_t pending = 0;   // arrivals still missing in the current phase
  int64_t tx = 0;        // transaction bytes still outstanding
  uint32_t phase = 0;    // the current (incomplete) phase
  /// Cluster ranks of the CTAs whose threads arrived in the current phase
  /// (a release barrier of a multicast pipeline counts the consumers of
  /// every CTA of the cluster): its completion orders their accesses too.
  uint32_t arrived_ranks = 0;
};

/// Who last wrote and read a byte of shared memory, in which barrier epoch.
struct ShadowByte {
  static constexpr int32_t kNobody = -1, kSeveral = -2;
  int32_t writer = kNobody;
  int32_t reader = kNobody;
  uint32_t write_epoch = 0;
  uint32_t read_epoch = 0;
  /// Written by a TMA load completing phase `copy_phase` of the mbarrier at
  /// shared offset `copy_barrier` (-1: not): a thread reads it only once it
  /// has waited for that phase.
  /// kUntrackedCopy: written by a cp.async no mbarrier tracks yet.
  static constexpr int64_t kUntrackedCopy = -2;
  int64_t copy_barrier = -1;
  uint32_t copy_phase = 0;
  /// Read by a TMA store of thread `store_thread` in its bulk group
  /// `store_group` (kNobody: not): nothing writes it until that group is waited for.
  int32_t store_thread = kNobody;
  uint64_t store_group = 0;
  /// Read by a wgmma of thread `wgmma_thread` in its wgmma group
  /// `wgmma_group` (kNobody: not): nothing writes it until that group is
  /// waited for (wgmma.wait_group).
  int32_t wgmma_thread = kNobody;
  uint64_t wgmma_group = 0;
  /// The writer's Thread::proxy_fences when it wrote the byte (a thread's
  /// store): the async proxy (a TMA store, wgmma) reads it only once the
  /// writer has fenced since.
  uint32_t write_fences = 0;
  /// The swizzle (0, 32, 64, 128 bytes) of the TMA copy that last wrote the
  /// byte; -1 when a thread wrote it (no layout known). A wgmma descriptor
  /// reading it must use the same swizzle.
  int16_t tma_swizzle = -1;
  /// Distributed shared memory: 1 + the cluster barrier's generation when a thread of this
  /// CTA last stored the byte, and when a thread of another CTA of the cluster last loaded it
  /// (0: never). The other CTA's access and this CTA's store must have a cluster barrier
  /// between them (its CTA barriers do not order other CTAs).
  uint32_t write_generation = 0;
  uint32_t remote_read_generation = 0;
};

struct Cluster;

struct Cta {
  int64_t x = 0, y = 0, z = 0;
  Cluster* cluster = nullptr;
  int rank = 0;  // %cluster_ctarank
  std::vector<Thread> threads;
  /// Accesses up to this far past the end of shared memory are reported as
  /// shared-memory overruns (not as global accesses that miss every buffer).
  static constexpr int64_t kSharedGuardBytes = 64 * 1024;
  /// Shared memory starts at a 1024-byte boundary inside `storage` (TMA's
  /// 128-byte swizzle needs it; the GPU's dynamic shared memory has it too).
  static constexpr int64_t kSharedAlign = 1024;
  std::vector<unsigned __int128> storage;  // shared_bytes + the guard + the alignment slack
  std::byte* shared = nullptr;             // kSharedAlign-aligned, in storage
  int64_t shared_bytes = 0;
  std::vector<ShadowByte> shadow;
  std::array<Barrier, 16> barriers{};
  std::vector<Collective> warps;
  /// mbarrier objects, by shared offset (tma.cc).
  std::map<int64_t, MBarrier> mbarriers;
  /// Per mbarrier (by shared offset): the last phase a TMA load into this CTA
  /// completes, and the operand it copies. Some thread must wait for that
  /// phase before the barrier is invalidated or the program ends: on the GPU
  /// an unawaited copy may still land in shared memory (and complete a
  /// barrier) after the SM has given it to the next program (tma.cc,
  /// unawaited_copy).
  std::map<int64_t, std::pair<uint32_t, std::string>> copied_phases;
  uint32_t epoch = 1;  // advanced by every barrier of all the CTA's threads
};

/// A thread-block cluster (LaunchConfig::cluster CTAs, consecutive along x):
/// its CTAs by rank, and barrier.cluster's generation, which advances when
/// every thread of the cluster that has not exited has arrived in it
/// (Thread::cluster_arrived, cluster_generation).
struct Cluster {
  std::vector<Cta*> ctas;
  uint64_t generation = 0;
};

struct LaunchState {
  const LaunchConfig* config = nullptr;
  std::vector<std::unique_ptr<Cta>> ctas;          // the resident batch
  std::vector<std::unique_ptr<Cluster>> clusters;  // of the resident batch
  Cta* cta = nullptr;                              // running now
  Thread* thread = nullptr;
  fcontext_t scheduler = nullptr;
  std::string error;           // the first failure
  uint64_t state_changes = 0;  // barrier/collective arrivals, exits: progress
};

/// The launch running on this OS thread.
LaunchState& current();

/// "block (1, 0, 0), thread (17, 0, 0)"
std::string where(const Cta& cta, const Thread& thread);
/// "thread (17, 0, 0)" ("block (1, 0, 0), thread (17, 0, 0)" in another
/// CTA than the running thread's)
std::string thread_name(const Cta& cta, int32_t linear);
/// The CTA of the running thread's cluster whose shared memory holds the
/// `bytes` at `p` (the running CTA's own first); fails naming `what` if none does.
Cta& shared_owner(const void* p, int64_t bytes, const char* what);
/// (The checks below run for every byte an access touches: their messages are views, made
/// into strings only when a check fails.)
/// Fails when byte `offset` of shared memory is still read by a TMA store
/// whose bulk group was not waited for; `writer` names what writes it.
void check_store_done(const Cta& cta, int64_t offset, std::string_view writer);
/// Fails unless the running thread has waited on barrier.cluster before `what` reaches
/// another CTA's shared memory: until then the cluster's other CTAs may not have started,
/// nor initialised their barriers.
void require_cluster_started(const char* what);
/// Fails when `what` (at `shared_offset` of `cta`'s shared memory, where one is given) reaches
/// `cta`, a peer of the running thread's CTA whose threads have all exited: its shared memory
/// is gone (a barrier.cluster before the exit keeps every CTA of the cluster until the others
/// are done).
void require_running(const Cta& cta, std::string_view what, int64_t shared_offset = -1);
/// Fails unless the thread that last stored byte `offset` (if a thread did)
/// executed fence.proxy.async after it: `reader` (a TMA store, a wgmma
/// operand) reads it through the async proxy, which may not see the store
/// otherwise.
void check_proxy_fenced(const Cta& cta, int64_t offset, std::string_view reader);
/// Fails if an unfinished wgmma (not yet waited for) reads shared `offset`,
/// which `writer` is about to overwrite.
void check_wgmma_done(const Cta& cta, int64_t offset, std::string_view writer);
/// Fails unless the bytes [offset, offset + bytes) of `cta`'s shared memory,
/// about to be overwritten by an asynchronous copy (`what`) issued by this
/// thread (of that CTA or, multicast, of another of its cluster), were
/// released: no other thread touched them since the last barrier, no TMA
/// store still reads them.
void check_stage_released(const Cta& cta, int64_t offset, int64_t bytes, std::string_view what);

/// Fails when thread `t`'s stack pointer is within a red zone of the bottom
/// of its fiber's stack. The stacks have no guard page, so a kernel whose
/// frame outgrows one would write over its neighbours unnoticed (TMA
/// descriptors passed by value were the first victims).
void check_stack(const Thread& t);

/// Records `message` (the first failure wins) for the running thread and
/// stops it: it is never resumed, and the launch ends.
[[noreturn]] void fail(const std::string& message);
/// A TMA load into `cta` completing a phase of the mbarrier at `offset` (every
/// mbarrier when negative) that no thread of the CTA has waited for, described
/// ("" when none); with `before_phase`, only a load completing an earlier phase.
std::string unawaited_copy(const Cta& cta, int64_t offset = -1, uint32_t before_phase = UINT32_MAX);

/// Suspends the running thread until the scheduler resumes it.
void suspend(Wait why);

/// An f16 (IEEE binary16) or bf16 value's bits as a float, exactly.
float half_to_float(uint16_t h, bool bf16);

/// The warp's exchange of wgmma's A registers (collectives.cc): every lane
/// passes two of its words (`part` 0: words 0-1, 1: words 2-3, low word
/// first) and receives every lane's in `lanes[32]`.
void gather_wgmma_a(int32_t part, int64_t words, int64_t* lanes);

}  // namespace pallas::emulator::detail
