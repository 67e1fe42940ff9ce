// The emulator's checks on kernels that plant one bug each (planted.mlir):
// each is reported exactly, naming kernel, block, thread and address; the
// correct twins run clean and give the same results under any schedule seed.

#include "pallas/emulator/abi.h"
#include "pallas/emulator/simt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

extern "C" {
#define PLANTED(name)                         \
  void pallas_emu_kernel_##name(void** args); \
  extern const int64_t pallas_emu_kernel_##name##_shared_bytes;
PLANTED(off_by_one)
PLANTED(missing_barrier)
PLANTED(with_barrier)
PLANTED(divergent_barrier)
PLANTED(dynamic_shared)
PLANTED(warp_sum)
PLANTED(shuffle_modes)
PLANTED(match_redux)
PLANTED(leaves_semaphore)
PLANTED(waits_forever)
PLANTED(cross_cta_flag)
PLANTED(misaligned_vector)
PLANTED(mbarrier_never_completes)
PLANTED(mbarrier_completes)
PLANTED(cluster_release)
PLANTED(tma_read_before_wait)
PLANTED(tma_expect_tx)
PLANTED(tma_never_awaited)
PLANTED(tma_stage_reuse)
PLANTED(tma_store_then_overwrite)
PLANTED(tma_store_unfenced)
PLANTED(wgmma_tma_operand)
#undef PLANTED
}

namespace pallas::emulator {
namespace {

using ::testing::HasSubstr;

/// A 1-D memref descriptor and the kernel parameters it expands to.
struct Descriptor {
  void* allocated;
  void* aligned;
  int64_t offset, size, stride;
  template <class T>
  explicit Descriptor(std::vector<T>& v)
      : allocated(v.data()),
        aligned(v.data()),
        offset(0),
        size(static_cast<int64_t>(v.size())),
        stride(1) {}
  void append(std::vector<void*>& args) {
    for (void* p :
         {static_cast<void*>(&allocated), static_cast<void*>(&aligned), static_cast<void*>(&offset),
          static_cast<void*>(&size), static_cast<void*>(&stride)})
      args.push_back(p);
  }
};

template <class T>
Buffer buffer(const char* name, const std::vector<T>& v, bool must_end_zero = false) {
  return Buffer{name, v.data(), v.size() * sizeof(T), must_end_zero};
}

std::string hex(const void* p) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%lx",
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

/// Launches `config`; returns the error ("" if none).
std::string launch_error(const LaunchConfig& config) {
  std::string error;
  if (launch(config, error)) return "";
  return error.empty() ? "<failed without a message>" : error;
}

/// A launch of `entry` over `ctas` CTAs of `threads` threads, with `args` and `buffers`
/// (which must outlive it) and the scheduler's `seed`.
LaunchConfig config_for(const char* kernel, ThreadEntry entry, int64_t shared_bytes,
                        std::vector<void*>& args, std::vector<Buffer>& buffers, int64_t ctas,
                        int threads, uint64_t seed) {
  LaunchConfig config;
  config.kernel = kernel;
  config.entry = entry;
  config.args = args.data();
  config.grid = {ctas, 1, 1};
  config.block = {threads, 1, 1};
  config.shared_bytes = shared_bytes;
  config.buffers = buffers;
  config.options.schedule_seed = seed;
  return config;
}

/// Runs `entry` over one CTA of `threads` threads; returns the error ("" if none).
std::string run(const char* kernel, ThreadEntry entry, int64_t shared_bytes,
                std::vector<Descriptor> descriptors, std::vector<Buffer> buffers, int threads = 128,
                uint64_t seed = 0, int64_t ctas = 1, int resident = 4) {
  std::vector<void*> args;
  for (Descriptor& d : descriptors) d.append(args);
  LaunchConfig config = config_for(kernel, entry, shared_bytes, args, buffers, ctas, threads, seed);
  config.options.concurrent_ctas = resident;
  return launch_error(config);
}

TEST(EmulatorChecks, OffByOneStoreIsOutOfBounds) {
  std::vector<float> out(128);
  std::string error =
      run("off_by_one", pallas_emu_kernel_off_by_one, 0, {Descriptor(out)}, {buffer("out", out)});
  EXPECT_EQ(error,
            "emulator: kernel 'off_by_one', block (0, 0, 0), thread (127, 0, 0): "
            "out-of-bounds store of 4 bytes at " +
                hex(out.data() + 128) + ": 0 bytes past the end of buffer 'out' [" +
                hex(out.data()) + ", " + hex(out.data() + 128) + ")");
}

TEST(EmulatorChecks, MisalignedVectorAccess) {
  std::vector<float> storage(20), shape(16);
  auto* aligned =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 15) / 16 * 16);
  Descriptor d(shape);
  d.allocated = d.aligned = aligned;
  std::string error = run("misaligned_vector", pallas_emu_kernel_misaligned_vector, 0, {d},
                          {Buffer{"out", aligned, 16 * sizeof(float), false}});
  EXPECT_THAT(error, HasSubstr("thread (0, 0, 0): misaligned load of 16 bytes declared 16-byte "
                               "aligned at " +
                               hex(aligned + 1)));
}

