// DeepSpeed 0.19.8's Muon checkpoints (tests/data/modern/muon_*): each flat
// buffer's own states, and every byte MapState serves against the live
// values the saving run recorded in MODERN.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "test_support.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/torch_file.h"

namespace ucfs {
namespace {

using testing::LiveBytes;
using testing::ModernDir;
using testing::ModernFacts;

class MuonCheckpointTest : public ::testing::TestWithParam<std::string> {};

// Every state of every param, byte for byte: the fp32 masters, Muon's
// momentum (whole params at ZeRO-1/2, each from the lowest rank holding it;
// a flat partition at ZeRO-3) and Adam's moments; each group has only its
// own states.
TEST_P(MuonCheckpointTest, EveryStateIsTheLiveValue) {
  const nlohmann::json& facts = ModernFacts(GetParam());
  auto c = Checkpoint::Open(*Env::Posix(), ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->optimizer_type(), "Muon");
  const bool flat = facts["zero_stage"].get<int>() < 3;
  // z2_muon_fp32_ws2's live_state could not read the momentum: muon_momentum_layout has it.
  const nlohmann::json momentum = facts["muon_momentum_layout"].is_object()
                                      ? facts["muon_momentum_layout"]["values"]
                                      : nlohmann::json::object();
  size_t compared = 0;
  for (size_t p = 0; p < c->params().size(); ++p) {
    const std::string& name = c->params()[p].name;
    nlohmann::json live = facts["live_state"]["params"][name];
    if (momentum.contains(name) && !live.contains("momentum_buffer")) {
      live["momentum_buffer"] = momentum[name];
    }
    const bool muon = live.contains("momentum_buffer");
    std::vector<std::string> names;
    for (const SubGroupState& gs : c->StatesOf(p)) {
      const std::string& state = c->states()[gs.state].name;
      names.push_back(state);
      EXPECT_EQ(gs.layout, state == "momentum_buffer" && flat ? StateLayout::kWholeParams
                                                              : StateLayout::kPartition)
          << name << " " << state;
      ASSERT_TRUE(live.contains(state)) << name << " " << state;
      EXPECT_EQ(testing::FullState(*c, p, gs.state), LiveBytes(live[state]))
          << name << " " << state;
      ++compared;
    }
    const std::vector<std::string> want =
        muon ? std::vector<std::string>{"fp32", "momentum_buffer"}
             : std::vector<std::string>{"fp32", "exp_avg", "exp_avg_sq"};
    EXPECT_EQ(names, want) << name;
    // A state the param's group lacks is NotFound, naming it.
    const size_t other = *c->FindState(muon ? "exp_avg" : "momentum_buffer");
    std::vector<Extent> extents;
    Status st = c->MapState(p, other, 0, 4, &extents);
    EXPECT_EQ(st.code(), Status::Code::kNotFound) << name;
    EXPECT_NE(st.message().find("'" + name + "'"), std::string::npos) << st.ToString();
  }
  EXPECT_GT(compared, 2 * c->params().size());
}

// ZeRO-1/2: each rank's buffer is the whole params its partition touches
// (MODERN.json's muon_momentum_layout, as DeepSpeed 0.19.8 saved it), and
// the params crossing a boundary are held by each rank they touch.
class MuonWholeParamsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MuonWholeParamsTest, WholeParamBuffersAreTheSavedOnes) {
  const nlohmann::json& facts = ModernFacts(GetParam());
  ASSERT_TRUE(facts["muon_momentum_layout"].is_object());
  auto c = Checkpoint::Open(*Env::Posix(), ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& rank : facts["muon_momentum_layout"]["per_rank"]) {
    const auto r = rank["rank"].get<uint32_t>();
    uint64_t numel = 0;
    for (const auto& n : rank["params_touched_numel"]) numel += n.get<uint64_t>();
    EXPECT_EQ(c->WholeParamsNumel(rank["group"].get<size_t>(), r), numel) << "rank " << r;
    for (const auto& name : rank["params_touched"]) {
      const std::vector<uint32_t> ranks =
          c->WholeParamRanks(*c->FindParam(name.get<std::string>()));
      EXPECT_NE(std::find(ranks.begin(), ranks.end(), r), ranks.end()) << name << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modern, MuonCheckpointTest,
                         ::testing::Values("muon_z1_fp32_ws2", "muon_z2_fp32_ws3",
                                           "muon_z3_fp32_ws2", "z2_muon_fp32_ws2"));
// ZeRO-1/2 only: at ZeRO-3 the momentum is a flat partition like exp_avg.
INSTANTIATE_TEST_SUITE_P(Modern, MuonWholeParamsTest,
                         ::testing::Values("muon_z1_fp32_ws2", "muon_z2_fp32_ws3",
                                           "z2_muon_fp32_ws2"));

// muon_z1_fp32_ws2 copied into `env` at /ck, rank `rank`'s optimizer file
// edited by `edit` (its data.pkl, given base_optimizer_state['state']).
void EditedMuonZ1(MemEnv& env, uint32_t rank,
                  const std::function<void(pickle::Document*, pickle::NodeId)>& edit) {
  EXPECT_TRUE(env.CopyTreeFrom(ModernDir("muon_z1_fp32_ws2") + "/checkpoint/global_step4",
                               "/ck/global_step4")
                  .ok());
  env.WriteFile("/ck/latest", "global_step4");
  const std::string path =
      "/ck/global_step4/zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt";
  env.WriteFile(path, testing::RepackTorchFile(*env.Contents(path), [&](pickle::Document* doc) {
                  const pickle::NodeId osd = doc->Get(doc->root(), "optimizer_state_dict");
                  edit(doc, doc->Get(doc->Get(osd, "base_optimizer_state"), "state"));
                }));
}

// Sets dict `dict`'s value under `key` (adding the key where absent).
void SetDictValue(pickle::Document* doc, pickle::NodeId dict, const std::string& key,
                  pickle::NodeId value) {
  auto& items = doc->mutable_node(dict).items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (doc->AsStr(items[i]) == key) {
      items[i + 1] = value;
      return;
    }
  }
  const pickle::NodeId k = doc->AddStr(key);
  doc->mutable_node(dict).items.push_back(k);
  doc->mutable_node(dict).items.push_back(value);
}

pickle::NodeId GroupState(pickle::Document* doc, pickle::NodeId state, int64_t k) {
  const auto items = doc->MappingItems(state);
  for (const auto& [key, value] : *items) {
    if (doc->AsInt(key) == k) return value;
  }
  return pickle::kNoNode;
}

// A momentum buffer that is not the whole params its rank's partition
// touches (here rank 0's 310-element fp32 partition for its 540) is
// refused at open, naming the file, the group and the key.
TEST(MuonHostile, AMomentumBufferOfTheWrongSizeIsRefusedNamingTheFile) {
  MemEnv env;
  EditedMuonZ1(env, 0, [](pickle::Document* doc, pickle::NodeId state) {
    const pickle::NodeId osd = doc->Get(doc->root(), "optimizer_state_dict");
    const pickle::NodeId fp32 =
        (*doc->SequenceItems(doc->Get(osd, "single_partition_of_fp32_groups")))[0];
    SetDictValue(doc, GroupState(doc, state, 0), "momentum_buffer", fp32);
  });
  auto c = Checkpoint::Open(env, "/ck");
  ASSERT_FALSE(c.ok());
  const std::string msg = c.status().ToString();
  EXPECT_NE(msg.find("zero_pp_rank_0_mp_rank_00_optim_states.pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer state[0]['momentum_buffer'] has shape [310]"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("540 elements"), std::string::npos) << msg;
}

// A tensor state whose layout ucfs does not know (here a whole-params
// buffer in the Adam group) is refused, naming the file, group and key,
// never copied.
TEST(MuonHostile, AStateOfUnknownLayoutIsRefusedNamingFileGroupAndKey) {
  MemEnv env;
  EditedMuonZ1(env, 1, [](pickle::Document* doc, pickle::NodeId state) {
    const pickle::NodeId momentum = doc->Get(GroupState(doc, state, 0), "momentum_buffer");
    SetDictValue(doc, GroupState(doc, state, 1), "odd_buffer", momentum);
  });
  auto c = Checkpoint::Open(env, "/ck");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kNotSupported);
  const std::string msg = c.status().ToString();
  EXPECT_NE(msg.find("zero_pp_rank_1_mp_rank_00_optim_states.pt: optimizer state[1]['odd_buffer'] "
                     "(param group 1)"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace ucfs
