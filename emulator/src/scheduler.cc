// The scheduler: one fiber per GPU thread (Boost.Context fcontext), a batch of
// `concurrent_ctas` CTAs resident at once, passes over their threads until all
// exit, and deadlock detection when a pass makes no progress.

#include "Scheduler.h"

#include "pallas/emulator/abi.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#if defined(__SANITIZE_ADDRESS__)
#define PALLAS_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PALLAS_ASAN_FIBERS 1
#endif
#endif
#ifdef PALLAS_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif

namespace pallas::emulator::detail {

using boost::context::detail::jump_fcontext;
using boost::context::detail::make_fcontext;
using boost::context::detail::transfer_t;

namespace {
thread_local LaunchState* running = nullptr;

// AddressSanitizer follows the stack switches between the scheduler and the
// thread fibers (its fake stacks and stack bounds, see
// sanitizer/common_interface_defs.h): every jump_fcontext is bracketed by
// start_switch (the stack being entered) and finish_switch (on arrival). No-ops
// in other builds.
// The scheduler's stack, recorded on every arrival in a fiber.
thread_local const void* scheduler_stack_bottom = nullptr;
thread_local size_t scheduler_stack_size = 0;
#ifdef PALLAS_ASAN_FIBERS
void start_switch(void** fake_stack, const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
}
void finish_switch(void* fake_stack, const void** bottom_old, size_t* size_old) {
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
}
#else
void start_switch(void**, const void*, size_t) {}
void finish_switch(void*, const void**, size_t*) {}
#endif

/// Into the scheduler from a thread fiber; `fake_stack` null when the fiber ends.
void switch_to_scheduler(void** fake_stack) {
  start_switch(fake_stack, scheduler_stack_bottom, scheduler_stack_size);
}

std::string triple(int64_t x, int64_t y, int64_t z) {
  std::ostringstream os;
  os << "(" << x << ", " << y << ", " << z << ")";
  return os.str();
}

/// Entry of every thread fiber: run the kernel for this thread, then exit.
void fiber_main(transfer_t from) {
  finish_switch(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
  LaunchState& s = current();
  s.scheduler = from.fctx;
  s.config->entry(s.config->args);
  s.thread->wait = Wait::kDone;
  ++s.state_changes;
  switch_to_scheduler(nullptr);
  jump_fcontext(s.scheduler, nullptr);  // never resumed
}

/// Compact thread ranges: "threads 0-63, 96"
std::string thread_ranges(const std::vector<int>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    os << (i ? ", " : "") << ids[i];
    if (j > i) os << "-" << ids[j];
    i = j + 1;
  }
  return os.str();
}

/// Who waits on what, per CTA, for the deadlock report.
std::string describe_deadlock(const LaunchState& s) {
  std::ostringstream os;
  os << "emulator: kernel '" << s.config->kernel
     << "': deadlock, no thread can make progress (linear thread ids):";
  for (const auto& cta : s.ctas) {
    std::map<int, std::vector<int>> at_barrier;
    std::vector<int> exited, in_collective, spinning;
    for (const Thread& t : cta->threads) {
      switch (t.wait) {
        case Wait::kBarrier:
          at_barrier[t.barrier_id].push_back(t.linear);
          break;
        case Wait::kDone:
          exited.push_back(t.linear);
          break;
        case Wait::kCollective:
          in_collective.push_back(t.linear);
          break;
        case Wait::kSpin:
          spinning.push_back(t.linear);
          break;
        case Wait::kRunnable:
          break;
      }
    }
    if (exited.size() == cta->threads.size()) continue;
    os << "\n  block " << triple(cta->x, cta->y, cta->z) << ":";
    for (const auto& [id, ids] : at_barrier)
      os << "\n    barrier " << id << ": " << cta->barriers[id].arrived << " of "
         << cta->barriers[id].expected << " threads arrived (waiting: threads "
         << thread_ranges(ids) << ")";
    if (!in_collective.empty())
      os << "\n    waiting in a warp collective (shfl/vote) for lanes that never arrive: threads "
         << thread_ranges(in_collective);
    if (!spinning.empty())
      os << "\n    spinning (nanosleep, try-wait, semaphore wait): threads "
         << thread_ranges(spinning);
    std::map<std::string, std::vector<int>> on_mbarrier;
    for (const Thread& t : cta->threads)
      if (t.wait == Wait::kSpin && !t.spin_on.empty()) on_mbarrier[t.spin_on].push_back(t.linear);
    for (const auto& [what, ids] : on_mbarrier)
      os << "\n    waiting on " << what << ": threads " << thread_ranges(ids);
    if (!exited.empty()) os << "\n    exited: threads " << thread_ranges(exited);
  }
  return os.str();
}

/// Runs the resident CTAs to completion; false on a failed check or deadlock.
bool run_batch(LaunchState& s, std::mt19937_64* rng) {
  std::vector<std::pair<Cta*, Thread*>> order;
  for (auto& cta : s.ctas)
    for (Thread& t : cta->threads) order.emplace_back(cta.get(), &t);
  // A spinning thread may need several passes to see a value another thread
  // wrote (a spin loop can have several yield points: load, then
  // compare-and-swap), so only this many passes in a row without progress
  // make a deadlock.
  constexpr int kIdlePassesForDeadlock = 4;
  int idle_passes = 0;
  for (;;) {
    if (rng) std::shuffle(order.begin(), order.end(), *rng);
    uint64_t before = s.state_changes;
    bool ran = false, pending = false;
    for (auto [cta, t] : order) {
      if (t->wait == Wait::kDone) continue;
      pending = true;
      if (t->wait == Wait::kBarrier &&
          cta->barriers[t->barrier_id].generation == t->wait_generation)
        continue;
      if (t->wait == Wait::kCollective &&
          cta->warps[t->linear / 32].generation == t->wait_generation)
        continue;
      ran |= t->wait != Wait::kSpin;
      t->wait = Wait::kRunnable;
      s.cta = cta;
      s.thread = t;
      void* fake_stack = nullptr;
      start_switch(&fake_stack, t->stack_low, static_cast<size_t>(t->stack_high - t->stack_low));
      transfer_t back = jump_fcontext(t->context, nullptr);
      finish_switch(fake_stack, nullptr, nullptr);
      t->context = back.fctx;
      if (!s.error.empty()) return false;
    }
    if (!pending) return true;
    idle_passes = !ran && s.state_changes == before ? idle_passes + 1 : 0;
    if (idle_passes == kIdlePassesForDeadlock) {
      s.error = describe_deadlock(s);
      return false;
    }
  }
}

}  // namespace

LaunchState& current() { return *running; }

void check_stack(const Thread& t) {
  constexpr uintptr_t kRedZoneBytes = 16 * 1024;
  const auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const auto low = reinterpret_cast<uintptr_t>(t.stack_low);
  if (sp < low + kRedZoneBytes)
    fail("the kernel's frame outgrows the emulated thread's stack of " +
         std::to_string(reinterpret_cast<uintptr_t>(t.stack_high) - low) +
         " bytes (pallas::emulator::Options::stack_bytes)");
}

std::string where(const Cta& cta, const Thread& t) {
  return "block " + triple(cta.x, cta.y, cta.z) + ", thread " + triple(t.x, t.y, t.z);
}

void fail(const std::string& message) {
  LaunchState& s = current();
  if (s.error.empty())
    s.error = "emulator: kernel '" + std::string(s.config->kernel) + "', " +
              where(*s.cta, *s.thread) + ": " + message;
  s.thread->wait = Wait::kDone;
  switch_to_scheduler(nullptr);
  jump_fcontext(s.scheduler, nullptr);  // never resumed
  __builtin_unreachable();
}

void suspend(Wait why) {
  LaunchState& s = current();
  s.thread->wait = why;
  void* fake_stack = nullptr;
  switch_to_scheduler(&fake_stack);
  transfer_t back = jump_fcontext(s.scheduler, nullptr);
  finish_switch(fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
  s.scheduler = back.fctx;
}

}  // namespace pallas::emulator::detail

namespace pallas::emulator {

using namespace detail;

bool launch(const LaunchConfig& config, std::string& error) {
  const auto& [bx, by, bz] = config.block;
  int64_t threads = int64_t{bx} * by * bz;
  if (bx <= 0 || by <= 0 || bz <= 0 || threads > 1024) {
    error = "emulator: kernel '" + std::string(config.kernel) + "': block of " +
            std::to_string(threads) + " threads; 1 to 1024 are allowed";
    return false;
  }
  if (config.options.concurrent_ctas <= 0) {
    error = "emulator: concurrent_ctas must be positive";
    return false;
  }
  const int64_t total = config.grid[0] * config.grid[1] * config.grid[2];
  if (total <= 0) return true;
  const int cluster = config.cluster;
  if (cluster < 1 || cluster > 16 || config.grid[0] % cluster != 0) {
    error = "emulator: kernel '" + std::string(config.kernel) + "': clusters of " +
            std::to_string(cluster) + " CTAs along x for a grid of " +
            std::to_string(config.grid[0]) +
            " along x; a cluster has 1 to 16 CTAs and divides the grid";
    return false;
  }
  if (config.options.concurrent_ctas < cluster) {
    error = "emulator: kernel '" + std::string(config.kernel) + "': concurrent_ctas " +
            std::to_string(config.options.concurrent_ctas) + " cannot hold a cluster of " +
            std::to_string(cluster) + " CTAs, which are resident together";
    return false;
  }

  LaunchState s;
  s.config = &config;
  LaunchState* saved = running;
  running = &s;
  struct Restore {
    LaunchState* saved;
    ~Restore() { running = saved; }
  } restore{saved};

  std::mt19937_64 rng(config.options.schedule_seed);
  std::mt19937_64* order_rng = config.options.schedule_seed ? &rng : nullptr;
  const uint64_t stack_bytes = std::max<uint64_t>(config.options.stack_bytes, 16 * 1024);
  // Whole clusters are resident (CTA c is rank c % cluster of its cluster:
  // grid[0] is a multiple of the cluster size).
  const int64_t resident =
      std::min<int64_t>(total, config.options.concurrent_ctas / cluster * cluster);
  std::vector<std::unique_ptr<std::byte[]>> stacks(static_cast<size_t>(resident * threads));
  // Not zeroed: the pages a thread never reaches are never touched.
  for (auto& stack : stacks) stack = std::make_unique_for_overwrite<std::byte[]>(stack_bytes);

  for (int64_t first = 0; first < total; first += resident) {
    s.ctas.clear();
    s.clusters.clear();
    for (int64_t c = first; c < std::min(total, first + resident); ++c) {
      auto cta = std::make_unique<Cta>();
      if ((c - first) % cluster == 0) s.clusters.push_back(std::make_unique<Cluster>());
      cta->cluster = s.clusters.back().get();
      cta->rank = static_cast<int>(c % cluster);
      cta->cluster->ctas.push_back(cta.get());
      cta->x = c % config.grid[0];
      cta->y = c / config.grid[0] % config.grid[1];
      cta->z = c / (config.grid[0] * config.grid[1]);
      cta->shared_bytes = config.shared_bytes;
      cta->storage.assign(
          static_cast<size_t>(
              (config.shared_bytes + Cta::kSharedGuardBytes + Cta::kSharedAlign + 15) / 16),
          0);
      auto raw = reinterpret_cast<uintptr_t>(cta->storage.data());
      cta->shared = reinterpret_cast<std::byte*>((raw + Cta::kSharedAlign - 1) / Cta::kSharedAlign *
                                                 Cta::kSharedAlign);
      cta->shadow.assign(static_cast<size_t>(config.shared_bytes), ShadowByte{});
      cta->warps.resize(static_cast<size_t>((threads + 31) / 32));
      cta->threads.resize(static_cast<size_t>(threads));
      for (int64_t i = 0; i < threads; ++i) {
        Thread& t = cta->threads[static_cast<size_t>(i)];
        t.linear = static_cast<int>(i);
        t.x = static_cast<int>(i % bx);
        t.y = static_cast<int>(i / bx % by);
        t.z = static_cast<int>(i / (int64_t{bx} * by));
        std::byte* stack = stacks[static_cast<size_t>((c - first) * threads + i)].get();
        t.stack_low = stack;
        t.stack_high = stack + stack_bytes;
        t.context = make_fcontext(t.stack_high, stack_bytes, fiber_main);
      }
      s.ctas.push_back(std::move(cta));
    }
    if (!run_batch(s, order_rng)) {
      error = s.error;
      return false;
    }
    for (const auto& cta : s.ctas)
      if (std::string copy = unawaited_copy(*cta); !copy.empty()) {
        error = "emulator: kernel '" + std::string(config.kernel) + "': program (" +
                std::to_string(cta->x) + ", " + std::to_string(cta->y) + ", " +
                std::to_string(cta->z) + ") ended before any of its threads waited for " + copy +
                " (on the GPU the copy may land in the shared memory of the next program)";
        return false;
      }
  }
  for (const Buffer& b : config.buffers) {
    if (!b.must_end_zero) continue;
    const auto* bytes = static_cast<const unsigned char*>(b.begin);
    for (uint64_t i = 0; i < b.bytes; ++i)
      if (bytes[i] != 0) {
        error = "emulator: kernel '" + std::string(config.kernel) + "': buffer '" + b.name +
                "' must be zero when the kernel ends, but byte " + std::to_string(i) + " is " +
                std::to_string(bytes[i]) + " (a semaphore not returned to zero)";
        return false;
      }
  }
  return true;
}

}  // namespace pallas::emulator

// ---- special registers, barriers, spin points ----

using namespace pallas::emulator;
using namespace pallas::emulator::detail;

extern "C" int32_t pallas_emu_sreg(int32_t which) {
  LaunchState& s = current();
  const Cta& cta = *s.cta;
  const Thread& t = *s.thread;
  const auto& block = s.config->block;
  const auto& grid = s.config->grid;
  const int threads = block[0] * block[1] * block[2];
  switch (which) {
    case kTidX:
      return t.x;
    case kTidY:
      return t.y;
    case kTidZ:
      return t.z;
    case kNtidX:
      return block[0];
    case kNtidY:
      return block[1];
    case kNtidZ:
      return block[2];
    case kCtaidX:
      return static_cast<int32_t>(cta.x);
    case kCtaidY:
      return static_cast<int32_t>(cta.y);
    case kCtaidZ:
      return static_cast<int32_t>(cta.z);
    case kNctaidX:
      return static_cast<int32_t>(grid[0]);
    case kNctaidY:
      return static_cast<int32_t>(grid[1]);
    case kNctaidZ:
      return static_cast<int32_t>(grid[2]);
    case kLaneId:
      return t.linear % 32;
    case kWarpId:
      return t.linear / 32;
    case kNwarpId:
      return (threads + 31) / 32;
    case kClusterCtaRank:
    case kClusterCtaidX:
      return cta.rank;
    case kClusterNctaRank:
    case kClusterNctaidX:
      return s.config->cluster;
    case kClusterCtaidY:
    case kClusterCtaidZ:
      return 0;
    case kClusterNctaidY:
    case kClusterNctaidZ:
      return 1;
    case kClusteridX:
      return static_cast<int32_t>(cta.x / s.config->cluster);
    case kClusteridY:
      return static_cast<int32_t>(cta.y);
    case kClusteridZ:
      return static_cast<int32_t>(cta.z);
    case kNclusteridX:
      return static_cast<int32_t>(grid[0] / s.config->cluster);
    case kNclusteridY:
      return static_cast<int32_t>(grid[1]);
    case kNclusteridZ:
      return static_cast<int32_t>(grid[2]);
  }
  fail("read of unknown special register " + std::to_string(which));
}

extern "C" void pallas_emu_barrier(int32_t id, int32_t count) {
  LaunchState& s = current();
  Cta& cta = *s.cta;
  const int threads = static_cast<int>(cta.threads.size());
  if (id < 0 || id >= static_cast<int32_t>(cta.barriers.size()))
    fail("bar.sync " + std::to_string(id) + ": barrier ids are 0 to 15");
  const int expected = count <= 0 ? threads : count;
  if (expected > threads || (expected % 32 != 0 && expected != threads))
    fail("bar.sync " + std::to_string(id) + " with a count of " + std::to_string(count) +
         "; it must be a multiple of 32 and at most the CTA's " + std::to_string(threads) +
         " threads");
  Barrier& b = cta.barriers[static_cast<size_t>(id)];
  if (b.arrived == 0) {
    b.expected = expected;
  } else if (b.expected != expected) {
    fail("bar.sync " + std::to_string(id) + " expects " + std::to_string(expected) +
         " threads while threads already waiting there expect " + std::to_string(b.expected));
  }
  ++s.state_changes;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    // A new race epoch: the participants' earlier accesses are ordered before
    // their later ones. For a named barrier of some threads (a warp-specialized
    // consumer's) this is coarse: it also orders threads that did not take
    // part (the emulator keeps one epoch per CTA, not a clock per thread).
    ++cta.epoch;
    return;
  }
  s.thread->barrier_id = id;
  s.thread->wait_generation = b.generation;
  suspend(Wait::kBarrier);
}

