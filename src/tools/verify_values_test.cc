// verify's scan of the values: tensors that lie about their records,
// non-finite values counted per param and state (not in padding), states it
// cannot partition, a ZeRO-1/2 checkpoint without its model states.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "tools/verify_test_support.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::NodeId;
using verify_testing::BrokenVerifyTest;
using verify_testing::Describe;
using verify_testing::Kind;
using verify_testing::OracleParams;

// A tensor whose storage claims more than its record holds, in a rank
// file Checkpoint::Open never reads (rank 2's model states), and one that
// reaches past its storage, in rank 1's optimizer file: both are named.
TEST_F(BrokenVerifyTest, TensorsOutsideTheirRecords) {
  Load("z3_fp32_ws3");
  Edit(Model(2), [](Document* doc) {
    NodeId t = doc->Get(doc->Get(doc->root(), "module"), "fc1.weight");
    NodeId pid = doc->node(doc->node(doc->node(t).b).items[0]).a;
    doc->mutable_node(doc->node(pid).items[4]).scalar = 1000;  // storage numel
  });
  Edit(Optim(1), [](Document* doc) {
    NodeId flats = doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "fp32_flat_groups");
    NodeId t = doc->node(flats).items[0];
    if (doc->IsGlobal(doc->node(t).a, "torch._tensor", "_rebuild_from_type_v2")) {
      t = doc->node(doc->node(t).b).items[2];  // the inner arguments
    } else {
      t = doc->node(t).b;
    }
    doc->mutable_node(doc->node(t).items[1]).scalar = 3;  // storage offset
  });
  const VerifyReport r = Run();
  ASSERT_EQ(Of(r, Kind::kTensor).size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(Of(r, Kind::kTensor)[0]->file, Optim(1));
  EXPECT_NE(Of(r, Kind::kTensor)[0]->message.find("['fp32_flat_groups'][0]"), std::string::npos)
      << Of(r, Kind::kTensor)[0]->message;
  EXPECT_EQ(Of(r, Kind::kTensor)[1]->file, Model(2));
  EXPECT_NE(Of(r, Kind::kTensor)[1]->message.find("['module']['fc1.weight']"), std::string::npos)
      << Of(r, Kind::kTensor)[1]->message;
  EXPECT_NE(Of(r, Kind::kTensor)[1]->message.find("holds 0 bytes"), std::string::npos);
}