// The emulator places each shared buffer at exactly its declared alignment and
// never, by luck, at twice it (so an access wider than the declaration fails
// its alignment check): a 4-aligned buffer starts at offset 4.
TEST(EmulatorChecks, MissingBarrierIsASharedMemoryRace) {
  EXPECT_EQ(pallas_emu_kernel_missing_barrier_shared_bytes, 4 + 512);
  std::vector<float> out(128);
  std::string error =
      run("missing_barrier", pallas_emu_kernel_missing_barrier,
          pallas_emu_kernel_missing_barrier_shared_bytes, {Descriptor(out)}, {buffer("out", out)});
  // Thread 0 ran first and read smem[1]; thread 1's write to it races.
  EXPECT_EQ(error,
            "emulator: kernel 'missing_barrier', block (0, 0, 0), thread (1, 0, 0): "
            "shared-memory race at shared offset 8: a store by this thread and a load by "
            "thread (0, 0, 0) with no barrier in between");
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    std::string e = run("missing_barrier", pallas_emu_kernel_missing_barrier,
                        pallas_emu_kernel_missing_barrier_shared_bytes, {Descriptor(out)},
                        {buffer("out", out)}, 128, seed);
    EXPECT_THAT(e, HasSubstr("shared-memory race at shared offset ")) << "seed " << seed;
  }
}

TEST(EmulatorChecks, BarrierMakesItRaceFreeUnderEverySchedule) {
  for (uint64_t seed : {0, 1, 2, 3}) {
    std::vector<float> out(128, -1.0f);
    EXPECT_EQ(run("with_barrier", pallas_emu_kernel_with_barrier,
                  pallas_emu_kernel_with_barrier_shared_bytes, {Descriptor(out)},
                  {buffer("out", out)}, 128, seed),
              "");
    for (int t = 0; t < 128; ++t) ASSERT_EQ(out[t], float((t + 1) % 128)) << "seed " << seed;
  }
}

TEST(EmulatorMemory, DynamicSharedMemoryFollowsTheStaticPart) {
  // 64 i32 at offset 4; dynamic memory comes after, 16-aligned.
  EXPECT_EQ(pallas_emu_kernel_dynamic_shared_shared_bytes, 272);
  std::vector<float> out(128, -1.0f);
  const int64_t dynamic_bytes = 128 * 4;
  EXPECT_EQ(run("dynamic_shared", pallas_emu_kernel_dynamic_shared,
                pallas_emu_kernel_dynamic_shared_shared_bytes + dynamic_bytes, {Descriptor(out)},
                {buffer("out", out)}),
            "");
  for (int t = 0; t < 128; ++t) ASSERT_EQ(out[t], float(t ^ 1) + 1000.0f * (t % 64)) << t;
  // Without the dynamic part the first dynamic access runs past shared memory.
  EXPECT_THAT(
      run("dynamic_shared", pallas_emu_kernel_dynamic_shared,
          pallas_emu_kernel_dynamic_shared_shared_bytes, {Descriptor(out)}, {buffer("out", out)}),
      HasSubstr("thread (0, 0, 0): shared-memory access of 4 bytes at shared offset 272 "
                "runs past the 272 bytes of shared memory"));
}

