// A second, independent reader of the reference files: LibTorch's own
// torch.save reader (torch::jit::pickle_load). It cannot read DeepSpeed's
// rank files (it rejects their globals), but it reads the bare-tensor files
// ds_to_universal writes, which is the job it is good at. Every one of them
// must agree with what ucfs's checkpoint model maps from the rank shards.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "libtorch_reader.h"
#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/dtype_cast.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

TEST(LibTorchCrossCheck, UniversalFilesAgreeWithTheCheckpointModel) {
  size_t files = 0;
  for (const std::string& fixture : testing::FixtureNames()) {
    auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir(fixture) + "/checkpoint");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::string zero;
    for (const char* base : {"/checkpoint", "/expected"}) {
      std::string dir = testing::FixtureDir(fixture) + base + "/global_step4_universal/zero";
      if (fs::exists(dir)) zero = dir;
    }
    ASSERT_FALSE(zero.empty()) << fixture;
    for (size_t p = 0; p < c->params().size(); ++p) {
      for (size_t s = 0; s < c->states().size(); ++s) {
        const std::string path =
            zero + "/" + c->params()[p].name + "/" + c->states()[s].name + ".pt";
        testing::LibTorchTensor t;
        std::string error;
        ASSERT_TRUE(testing::LoadWithLibTorch(path, &t, &error)) << path << ": " << error;
        ASSERT_EQ(t.dtype, "float32") << path;
        ASSERT_EQ(t.shape.size(), 1u) << path;
        EXPECT_EQ(t.requires_grad, s == 0) << path;  // fp32.pt keeps the flat's requires_grad
        const uint64_t numel = c->params()[p].numel;
        ASSERT_GE(static_cast<uint64_t>(t.shape[0]), numel) << path;
        std::vector<Extent> extents;
        ASSERT_TRUE(c->MapState(p, s, 0, numel * 4, &extents).ok());
        const std::string ours = testing::ReadExtents(*c, extents);
        EXPECT_EQ(t.bytes.substr(0, numel * 4), ours) << path;
        ++files;
      }
    }
  }
  EXPECT_EQ(files, 6u * 4 * 3 + 12 * 3);
}

// The casts the Hugging Face weights are made with round exactly as
// torch's .to() does: every float32 exponent, the ties, subnormals,
// overflow, infinities, and random bit patterns.
TEST(LibTorchCrossCheck, Float32CastsRoundAsTorchDoes) {
  std::vector<uint32_t> bits;
  for (uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (uint32_t mantissa : {0u, 1u, 0x1000u, 0x1FFFu, 0x2000u, 0x3000u, 0x7FFFu, 0x8000u,
                              0x18000u, 0x400000u, 0x7FFFFFu, 0x7FE000u, 0x7FF000u}) {
      for (uint32_t sign : {0u, 0x80000000u}) bits.push_back(sign | (exponent << 23) | mantissa);
    }
  }
  std::mt19937 rng(20261202);
  for (int i = 0; i < 200000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  for (const char* dtype : {"bfloat16", "float16"}) {
    const std::vector<uint16_t> want = testing::CastWithLibTorch(bits, dtype);
    size_t compared = 0;
    for (size_t i = 0; i < bits.size(); ++i) {
      const bool nan = (bits[i] & 0x7FFFFFFFu) > 0x7F800000u;
      const uint16_t got = std::string(dtype) == "bfloat16" ? Float32BitsToBFloat16(bits[i])
                                                            : Float32BitsToFloat16(bits[i]);
      if (nan) {
        // Any NaN is a NaN; payloads are not a value.
        const bool got_nan =
            std::string(dtype) == "bfloat16" ? (got & 0x7FFF) > 0x7F80 : (got & 0x7FFF) > 0x7C00;
        EXPECT_TRUE(got_nan) << dtype << " " << std::hex << bits[i];
        continue;
      }
      ASSERT_EQ(got, want[i]) << dtype << " of 0x" << std::hex << bits[i];
      ++compared;
    }
    EXPECT_GT(compared, 190000u);
  }
}

}  // namespace
}  // namespace ucfs