// A NaN and a +Inf in rank 1's fp32 master weights and a -Inf in rank 2's
// exp_avg_sq, at valid positions worked out from the oracle's partition
// sizes (P of each param, params in param_shapes order in the flat buffer).
TEST_F(BrokenVerifyTest, NonFiniteValuesAreCountedPerParamAndState) {
  Load("z3_fp32_ws3");
  const auto& oracle = testing::Oracle(fixture_);
  const auto& params = OracleParams(oracle);
  ASSERT_EQ(params[0]["name"], "embed.weight");
  ASSERT_EQ(params[1]["name"], "fc1.weight");
  ASSERT_EQ(params[3]["name"], "fc2.weight");
  const uint64_t p_embed = params[0]["partition_numel"];
  const uint64_t p_fc1 = params[1]["partition_numel"];
  const uint64_t p_bias = params[2]["partition_numel"];
  const uint64_t p_fc2 = params[3]["partition_numel"];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // fc1.weight, rank 1, slot element 3 = global element P + 3.
  Poke(Optim(1), ElementOffset(Optim(1), Flat("fp32"), p_embed + 3), nan);
  // embed.weight, rank 1, slot element 0 = global element P.
  Poke(Optim(1), ElementOffset(Optim(1), Flat("fp32"), 0), inf);
  // fc2.weight exp_avg_sq, rank 2, slot element 1 = global 2P + 1 (and 4 also).
  const uint64_t fc2 = p_embed + p_fc1 + p_bias;
  Poke(Optim(2), ElementOffset(Optim(2), Flat("exp_avg_sq"), fc2 + 1), -inf);
  Poke(Optim(2), ElementOffset(Optim(2), Flat("exp_avg_sq"), fc2 + 4), nan);

  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 3u) << Describe(r);
  for (const VerifyProblem& p : r.problems) EXPECT_EQ(p.kind, Kind::kNonFinite);
  // By param (param_shapes order), then state.
  ASSERT_EQ(r.nonfinite.size(), 3u);
  const NonFiniteCount& a = r.nonfinite[0];
  EXPECT_EQ(a.param, "embed.weight");
  EXPECT_EQ(a.state, "fp32");
  EXPECT_EQ(a.nan, 0u);
  EXPECT_EQ(a.inf, 1u);
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_EQ(a.ranks[0].rank, 1u);
  EXPECT_EQ(a.ranks[0].file, Optim(1));
  EXPECT_EQ(a.ranks[0].first_element, p_embed);
  const NonFiniteCount& b = r.nonfinite[1];
  EXPECT_EQ(b.param, "fc1.weight");
  EXPECT_EQ(b.state, "fp32");
  EXPECT_EQ(b.nan, 1u);
  EXPECT_EQ(b.inf, 0u);
  ASSERT_EQ(b.ranks.size(), 1u);
  EXPECT_EQ(b.ranks[0].file, Optim(1));
  EXPECT_EQ(b.ranks[0].first_element, p_fc1 + 3);
  const NonFiniteCount& c = r.nonfinite[2];
  EXPECT_EQ(c.param, "fc2.weight");
  EXPECT_EQ(c.state, "exp_avg_sq");
  EXPECT_EQ(c.nan, 1u);
  EXPECT_EQ(c.inf, 1u);
  ASSERT_EQ(c.ranks.size(), 1u);
  EXPECT_EQ(c.ranks[0].rank, 2u);
  EXPECT_EQ(c.ranks[0].first_element, 2 * p_fc2 + 1);
  // The problem lines name the file and the param.
  EXPECT_EQ(r.problems[0].file, Optim(1));
  EXPECT_NE(r.problems[0].message.find("'embed.weight' fp32: 1 Inf"), std::string::npos)
      << r.problems[0].message;
  EXPECT_NE(r.problems[1].message.find("'fc1.weight' fp32: 1 NaN"), std::string::npos)
      << r.problems[1].message;
  EXPECT_EQ(r.problems[2].file, Optim(2));
  EXPECT_NE(r.problems[2].message.find("'fc2.weight' exp_avg_sq: 1 NaN, 1 Inf"), std::string::npos)
      << r.problems[2].message;
}

// NaN and Inf in padding are DeepSpeed's uninitialised memory, not a
// problem: positions from the oracle's list of padding elements.
TEST_F(BrokenVerifyTest, NonFiniteInPaddingIsIgnored) {
  Load("z3_fp32_ws3");
  const auto& oracle = testing::Oracle(fixture_);
  const auto& padding = oracle["partitioning"]["padding_contents"];
  int poked = 0;
  for (const auto& [param, states] : padding.items()) {
    for (const auto& [state, elements] : states.items()) {
      for (const auto& e : elements) {
        const int rank = e["rank"];
        const std::string file = Optim(rank);
        Poke(file, ElementOffset(file, Flat(state), e["flat_index"]),
             poked % 2 ? std::numeric_limits<float>::infinity()
                       : std::numeric_limits<float>::quiet_NaN());
        ++poked;
      }
    }
  }
  ASSERT_GE(poked, 9);
  const VerifyReport r = Run();
  EXPECT_TRUE(r.ok()) << Describe(r);
  EXPECT_TRUE(r.nonfinite.empty());
  EXPECT_TRUE(r.scanned);
}

