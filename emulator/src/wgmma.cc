// wgmma.mma_async on the emulator: each thread of the warpgroup computes its
// own accumulator registers, reading the operands from shared memory through
// the matrix descriptors as the PTX ISA defines them (written here from the
// ISA, independently of the lowering that builds them, so that a descriptor
// the lowering gets wrong reads the wrong elements and the test fails).
//
// Descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address
// >> 4, 16-29 leading dimension byte offset >> 4, 32-45 stride dimension
// byte offset >> 4, 62-63 swizzle mode (1: 128 bytes, 2: 64, 3: 32; 0, no
// swizzle, is not emulated). K-major operand with swizzle S: row r (of M for
// A, N for B), element k (0..15) of the instruction's K is at
//   o = start + (r / 8) * SBO + (r % 8) * S + 2 k,
// then the swizzle XORs the 16-byte piece within each 128-byte line with
// the line's index modulo S / 16: o ^ (((o >> 7) % (S / 16)) << 4).
// MN-major operand (imm-trans-a / imm-trans-b = 1; PTX ISA "canonical
// layouts", MN-major with swizzle): element c of M (or N), row k of K is at
//   o = start + (c / (S / 2)) * LBO + (k / 8) * SBO + (k % 8) * S + 2 (c % (S / 2)),
// S / 2 elements of M or N forming one swizzled line, LBO apart for the
// next S / 2, SBO apart for the next 8 rows of K; then the same swizzle. The
// address is a shared-window address; the 18 bits the descriptor keeps
// identify the byte (shared memory is below 256 KiB), and the swizzle uses
// the absolute address bits, so tiles must be aligned to the pattern.
//
// Accumulator fragment (PTX ISA, wgmma .m64nNk16 D): register i of thread t
// (warp w = t / 32 of the warpgroup, lane l) holds row 16 w + l / 4 +
// 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2.
// Accumulator tokens. A wgmma writes its accumulator registers asynchronously: reading
// them before wgmma.wait_group completes its group is undefined (PTX ISA). The emulator
// multiplies when the wgmma is issued, so instead of the results it leaves tokens in the
// registers: quiet NaNs 0x7fe00000 | s, s the thread's result serial (21 bits, never 0),
// whose ring slot s % kResultSlots keeps the value and the wgmma group. A read through the
// compiler's copy fence (kCopyOperandsAsm: the load of an accumulator, after the wait
// the lowering chose) resolves them and fails where the group is not complete; a wgmma
// that accumulates onto them, and the in-place fence around a multiply, resolve them
// unchecked (multiplies into one accumulator run in order). Read any other way, a token
// is a NaN, which the kernel's result shows. Worked example: wgmma(s) is group 0, wgmma(o)
// group 1; wait_group 1 completes group 0, so reading s resolves and reading o fails
// until wait_group 0. A store of a block value into an accumulator's registers
// (kAccumulatorStoreAttrName) fails where they still hold a token of an incomplete group.
//
// A in registers (PTX ISA, "Register fragment" of A for .m64nNk16 f16/bf16):
// element i (0..7; word i / 2, low half first) of lane l of warp w is row
// 16 w + l / 4 + 8 ((i / 2) % 2), column 2 (l % 4) + i % 2 + 8 (i / 4), so a
// warp's 32 lanes hold its 16 rows: the rows its own accumulator rows need.

#include "Scheduler.h"

#include "pallas/emulator/abi.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

using namespace pallas::emulator;
using namespace pallas::emulator::detail;

