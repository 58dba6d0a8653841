// verify over DeepSpeed 0.19.8's Muon checkpoints: the optimizer and each
// group's states named, and the copies of a Muon param's whole momentum on
// every rank it touches compared.
#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"
#include "ucfs/tools/verify.h"

namespace ucfs {
namespace {

using testing::ModernDir;

TEST(MuonVerify, NamesTheOptimizerAndEachGroupsStates) {
  auto r = Verify(*Env::Posix(), ModernDir("muon_z2_fp32_ws3") + "/checkpoint");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << (r->problems.empty() ? "" : r->problems[0].message);
  EXPECT_EQ(r->optimizer, "Muon via DeepSpeedZeroOptimizer");
  EXPECT_EQ(r->group_states, (std::vector<std::string>{"fp32, momentum_buffer (whole params)",
                                                       "fp32, exp_avg, exp_avg_sq"}));
  // fc1.weight (ranks 0-1) and fc2.weight (ranks 1-2): one further copy
  // each, 240 and 300 float32, both copies read.
  EXPECT_EQ(r->bytes_compared, 2u * 4 * (240 + 300));
}

// Rank 1's copy of fc2.weight's momentum (the first param of its buffer)
// made to differ from rank 0's: a replica problem of rank 1's file.
TEST(MuonVerify, CopiesThatDisagreeAreAProblemOfTheFileHoldingThem) {
  MemEnv env;
  ASSERT_TRUE(env.CopyTreeFrom(ModernDir("muon_z1_fp32_ws2") + "/checkpoint/global_step4",
                               "/ck/global_step4")
                  .ok());
  env.WriteFile("/ck/latest", "global_step4");
  const std::string rank1 = "/ck/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt";
  const std::string bytes = *env.Contents(rank1);
  auto file = env.Open(rank1);
  auto archive = ZipArchive::Open(**file);
  ASSERT_TRUE(archive.ok());
  auto doc = pickle::Parse(*ZipArchive::ReadRecord(**file, *archive->Find("data.pkl")));
  ASSERT_TRUE(doc.ok());
  const pickle::NodeId state = doc->Get(
      doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "base_optimizer_state"), "state");
  pickle::NodeId momentum = pickle::kNoNode;
  const auto items = doc->MappingItems(state);
  for (const auto& [key, value] : *items) {
    if (doc->AsInt(key) == 0) momentum = doc->Get(value, "momentum_buffer");
  }
  auto t = MatchTensor(*doc, momentum);
  ASSERT_TRUE(t.ok() && t->has_value());
  const std::string name = "data/" + (*t)->storage_key;
  std::string data = *ZipArchive::ReadRecord(**file, *archive->Find(name));
  data[(*t)->byte_offset() + 3] ^= 0x80;  // element 0's sign
  env.WriteFile(rank1, testing::ReplaceTorchRecord(bytes, name, data));

  auto r = Verify(env, "/ck");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->problems.size(), 1u);
  EXPECT_EQ(r->problems[0].kind, VerifyProblem::Kind::kReplica);
  EXPECT_EQ(r->problems[0].file, rank1);
  EXPECT_NE(r->problems[0].message.find("'fc2.weight' momentum_buffer: rank 1's copy"),
            std::string::npos)
      << r->problems[0].message;
  EXPECT_NE(r->problems[0].message.find("in 1 of 300 elements (the first is element 0)"),
            std::string::npos)
      << r->problems[0].message;
}

}  // namespace
}  // namespace ucfs