TEST(EmulatorChecks, BarrierInDivergentBranchDeadlocks) {
  std::vector<float> out(128);
  std::string error = run("divergent_barrier", pallas_emu_kernel_divergent_barrier, 0,
                          {Descriptor(out)}, {buffer("out", out)});
  EXPECT_EQ(error,
            "emulator: kernel 'divergent_barrier': deadlock, no thread can make progress (linear "
            "thread ids):\n  block (0, 0, 0):\n    barrier 0: 64 of 128 threads arrived (waiting: "
            "threads 0-63)\n    exited: threads 64-127");
}

TEST(EmulatorChecks, SpinningOnAFlagNobodySetsDeadlocks) {
  std::vector<int32_t> flag(1, 0);
  std::string error = run("waits_forever", pallas_emu_kernel_waits_forever, 0, {Descriptor(flag)},
                          {buffer("flag", flag)});
  EXPECT_EQ(error,
            "emulator: kernel 'waits_forever': deadlock, no thread can make progress (linear "
            "thread ids):\n  block (0, 0, 0):\n    spinning (nanosleep, try-wait, semaphore "
            "wait): threads 0-127");
}

TEST(EmulatorChecks, MBarrierPhaseThatCannotCompleteDeadlocksNamingTheBarrier) {
  std::vector<float> out(128);
  std::string error = run("mbarrier_never_completes", pallas_emu_kernel_mbarrier_never_completes,
                          pallas_emu_kernel_mbarrier_never_completes_shared_bytes,
                          {Descriptor(out)}, {buffer("out", out)});
  EXPECT_THAT(error, HasSubstr("deadlock, no thread can make progress"));
  EXPECT_THAT(error, HasSubstr("waiting on the mbarrier at shared offset "));
  EXPECT_THAT(error, HasSubstr("(phase 0: 1 of 2 arrivals and 0 bytes of copies outstanding): "
                               "threads 0-127"));
}

TEST(EmulatorChecks, MBarrierPhaseCompletesForEveryWaiter) {
  for (uint64_t seed : {0, 1, 2}) {
    std::vector<float> out(128, 0.0f);
    EXPECT_EQ(run("mbarrier_completes", pallas_emu_kernel_mbarrier_completes,
                  pallas_emu_kernel_mbarrier_completes_shared_bytes, {Descriptor(out)},
                  {buffer("out", out)}, 128, seed),
              "")
        << "seed " << seed;
    EXPECT_EQ(std::accumulate(out.begin(), out.end(), 0.0f), 128.0f);
  }
}

/// cluster_release on a grid of 2 CTAs in one cluster of 2.
std::string run_cluster(std::vector<int32_t>& out, bool early, uint64_t seed) {
  Descriptor d(out);
  std::vector<void*> args;
  d.append(args);
  args.push_back(&early);
  std::vector<Buffer> buffers{buffer("out", out)};
  LaunchConfig config =
      config_for("cluster_release", pallas_emu_kernel_cluster_release,
                 pallas_emu_kernel_cluster_release_shared_bytes, args, buffers, 2, 64, seed);
  config.cluster = 2;
  return launch_error(config);
}

TEST(EmulatorClusters, RemoteArrivalsAfterTheClusterBarrier) {
  for (uint64_t seed : {0, 1, 2}) {
    std::vector<int32_t> out(128, -1);
    EXPECT_EQ(run_cluster(out, /*early=*/false, seed), "") << "seed " << seed;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], i / 64) << "element " << i;
  }
}

TEST(EmulatorClusters, MapaBeforeTheClusterBarrier) {
  std::vector<int32_t> out(128, -1);
  EXPECT_THAT(run_cluster(out, /*early=*/true, 0),
              HasSubstr("block (0, 0, 0), thread (0, 0, 0): mapa reaches another CTA of the "
                        "cluster before this thread waited on barrier.cluster"));
}

//===----------------------------------------------------------------------===//
// Asynchronous copies: the planted TMA kernels over a 256-element f32 array
//===----------------------------------------------------------------------===//

