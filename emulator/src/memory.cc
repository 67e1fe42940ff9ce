// Memory checks: every global access must lie inside one buffer of the launch;
// shared accesses are tracked per byte (last writer and readers, by barrier
// epoch) to find races.

#include "Scheduler.h"

#include "pallas/emulator/abi.h"

#include <cstdio>

using namespace pallas::emulator;
using namespace pallas::emulator::detail;

namespace {

std::string hex(uintptr_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(v));
  return buf;
}

[[noreturn]] void out_of_bounds(uintptr_t a, int64_t bytes, int32_t flags) {
  const LaunchState& s = current();
  std::string what = std::string(flags & kAccessAtomic  ? "atomic"
                                 : flags & kAccessStore ? "store"
                                                        : "load") +
                     " of " + std::to_string(bytes) + " bytes at " + hex(a);
  // Name the nearest buffer and how far off the access is.
  const Buffer* nearest = nullptr;
  uint64_t distance = UINT64_MAX;
  for (const Buffer& b : s.config->buffers) {
    auto begin = reinterpret_cast<uintptr_t>(b.begin), end = begin + b.bytes;
    uint64_t d = a < begin ? begin - a : a >= end ? a - end : 0;
    if (d < distance) distance = d, nearest = &b;
  }
  if (!nearest) fail("out-of-bounds " + what + ": the launch has no buffers");
  auto begin = reinterpret_cast<uintptr_t>(nearest->begin), end = begin + nearest->bytes;
  std::string range =
      "buffer '" + std::string(nearest->name) + "' [" + hex(begin) + ", " + hex(end) + ")";
  if (a >= end)
    fail("out-of-bounds " + what + ": " + std::to_string(a - end) + " bytes past the end of " +
         range);
  if (a < begin)
    fail("out-of-bounds " + what + ": " + std::to_string(begin - a) +
         " bytes before the start of " + range);
  fail("out-of-bounds " + what + ": it runs " + std::to_string(a + bytes - end) +
       " bytes past the end of " + range);
}

/// A load of byte `i`, which a TMA load wrote: the thread must have waited
/// for the mbarrier phase that copy completes.
void check_copy_seen(const Thread& t, int64_t i, const ShadowByte& sh) {
  if (sh.copy_barrier == ShadowByte::kUntrackedCopy)
    fail("a load of shared offset " + std::to_string(i) +
         " before its cp.async copy completed: no mbarrier tracks the copy yet "
         "(cp.async.mbarrier.arrive), so nothing says it has landed");
  auto seen = t.phases_seen.find(sh.copy_barrier);
  if (seen != t.phases_seen.end() && seen->second > sh.copy_phase) return;
  fail("a load of shared offset " + std::to_string(i) +
       " before its TMA copy completed: the copy completes phase " + std::to_string(sh.copy_phase) +
       " of the mbarrier at shared offset " + std::to_string(sh.copy_barrier) +
       ", which this thread has not waited for (mbarrier.try_wait.parity); it may read the "
       "stage's previous contents");
}

void check_race(Cta& cta, const Thread& t, int64_t offset, int64_t bytes, bool store) {
  const int32_t me = t.linear;
  for (int64_t i = offset; i < offset + bytes; ++i) {
    ShadowByte& sh = cta.shadow[static_cast<size_t>(i)];
    if (store) {
      check_store_done(cta, i, "a store by this thread");
      check_wgmma_done(cta, i, "a store by this thread");
      sh.copy_barrier = -1;  // the thread's own data now
      sh.tma_swizzle = -1;
    } else if (sh.copy_barrier != -1) {
      check_copy_seen(t, i, sh);
    }
    auto race = [&](int32_t other, const char* what) {
      fail("shared-memory race at shared offset " + std::to_string(i) + ": " +
           std::string(store ? "a store" : "a load") + " by this thread and " + what + " by " +
           (other == ShadowByte::kSeveral ? std::string("several other threads")
                                          : thread_name(cta, other)) +
           " with no barrier in between");
    };
    if (sh.write_epoch == cta.epoch && sh.writer != me) race(sh.writer, "a store");
    if (store && cta.cluster) {
      const uint32_t now = static_cast<uint32_t>(cta.cluster->generation) + 1;
      if (sh.remote_read_generation == now)
        fail("distributed shared-memory race at shared offset " + std::to_string(i) +
             ": a store by this thread and a load by a thread of another program of the "
             "cluster with no cluster barrier in between");
      sh.write_generation = now;
    }
    if (store) {
      if (sh.read_epoch == cta.epoch && sh.reader != me && sh.reader != ShadowByte::kNobody)
        race(sh.reader, "a load");
      sh.writer = me;
      sh.write_epoch = cta.epoch;
      sh.write_fences = t.proxy_fences;
    } else {
      sh.reader = sh.read_epoch == cta.epoch && sh.reader != me ? ShadowByte::kSeveral : me;
      sh.read_epoch = cta.epoch;
    }
  }
}

}  // namespace