// ZeRO-2: a NaN in rank 1's fp32 partition of param group 1 at element 1,
// which is fc2.bias's element 10 (rank 0 holds its first 9: ORACLE.json
// param_slice_mappings), is reported there; NaN and Inf in the padding of
// rank 1's moments of both groups (the last 1 and 3 of their partitions of
// 416 and 54) are not.
TEST_F(BrokenVerifyTest, FlatGroupNonFiniteValuesAreMappedToTheirParam) {
  Load("z2_tricky_fp32_ws2");
  const auto& oracle = testing::Oracle(fixture_);
  const auto& rank1 = oracle["file_facts"]["per_rank"][1]["param_slice_mappings"];
  ASSERT_EQ(rank1[1]["fc2.bias"]["start"], 0);
  ASSERT_EQ(oracle["file_facts"]["per_rank"][0]["param_slice_mappings"][1]["fc2.bias"]["numel"], 9);
  const std::vector<std::string> fp32 = {"optimizer_state_dict", "single_partition_of_fp32_groups",
                                         "1"};
  auto moment = [](const std::string& group, const std::string& state) {
    return std::vector<std::string>{"optimizer_state_dict", "base_optimizer_state", "state", group,
                                    state};
  };
  Poke(Optim(1), ElementOffset(Optim(1), fp32, 1), std::numeric_limits<float>::quiet_NaN());
  Poke(Optim(1), ElementOffset(Optim(1), moment("0", "exp_avg"), 415),
       std::numeric_limits<float>::infinity());
  for (uint64_t i : {51, 52, 53}) {
    Poke(Optim(1), ElementOffset(Optim(1), moment("1", "exp_avg_sq"), i),
         std::numeric_limits<float>::quiet_NaN());
  }
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kNonFinite);
  EXPECT_EQ(r.problems[0].file, Optim(1));
  EXPECT_NE(r.problems[0].message.find("'fc2.bias' fp32: 1 NaN"), std::string::npos)
      << r.problems[0].message;
  ASSERT_EQ(r.nonfinite.size(), 1u);
  ASSERT_EQ(r.nonfinite[0].ranks.size(), 1u);
  EXPECT_EQ(r.nonfinite[0].ranks[0].rank, 1u);
  EXPECT_EQ(r.nonfinite[0].ranks[0].first_element, 10u);
}

// An optimizer state ucfs cannot partition (here group 0's exp_avg, a
// partition of another length, in group 1) fails verify, naming the group
// and the key: never "OK" over a checkpoint every view refuses.
TEST_F(BrokenVerifyTest, StateItCannotPartitionIsAProblem) {
  Load("z2_tricky_fp32_ws2");
  for (int rank : {0, 1}) {
    Edit(Optim(rank), [](Document* d) {
      const NodeId osd = d->Get(d->root(), "optimizer_state_dict");
      const NodeId state = d->Get(d->Get(osd, "base_optimizer_state"), "state");
      const NodeId group0 = (*d->MappingItems(state))[0].second;
      const NodeId group1 = (*d->MappingItems(state))[1].second;
      d->AppendPair(group1, d->AddStr("momentum_buffer"), d->Get(group0, "exp_avg"));
    });
  }
  const VerifyReport r = Run();
  ASSERT_FALSE(r.problems.empty()) << Describe(r);
  bool named = false;
  for (const VerifyProblem& p : r.problems) {
    named = named || (p.file == Optim(0) &&
                      p.message.find("optimizer state[1]['momentum_buffer'] (param group 1)") !=
                          std::string::npos);
  }
  EXPECT_TRUE(named) << Describe(r);
}

// ZeRO-1/2 keep the model states in one file: its absence is named (the
// optimizer files say which stage wrote them); no rank misses another.
TEST_F(BrokenVerifyTest, FlatGroupMissingModelStates) {
  Load("z2_tricky_fp32_ws2");
  ASSERT_TRUE(env_.RemoveFile(Tag("mp_rank_00_model_states.pt")));
  const VerifyReport r = Run();
  auto missing = Of(r, Kind::kMissing);
  ASSERT_EQ(missing.size(), 1u) << Describe(r);
  EXPECT_EQ(missing[0]->file, Tag("mp_rank_00_model_states.pt"));
  EXPECT_NE(missing[0]->message.find("mp_rank_00_model_states.pt at ZeRO stages 1 and 2"),
            std::string::npos)
      << missing[0]->message;
}

}  // namespace
}  // namespace ucfs