namespace {
/// The cluster barrier's arrivals in its current generation by threads that
/// have not exited, and the threads that have not exited.
std::pair<int, int> cluster_counts(const Cluster& cluster) {
  int arrived = 0, live = 0;
  for (const Cta* cta : cluster.ctas)
    for (const Thread& t : cta->threads) {
      if (t.wait == Wait::kDone) continue;  // an exited thread no longer counts, arrived or not
      ++live;
      arrived += t.cluster_arrived && t.cluster_generation == cluster.generation;
    }
  return {arrived, live};
}

/// Completes the cluster barrier once every thread of the cluster that has
/// not exited has arrived (PTX's barrier.cluster.wait).
void try_complete_cluster_barrier(Cluster& cluster) {
  const auto [arrived, live] = cluster_counts(cluster);
  if (arrived < live) return;
  ++cluster.generation;
  ++current().state_changes;
  for (Cta* cta : cluster.ctas) ++cta->epoch;  // orders the cluster's accesses, as bar.sync
}
}  // namespace

extern "C" void pallas_emu_cluster_arrive(void) {
  LaunchState& s = current();
  Thread& t = *s.thread;
  if (t.cluster_arrived)
    fail("barrier.cluster.arrive twice without a barrier.cluster.wait between them");
  t.cluster_arrived = true;
  t.cluster_generation = s.cta->cluster->generation;
  ++s.state_changes;
  try_complete_cluster_barrier(*s.cta->cluster);
}