namespace pallas::emulator::detail {

std::string thread_name(const Cta& cta, int32_t linear) {
  const Thread& t = cta.threads[static_cast<size_t>(linear)];
  const std::string name = "thread (" + std::to_string(t.x) + ", " + std::to_string(t.y) + ", " +
                           std::to_string(t.z) + ")";
  if (&cta == current().cta) return name;
  return "block (" + std::to_string(cta.x) + ", " + std::to_string(cta.y) + ", " +
         std::to_string(cta.z) + "), " + name;
}

Cta& shared_owner(const void* p, int64_t bytes, const char* what) {
  LaunchState& s = current();
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto holds = [&](const Cta& cta) {
    const auto base = reinterpret_cast<uintptr_t>(cta.shared);
    return a >= base &&
           a + static_cast<uint64_t>(bytes) <= base + static_cast<uint64_t>(cta.shared_bytes);
  };
  if (holds(*s.cta)) return *s.cta;
  if (s.cta->cluster)
    for (Cta* peer : s.cta->cluster->ctas)
      if (holds(*peer)) return *peer;
  const auto base = reinterpret_cast<uintptr_t>(s.cta->shared);
  fail(std::string(what) + " (" +
       (a >= base ? "shared offset " + std::to_string(a - base) : hex(a)) + ", " +
       std::to_string(bytes) + " bytes) is not inside the " + std::to_string(s.cta->shared_bytes) +
       " bytes of the shared memory of the program or of its cluster's programs");
}

void require_cluster_started(const char* what) {
  if (current().thread->cluster_started) return;
  fail(std::string(what) +
       " reaches another CTA of the cluster before this thread waited on barrier.cluster: "
       "the cluster's CTAs are not known to have started (nor initialised their barriers) "
       "until then");
}

void require_running(const Cta& cta, std::string_view what, int64_t shared_offset) {
  if (&cta == current().cta) return;
  for (const Thread& t : cta.threads)
    if (t.wait != Wait::kDone) return;
  fail(std::string(what) +
       (shared_offset >= 0 ? " at shared offset " + std::to_string(shared_offset) : "") +
       " reaches block (" + std::to_string(cta.x) + ", " + std::to_string(cta.y) + ", " +
       std::to_string(cta.z) +
       ") of the cluster, which has exited: a CTA's shared memory lives until it exits, so "
       "its cluster meets at barrier.cluster first");
}

void check_store_done(const Cta& cta, int64_t offset, std::string_view writer) {
  const ShadowByte& sh = cta.shadow[static_cast<size_t>(offset)];
  if (sh.store_thread == ShadowByte::kNobody) return;
  const Thread& issuer = cta.threads[static_cast<size_t>(sh.store_thread)];
  if (issuer.bulk_completed > sh.store_group) return;
  fail(std::string(writer) + " overwrites shared offset " + std::to_string(offset) +
       " while a TMA store still reads it (bulk group " + std::to_string(sh.store_group) + " of " +
       thread_name(cta, sh.store_thread) +
       ", not yet waited for): wait for the store (cp.async.bulk.wait_group.read, Pallas' "
       "wait_smem_to_gmem) before writing the stage again");
}

void check_proxy_fenced(const Cta& cta, int64_t offset, std::string_view reader) {
  const ShadowByte& sh = cta.shadow[static_cast<size_t>(offset)];
  if (sh.writer < 0 || sh.copy_barrier != -1) return;  // no thread's store (a copy's bytes)
  if (cta.threads[static_cast<size_t>(sh.writer)].proxy_fences != sh.write_fences) return;
  fail(std::string(reader) + " reads shared offset " + std::to_string(offset) + ", which " +
       thread_name(cta, sh.writer) +
       " stored without a fence.proxy.async after it: the async proxy (TMA, wgmma) may not "
       "see a thread's stores until it fences them (Pallas' commit_smem)");
}

void check_wgmma_done(const Cta& cta, int64_t offset, std::string_view writer) {
  const ShadowByte& sh = cta.shadow[static_cast<size_t>(offset)];
  if (sh.wgmma_thread == ShadowByte::kNobody) return;
  const Thread& issuer = cta.threads[static_cast<size_t>(sh.wgmma_thread)];
  if (issuer.wgmma_completed > sh.wgmma_group) return;
  fail(std::string(writer) + " overwrites shared offset " + std::to_string(offset) +
       " while a wgmma still reads it (wgmma group " + std::to_string(sh.wgmma_group) + " of " +
       thread_name(cta, sh.wgmma_thread) +
       ", not yet waited for): wait for the multiply (wgmma.wait_group, Pallas' wgmma_wait) "
       "before writing its operand again; a pipeline that leaves it in flight releases the "
       "step's buffers later (delay_release)");
}

void check_stage_released(const Cta& cta, int64_t offset, int64_t bytes, std::string_view what) {
  // A multicast copy into a peer's buffer: every access there is another thread's.
  const int32_t me = &cta == current().cta ? current().thread->linear : -3;
  for (int64_t at = offset; at < offset + bytes; ++at) {
    const ShadowByte& sh = cta.shadow[static_cast<size_t>(at)];
    const bool read =
        sh.read_epoch == cta.epoch && sh.reader != me && sh.reader != ShadowByte::kNobody;
    const bool written =
        sh.write_epoch == cta.epoch && sh.writer != me && sh.writer != ShadowByte::kNobody;
    if (read || written)
      fail(std::string(what) + " overwrites shared offset " + std::to_string(at) + ", which " +
           (read ? (sh.reader == ShadowByte::kSeveral ? std::string("several threads")
                                                      : thread_name(cta, sh.reader)) +
                       " read"
                 : thread_name(cta, sh.writer) + " wrote") +
           " since the last barrier: the producer reuses a stage before its consumers released "
           "it (a barrier after their last access)");
    check_store_done(cta, at, what);
    check_wgmma_done(cta, at, what);
  }
}

}  // namespace pallas::emulator::detail

