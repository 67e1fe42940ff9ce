// ptxas' advisories fail the build (GpuPipeline.cpp, assembleWithPtxas): a
// planted kernel whose wgmma pipeline ptxas serializes is refused with the
// advisory's text, and its twin without the defect assembles.

#include "pallas/Codegen/Pipelines.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using pallas::codegen::assembleWithPtxas;
using pallas::codegen::GpuBinary;
using pallas::codegen::GpuOptions;
using pallas::codegen::ptxasAdvisories;

/// Two m64n8k16 wgmmas in one commit group on the same accumulator; with
/// `planted`, a mov redefines an accumulator register between them, which
/// ptxas can only honour by serializing every wgmma of the kernel (C7511,
/// and C7519: a warpgroup.arrive it injected).
std::string two_wgmmas(bool planted) {
  return std::string(R"(.version 8.0
.target sm_90a
.address_size 64
.visible .entry planted_serialized(.param .u64 out, .param .u64 da, .param .u64 db)
{
.reg .f32 %d<4>;
.reg .b64 %descA, %descB, %p;
ld.param.u64 %descA, [da];
ld.param.u64 %descB, [db];
ld.param.u64 %p, [out];
mov.f32 %d0, 0f00000000;
mov.f32 %d1, 0f00000000;
mov.f32 %d2, 0f00000000;
mov.f32 %d3, 0f00000000;
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%d0, %d1, %d2, %d3}, %descA, %descB, 1, 1, 1, 0, 0;
)") + (planted ? "mov.f32 %d1, 0f3F800000;\n" : "") +
         R"(wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%d0, %d1, %d2, %d3}, %descA, %descB, 1, 1, 1, 0, 0;
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;
add.f32 %d0, %d0, %d1;
add.f32 %d0, %d0, %d2;
add.f32 %d0, %d0, %d3;
st.global.f32 [%p], %d0;
ret;
}
)";
}

GpuOptions options() {
  GpuOptions o;
  o.ptxas = PALLAS_TEST_PTXAS;
  return o;
}

GpuBinary sm90a(std::string ptx) {
  GpuBinary bin;
  bin.arch = "sm_90a";
  bin.ptx = std::move(ptx);
  return bin;
}

TEST(Ptxas, SerializedWgmmaFailsNamingTheAdvisory) {
  GpuBinary bin = sm90a(two_wgmmas(/*planted=*/true));
  std::string error;
  EXPECT_FALSE(assembleWithPtxas(options(), bin, error));
  EXPECT_NE(error.find("ptxas -arch=sm_90a reported"), std::string::npos) << error;
  EXPECT_NE(error.find("(C7511) Potential Performance Loss: wgmma.mma_async instructions are "
                       "serialized"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("'planted_serialized'"), std::string::npos) << error;
  // The PTX the advisory cites is kept, and named: it is there, with the planted kernel.
  const std::string kept = "the PTX is kept at ";
  const size_t at = error.find(kept);
  ASSERT_NE(at, std::string::npos) << error;
  const size_t from = at + kept.size();
  const std::string path = error.substr(from, error.find(')', from) - from);
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_EQ(text.str(), bin.ptx) << path;
  std::remove(path.c_str());
}

TEST(Ptxas, TwinWithoutTheDefectAssembles) {
  GpuBinary bin = sm90a(two_wgmmas(/*planted=*/false));
  std::string error;
  ASSERT_TRUE(assembleWithPtxas(options(), bin, error)) << error;
  EXPECT_FALSE(bin.cubin.empty());
  EXPECT_GT(bin.registers, 0);
  EXPECT_EQ(bin.spill_stores, 0);
}

TEST(Ptxas, AdvisoriesAreWarningsAndCodedLinesOnly) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
      "ptxas info    : Function properties for k\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers\n"
      "ptxas /tmp/k.ptx, line 12; warning : Unsupported .version 9.9; current version is '9.0'\n"
      "ptxas info    : (C7519) warpgroup.arrive is injected in around line 20 by compiler\n"
      "ptxas info    : Compile time = 5.3 ms\n";
  const std::vector<std::string> found = ptxasAdvisories(log);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].rfind("ptxas /tmp/k.ptx, line 12; warning", 0), 0u);
  EXPECT_EQ(found[1].rfind("ptxas info    : (C7519)", 0), 0u);
}

}  // namespace