/// An EmuTensorMap over `v` (256 floats), one box of all of it.
EmuTensorMap tensor_map(std::vector<float>& v, const char* name) {
  EmuTensorMap map{};
  map.magic = kEmuTensorMapMagic;
  map.rank = 1;
  map.element_bytes = 4;
  map.base = v.data();
  map.dims[0] = static_cast<uint32_t>(v.size());
  map.box[0] = 256;
  map.name = name;
  return map;
}

/// Runs a planted TMA kernel: (out, descriptor over `array`[, scalar]).
template <class Scalar = std::nullptr_t>
std::string run_tma(const char* kernel, ThreadEntry entry, int64_t shared_bytes,
                    std::vector<float>& out, std::vector<float>& array, Scalar scalar = nullptr,
                    uint64_t seed = 0) {
  EmuTensorMap map = tensor_map(array, "x");
  const void* descriptor = &map;
  Descriptor d(out);
  std::vector<void*> args;
  d.append(args);
  args.push_back(&descriptor);
  if constexpr (!std::is_same_v<Scalar, std::nullptr_t>) args.push_back(&scalar);
  std::vector<Buffer> buffers{buffer("out", out)};
  if (array.data() != out.data()) buffers.push_back(buffer("x", array));
  return launch_error(config_for(kernel, entry, shared_bytes, args, buffers, 1, 128, seed));
}

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

TEST(EmulatorChecks, ReadingAStageBeforeItsCopyCompleted) {
  std::vector<float> out(128), x = iota_floats(256);
  std::string error = run_tma("tma_read_before_wait", pallas_emu_kernel_tma_read_before_wait,
                              pallas_emu_kernel_tma_read_before_wait_shared_bytes, out, x);
  EXPECT_THAT(error, HasSubstr(": a load of shared offset "));
  EXPECT_THAT(error, HasSubstr("before its TMA copy completed: the copy completes phase 0 of the "
                               "mbarrier at shared offset "));
  EXPECT_THAT(error, HasSubstr("which this thread has not waited for"));
}

// A program must wait for every TMA copy into its shared memory before it
// ends, read or not: on the GPU the copy may land in the next program's.
TEST(EmulatorChecks, ProgramEndsBeforeWaitingForACopy) {
  std::vector<float> out(128, 1.0f), x = iota_floats(256);
  std::string error = run_tma("tma_never_awaited", pallas_emu_kernel_tma_never_awaited,
                              pallas_emu_kernel_tma_never_awaited_shared_bytes, out, x, false);
  EXPECT_THAT(error, HasSubstr("program (0, 0, 0) ended before any of its threads waited for the "
                               "TMA load of operand 'x' that completes phase 0 of the mbarrier "
                               "at shared offset "));
  out.assign(128, 1.0f);
  EXPECT_EQ(run_tma("tma_never_awaited", pallas_emu_kernel_tma_never_awaited,
                    pallas_emu_kernel_tma_never_awaited_shared_bytes, out, x, true),
            "");
}

TEST(EmulatorChecks, ExpectTxMatchingTheCopyCompletesThePhase) {
  for (uint64_t seed : {0, 1, 2}) {
    std::vector<float> out(128, 0.0f), x = iota_floats(256);
    EXPECT_EQ(run_tma("tma_expect_tx", pallas_emu_kernel_tma_expect_tx,
                      pallas_emu_kernel_tma_expect_tx_shared_bytes, out, x, int32_t{1024}, seed),
              "")
        << "seed " << seed;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], x[i]) << "element " << i;
  }
}

TEST(EmulatorChecks, ExpectTxFewerBytesThanTheCopy) {
  std::vector<float> out(128), x = iota_floats(256);
  std::string error = run_tma("tma_expect_tx", pallas_emu_kernel_tma_expect_tx,
                              pallas_emu_kernel_tma_expect_tx_shared_bytes, out, x, int32_t{512});
  EXPECT_THAT(error, HasSubstr("received 512 more bytes of copies than its expect-tx announced "
                               "in phase 0"));
}

TEST(EmulatorChecks, ExpectTxMoreBytesThanTheCopyDeadlocks) {
  std::vector<float> out(128), x = iota_floats(256);
  std::string error = run_tma("tma_expect_tx", pallas_emu_kernel_tma_expect_tx,
                              pallas_emu_kernel_tma_expect_tx_shared_bytes, out, x, int32_t{2048});
  EXPECT_THAT(error, HasSubstr("deadlock, no thread can make progress"));
  EXPECT_THAT(error, HasSubstr("(phase 0: 0 of 1 arrivals and 1024 bytes of copies outstanding)"));
}

