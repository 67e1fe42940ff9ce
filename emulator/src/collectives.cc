// Warp collectives as rendezvous of the lanes in the member mask: each lane
// deposits its operands and waits; the last lane to arrive computes every
// lane's result (PTX's rules) and releases the others.

#include "Scheduler.h"

#include "pallas/emulator/abi.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

using namespace pallas::emulator;
using namespace pallas::emulator::detail;

namespace {

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* shuffle_name(int32_t mode) {
  switch (mode) {
    case kShflBfly:
      return "shfl.sync.bfly";
    case kShflUp:
      return "shfl.sync.up";
    case kShflDown:
      return "shfl.sync.down";
    case kShflIdx:
      return "shfl.sync.idx";
  }
  return "shfl.sync.?";
}

/// shfl.sync for all lanes, following the PTX ISA: c = (segmask << 8) | clamp;
/// a lane whose source is out of its segment reads its own value, predicate false.
void compute_shuffle(Collective& w) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!(w.member_mask >> lane & 1)) continue;
    const int32_t b = w.operand[lane];
    const int32_t c = w.clamp[lane];
    const int32_t clamp = c & 0x1f, segmask = (c >> 8) & 0x1f;
    const int32_t max_lane = (lane & segmask) | (clamp & ~segmask);
    const int32_t min_lane = lane & segmask;
    int32_t j = lane;
    bool in_range = false;
    switch (w.mode) {
      case kShflUp:
        j = lane - b;
        in_range = j >= max_lane;
        break;
      case kShflDown:
        j = lane + b;
        in_range = j <= max_lane;
        break;
      case kShflBfly:
        j = lane ^ b;
        in_range = j <= max_lane;
        break;
      case kShflIdx:
        j = min_lane | (b & ~segmask);
        in_range = j <= max_lane;
        break;
      default:
        fail("unknown shuffle mode " + std::to_string(w.mode));
    }
    if (!in_range) j = lane;
    if (j < 0 || j > 31 || !(w.member_mask >> j & 1))
      fail(std::string(shuffle_name(w.mode)) + ": lane " + std::to_string(lane) + " reads lane " +
           std::to_string(j) + ", which is not in the member mask " + hex(w.member_mask));
    w.result[lane] = static_cast<int64_t>(static_cast<uint32_t>(w.value[static_cast<size_t>(j)])) |
                     (static_cast<int64_t>(in_range) << 32);
  }
}

void compute_vote(Collective& w) {
  uint32_t ballot = 0;
  for (int lane = 0; lane < 32; ++lane)
    if ((w.member_mask >> lane & 1) && w.value[lane] != 0) ballot |= 1u << lane;
  int64_t r = 0;
  switch (w.mode) {
    case kVoteBallot:
      r = static_cast<int32_t>(ballot);
      break;
    case kVoteAny:
      r = ballot != 0;
      break;
    case kVoteAll:
      r = ballot == w.member_mask;
      break;
    case kVoteUni:
      r = ballot == 0 || ballot == w.member_mask;
      break;
    default:
      fail("unknown vote mode " + std::to_string(w.mode));
  }
  for (int lane = 0; lane < 32; ++lane) w.result[lane] = r;
}

void compute_match(Collective& w) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!(w.member_mask >> lane & 1)) continue;
    uint32_t same = 0;
    for (int other = 0; other < 32; ++other)
      if ((w.member_mask >> other & 1) &&
          w.value[static_cast<size_t>(other)] == w.value[static_cast<size_t>(lane)])
        same |= 1u << other;
    const bool all = same == w.member_mask;
    w.result[static_cast<size_t>(lane)] =
        w.mode == kMatchAny ? same : (all ? w.member_mask : 0) | (static_cast<int64_t>(all) << 32);
  }
}

