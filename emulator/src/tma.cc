// mbarriers, TMA box copies and bulk async-groups (sm_90's asynchronous
// copies), emulated on the running thread.
//
// A TMA copy is performed when it is issued, and its bytes complete
// transactions on its mbarrier at once; what the emulator checks is what the
// program may rely on: every element of the box read from (or written to) the
// array is inside a buffer of the launch, the destination is aligned and
// inside shared memory, the barrier is initialised, and the bytes announced
// by expect-tx match the bytes copied. A wait on a phase that can never
// complete is a deadlock naming the barrier and what it still expects.
//
// What a real copy's asynchrony allows is tracked per shared byte (the
// shadow, Scheduler.h), so that a program relying on the eager copies fails:
//   - a byte a TMA load wrote is read only by a thread that waited for the
//     mbarrier phase the copy completes (else it could see the old stage);
//   - a TMA load overwrites only bytes no other thread touched since the last
//     barrier (the consumers released the stage);
//   - a byte a TMA store reads is written (by a thread or a TMA load) only
//     after the storing thread waited for the store's bulk group
//     (cp.async.bulk.wait_group.read);
//   - a TMA store or reduction never reaches the end of a row that ends inside
//     a 16-byte piece (the GPU writes the piece whole: check_row_end).
//
// The swizzle is TMA's: the 16-byte piece p of 128-byte line l of the
// box (row-major, densely packed) is stored at piece p ^ (l % (S / 16)) for a
// swizzle of S bytes (see StagingRules.cpp for a worked example).

#include "Scheduler.h"

#include "pallas/emulator/abi.h"

#include <algorithm>
#include <cstring>

using namespace pallas::emulator;
using namespace pallas::emulator::detail;