TEST(EmulatorChecks, ProducerReusingAStageBeforeItsConsumersReleasedIt) {
  std::vector<float> out(128), x = iota_floats(256);
  std::string error = run_tma("tma_stage_reuse", pallas_emu_kernel_tma_stage_reuse,
                              pallas_emu_kernel_tma_stage_reuse_shared_bytes, out, x, false);
  EXPECT_THAT(error, HasSubstr("thread (0, 0, 0): a TMA load of operand 'x' overwrites shared "
                               "offset "));
  EXPECT_THAT(error, HasSubstr("since the last barrier: the producer reuses a stage before its "
                               "consumers released it"));
}

TEST(EmulatorChecks, StageReleasedByABarrierIsRefilledSafely) {
  for (uint64_t seed : {0, 1, 2}) {
    std::vector<float> out(128, 0.0f), x = iota_floats(256);
    EXPECT_EQ(run_tma("tma_stage_reuse", pallas_emu_kernel_tma_stage_reuse,
                      pallas_emu_kernel_tma_stage_reuse_shared_bytes, out, x, true, seed),
              "")
        << "seed " << seed;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 2 * x[i]) << "element " << i;
  }
}

TEST(EmulatorChecks, StageOverwrittenWhileATmaStoreReadsIt) {
  std::vector<float> out(256, -1.0f);
  std::string error =
      run_tma("tma_store_then_overwrite", pallas_emu_kernel_tma_store_then_overwrite,
              pallas_emu_kernel_tma_store_then_overwrite_shared_bytes, out, out, false);
  EXPECT_THAT(error, HasSubstr("a store by this thread overwrites shared offset "));
  EXPECT_THAT(error, HasSubstr("while a TMA store still reads it (bulk group 0 of thread (0, 0, "
                               "0), not yet waited for)"));
}

TEST(EmulatorChecks, StageWrittenAgainAfterWaitingForTheStore) {
  for (uint64_t seed : {0, 1, 2}) {
    std::vector<float> out(256, -1.0f);
    EXPECT_EQ(
        run_tma("tma_store_then_overwrite", pallas_emu_kernel_tma_store_then_overwrite,
                pallas_emu_kernel_tma_store_then_overwrite_shared_bytes, out, out, true, seed),
        "")
        << "seed " << seed;
    for (size_t i = 0; i < 256; ++i) ASSERT_EQ(out[i], float(i % 128)) << "element " << i;
  }
}

// The GPU writes the 16-byte piece that ends a row whole (an H200 overwrote the padding after
// a [70, 161] f32 output's rows): a TMA store reaching the end of a row that ends inside a
// piece is refused, naming the operand and the bytes; rows of whole pieces store exactly.
TEST(EmulatorChecks, TmaStoreReachingARowEndInsideA16BytePiece) {
  std::vector<float> out(256, -1.0f);
  EmuTensorMap map = tensor_map(out, "out");
  map.dims[0] = 253;  // 1012 bytes: the piece 1008..1023 holds the last element
  const void* descriptor = &map;
  Descriptor d(out);
  std::vector<void*> args;
  d.append(args);
  args.push_back(&descriptor);
  bool wait = true;
  args.push_back(&wait);
  std::vector<Buffer> buffers{buffer("out", out)};
  const auto launch_once = [&] {
    return launch_error(config_for(
        "tma_store_then_overwrite", pallas_emu_kernel_tma_store_then_overwrite,
        pallas_emu_kernel_tma_store_then_overwrite_shared_bytes, args, buffers, 1, 128, 0));
  };
  EXPECT_THAT(launch_once(),
              HasSubstr("TMA store of operand 'out' reaches the end of its rows, which are 253 "
                        "elements (1012 bytes, not a multiple of 16): the GPU writes the 16-byte "
                        "piece that ends a row whole, so bytes 1012..1023 after each row's end "
                        "would be written too"));
  out.assign(256, -1.0f);
  map.dims[0] = 252;  // 1008 bytes: whole pieces, the store clips exactly
  EXPECT_EQ(launch_once(), "");
  for (size_t i = 0; i < 256; ++i)
    ASSERT_EQ(out[i], i < 252 ? float(i % 128) : -1.0f) << "element " << i;
}