void compute_redux(Collective& w) {
  bool first = true;
  int32_t acc = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(w.member_mask >> lane & 1)) continue;
    const auto v = static_cast<int32_t>(w.value[static_cast<size_t>(lane)]);
    const auto u = static_cast<uint32_t>(v), a = static_cast<uint32_t>(acc);
    if (first) {
      acc = v;
      first = false;
      continue;
    }
    switch (w.mode) {
      case kReduxAdd:
        acc = static_cast<int32_t>(a + u);
        break;
      case kReduxAnd:
        acc = static_cast<int32_t>(a & u);
        break;
      case kReduxOr:
        acc = static_cast<int32_t>(a | u);
        break;
      case kReduxXor:
        acc = static_cast<int32_t>(a ^ u);
        break;
      case kReduxMax:
        acc = std::max(acc, v);
        break;
      case kReduxMin:
        acc = std::min(acc, v);
        break;
      case kReduxUmax:
        acc = static_cast<int32_t>(std::max(a, u));
        break;
      case kReduxUmin:
        acc = static_cast<int32_t>(std::min(a, u));
        break;
      default:
        fail("redux.sync kind " + std::to_string(w.mode) + " has no emulator rule");
    }
  }
  for (int lane = 0; lane < 32; ++lane) w.result[static_cast<size_t>(lane)] = acc;
}

void compute_gather(Collective& w) {
  for (int lane = 0; lane < 32; ++lane)
    if (w.member_mask >> lane & 1) std::copy(w.value.begin(), w.value.end(), w.gather[lane]);
}

/// mma.sync m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
/// g = lane / 4, t = lane % 4:
///   A (16 x 16): word r, half h of lane l holds row g + 8 (r % 2), column
///     2 t + h + 8 (r / 2);
///   B (16 x 8):  word r, half h holds row (K) 2 t + h + 8 r, column g;
///   C, D (16 x 8, f32): register i holds row g + 8 (i / 2), column 2 t + i % 2.
/// Each lane's `frag` (Collective::value) is 4 words of A, 2 of B, 4 of C, 4 of D.
void compute_mma(Collective& w) {
  auto frag = [&](int lane) { return reinterpret_cast<int32_t*>(w.value[lane]); };
  const bool bf16 = w.mode == 1;
  auto half = [&](int lane, int word, int h) {
    const auto bits = static_cast<uint32_t>(frag(lane)[word]);
    return half_to_float(static_cast<uint16_t>(h ? bits >> 16 : bits & 0xffff), bf16);
  };
  auto a = [&](int row, int k) {  // the lane, word and half holding A[row][k]
    return half((row % 8) * 4 + (k % 8) / 2, row / 8 + 2 * (k / 8), k % 2);
  };
  auto b = [&](int k, int col) { return half(col * 4 + (k % 8) / 2, 4 + k / 8, k % 2); };
  std::array<float, 32 * 4> d{};
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
      float sum;
      std::memcpy(&sum, &frag(lane)[6 + i], sizeof sum);
      for (int k = 0; k < 16; ++k) sum += a(row, k) * b(k, col);
      d[static_cast<size_t>(lane * 4 + i)] = sum;
    }
  for (int lane = 0; lane < 32; ++lane)
    std::memcpy(&frag(lane)[10], &d[static_cast<size_t>(lane * 4)], 4 * sizeof(float));
}

/// Joins the warp's collective and returns this lane's result.
int64_t rendezvous(Collective::Kind kind, int32_t mode, int32_t mask, int64_t value,
                   int32_t operand, int32_t clamp, int64_t* gather = nullptr) {
  LaunchState& s = current();
  Thread& t = *s.thread;
  const int lane = t.linear % 32;
  const uint32_t member_mask = static_cast<uint32_t>(mask);
  const char* what = kind == Collective::kShuffle  ? shuffle_name(mode)
                     : kind == Collective::kVote   ? "vote.sync"
                     : kind == Collective::kMatch  ? "match.sync"
                     : kind == Collective::kGather ? "ldmatrix"
                     : kind == Collective::kWgmmaA ? "wgmma (registers of a)"
                     : kind == Collective::kMma    ? "mma.sync"
                                                   : "redux.sync";
  if (!(member_mask >> lane & 1))
    fail(std::string(what) + " by lane " + std::to_string(lane) +
         ", which is not in its member mask " + hex(member_mask));
  Collective& w = s.cta->warps[static_cast<size_t>(t.linear / 32)];
  if (!w.active) {
    w.active = true;
    w.kind = kind;
    w.mode = mode;
    w.member_mask = member_mask;
    w.arrived = 0;
  } else if (w.kind != kind || w.mode != mode || w.member_mask != member_mask) {
    fail(std::string(what) + " with member mask " + hex(member_mask) +
         " while other lanes of the warp wait in a different collective (mask " +
         hex(w.member_mask) + ")");
  }
  w.value[static_cast<size_t>(lane)] = value;
  w.operand[static_cast<size_t>(lane)] = operand;
  w.clamp[static_cast<size_t>(lane)] = clamp;
  w.gather[static_cast<size_t>(lane)] = gather;
  w.arrived |= 1u << lane;
  ++s.state_changes;
  if (w.arrived == w.member_mask) {
    switch (kind) {
      case Collective::kShuffle:
        compute_shuffle(w);
        break;
      case Collective::kVote:
        compute_vote(w);
        break;
      case Collective::kMatch:
        compute_match(w);
        break;
      case Collective::kRedux:
        compute_redux(w);
        break;
      case Collective::kGather:
      case Collective::kWgmmaA:
        compute_gather(w);
        break;
      case Collective::kMma:
        compute_mma(w);
        break;
    }
    w.active = false;
    ++w.generation;
  } else {
    t.wait_generation = w.generation;
    suspend(Wait::kCollective);
  }
  return w.result[static_cast<size_t>(lane)];
}

}  // namespace