namespace {

int64_t shared_offset(const Cta& cta, const void* p, const char* what, int64_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(cta.shared);
  if (a < base || a + static_cast<uint64_t>(bytes) > base + static_cast<uint64_t>(cta.shared_bytes))
    fail(std::string(what) + " is not inside the " + std::to_string(cta.shared_bytes) +
         " bytes of the program's shared memory");
  return static_cast<int64_t>(a - base);
}

std::string barrier_name(int64_t offset) {
  return "the mbarrier at shared offset " + std::to_string(offset);
}

MBarrier& barrier_at(Cta& cta, void* p, const char* op) {
  const int64_t offset = shared_offset(cta, p, op, 8);
  if (offset % 8 != 0)
    fail(std::string(op) + ": " + barrier_name(offset) + " is not 8-byte aligned");
  auto it = cta.mbarriers.find(offset);
  if (it == cta.mbarriers.end())
    fail(std::string(op) + " on " + barrier_name(offset) + ", which was never initialised");
  return it->second;
}

/// Completes the phase when its arrivals and transactions are all in.
void maybe_complete(Cta& cta, int64_t offset, MBarrier& bar) {
  const uint32_t ranks = bar.arrived_ranks;
  if (bar.pending == 0 && bar.tx < 0)
    fail(barrier_name(offset) + " received " + std::to_string(-bar.tx) +
         " more bytes of copies than its expect-tx announced in phase " +
         std::to_string(bar.phase));
  if (bar.pending != 0 || bar.tx != 0) return;
  ++bar.phase;
  bar.pending = bar.expected;
  bar.arrived_ranks = 0;
  ++current().state_changes;
  // A phase that several threads' arrivals complete orders their earlier
  // accesses before the accesses of whoever waits for it, as bar.sync does
  // (a consumer warpgroup releasing a stage buffer to the producer thread
  // that refills it): a new epoch. Coarse: it also orders threads that did
  // not arrive.
  if (bar.expected > 1) ++cta.epoch;
  // Arrivals from other CTAs of the cluster (a multicast pipeline's
  // release): their accesses come before the copies that follow, too.
  if (bar.expected > 1 && cta.cluster)
    for (Cta* peer : cta.cluster->ctas)
      if (peer != &cta && (ranks >> peer->rank & 1u)) ++peer->epoch;
}

/// The descriptor of a TMA `what` ("load", "store") given `rank` coordinates.
const EmuTensorMap& tensor_map(const void* descriptor, int32_t rank, const char* what) {
  const auto* map = static_cast<const EmuTensorMap*>(descriptor);
  if (map == nullptr || map->magic != kEmuTensorMapMagic)
    fail(
        "TMA copy with a descriptor that is not an emulator tensor map (built for another "
        "backend?)");
  if (rank != map->rank)
    fail(std::string("TMA ") + what + " of operand '" + map->name + "' with " +
         std::to_string(rank) + " coordinates; its descriptor has rank " +
         std::to_string(map->rank));
  return *map;
}

/// Where byte `o` of the unswizzled box lives in shared memory.
int64_t swizzle(int64_t o, int swizzle_bytes) {
  if (swizzle_bytes == 0) return o;
  return o ^ (((o >> 7) & (swizzle_bytes / 16 - 1)) << 4);
}

/// Calls `each(box_offset_bytes, global_address_or_null, run_bytes)` for every
/// innermost run of the box: the run's elements inside the array, contiguous
/// in global memory, and those outside (address null), element by element.
template <class F>
void for_each_run(const EmuTensorMap& map, const int32_t* coords, F&& each) {
  const int rank = map.rank;
  int64_t outer = 1;
  for (int d = 1; d < rank; ++d) outer *= map.box[d];
  const int64_t eb = map.element_bytes, inner = map.box[0];
  for (int64_t row = 0; row < outer; ++row) {
    // Coordinates of this row's dims 1..rank-1.
    bool inside = true;
    int64_t address = 0, r = row;
    for (int d = 1; d < rank; ++d) {
      const int64_t i = r % map.box[d];
      r /= map.box[d];
      const int64_t g = static_cast<int64_t>(coords[d]) + i;
      inside = inside && g >= 0 && g < static_cast<int64_t>(map.dims[d]);
      address += g * static_cast<int64_t>(map.strides[d - 1]);
    }
    const int64_t row_offset = row * inner * eb;
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t g = static_cast<int64_t>(coords[0]) + i;
      const bool in = inside && g >= 0 && g < static_cast<int64_t>(map.dims[0]);
      const auto* p = static_cast<const std::byte*>(map.base) + address + g * eb;
      each(row_offset + i * eb, in ? p : nullptr);
    }
  }
}

/// Fails when a TMA store or reduction (`what`) reaches the last element of a row that ends
/// inside a 16-byte piece: the GPU writes that piece whole, so the bytes after the row's end
/// (the padding before the next row, or whatever follows the array) would be written too.
/// Seen on an H200: a [70, 161] f32 output with row stride 164 got columns 161..163 written.
/// The entry points keep such operands off TMA (tma_rule_broken); a kernel that gets here
/// would corrupt memory on the GPU, so the emulator refuses it rather than guess the bytes.
void check_row_end(const EmuTensorMap& map, const int32_t* coords, const char* what) {
  const int64_t eb = map.element_bytes, dim0 = map.dims[0];
  if (dim0 * eb % 16 == 0) return;
  if (coords[0] >= dim0 || coords[0] + int64_t{map.box[0]} < dim0) return;  // not the row's end
  for (int d = 1; d < map.rank; ++d)  // a box whose rows are all outside writes nothing
    if (coords[d] >= static_cast<int64_t>(map.dims[d]) || coords[d] + int64_t{map.box[d]} <= 0)
      return;
  fail(std::string(what) + " of operand '" + map.name +
       "' reaches the end of its rows, which are " + std::to_string(dim0) + " elements (" +
       std::to_string(dim0 * eb) +
       " bytes, not a multiple of 16): the GPU writes the 16-byte piece that ends a row whole, so "
       "bytes " +
       std::to_string(dim0 * eb) + ".." + std::to_string((dim0 * eb + 15) / 16 * 16 - 1) +
       " after each row's end would be written too (an operand written through TMA needs rows of "
       "a multiple of 16 bytes)");
}