TEST(EmulatorChecks, TmaStoreOfThreadsStoresNeedsTheirProxyFence) {
  std::vector<float> out(256, -1.0f);
  std::string error = run_tma("tma_store_unfenced", pallas_emu_kernel_tma_store_unfenced,
                              pallas_emu_kernel_tma_store_unfenced_shared_bytes, out, out, false);
  EXPECT_THAT(error, HasSubstr("thread (0, 0, 0): a TMA store of operand 'x' reads shared offset "
                               "0, which thread (0, 0, 0) stored without a fence.proxy.async"));
  for (uint64_t seed : {0, 1}) {
    std::vector<float> fenced(256, -1.0f);
    EXPECT_EQ(
        run_tma("tma_store_unfenced", pallas_emu_kernel_tma_store_unfenced,
                pallas_emu_kernel_tma_store_unfenced_shared_bytes, fenced, fenced, true, seed),
        "")
        << "seed " << seed;
    for (size_t i = 0; i < 256; ++i) ASSERT_EQ(fenced[i], float(i % 128)) << "element " << i;
  }
}

//===----------------------------------------------------------------------===//
// wgmma on a TMA-staged operand: x is 64 rows x 16 bf16, copied with a
// 32-byte swizzle; the kernel multiplies x by x[0:8]^T
//===----------------------------------------------------------------------===//

/// Descriptor bits 32-63 for rows of `swizzle` bytes: stride byte offset
/// (8 rows) >> 4, and the swizzle mode (1: 128 bytes, 2: 64, 3: 32).
int64_t descriptor_high(int64_t swizzle) {
  const uint64_t mode = swizzle == 128 ? 1 : swizzle == 64 ? 2 : 3;
  return static_cast<int64_t>((static_cast<uint64_t>(8 * swizzle >> 4) << 32) | (mode << 62));
}

std::string run_wgmma(std::vector<float>& out, std::vector<uint16_t>& x, int64_t descriptor_swizzle,
                      bool early, uint64_t seed = 0, bool read_early = false,
                      bool store_early = false) {
  EmuTensorMap map{};
  map.magic = kEmuTensorMapMagic;
  map.rank = 2;
  map.element_bytes = 2;
  map.swizzle = 32;
  map.base = x.data();
  map.dims[0] = 16;
  map.dims[1] = 64;
  map.box[0] = 16;
  map.box[1] = 64;
  map.strides[0] = 32;
  map.name = "x";
  const void* descriptor = &map;
  int64_t high = descriptor_high(descriptor_swizzle);
  Descriptor d(out);
  std::vector<void*> args;
  d.append(args);
  args.push_back(&descriptor);
  args.push_back(&high);
  args.push_back(&early);
  args.push_back(&read_early);
  args.push_back(&store_early);
  std::vector<Buffer> buffers{buffer("out", out), buffer("x", x)};
  return launch_error(config_for("wgmma_tma_operand", pallas_emu_kernel_wgmma_tma_operand,
                                 pallas_emu_kernel_wgmma_tma_operand_shared_bytes, args, buffers, 1,
                                 128, seed));
}

/// bf16 bits of small integers (exact), x[r][k] = (3 r + k) % 7 - 3.
std::vector<uint16_t> small_bf16_matrix() {
  std::vector<uint16_t> x(64 * 16);
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < 16; ++k) {
      const float v = static_cast<float>((3 * r + k) % 7 - 3);
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      x[static_cast<size_t>(r * 16 + k)] = static_cast<uint16_t>(bits >> 16);
    }
  return x;
}