extern "C" void pallas_emu_access(const void* address, int64_t bytes, int64_t align,
                                  int32_t flags) {
  LaunchState& s = current();
  Cta& cta = *s.cta;
  const Thread& t = *s.thread;
  check_stack(t);
  const auto a = reinterpret_cast<uintptr_t>(address);
  const auto shared = reinterpret_cast<uintptr_t>(cta.shared);
  if (align > 1 && a % static_cast<uint64_t>(align) != 0) {
    const bool in_shared = a >= shared && a < shared + static_cast<uint64_t>(cta.shared_bytes);
    fail(std::string("misaligned ") +
         (flags & kAccessAtomic  ? "atomic"
          : flags & kAccessStore ? "store"
                                 : "load") +
         " of " + std::to_string(bytes) + " bytes declared " + std::to_string(align) +
         "-byte aligned at " +
         (in_shared ? "shared offset " + std::to_string(a - shared) : hex(a)));
  }
  if (a >= shared &&
      a < shared + static_cast<uint64_t>(cta.shared_bytes + Cta::kSharedGuardBytes)) {
    if (a + bytes > shared + static_cast<uint64_t>(cta.shared_bytes))
      fail("shared-memory access of " + std::to_string(bytes) + " bytes at shared offset " +
           std::to_string(a - shared) + " runs past the " + std::to_string(cta.shared_bytes) +
           " bytes of shared memory");
    if (!(flags & kAccessAtomic))
      check_race(cta, t, static_cast<int64_t>(a - shared), bytes, flags & kAccessStore);
    return;
  }
  // Another program's shared memory in the thread's cluster (a mapa'd address: distributed
  // shared memory), loaded only. Only a cluster barrier orders it against the owner's stores.
  if (cta.cluster)
    for (Cta* peer : cta.cluster->ctas) {
      const auto base = reinterpret_cast<uintptr_t>(peer->shared);
      if (peer == &cta || a < base ||
          a >= base + static_cast<uint64_t>(peer->shared_bytes + Cta::kSharedGuardBytes))
        continue;
      // (Messages are made only when a check fails: this runs for every peer load.)
      auto owner = [&] {
        return "block (" + std::to_string(peer->x) + ", " + std::to_string(peer->y) + ", " +
               std::to_string(peer->z) + ")";
      };
      const int64_t offset = static_cast<int64_t>(a - base);
      if (flags & (kAccessStore | kAccessAtomic))
        fail("distributed shared-memory store at shared offset " + std::to_string(offset) + " of " +
             owner() + "; the emulator models loads of a peer's shared memory only");
      if (a + bytes > base + static_cast<uint64_t>(peer->shared_bytes))
        fail("distributed shared-memory load of " + std::to_string(bytes) +
             " bytes at shared offset " + std::to_string(offset) + " of " + owner() +
             " runs past its " + std::to_string(peer->shared_bytes) + " bytes of shared memory");
      require_cluster_started("a distributed shared-memory load");
      require_running(*peer, "a distributed shared-memory load", offset);
      const uint32_t now = static_cast<uint32_t>(cta.cluster->generation) + 1;
      for (int64_t i = offset; i < offset + bytes; ++i) {
        ShadowByte& sh = peer->shadow[static_cast<size_t>(i)];
        if (sh.write_generation == now)
          fail("distributed shared-memory race at shared offset " + std::to_string(i) + " of " +
               owner() + ": a load by this thread and a store by " + thread_name(*peer, sh.writer) +
               " with no cluster barrier in between");
        sh.remote_read_generation = now;
      }
      return;
    }
  // The thread's own stack (its local variables).
  if (a >= reinterpret_cast<uintptr_t>(t.stack_low) &&
      a + bytes <= reinterpret_cast<uintptr_t>(t.stack_high))
    return;
  for (const Buffer& b : s.config->buffers) {
    auto begin = reinterpret_cast<uintptr_t>(b.begin);
    if (a >= begin && a + bytes <= begin + b.bytes) return;
  }
  out_of_bounds(a, bytes, flags);
}

extern "C" void* pallas_emu_shared_base(void) {
  LaunchState& s = current();
  check_stack(*s.thread);  // a kernel's first call: its frame is allocated
  return s.cta->shared;
}