int64_t box_bytes(const EmuTensorMap& map) {
  int64_t bytes = map.element_bytes;
  for (int d = 0; d < map.rank; ++d) bytes *= map.box[d];
  return bytes;
}

void check_box_destination(const Cta& cta, const void* smem, const EmuTensorMap& map,
                           const char* what) {
  const int64_t offset = shared_offset(cta, smem, what, box_bytes(map));
  const int64_t align = map.swizzle == 0 ? 128 : map.swizzle * 8;
  if (offset % align != 0)
    fail(std::string(what) + " of operand '" + map.name + "' at shared offset " +
         std::to_string(offset) + ": a " + std::to_string(map.swizzle) +
         "-byte swizzled box must be " + std::to_string(align) + "-byte aligned");
}

}  // namespace

extern "C" void pallas_emu_mbarrier_init(void* barrier, int32_t count) {
  Cta& cta = *current().cta;
  const int64_t offset = shared_offset(cta, barrier, "mbarrier.init", 8);
  if (count < 1 || count >= (1 << 20))
    fail("mbarrier.init of " + barrier_name(offset) + " with " + std::to_string(count) +
         " arrivals; PTX allows 1 to 2^20 - 1");
  if (cta.mbarriers.count(offset))
    fail("mbarrier.init of " + barrier_name(offset) +
         ", which is still initialised (mbarrier.inval it before initialising it again)");
  cta.mbarriers[offset] = MBarrier{count, count, 0, 0};
  for (Thread& t : cta.threads) t.phases_seen.erase(offset);  // a new barrier's phases
}

extern "C" void pallas_emu_mbarrier_inval(void* barrier) {
  Cta& cta = *current().cta;
  MBarrier& bar = barrier_at(cta, barrier, "mbarrier.inval");
  const int64_t offset = shared_offset(cta, barrier, "mbarrier.inval", 8);
  if (bar.tx != 0)
    fail("mbarrier.inval of " + barrier_name(offset) + " with " + std::to_string(bar.tx) +
         " bytes of copies still outstanding in phase " + std::to_string(bar.phase));
  if (std::string copy = unawaited_copy(cta, offset); !copy.empty())
    fail("mbarrier.inval of " + barrier_name(offset) + " before any thread waited for " + copy);
  cta.mbarriers.erase(offset);
  cta.copied_phases.erase(offset);
}

extern "C" void pallas_emu_mbarrier_arrive_expect_tx(void* barrier, int32_t bytes) {
  Cta& cta = *current().cta;
  MBarrier& bar = barrier_at(cta, barrier, "mbarrier.arrive.expect_tx");
  const int64_t offset = shared_offset(cta, barrier, "mbarrier", 8);
  // The emulator's copies land at issue; a GPU's may still be in flight until
  // some thread has waited for their phase. Arming the barrier for more copies
  // before then (a pipeline refilling a stage whose step skipped its load)
  // lets this arrival and its bytes count toward the earlier phase, and the
  // new copy race the old one into the buffer.
  if (std::string copy = unawaited_copy(cta, offset, bar.phase); !copy.empty())
    fail("mbarrier.arrive.expect_tx on " + barrier_name(offset) + " in phase " +
         std::to_string(bar.phase) + " before any thread waited for " + copy +
         ": on the GPU that copy may still be in flight");
  bar.tx += bytes;
  --bar.pending;
  maybe_complete(cta, offset, bar);
}