void pallas::emulator::detail::gather_wgmma_a(int32_t part, int64_t words, int64_t* lanes) {
  rendezvous(Collective::kWgmmaA, part, -1, words, 0, 0, lanes);
}

extern "C" int64_t pallas_emu_shfl(int32_t mode, int32_t member_mask, int32_t value,
                                   int32_t lane_or_offset, int32_t clamp) {
  return rendezvous(Collective::kShuffle, mode, member_mask, value, lane_or_offset, clamp);
}

extern "C" int64_t pallas_emu_match(int32_t mode, int32_t member_mask, int64_t value) {
  return rendezvous(Collective::kMatch, mode, member_mask, value, 0, 0);
}

extern "C" int32_t pallas_emu_redux(int32_t kind, int32_t member_mask, int32_t value) {
  return static_cast<int32_t>(rendezvous(Collective::kRedux, kind, member_mask, value, 0, 0));
}

extern "C" int32_t pallas_emu_vote(int32_t mode, int32_t member_mask, int32_t predicate) {
  return static_cast<int32_t>(
      rendezvous(Collective::kVote, mode, member_mask, predicate != 0, 0, 0));
}

extern "C" void pallas_emu_ldmatrix(int32_t num, int32_t trans, const void* row, int32_t* out) {
  if (num != 1 && num != 2 && num != 4)
    fail("ldmatrix .x" + std::to_string(num) + " is not .x1/.x2/.x4");
  const int lane = current().thread->linear % 32;
  const auto address = reinterpret_cast<uintptr_t>(row);
  // Only the lanes that supply a row need an aligned address.
  if (lane < 8 * num && address % 16 != 0)
    fail("ldmatrix: lane " + std::to_string(lane) + "'s row address " +
         hex(static_cast<uint32_t>(address)) + " is not 16-byte aligned");
  std::array<int64_t, 32> rows{};
  rendezvous(Collective::kGather, num | trans << 8, -1, static_cast<int64_t>(address), 0, 0,
             rows.data());
  for (int j = 0; j < num; ++j) {
    uint16_t h[2];
    for (int e = 0; e < 2; ++e) {
      // Not transposed: row lane / 4, column 2 (lane % 4) + e of matrix j.
      // Transposed: row 2 (lane % 4) + e, column lane / 4.
      const int r = trans ? 2 * (lane % 4) + e : lane / 4,
                c = trans ? lane / 4 : 2 * (lane % 4) + e;
      const auto* at =
          reinterpret_cast<const std::byte*>(rows[static_cast<size_t>(8 * j + r)]) + 2 * c;
      pallas_emu_access(at, 2, 2, kAccessLoad);
      std::memcpy(&h[e], at, sizeof h[e]);
    }
    out[j] = static_cast<int32_t>(static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16);
  }
}

extern "C" void pallas_emu_mma_sync(int32_t type, int32_t* frag) {
  rendezvous(Collective::kMma, type, -1, static_cast<int64_t>(reinterpret_cast<uintptr_t>(frag)), 0,
             0);
}