TEST(EmulatorChecks, WgmmaReadsTheTmaTileThroughItsDescriptor) {
  for (uint64_t seed : {0, 1, 2}) {
    std::vector<float> out(512, -1.0f);
    std::vector<uint16_t> x = small_bf16_matrix();
    ASSERT_EQ(run_wgmma(out, x, 32, /*early=*/false, seed), "") << "seed " << seed;
    // Thread t's register i: row 16 (t / 32) + (t % 32) / 4 + 8 (i / 2),
    // column 2 (t % 4) + i % 2 (PTX's wgmma D fragment).
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (i / 2), col = 2 * (t % 4) + i % 2;
        float want = 0;
        for (int k = 0; k < 16; ++k)
          want += static_cast<float>(((3 * row + k) % 7 - 3) * ((3 * col + k) % 7 - 3));
        ASSERT_EQ(out[static_cast<size_t>(4 * t + i)], want) << "thread " << t << " register " << i;
      }
  }
}

TEST(EmulatorChecks, WgmmaOperandOverwrittenBeforeItsWait) {
  std::vector<float> out(512);
  std::vector<uint16_t> x = small_bf16_matrix();
  std::string error = run_wgmma(out, x, 32, /*early=*/true);
  EXPECT_THAT(error, HasSubstr("a store by this thread overwrites shared offset "));
  EXPECT_THAT(error, HasSubstr("while a wgmma still reads it (wgmma group 0 of thread "));
  EXPECT_THAT(error, HasSubstr("not yet waited for): wait for the multiply (wgmma.wait_group"));
}

// The accumulator read before wgmma.wait_group completes its group (what a lowering that
// waited too little for an accumulator load would do): its registers still hold the
// emulator's tokens, and the read fails.
TEST(EmulatorChecks, WgmmaAccumulatorReadBeforeItsWait) {
  std::vector<float> out(512);
  std::vector<uint16_t> x = small_bf16_matrix();
  std::string error = run_wgmma(out, x, 32, /*early=*/false, 0, /*read_early=*/true);
  EXPECT_THAT(error, HasSubstr("a read of an accumulator register while the wgmma writing it is "
                               "in flight (wgmma group 0 of thread "));
  EXPECT_THAT(error, HasSubstr("wait for the multiply (wgmma.wait_group) before reading its "
                               "accumulator"));
}

// An accumulator store before the wait: the multiply would write the registers after it.
TEST(EmulatorChecks, WgmmaAccumulatorStoredBeforeItsWait) {
  std::vector<float> out(512);
  std::vector<uint16_t> x = small_bf16_matrix();
  std::string error =
      run_wgmma(out, x, 32, /*early=*/false, 0, /*read_early=*/false, /*store_early=*/true);
  EXPECT_THAT(error, HasSubstr("a store to an accumulator register while the wgmma writing it "
                               "is in flight (wgmma group 0 of thread "));
  EXPECT_THAT(error, HasSubstr("wait for it (wgmma.wait_group) before writing its accumulator"));
}

TEST(EmulatorChecks, WgmmaDescriptorSwizzleDiffersFromTheCopy) {
  std::vector<float> out(512);
  std::vector<uint16_t> x = small_bf16_matrix();
  std::string error = run_wgmma(out, x, 128, /*early=*/false);
  EXPECT_THAT(error, HasSubstr("through a descriptor with a 128-byte swizzle, but the TMA copy "
                               "that wrote it used a 32-byte swizzle"));
}

TEST(EmulatorScheduling, ProgramsWaitingOnEachOtherNeedToBeResident) {
  for (uint64_t seed : {0, 3}) {
    std::vector<int32_t> flag(1, 0), out(1, 0);
    EXPECT_EQ(run("cross_cta_flag", pallas_emu_kernel_cross_cta_flag, 0,
                  {Descriptor(flag), Descriptor(out)},
                  {buffer("flag", flag, /*must_end_zero=*/true), buffer("out", out)}, 32, seed,
                  /*ctas=*/2, /*resident=*/2),
              "");
    EXPECT_EQ(out[0], 1);
  }
  // One resident CTA: CTA 0 spins on a flag only CTA 1 (never resident) can set.
  std::vector<int32_t> flag(1, 0), out(1, 0);
  EXPECT_EQ(run("cross_cta_flag", pallas_emu_kernel_cross_cta_flag, 0,
                {Descriptor(flag), Descriptor(out)}, {buffer("flag", flag), buffer("out", out)}, 32,
                0, /*ctas=*/2, /*resident=*/1),
            "emulator: kernel 'cross_cta_flag': deadlock, no thread can make progress (linear "
            "thread ids):\n  block (0, 0, 0):\n    spinning (nanosleep, try-wait, semaphore "
            "wait): threads 0\n    exited: threads 1-31");
}