extern "C" int32_t pallas_emu_mbarrier_test_parity(void* barrier, int32_t parity) {
  Cta& cta = *current().cta;
  Thread& me = *current().thread;
  const int64_t offset = shared_offset(cta, barrier, "mbarrier wait", 8);
  const MBarrier& bar = barrier_at(cta, barrier, "mbarrier wait");
  // The phase of parity `parity` has completed when the current one differs.
  if ((bar.phase & 1u) != static_cast<uint32_t>(parity & 1)) {
    // The thread has seen the latest completed phase of this parity, and every one before.
    const uint32_t completed =
        (bar.phase - 1) % 2 == static_cast<uint32_t>(parity & 1) ? bar.phase : bar.phase - 1;
    uint32_t& seen = me.phases_seen[offset];
    seen = std::max(seen, completed);
    me.spin_on.clear();
    return 1;
  }
  // Not yet: the caller tries again; the other threads run meanwhile.
  me.spin_on = barrier_name(offset) + " (phase " + std::to_string(bar.phase) + ": " +
               std::to_string(bar.pending) + " of " + std::to_string(bar.expected) +
               " arrivals and " + std::to_string(bar.tx) + " bytes of copies outstanding)";
  suspend(Wait::kSpin);
  return 0;
}

extern "C" void pallas_emu_mbarrier_wait_parity(void* barrier, int32_t parity) {
  while (!pallas_emu_mbarrier_test_parity(barrier, parity)) {
  }
}

extern "C" void pallas_emu_cp_async(void* dst, const void* src, int32_t bytes, int32_t src_bytes) {
  Cta& cta = *current().cta;
  Thread& me = *current().thread;
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail("cp.async of " + std::to_string(bytes) + " bytes; PTX copies 4, 8 or 16");
  if (src_bytes < 0 || src_bytes > bytes)
    fail("cp.async with a source size of " + std::to_string(src_bytes) + " bytes for a copy of " +
         std::to_string(bytes));
  const int64_t offset = shared_offset(cta, dst, "cp.async destination", bytes);
  if (offset % bytes != 0)
    fail("cp.async of " + std::to_string(bytes) + " bytes to shared offset " +
         std::to_string(offset) + ", which is not " + std::to_string(bytes) + "-byte aligned");
  if (reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(bytes) != 0)
    fail("cp.async of " + std::to_string(bytes) + " bytes from a global address that is not " +
         std::to_string(bytes) + "-byte aligned");
  check_stage_released(cta, offset, bytes, "a cp.async copy");
  if (src_bytes > 0) pallas_emu_access(src, src_bytes, 1, kAccessLoad);  // inside a buffer
  auto* to = static_cast<std::byte*>(dst);
  std::memcpy(to, src, static_cast<size_t>(src_bytes));
  std::memset(to + src_bytes, 0, static_cast<size_t>(bytes - src_bytes));  // zero fill
  for (int64_t k = offset; k < offset + bytes; ++k) {
    ShadowByte& sh = cta.shadow[static_cast<size_t>(k)];
    sh = ShadowByte{};  // the copy's, not a thread's, until an mbarrier tracks it
    sh.copy_barrier = ShadowByte::kUntrackedCopy;
    me.cp_async_untracked.push_back(k);
  }
}

namespace {

/// The thread's cp.async copies not yet attached to a barrier are now
/// tracked by the current phase of `bar` (at `offset`): the copies land at
/// issue here, and a thread reads their bytes once it has seen that phase.
void track_cp_async(Cta& cta, Thread& me, int64_t offset, const MBarrier& bar) {
  for (int64_t k : me.cp_async_untracked) {
    ShadowByte& sh = cta.shadow[static_cast<size_t>(k)];
    if (sh.copy_barrier != ShadowByte::kUntrackedCopy) continue;  // overwritten since
    sh.copy_barrier = offset;
    sh.copy_phase = bar.phase;
  }
  me.cp_async_untracked.clear();
}

/// One arrival on `bar` by `op`, which fails when the phase has all its arrivals.
void arrive(Cta& cta, int64_t offset, MBarrier& bar, const char* op) {
  if (bar.pending == 0)
    fail(std::string(op) + " on " + barrier_name(offset) + " in phase " +
         std::to_string(bar.phase) + ", whose " + std::to_string(bar.expected) +
         " arrivals are all in");
  --bar.pending;
  bar.arrived_ranks |= 1u << current().cta->rank;
  maybe_complete(cta, offset, bar);
}

}  // namespace

