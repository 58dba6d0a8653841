#include <gtest/gtest.h>

#include <map>

#include "test_support.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

std::shared_ptr<const ParallelCheckpoint> Open(Env& env, const std::string& path) {
  auto opened = ParallelCheckpoint::Open(env, path);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  if (!opened.ok()) return nullptr;
  return std::make_shared<const ParallelCheckpoint>(std::move(opened).value());
}

std::string ReadStorage(const ParallelCheckpoint& c, const StorageSpec& storage) {
  std::vector<ReadPiece> pieces;
  EXPECT_TRUE(PlanStorage(c, storage, 0, storage.size(), &pieces).ok());
  SourceFiles reader(*Env::Posix(), [&](uint32_t i) { return c.sources()[i]; });
  std::string bytes;
  EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
  return bytes;
}

class ParallelConsolidatedTest : public ::testing::TestWithParam<std::string> {};

// The state dict zero_to_fp32.py cannot make of a TP/PP checkpoint: every
// trainable param once (a tied embedding from its first stage), in the
// stages' order, at its full merged shape (the vocabulary cut to
// original_vocab_size rows), its values the live engine's full fp32 master
// weights (ORACLE.json), element for element.
TEST_P(ParallelConsolidatedTest, StateDictHoldsTheFullMasterWeights) {
  const std::string dir = testing::TpFixtureDir(GetParam());
  auto c = Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(c);
  const auto& oracle = testing::TpOracle(GetParam());
  auto tensors = ConsolidatedStateDict(*Env::Posix(), *c);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), oracle["params"].size());
  ASSERT_EQ(tensors->size(), c->params().size());
  for (size_t i = 0; i < tensors->size(); ++i) {
    const ConsolidatedTensor& t = (*tensors)[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, c->params()[i].name);
    ASSERT_TRUE(oracle["expected_full_values"]["fp32"].contains(t.name));
    EXPECT_EQ(t.dtype, DType::kFloat32);
    EXPECT_TRUE(t.requires_grad);
    EXPECT_EQ(t.shape, oracle["params"][t.name]["full_shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(testing::FloatValues(ReadStorage(*c, t.storage), DType::kFloat32),
              oracle["expected_full_values"]["fp32"][t.name].get<std::vector<double>>());
  }
}

// <tag>_fp32/ in the universal view and in the reshard view at a new D:
// pytorch_model.bin (an OrderedDict, as 0.14.5's zero_to_fp32 writes) and
// model.safetensors, read by parsers of their own, hold those tensors.
TEST_P(ParallelConsolidatedTest, BothViewsServeThemAsBinAndSafetensors) {
  const std::string dir = testing::TpFixtureDir(GetParam());
  auto c = Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(c);
  auto tensors = ConsolidatedStateDict(*Env::Posix(), *c);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  std::map<std::string, std::string> want;
  std::vector<std::string> order;
  for (const ConsolidatedTensor& t : *tensors) {
    want[t.name] = ReadStorage(*c, t.storage);
    order.push_back(t.name);
  }
  ReshardOptions at3;
  at3.world_size = 3;
  std::vector<std::pair<std::string, Result<std::unique_ptr<View>>>> views;
  views.emplace_back("universal", BuildUniversalView(*Env::Posix(), c));
  views.emplace_back("reshard at 3", BuildReshardView(*Env::Posix(), c, at3));
  for (auto& [label, view] : views) {
    SCOPED_TRACE(label);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    const InodeId fp32 = testing::ResolvePath(**view, "global_step4_fp32");
    EXPECT_EQ(testing::EntryNames(**view, fp32),
              (std::vector<std::string>{"model.safetensors", "pytorch_model.bin"}));
    const testing::BinContents bin = testing::ReadBin(
        testing::ReadViewFile(*Env::Posix(), **view,
                              testing::ResolvePath(**view, "global_step4_fp32/pytorch_model.bin")));
    EXPECT_FALSE(bin.plain_dict);
    EXPECT_EQ(bin.names, order);
    for (const auto& [name, bytes] : want) EXPECT_EQ(bin.tensors.at(name).second, bytes) << name;
    const auto safetensors = testing::ParseSafetensors(
        testing::ReadViewFile(*Env::Posix(), **view,
                              testing::ResolvePath(**view, "global_step4_fp32/model.safetensors")));
    ASSERT_EQ(safetensors.size(), want.size());
    for (const ConsolidatedTensor& t : *tensors) {
      EXPECT_EQ(safetensors.at(t.name).dtype, "F32");
      EXPECT_EQ(safetensors.at(t.name).shape, t.shape);
      EXPECT_EQ(safetensors.at(t.name).bytes, want[t.name]) << t.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, ParallelConsolidatedTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

// Without universal_checkpoint_info a 2-way TP checkpoint's slices have no
// known merge: the view at a new D still serves its rank files, without
// <tag>_fp32 (the mount warns why).
TEST(ParallelConsolidated, NoMergeNoConsolidatedWeightsButTheViewServes) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(testing::TpFixtureDir("tp_z1_fp32_t2d2") + "/checkpoint", "/ck").ok());
  const std::string model0 = "/ck/global_step4/mp_rank_00_model_states.pt";
  env.WriteFile(model0, testing::RepackTorchFile(*env.Contents(model0), [](pickle::Document* d) {
                  testing::RemoveDictKey(d, d->root(), "universal_checkpoint_info");
                }));
  auto c = Open(env, "/ck");
  ASSERT_TRUE(c);
  auto tensors = ConsolidatedStateDict(env, *c);
  EXPECT_EQ(tensors.status().code(), Status::Code::kNotSupported);
  EXPECT_EQ(tensors.status().file(), model0);
  ReshardOptions at1;
  at1.world_size = 1;
  auto view = BuildReshardView(env, c, at1);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_FALSE((*view)->Lookup(kRootInode, "global_step4_fp32").ok());
  EXPECT_TRUE((*view)
                  ->Lookup(testing::ResolvePath(**view, "global_step4"),
                           "zero_pp_rank_0_mp_rank_01_optim_states.pt")
                  .ok());
}

}  // namespace
}  // namespace ucfs