TEST(EmulatorChecks, SemaphoreLeftNonZero) {
  std::vector<int32_t> sem(4, 0);
  std::string error = run("leaves_semaphore", pallas_emu_kernel_leaves_semaphore, 0,
                          {Descriptor(sem)}, {buffer("sem", sem, /*must_end_zero=*/true)});
  EXPECT_EQ(error,
            "emulator: kernel 'leaves_semaphore': buffer 'sem' must be zero when the kernel ends, "
            "but byte 0 is 1 (a semaphore not returned to zero)");
}

TEST(EmulatorCollectives, ButterflyWarpSumIsTheSameUnderEverySchedule) {
  std::vector<float> in(128);
  for (int i = 0; i < 128; ++i) in[i] = float(i % 7) - 2.5f + 0.125f * i;
  std::vector<float> first;
  for (uint64_t seed : {0, 7, 99}) {
    std::vector<float> out(128, -1.0f);
    ASSERT_EQ(run("warp_sum", pallas_emu_kernel_warp_sum, 0, {Descriptor(in), Descriptor(out)},
                  {buffer("in", in), buffer("out", out)}, 128, seed),
              "");
    for (int t = 0; t < 128; ++t) {
      float want = std::accumulate(in.begin() + t / 32 * 32, in.begin() + t / 32 * 32 + 32, 0.0f);
      ASSERT_NEAR(out[t], want, 1e-4) << "thread " << t;
    }
    if (first.empty()) first = out;
    EXPECT_EQ(out, first) << "seed " << seed << " changed the result of a race-free kernel";
  }
}

TEST(EmulatorCollectives, ShuffleModesFollowPtx) {
  std::vector<int32_t> in(32), up(32), down(32), idx(32), valid(32);
  for (int i = 0; i < 32; ++i) in[i] = 100 + i;
  ASSERT_EQ(
      run("shuffle_modes", pallas_emu_kernel_shuffle_modes, 0,
          {Descriptor(in), Descriptor(up), Descriptor(down), Descriptor(idx), Descriptor(valid)},
          {buffer("in", in), buffer("up", up), buffer("down", down), buffer("idx", idx),
           buffer("valid", valid)},
          32),
      "");
  for (int i = 0; i < 32; ++i) {
    SCOPED_TRACE("lane " + std::to_string(i));
    EXPECT_EQ(up[i], i >= 1 ? in[i - 1] : in[i]);  // out of range: own value
    EXPECT_EQ(down[i], i + 3 <= 31 ? in[i + 3] : in[i]);
    EXPECT_EQ(idx[i], in[(i & ~7) | 5]);  // lane 5 of each 8-lane segment
    EXPECT_EQ(valid[i], (i >= 1 ? 1 : 0) + (i + 3 <= 31 ? 2 : 0));
  }
}

TEST(EmulatorCollectives, MatchAndReduxFollowPtx) {
  std::vector<int32_t> in(32), same(32), sum(32), umax(32);
  for (int i = 0; i < 32; ++i) in[i] = i % 3 == 0 ? -7 : i;  // lanes 0, 3, 6, ... share -7
  ASSERT_EQ(
      run("match_redux", pallas_emu_kernel_match_redux, 0,
          {Descriptor(in), Descriptor(same), Descriptor(sum), Descriptor(umax)},
          {buffer("in", in), buffer("same", same), buffer("sum", sum), buffer("umax", umax)}, 32),
      "");
  uint32_t sevens = 0;
  for (int i = 0; i < 32; i += 3) sevens |= 1u << i;
  const int32_t total = std::accumulate(in.begin(), in.end(), 0);
  for (int i = 0; i < 32; ++i) {
    SCOPED_TRACE("lane " + std::to_string(i));
    EXPECT_EQ(static_cast<uint32_t>(same[i]), i % 3 == 0 ? sevens : 1u << i);
    EXPECT_EQ(sum[i], total);
    EXPECT_EQ(umax[i], -7);  // 0xfffffff9 is the largest unsigned value
  }
}

}  // namespace
}  // namespace pallas::emulator