extern "C" void pallas_emu_cp_async_mbarrier_arrive_noinc(void* barrier) {
  Cta& cta = *current().cta;
  MBarrier& bar = barrier_at(cta, barrier, "cp.async.mbarrier.arrive");
  const int64_t offset = shared_offset(cta, barrier, "mbarrier", 8);
  track_cp_async(cta, *current().thread, offset, bar);
  arrive(cta, offset, bar, "cp.async.mbarrier.arrive");  // the copies land at once: so does it
}

extern "C" void pallas_emu_cp_async_mbarrier_arrive(void* barrier) {
  Cta& cta = *current().cta;
  MBarrier& bar = barrier_at(cta, barrier, "cp.async.mbarrier.arrive");
  // Pending count + 1, then - 1 once the copies land (at once here): the
  // phase is the current one, completed by the barrier's own arrivals.
  track_cp_async(cta, *current().thread, shared_offset(cta, barrier, "mbarrier", 8), bar);
}

extern "C" int64_t pallas_emu_mbarrier_arrive(void* barrier) {
  Cta& cta = shared_owner(barrier, 8, "mbarrier.arrive's barrier");  // remote: mapa's address
  require_running(cta, "an mbarrier.arrive");
  MBarrier& bar = barrier_at(cta, barrier, "mbarrier.arrive");
  const uint32_t phase = bar.phase;
  arrive(cta, shared_offset(cta, barrier, "mbarrier", 8), bar, "mbarrier.arrive");
  // The arrival that completes a phase lets the waiters run before the
  // arriving thread goes on: the adversarial order for a released stage. A
  // producer refills the buffer at once, while whatever the consumer still
  // has in flight on it (a wgmma not yet waited for) is caught by the
  // operand checks, instead of being hidden by the consumer running ahead.
  if (bar.phase != phase) suspend(Wait::kRunnable);
  return 0;
}

namespace pallas::emulator::detail {

std::string unawaited_copy(const Cta& cta, int64_t offset, uint32_t before_phase) {
  for (const auto& [at, copy] : cta.copied_phases) {
    if (offset >= 0 && at != offset) continue;
    if (copy.first >= before_phase) continue;
    const bool awaited = std::any_of(cta.threads.begin(), cta.threads.end(), [&](const Thread& t) {
      auto seen = t.phases_seen.find(at);
      return seen != t.phases_seen.end() && seen->second > copy.first;
    });
    if (!awaited)
      return "the TMA load of operand '" + copy.second + "' that completes phase " +
             std::to_string(copy.first) + " of " + barrier_name(at);
  }
  return "";
}

}  // namespace pallas::emulator::detail

namespace {

/// A TMA load of the box at `coords` into `cta`'s shared memory at `dst`,
/// completing on its mbarrier at `barrier` (addresses in `cta`'s window).
void tma_load_into(Cta& cta, void* dst, const EmuTensorMap& map, void* barrier,
                   const int32_t* coords) {
  check_box_destination(cta, dst, map, "TMA load destination");
  MBarrier& bar = barrier_at(cta, barrier, "TMA load completing");
  auto* smem = static_cast<std::byte*>(dst);
  const int64_t eb = map.element_bytes;
  const int64_t base_offset = shared_offset(cta, dst, "TMA load destination", 0);
  const int64_t barrier_offset = shared_offset(cta, barrier, "mbarrier", 8);
  const std::string load = "a TMA load of operand '" + std::string(map.name) + "'";
  for_each_run(map, coords, [&](int64_t o, const std::byte* src) {
    // The stage's consumers released it (no other thread touched these
    // bytes since the last barrier), and no TMA store still reads them.
    check_stage_released(cta, base_offset + swizzle(o, map.swizzle), eb, load);
    std::byte* to = smem + swizzle(o, map.swizzle);
    if (src) {
      pallas_emu_access(src, eb, 1, kAccessLoad);  // inside a buffer of the launch
      std::memcpy(to, src, static_cast<size_t>(eb));
    } else {
      std::memset(to, 0, static_cast<size_t>(eb));  // outside the array: zero fill
    }
    // The async proxy wrote these bytes: no thread owns them in this epoch, and
    // a thread reads them once it has seen the phase this copy completes.
    for (int64_t k = 0; k < eb; ++k) {
      ShadowByte& sh = cta.shadow[static_cast<size_t>(base_offset + swizzle(o, map.swizzle) + k)];
      sh = ShadowByte{};
      sh.copy_barrier = barrier_offset;
      sh.copy_phase = bar.phase;
      sh.tma_swizzle = static_cast<int16_t>(map.swizzle);
    }
  });
  cta.copied_phases[barrier_offset] = {bar.phase, map.name};
  bar.tx -= box_bytes(map);
  maybe_complete(cta, shared_offset(cta, barrier, "mbarrier", 8), bar);
}

/// The address of `p` (in `from`'s shared memory) in `to`'s.
std::byte* same_offset(const Cta& from, const void* p, const Cta& to) {
  return to.shared + (static_cast<const std::byte*>(p) - from.shared);
}

}  // namespace

