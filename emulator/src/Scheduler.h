// Internal state of the SIMT runtime: CTAs, threads (fibers), barriers, warp
// collectives and shared-memory shadow state, and the running launch.
#pragma once

#include "pallas/emulator/simt.h"

#include <boost/context/detail/fcontext.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace pallas::emulator::detail {

using boost::context::detail::fcontext_t;

/// Why a thread is not running.
enum class Wait { kRunnable, kBarrier, kCollective, kSpin, kDone };

struct Thread {
  int linear = 0;  // x + y * ntid.x + z * ntid.x * ntid.y
  int x = 0, y = 0, z = 0;
  fcontext_t context = nullptr;
  std::byte* stack_low = nullptr;
  std::byte* stack_high = nullptr;
  Wait wait = Wait::kRunnable;
  int barrier_id = -1;
  uint64_t wait_generation = 0;  // of the barrier or collective waited on
};

/// One bar.sync id of a CTA.
struct Barrier {
  int arrived = 0;
  int expected = 0;
  uint64_t generation = 0;
};

/// The warp collective (shfl.sync or vote.sync) a warp's lanes are meeting at.
struct Collective {
  enum Kind { kShuffle, kVote, kMatch, kRedux } kind = kShuffle;
  bool active = false;
  int32_t mode = 0;
  uint32_t member_mask = 0;
  uint32_t arrived = 0;
  std::array<int64_t, 32> value{};
  std::array<int32_t, 32> operand{}, clamp{};
  std::array<int64_t, 32> result{};
  uint64_t generation = 0;
};

/// Who last wrote and read a byte of shared memory, in which barrier epoch.
struct ShadowByte {
  static constexpr int32_t kNobody = -1, kSeveral = -2;
  int32_t writer = kNobody;
  int32_t reader = kNobody;
  uint32_t write_epoch = 0;
  uint32_t read_epoch = 0;
};

struct Cta {
  int64_t x = 0, y = 0, z = 0;
  std::vector<Thread> threads;
  /// Accesses up to this far past the end of shared memory are reported as
  /// shared-memory overruns (not as global accesses that miss every buffer).
  static constexpr int64_t kSharedGuardBytes = 64 * 1024;
  std::vector<unsigned __int128> shared;  // 16-byte aligned, shared_bytes + the guard
  int64_t shared_bytes = 0;
  std::vector<ShadowByte> shadow;
  std::array<Barrier, 16> barriers{};
  std::vector<Collective> warps;
  uint32_t epoch = 1;  // advanced by every barrier of all the CTA's threads
};

struct LaunchState {
  const LaunchConfig* config = nullptr;
  std::vector<std::unique_ptr<Cta>> ctas;  // the resident batch
  Cta* cta = nullptr;                      // running now
  Thread* thread = nullptr;
  fcontext_t scheduler = nullptr;
  std::string error;           // the first failure
  uint64_t state_changes = 0;  // barrier/collective arrivals, exits: progress
};

/// The launch running on this OS thread.
LaunchState& current();

/// "block (1, 0, 0), thread (17, 0, 0)"
std::string where(const Cta& cta, const Thread& thread);

/// Records `message` (the first failure wins) for the running thread and
/// stops it: it is never resumed, and the launch ends.
[[noreturn]] void fail(const std::string& message);

/// Suspends the running thread until the scheduler resumes it.
void suspend(Wait why);

}  // namespace pallas::emulator::detail
