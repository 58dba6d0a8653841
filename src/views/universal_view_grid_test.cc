#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "test_support.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

constexpr auto Tree = testing::ViewTree;

class ParallelUniversalViewTest : public ::testing::TestWithParam<std::string> {};
class ParallelUniversalValuesTest : public ::testing::TestWithParam<std::string> {};

// Byte for byte the universal checkpoint the fixture's expected/ holds
// (DeepSpeed 0.14.5's converter's output where it is right, and the
// reference where it is not: ZeRO-3 with TP), with real CRCs.
TEST_P(ParallelUniversalViewTest, TreeIsByteIdenticalToTheReference) {
  const std::string dir = testing::TpFixtureDir(GetParam());
  auto opened = ParallelCheckpoint::Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto c = std::make_shared<const ParallelCheckpoint>(std::move(opened).value());
  UniversalViewOptions options;
  options.compute_crc = true;
  auto view = BuildUniversalView(*Env::Posix(), c, options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(testing::ReadViewFile(*Env::Posix(), **view,
                                  testing::ResolvePath(**view, "latest_universal")),
            testing::ReadFile(dir + "/expected/latest_universal"));
  std::map<std::string, std::string> shown;
  Tree(*Env::Posix(), **view, testing::ResolvePath(**view, "global_step4_universal"), "", &shown);
  std::map<std::string, std::string> expected;
  const fs::path ref = dir + "/expected/global_step4_universal";
  for (const auto& e : fs::recursive_directory_iterator(ref)) {
    if (e.is_regular_file()) {
      expected[fs::relative(e.path(), ref).string()] = testing::ReadFile(e.path().string());
    }
  }
  ASSERT_EQ(shown.size(), expected.size());
  for (const auto& [path, bytes] : expected) {
    ASSERT_TRUE(shown.contains(path)) << path;
    EXPECT_TRUE(shown[path] == bytes)
        << path << ": " << shown[path].size() << " bytes shown, " << bytes.size() << " expected";
  }
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, ParallelUniversalViewTest,
                         ::testing::ValuesIn(testing::TpFixturesWithExpected()));
// DeepSpeed 0.19.8's AutoTP: every param laid out by its affine map (an odd
// vocabulary split [31, 30], GQA heads split unevenly [16, 8]), each file
// {'param': ...} as its converter writes it, no step.pt at ZeRO-3.
INSTANTIATE_TEST_SUITE_P(AutoTp, ParallelUniversalViewTest,
                         ::testing::Values("modern/autotp_z1_fp32_t2d2",
                                           "modern/autotp_z2_bf16_t2d2",
                                           "modern/autotp_z3_fp32_t2d2",
                                           "modern/autotp_uneven_z1_fp32_t2d2",
                                           "modern/autotp_kv4_z1_fp32_t2d2"),
                         [](const auto& info) { return info.param.substr(7); });
// DeepSpeed 0.19.8's AutoEP (EP 2): each expert stack gathered from its EP
// ranks' buffers, {'param', 'cat_dim', 'is_expert_param', 'ep_num_experts'};
// at ZeRO-1/2 mp_rank_00 re-saved with the lightweight metadata, at ZeRO-3
// each rank's model states with its own (and the dense params bare); D 3
// pads the expert partitions; EP rank = rank div D with
// use_data_before_expert_parallelism.
INSTANTIATE_TEST_SUITE_P(AutoEp, ParallelUniversalViewTest,
                         ::testing::Values("modern/autoep_z1_fp32_e2d2",
                                           "modern/autoep_z2_fp32_e2d2",
                                           "modern/autoep_z2_fp32_e2d3",
                                           "modern/autoep_z2_fp32_e2d2_dbe",
                                           "modern/autoep_z3_fp32_e2d2"),
                         [](const auto& info) { return info.param.substr(7); });
// The merges Megatron never asks for (make_merge_rules_fixture.py): an
// averaged param, SubparamShape along dim 0 and, viewed anew, along dim 1.
INSTANTIATE_TEST_SUITE_P(MergeRules, ParallelUniversalViewTest,
                         ::testing::Values("tp_z1_fp32_t2d2_merges"));

// The tensor under key 'param' of a universal per-param file, and its
// shape, read by ucfs's codec.
std::pair<std::vector<int64_t>, std::string> ParamTensor(const std::string& file) {
  MemEnv env;
  env.WriteFile("/f.pt", file);
  auto summary = SummarizeTorchFile(env, "/f.pt");
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  if (!summary.ok()) return {};
  auto doc = pickle::Parse(summary->pickle);
  EXPECT_TRUE(doc.ok());
  if (!doc.ok()) return {};
  auto t = MatchTensor(*doc, doc->Get(doc->root(), "param"));
  EXPECT_TRUE(t.ok() && t->has_value());
  if (!t.ok() || !t->has_value()) return {};
  const ZipRecord* rec = summary->Find("data/" + (*t)->storage_key);
  EXPECT_NE(rec, nullptr);
  if (rec == nullptr) return {};
  return {(*t)->shape, file.substr(rec->data_offset + (*t)->byte_offset(), (*t)->byte_size())};
}

// Every fixture, the one without a converter's output too (ZeRO-3 bf16
// with TP at D = 3): each param's fp32, exp_avg and exp_avg_sq at its full
// merged shape hold the live engine's values (ORACLE.json, from the oracle's
// plain-torch reader), element for element.
TEST_P(ParallelUniversalValuesTest, EveryStateHoldsTheFullMergedValues) {
  const std::string dir = testing::TpFixtureDir(GetParam());
  const auto& oracle = testing::TpOracle(GetParam());
  auto opened = ParallelCheckpoint::Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto c = std::make_shared<const ParallelCheckpoint>(std::move(opened).value());
  auto view = BuildUniversalView(*Env::Posix(), c);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  size_t compared = 0;
  for (const auto& [name, info] : oracle["params"].items()) {
    for (const char* state : {"fp32", "exp_avg", "exp_avg_sq"}) {
      SCOPED_TRACE(name + "/" + state);
      const auto [shape, bytes] = ParamTensor(testing::ReadViewFile(
          *Env::Posix(), **view,
          testing::ResolvePath(**view,
                               "global_step4_universal/zero/" + name + "/" + state + ".pt")));
      EXPECT_EQ(shape, info["full_shape"].get<std::vector<int64_t>>());
      EXPECT_EQ(testing::FloatValues(bytes, DType::kFloat32),
                oracle["expected_full_values"][state][name].get<std::vector<double>>());
      ++compared;
    }
  }
  EXPECT_EQ(compared, 3 * oracle["params"].size());
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, ParallelUniversalValuesTest,
                         ::testing::ValuesIn(testing::TpGridFixtureNames()));

// The reshard view at a new D, P and T kept, written out and read back: a
// grid of the same stages and tensor ranks at D' ranks, whose every param's
// merged states are byte for byte the source's (its universal files match).
class ParallelReshardViewTest : public ::testing::TestWithParam<std::pair<std::string, uint32_t>> {
};

TEST_P(ParallelReshardViewTest, ExportedAtNItIsTheSameCheckpointAtNRanks) {
  const auto& [fixture, n] = GetParam();
  const std::string dir = testing::TpFixtureDir(fixture);
  auto opened = ParallelCheckpoint::Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto c = std::make_shared<const ParallelCheckpoint>(std::move(opened).value());
  ReshardOptions options;
  options.world_size = n;
  auto view = BuildReshardView(*Env::Posix(), c, options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  // Written out as the files it shows.
  MemEnv out;
  std::map<std::string, std::string> tag;
  Tree(*Env::Posix(), **view, testing::ResolvePath(**view, "global_step4"), "", &tag);
  for (const auto& [name, bytes] : tag) out.WriteFile("/out/global_step4/" + name, bytes);
  out.WriteFile("/out/latest", "global_step4");
  auto again = ParallelCheckpoint::Open(out, "/out");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->degrees().pp, c->degrees().pp);
  EXPECT_EQ(again->degrees().tp, c->degrees().tp);
  EXPECT_EQ(again->degrees().dp, n);
  // Layer files pass through; no saved rank of another D is left.
  for (const auto& [key, path] : c->files().layer_files) {
    ASSERT_TRUE(out.Contents("/out/global_step4/" + std::string(BaseName(path))));
    EXPECT_EQ(*out.Contents("/out/global_step4/" + std::string(BaseName(path))),
              testing::ReadFile(path));
  }
  auto shared_again = std::make_shared<const ParallelCheckpoint>(std::move(again).value());
  auto before = BuildUniversalView(*Env::Posix(), c);
  auto after = BuildUniversalView(out, shared_again);
  ASSERT_TRUE(before.ok() && after.ok());
  std::map<std::string, std::string> a, b;
  Tree(*Env::Posix(), **before, testing::ResolvePath(**before, "global_step4_universal/zero"), "",
       &a);
  Tree(out, **after, testing::ResolvePath(**after, "global_step4_universal/zero"), "", &b);
  ASSERT_EQ(a.size(), b.size());
  size_t compared = 0;
  for (const auto& [path, bytes] : a) {
    if (path == "optimizer_state.pt") continue;  // partition_count is N's
    EXPECT_TRUE(b[path] == bytes) << path;
    ++compared;
  }
  EXPECT_EQ(compared + 1, a.size());  // every file but optimizer_state.pt
  EXPECT_GT(compared, 40u);
}

INSTANTIATE_TEST_SUITE_P(
    TpFixtures, ParallelReshardViewTest,
    ::testing::Values(std::pair<std::string, uint32_t>{"tp_z1_fp32_t2d2", 3},
                      std::pair<std::string, uint32_t>{"pp_bf16opt_p2t2d2", 1},
                      std::pair<std::string, uint32_t>{"z3_tp_fp32_t2d2", 3},
                      std::pair<std::string, uint32_t>{"tp_z1_swiglu_t4d1", 2},
                      std::pair<std::string, uint32_t>{"pp_z1_fp32_p2d2_nomodelaxis", 3},
                      std::pair<std::string, uint32_t>{"tp_z2_bf16_t2d3", 2},
                      std::pair<std::string, uint32_t>{"z3_tp_bf16_t2d3", 4},
                      std::pair<std::string, uint32_t>{"modern/autotp_uneven_z1_fp32_t2d2", 3},
                      std::pair<std::string, uint32_t>{"modern/autotp_z3_fp32_t2d2", 1}));

}  // namespace
}  // namespace ucfs