extern "C" void pallas_emu_tma_load(void* dst, const void* descriptor, void* barrier, int32_t rank,
                                    int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
  const int32_t coords[5] = {c0, c1, c2, c3, c4};
  tma_load_into(*current().cta, dst, tensor_map(descriptor, rank, "load"), barrier, coords);
}

extern "C" void pallas_emu_tma_load_multicast(void* dst, const void* descriptor, void* barrier,
                                              int32_t mask, int32_t rank, int32_t c0, int32_t c1,
                                              int32_t c2, int32_t c3, int32_t c4) {
  Cta& cta = *current().cta;
  const EmuTensorMap& map = tensor_map(descriptor, rank, "multicast load");
  (void)shared_offset(cta, dst, "TMA multicast load destination", box_bytes(map));
  (void)shared_offset(cta, barrier, "TMA multicast load's mbarrier", 8);
  const auto& ctas = cta.cluster->ctas;
  const auto bits = static_cast<uint32_t>(mask) & 0xffffu;
  if (bits == 0 || (bits >> ctas.size()) != 0)
    fail("TMA multicast load of operand '" + std::string(map.name) + "' with CTA mask " +
         std::to_string(bits) + " in a cluster of " + std::to_string(ctas.size()) +
         " CTAs; the mask names ranks 0 to " + std::to_string(ctas.size() - 1));
  if ((bits & ~(1u << cta.rank)) != 0) require_cluster_started("a TMA multicast load");
  const int32_t coords[5] = {c0, c1, c2, c3, c4};
  for (Cta* to : ctas)
    if (bits >> to->rank & 1u) {
      require_running(*to, "a TMA multicast load of operand '" + std::string(map.name) + "'");
      tma_load_into(*to, same_offset(cta, dst, *to), map, same_offset(cta, barrier, *to), coords);
    }
}

extern "C" void* pallas_emu_mapa(const void* p, int32_t rank) {
  Cta& cta = shared_owner(p, 1, "mapa's address");
  const auto& ctas = cta.cluster->ctas;
  if (rank < 0 || static_cast<size_t>(rank) >= ctas.size())
    fail("mapa to CTA rank " + std::to_string(rank) + " in a cluster of " +
         std::to_string(ctas.size()) + " CTAs");
  if (ctas[static_cast<size_t>(rank)] != current().cta) require_cluster_started("mapa");
  return same_offset(cta, p, *ctas[static_cast<size_t>(rank)]);
}