extern "C" void pallas_emu_cluster_wait(void) {
  LaunchState& s = current();
  Thread& t = *s.thread;
  if (!t.cluster_arrived) fail("barrier.cluster.wait without a barrier.cluster.arrive before it");
  Cluster& cluster = *s.cta->cluster;
  while (cluster.generation == t.cluster_generation) {
    try_complete_cluster_barrier(cluster);
    if (cluster.generation != t.cluster_generation) break;
    const auto [arrived, live] = cluster_counts(cluster);
    t.spin_on = "the cluster barrier (" + std::to_string(arrived) + " of the cluster's " +
                std::to_string(live) + " running threads arrived)";
    suspend(Wait::kSpin);
  }
  t.spin_on.clear();
  t.cluster_arrived = false;
  t.cluster_started = true;
}

extern "C" void pallas_emu_yield(void) { suspend(Wait::kSpin); }

extern "C" void pallas_emu_yield_rmw(void) {
  // A read-modify-write may change memory (a signal, an atomic add of a
  // reduction), so the pass it runs in made progress: only loops that poll
  // with loads and compare-and-swaps that fail are deadlocks.
  ++current().state_changes;
  suspend(Wait::kSpin);
}

extern "C" void pallas_emu_setmaxnreg(int32_t count) {
  if (count < 24 || count > 256 || count % 8 != 0)
    fail("setmaxnreg " + std::to_string(count) +
         ": the register count must be a multiple of 8 in [24, 256]");
}
