// The reshard view of DeepSpeed 0.19.8's expert-parallel fixtures
// (moe_z2_fp32_e2d2, autoep_z2_fp32_e2d2, autoep_z3_fp32_e2d2: W 4, EP 2)
// at N = EP · D': its rank files open as a checkpoint whose expert groups
// are cut over the EDP groups of N (at ZeRO-3 each rank's partition groups
// checked as the open checks them), every state of every EP rank's experts
// the source's, each rank's AutoEP metadata its own; N not a multiple of
// EP is refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/expert_topology.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/views/hf_weights.h"
#include "ucfs/views/reshard_view.h"

namespace ucfs {
namespace {

using testing::ModernDir;

class ExpertReshardTest : public ::testing::TestWithParam<std::string> {};

// Every entry of both ds_autoep_layers lists of model-states file `path`
// says it is rank `rank` of `n` (EP 2): its EP rank, EDP rank and size, its
// experts. Returns how many entries it checked.
size_t ExpectAutoEpRank(Env& env, const std::string& path, uint32_t n, uint32_t rank,
                        bool data_first) {
  auto summary = SummarizeTorchFile(env, path);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  if (!summary.ok()) return 0;
  auto doc = pickle::Parse(summary->pickle);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  if (!doc.ok()) return 0;
  const ExpertTopology topology{n, 2, data_first};
  const int64_t ep_rank = topology.EpRank(rank);
  size_t checked = 0;
  for (pickle::NodeId layers :
       {doc->Get(doc->root(), "ds_autoep_layers"),
        doc->Get(doc->Get(doc->root(), "universal_checkpoint_info"), "ds_autoep_layers")}) {
    auto entries = doc->SequenceItems(layers);
    if (!entries) continue;
    for (pickle::NodeId entry : *entries) {
      auto field = [&](const char* key) { return doc->AsInt(doc->Get(entry, key)).value_or(-1); };
      const int64_t local = field("num_local_experts");
      EXPECT_EQ(field("ep_rank"), ep_rank) << path;
      EXPECT_EQ(field("expert_data_parallel_rank"), topology.EdpRank(rank)) << path;
      EXPECT_EQ(field("expert_data_parallel_world_size"), n / 2) << path;
      EXPECT_EQ(field("global_expert_start"), ep_rank * local) << path;
      EXPECT_EQ(field("global_expert_end"), (ep_rank + 1) * local) << path;
      ++checked;
    }
  }
  return checked;
}

TEST_P(ExpertReshardTest, EveryEpRanksStatesAtNewD) {
  Env& env = *Env::Posix();
  auto c = Checkpoint::Open(env, ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto source = std::make_shared<const Checkpoint>(std::move(c).value());
  for (uint32_t n : {2u, 4u, 6u, 8u}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    auto view = BuildReshardView(env, source, {n, std::nullopt});
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    MemEnv out;
    testing::CopyViewCheckpoint(env, **view, "global_step4", &out, "/r");
    auto listed = out.ListDir("/r/global_step4");
    ASSERT_TRUE(listed.ok());
    size_t expert_files = 0;
    for (const DirEntry& e : *listed) expert_files += IsExpertFileName(e.name);
    // One per MoE layer and global expert, whatever N is: the source's.
    size_t saved = 0;
    for (const auto& e : std::filesystem::directory_iterator(source->files().tag_dir)) {
      saved += IsExpertFileName(e.path().filename().string());
    }
    EXPECT_EQ(expert_files, saved);
    // ZeRO-3 keeps its experts in the rank files only.
    EXPECT_EQ(saved > 0, source->partitioning() == Partitioning::kFlatGroup);
    auto r = Checkpoint::Open(out, "/r");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->world_size(), n);
    ASSERT_EQ(r->sub_groups().size(), 3u);
    const bool data_first = source->data_before_expert_parallelism();
    EXPECT_EQ(r->data_before_expert_parallelism(), data_first);
    EXPECT_EQ(r->sub_groups()[1].members, (ExpertTopology{n, 2, data_first}.Members(0)));
    EXPECT_EQ(r->sub_groups()[2].members, (ExpertTopology{n, 2, data_first}.Members(1)));
    ASSERT_EQ(r->params().size(), source->params().size());
    for (size_t p = 0; p < r->params().size(); ++p) {
      const ParamInfo& info = r->params()[p];
      EXPECT_EQ(info.name, source->params()[p].name);
      EXPECT_EQ(info.family, source->params()[p].family);
      for (size_t s = 0; s < r->states().size(); ++s) {
        EXPECT_TRUE(testing::FullState(*r, p, s, &out) == testing::FullState(*source, p, s))
            << info.name << " family " << info.family << " " << r->states()[s].name;
      }
    }
    if (!source->autoep()) continue;
    // ZeRO-1/2's one model-states file is rank 0's; ZeRO-3's each rank's.
    const bool per_rank = source->partitioning() == Partitioning::kPerParam;
    // Each layer's entry, in both lists.
    const pickle::Document& saved_model = source->rank0_model();
    const size_t entries =
        2 *
        saved_model.SequenceItems(saved_model.Get(saved_model.root(), "ds_autoep_layers"))->size();
    ASSERT_GT(entries, 0u);
    for (uint32_t rank = 0; rank < (per_rank ? n : 1); ++rank) {
      const std::string name =
          per_rank ? "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_model_states.pt"
                   : "mp_rank_00_model_states.pt";
      EXPECT_EQ(ExpectAutoEpRank(out, "/r/global_step4/" + name, n, rank, data_first), entries)
          << name;
    }
  }
  auto refused = BuildReshardView(env, source, {3, std::nullopt});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("N must be a multiple of 2, not 3"), std::string::npos)
      << refused.status().ToString();
}

// Hugging Face weights beside a config.json: native MoE's global names are
// the model's own; AutoEP's engine names are not, and are not guessed.
TEST(ExpertHfWeights, NativeServedAutoEpRefused) {
  Env& env = *Env::Posix();
  auto native = Checkpoint::Open(env, ModernDir("moe_z2_fp32_e2d2") + "/checkpoint");
  ASSERT_TRUE(native.ok()) << native.status().ToString();
  auto files = HfWeightsFiles(env, std::make_shared<const Checkpoint>(std::move(native).value()));
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_FALSE(files->empty());
  auto autoep = Checkpoint::Open(env, ModernDir("autoep_z2_fp32_e2d2") + "/checkpoint");
  ASSERT_TRUE(autoep.ok()) << autoep.status().ToString();
  auto refused = HfWeightsFiles(env, std::make_shared<const Checkpoint>(std::move(autoep).value()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kNotSupported);
  EXPECT_NE(refused.status().message().find("an AutoEP run names its experts' stacks"),
            std::string::npos)
      << refused.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertReshardTest,
                         ::testing::Values("moe_z1_fp32_e2d2", "moe_z2_fp32_e2d2",
                                           "moe_z2_fp32_e2d3", "autoep_z1_fp32_e2d2",
                                           "autoep_z2_fp32_e2d2", "autoep_z2_fp32_e2d3",
                                           "autoep_z2_fp32_e2d2_dbe", "autoep_z3_fp32_e2d2"));

}  // namespace
}  // namespace ucfs