extern "C" void pallas_emu_tma_store(const void* descriptor, const void* src, int32_t rank,
                                     int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
  Cta& cta = *current().cta;
  const EmuTensorMap& map = tensor_map(descriptor, rank, "store");
  check_box_destination(cta, src, map, "TMA store source");
  const int32_t coords[5] = {c0, c1, c2, c3, c4};
  check_row_end(map, coords, "TMA store");
  const auto* smem = static_cast<const std::byte*>(src);
  const int64_t eb = map.element_bytes;
  const int64_t base_offset = shared_offset(cta, src, "TMA store source", 0);
  Thread& me = *current().thread;
  const std::string store = "a TMA store of operand '" + std::string(map.name) + "'";
  for_each_run(map, coords, [&](int64_t o, const std::byte* dst) {
    // The store reads its source until its bulk group is waited for (an
    // uncommitted copy belongs to the thread's next group), even where it clips.
    for (int64_t k = 0; k < eb; ++k) {
      check_proxy_fenced(cta, base_offset + swizzle(o, map.swizzle) + k, store);
      ShadowByte& sh = cta.shadow[static_cast<size_t>(base_offset + swizzle(o, map.swizzle) + k)];
      sh.store_thread = me.linear;
      sh.store_group = me.bulk_committed;
    }
    if (!dst) return;  // outside the array: clipped
    pallas_emu_access(dst, eb, 1, kAccessStore);
    std::memcpy(const_cast<std::byte*>(dst), smem + swizzle(o, map.swizzle),
                static_cast<size_t>(eb));
  });
}

extern "C" void pallas_emu_tma_reduce_add(const void* descriptor, const void* src, int32_t rank,
                                          int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                          int32_t c4) {
  Cta& cta = *current().cta;
  const EmuTensorMap& map = tensor_map(descriptor, rank, "reduction");
  if (map.element_bytes != 4)
    fail(std::string("TMA add reduction into operand '") + map.name + "' of " +
         std::to_string(map.element_bytes) + "-byte elements; the emulator adds f32 and i32");
  check_box_destination(cta, src, map, "TMA reduction source");
  const int32_t coords[5] = {c0, c1, c2, c3, c4};
  check_row_end(map, coords, "TMA add reduction");
  const auto* smem = static_cast<const std::byte*>(src);
  const int64_t base_offset = shared_offset(cta, src, "TMA reduction source", 0);
  Thread& me = *current().thread;
  const std::string reduction = "a TMA reduction into operand '" + std::string(map.name) + "'";
  for_each_run(map, coords, [&](int64_t o, const std::byte* dst) {
    for (int64_t k = 0; k < 4; ++k) {  // read until its bulk group is waited for
      check_proxy_fenced(cta, base_offset + swizzle(o, map.swizzle) + k, reduction);
      ShadowByte& sh = cta.shadow[static_cast<size_t>(base_offset + swizzle(o, map.swizzle) + k)];
      sh.store_thread = me.linear;
      sh.store_group = me.bulk_committed;
    }
    if (!dst) return;  // outside the array: clipped
    pallas_emu_access(dst, 4, 4, kAccessStore | kAccessAtomic);
    auto* to = const_cast<std::byte*>(dst);
    const std::byte* from = smem + swizzle(o, map.swizzle);
    if (map.is_float) {
      float a, b;
      std::memcpy(&a, to, 4);
      std::memcpy(&b, from, 4);
      a += b;
      std::memcpy(to, &a, 4);
    } else {
      uint32_t a, b;  // two's complement: wraps as the GPU's
      std::memcpy(&a, to, 4);
      std::memcpy(&b, from, 4);
      a += b;
      std::memcpy(to, &a, 4);
    }
  });
}

extern "C" void pallas_emu_tma_prefetch(const void* descriptor, int32_t rank, int32_t, int32_t,
                                        int32_t, int32_t, int32_t) {
  (void)tensor_map(descriptor, rank, "prefetch");  // a hint: it reads nothing the program sees
}

extern "C" void pallas_emu_bulk_commit(void) { ++current().thread->bulk_committed; }

extern "C" void pallas_emu_bulk_wait(int32_t pending, int32_t read_only) {
  (void)read_only;  // the emulator's stores write global memory when issued
  if (pending < 0) fail("cp.async.bulk.wait_group with a negative count");
  // Every committed group but the newest `pending` is complete.
  Thread& t = *current().thread;
  const auto keep = static_cast<uint64_t>(pending);
  if (t.bulk_committed > keep)
    t.bulk_completed = std::max(t.bulk_completed, t.bulk_committed - keep);
}