float pallas::emulator::detail::half_to_float(uint16_t h, bool bf16) {
  uint32_t bits;
  if (bf16) {
    bits = static_cast<uint32_t>(h) << 16;
  } else {  // IEEE binary16
    const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) {
      if (mantissa == 0) {
        bits = sign;
      } else {  // subnormal: normalise
        int e = -1;
        uint32_t m = mantissa;
        do {
          ++e;
          m <<= 1;
        } while ((m & 0x400) == 0);
        bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
      }
    } else if (exponent == 0x1f) {
      bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
      bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace {

struct Operand {
  int64_t start, leading_bytes, stride_bytes, swizzle;
  bool mn_major;
};

Operand decode(int64_t desc, bool mn_major, const char* which) {
  const auto d = static_cast<uint64_t>(desc);
  const int64_t mode = static_cast<int64_t>(d >> 62);
  if (mode == 0)
    fail(std::string("wgmma operand ") + which +
         ": descriptor without swizzle (interleaved core matrices) is not emulated");
  return Operand{static_cast<int64_t>(d & 0x3fff) << 4,
                 static_cast<int64_t>((d >> 16) & 0x3fff) << 4,
                 static_cast<int64_t>((d >> 32) & 0x3fff) << 4,
                 mode == 1   ? 128
                 : mode == 2 ? 64
                             : 32,
                 mn_major};
}

/// The element at row `r` (of M for a, N for b), K index `k` of an operand; `what` names it
/// in failures ("wgmma operand a").
float element(Cta& cta, const Operand& op, int64_t r, int64_t k, bool bf16, std::string_view what) {
  const int64_t span = op.swizzle / 2;  // elements of one swizzled line
  int64_t o = op.mn_major ? op.start + (r / span) * op.leading_bytes + (k / 8) * op.stride_bytes +
                                (k % 8) * op.swizzle + 2 * (r % span)
                          : op.start + (r / 8) * op.stride_bytes + (r % 8) * op.swizzle + 2 * k;
  o ^= ((o >> 7) % (op.swizzle / 16)) << 4;
  // The descriptor holds the low 18 bits of the shared-window address.
  const auto base = static_cast<int64_t>(reinterpret_cast<uintptr_t>(cta.shared) & 0x3ffff);
  const int64_t offset = ((o - base) % (1 << 18) + (1 << 18)) % (1 << 18);
  if (offset + 2 > cta.shared_bytes)
    fail(std::string(what) + " reads shared offset " + std::to_string(offset) + ", past the " +
         std::to_string(cta.shared_bytes) + " bytes of shared memory");
  const std::byte* at = cta.shared + offset;
  pallas_emu_access(at, 2, 2, kAccessLoad);  // races, and copies not yet waited for
  const Thread& t = *current().thread;
  for (int64_t k = offset; k < offset + 2; ++k) {
    check_proxy_fenced(cta, k, what);
    ShadowByte& sh = cta.shadow[static_cast<size_t>(k)];
    // A TMA copy wrote the byte in its swizzled layout: the descriptor must
    // read it with the same swizzle, or it reads other elements.
    if (sh.tma_swizzle >= 0 && sh.tma_swizzle != op.swizzle)
      fail(std::string(what) + " reads shared offset " + std::to_string(k) +
           " through a descriptor with a " + std::to_string(op.swizzle) +
           "-byte swizzle, but the TMA copy that wrote it used " +
           (sh.tma_swizzle == 0 ? std::string("no swizzle")
                                : "a " + std::to_string(sh.tma_swizzle) + "-byte swizzle"));
    // Until the thread's wgmma.wait_group completes this group, nothing may
    // overwrite the operand (memory.cc, check_wgmma_done).
    sh.wgmma_thread = t.linear;
    sh.wgmma_group = t.wgmma_committed;
  }
  uint16_t h;
  std::memcpy(&h, at, sizeof h);
  return half_to_float(h, bf16);
}

/// D += A B^T for one thread's accumulator registers of an m64nNk16 product
/// (PTX's wgmma D fragment): register i holds row 16 warp + lane / 4 +
/// 8 ((i / 2) % 2), column 8 (i / 4) + 2 (lane % 4) + i % 2 of the warpgroup's
/// D. `a(row, k)` and `b(col, k)` give the operands' elements; without
/// `scale_d` the old D is not added.
///
/// The thread's registers cover 2 rows of D and n / 4 columns, so it reads its 2 x 16
/// elements of A and n / 4 x 16 of B once each (every check of a read is the same on the
/// next read of that element by the same thread), not once per register: for n = 128,
/// 544 reads instead of 2048. Worked example, lane 5 of warp 1, n = 16: rows 16 + 1 = 17
/// and 25; register i = 5 is row 17 + 8 ((5 / 2) % 2) = 17, column 8 (5 / 4) + 2 (5 % 4) +
/// 5 % 2 = 11: A's row index (i / 2) % 2 = 0, B's column index 2 (i / 4) + i % 2 = 3 (columns
/// 2 (lane % 4) + {0, 1, 8, 9} = 2, 3, 10, 11).
template <class AElement, class BElement>
void multiply_accumulate(float* acc, int32_t n, int warp, int lane, bool scale_d, AElement&& a,
                         BElement&& b) {
  // (n is 8..256, a multiple of 8: check_n, which every caller runs first.)
  const int64_t row0 = 16 * warp + lane / 4;
  std::array<std::array<float, 16>, 2> a_rows;
  std::array<std::array<float, 16>, 64> b_cols;  // n / 4 <= 64 columns
  std::array<bool, 2> a_read{};
  std::array<bool, 64> b_read{};
  for (int i = 0; i < n / 2; ++i) {
    const int h = (i / 2) % 2, j = 2 * (i / 4) + i % 2;
    // An element is read where the register loop first needs it, A's and B's alternately
    // along K as before, so that of several faulty reads the same one is reported first.
    const bool read_a = !a_read[h], read_b = !b_read[j];
    for (int64_t k = 0; k < 16 && (read_a || read_b); ++k) {
      if (read_a) a_rows[h][k] = a(row0 + 8 * h, k);
      if (read_b) b_cols[j][k] = b(8 * (j / 2) + 2 * (lane % 4) + j % 2, k);
    }
    a_read[h] = b_read[j] = true;
    float sum = scale_d ? acc[i] : 0.0f;
    for (int64_t k = 0; k < 16; ++k) sum += a_rows[h][k] * b_cols[j][k];
    acc[i] = sum;
  }
}

constexpr uint32_t kTokenBits = 0x7fe00000u, kTokenMask = 0xffe00000u, kSerialMask = 0x1fffffu;
/// The ring's slots: a token stays readable until its thread has handed out this many more
/// results. Each instruction of a multiply consumes the tokens of the one before (its
/// accumulator input), so what counts is how long an accumulator sits unread while others
/// are multiplied into: attention d128 hands out 256 a step (S: 32 registers x 8
/// instructions, O: 64 x 4) and reads both within it. A kernel that leaves one unread for
/// 1024 results fails, naming this limit.
constexpr size_t kResultSlots = 1024;

uint32_t bits_of(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

/// How a register holding a token is read (resolve).
enum class Read {
  kLenient,      // the in-place fence: registers may be stale bytes (before a first multiply)
  kAccumulated,  // a multiply adds onto them (scale-d 1): in flight is fine, dropped is not
  kChecked,      // an accumulator's load: its multiply must be complete
};

/// The ring slot a register holding `bits` names, if they have a token's shape (null
/// otherwise); the slot holds that very token only while the result is live.
const WgmmaResult* slot_of(const Thread& t, uint32_t bits) {
  if ((bits & kTokenMask) != kTokenBits || t.wgmma_results.empty()) return nullptr;
  return &t.wgmma_results[(bits & kSerialMask) % kResultSlots];
}

/// The value register `v` of thread `t` stands for: its wgmma's result if it holds a
/// token of the thread's, else itself.
float resolve(const Thread& t, float v, Read read) {
  const uint32_t bits = bits_of(v);
  const WgmmaResult* slot = slot_of(t, bits);
  if (slot == nullptr) return v;
  const WgmmaResult& r = *slot;
  if (r.token != bits) {
    // Not a live token of this thread's: a result it has since overwritten in the ring, or
    // bits that merely look like one (an accumulator's registers before its first
    // multiply are stale stack bytes, maybe another thread's tokens; the multiply, scale-d
    // 0, ignores them). Added onto or loaded, it is refused rather than read as NaN.
    const uint32_t since = (t.wgmma_result_serial - (bits & kSerialMask)) & kSerialMask;
    if (read != Read::kLenient && since >= kResultSlots)
      fail("the emulator dropped a wgmma result before it was read: thread " +
           std::to_string(t.linear) + " handed out " + std::to_string(since) +
           " accumulator results since (the emulator keeps the last " +
           std::to_string(kResultSlots) + " a thread; emulator/src/wgmma.cc, kResultSlots)");
    return v;
  }
  if (read == Read::kChecked && r.group >= t.wgmma_completed)
    fail(
        "a read of an accumulator register while the wgmma writing it is in flight (wgmma "
        "group " +
        std::to_string(r.group) + " of thread " + std::to_string(t.linear) +
        ", not yet waited for): wait for the multiply (wgmma.wait_group) before reading its "
        "accumulator");
  return r.value;
}

/// The accumulator registers a multiply reads: resolved where it adds onto them (scale-d
/// 1), left alone where it ignores them.
void resolve_inputs(const Thread& t, float* acc, int32_t count, int32_t scale_d) {
  if (scale_d == 0) return;
  for (int32_t i = 0; i < count; ++i) acc[i] = resolve(t, acc[i], Read::kAccumulated);
}

/// Replaces the thread's `count` freshly computed registers by tokens of group
/// `wgmma_committed` (the group the wgmma belongs to until the next commit).
void hand_out_tokens(Thread& t, float* acc, int32_t count) {
  if (t.wgmma_results.empty()) t.wgmma_results.resize(kResultSlots);
  for (int32_t i = 0; i < count; ++i) {
    t.wgmma_result_serial = (t.wgmma_result_serial + 1) & kSerialMask;
    if (t.wgmma_result_serial == 0) t.wgmma_result_serial = 1;
    const uint32_t token = kTokenBits | t.wgmma_result_serial;
    t.wgmma_results[t.wgmma_result_serial % kResultSlots] =
        WgmmaResult{token, acc[i], t.wgmma_committed};
    acc[i] = float_of(token);
  }
}

void check_n(int32_t n, const char* what) {
  if (n % 8 != 0 || n < 8 || n > 256)
    fail(std::string(what) + " n = " + std::to_string(n) + " is not 8..256");
}

}  // namespace

extern "C" void pallas_emu_wgmma(float* acc, int32_t n, int64_t desc_a, int64_t desc_b,
                                 int32_t type, int32_t trans_a, int32_t trans_b, int32_t scale_d) {
  LaunchState& s = current();
  Cta& cta = *s.cta;
  check_n(n, "wgmma");
  const Operand a = decode(desc_a, trans_a != 0, "a"), b = decode(desc_b, trans_b != 0, "b");
  const bool bf16 = type == 1;
  const int t = s.thread->linear % 128;
  resolve_inputs(*s.thread, acc, n / 2, scale_d);
  multiply_accumulate(
      acc, n, t / 32, t % 32, scale_d != 0,
      [&](int64_t row, int64_t k) { return element(cta, a, row, k, bf16, "wgmma operand a"); },
      [&](int64_t col, int64_t k) { return element(cta, b, col, k, bf16, "wgmma operand b"); });
  hand_out_tokens(*s.thread, acc, n / 2);
}

extern "C" void pallas_emu_wgmma_register_a(float* acc, int32_t n, const int32_t* a_words,
                                            int64_t desc_b, int32_t type, int32_t trans_b,
                                            int32_t scale_d) {
  LaunchState& s = current();
  Cta& cta = *s.cta;
  check_n(n, "wgmma (a in registers)");
  const Operand b = decode(desc_b, trans_b != 0, "b");
  const bool bf16 = type == 1;
  const int t = s.thread->linear % 128, lane = t % 32;
  // Every lane of the warp, its 4 words: two exchanges of two words each.
  std::array<int64_t, 32> low{}, high{};
  auto pair = [&](int w) {
    return static_cast<int64_t>(static_cast<uint32_t>(a_words[w])) |
           static_cast<int64_t>(static_cast<uint32_t>(a_words[w + 1])) << 32;
  };
  gather_wgmma_a(0, pair(0), low.data());
  gather_wgmma_a(1, pair(2), high.data());
  // Row r (0..15 of the warp's) and K index k: lane 4 (r % 8) + (k % 8) / 2,
  // element i = 2 (r / 8) + 4 (k / 8) + k % 2 (word i / 2, half i % 2).
  auto a = [&](int64_t r, int64_t k) {
    const int64_t holder = 4 * (r % 8) + (k % 8) / 2, i = 2 * (r / 8) + 4 * (k / 8) + k % 2;
    const int64_t words = (i / 2 < 2 ? low : high)[static_cast<size_t>(holder)];
    const auto word = static_cast<uint32_t>(words >> (32 * ((i / 2) % 2)));
    return half_to_float(static_cast<uint16_t>(i % 2 ? word >> 16 : word & 0xffff), bf16);
  };
  // Rows of A count from the warp's first (warp 0): each warp holds its own 16.
  resolve_inputs(*s.thread, acc, n / 2, scale_d);
  multiply_accumulate(acc, n, /*warp=*/0, lane, scale_d != 0, a, [&](int64_t col, int64_t k) {
    return element(cta, b, col, k, bf16, "wgmma operand b");
  });
  hand_out_tokens(*s.thread, acc, n / 2);
}

extern "C" void pallas_emu_wgmma_fence(void) {}

extern "C" void pallas_emu_wgmma_overwrite(const float* registers, int32_t count) {
  const Thread& t = *current().thread;
  for (int32_t i = 0; i < count; ++i) {
    const uint32_t bits = bits_of(registers[i]);
    const WgmmaResult* r = slot_of(t, bits);
    // (Not a live token: stale bytes or a result long read; nothing writes them any more.)
    if (r != nullptr && r->token == bits && r->group >= t.wgmma_completed)
      fail(
          "a store to an accumulator register while the wgmma writing it is in flight "
          "(wgmma group " +
          std::to_string(r->group) + " of thread " + std::to_string(t.linear) +
          ", not yet waited for): the multiply would overwrite the store; wait for it "
          "(wgmma.wait_group) before writing its accumulator");
  }
}

extern "C" void pallas_emu_wgmma_read(float* registers, int32_t count, int32_t checked) {
  const Thread& t = *current().thread;
  for (int32_t i = 0; i < count; ++i)
    registers[i] = resolve(t, registers[i], checked != 0 ? Read::kChecked : Read::kLenient);
}

extern "C" void pallas_emu_fence_proxy_async(void) { ++current().thread->proxy_fences; }

extern "C" void pallas_emu_wgmma_commit(void) { ++current().thread->wgmma_committed; }

extern "C" void pallas_emu_wgmma_wait(int32_t pending) {
  Thread& t = *current().thread;
  const auto keep = static_cast<uint64_t>(std::max(pending, 0));
  if (t.wgmma_committed > keep)
    t.wgmma_completed = std::max(t.wgmma_completed, t.wgmma_committed - keep);
}
