// The views of DeepSpeed 0.19.8's Muon checkpoints (tests/data/modern/
// muon_*): the universal view's per-param files against the live values in
// MODERN.json (DeepSpeed's converter writes none: KeyError 'exp_avg'), and
// the reshard view at N read back as a checkpoint holding the source's
// every value, Muon's whole-param buffers re-split for the new partitions.
#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

using testing::LiveBytes;
using testing::ModernDir;
using testing::ModernFacts;

std::shared_ptr<const Checkpoint> Open(Env& env, const std::string& path) {
  auto c = Checkpoint::Open(env, path);
  EXPECT_TRUE(c.ok()) << path << ": " << c.status().ToString();
  if (!c.ok()) return nullptr;
  return std::make_shared<const Checkpoint>(std::move(c).value());
}

// The tensor a served torch file holds (bare, or a universal dict's
// 'param'): its shape and bytes, read by ucfs's codec.
struct Served {
  std::vector<int64_t> shape;
  std::string bytes;
};
Served TensorOf(const std::string& file) {
  MemEnv mem;
  mem.WriteFile("/f.pt", file);
  auto f = mem.Open("/f.pt");
  auto archive = ZipArchive::Open(**f);
  EXPECT_TRUE(archive.ok());
  if (!archive.ok()) return {};
  auto doc = pickle::Parse(*ZipArchive::ReadRecord(**f, *archive->Find("data.pkl")));
  EXPECT_TRUE(doc.ok());
  pickle::NodeId node = doc->root();
  if (doc->node(node).kind == pickle::Kind::kDict) node = doc->Get(node, "param");
  auto t = MatchTensor(*doc, node);
  EXPECT_TRUE(t.ok() && t->has_value());
  if (!t.ok() || !t->has_value()) return {};
  const std::string record =
      *ZipArchive::ReadRecord(**f, *archive->Find("data/" + (*t)->storage_key));
  return {(*t)->shape, record.substr((*t)->byte_offset(), (*t)->byte_size())};
}

// The live values of every param's states, with z2_muon_fp32_ws2's momentum
// from muon_momentum_layout (its live_state could not read it).
nlohmann::json LiveParams(const nlohmann::json& facts) {
  nlohmann::json params = facts["live_state"]["params"];
  if (facts["muon_momentum_layout"].is_object()) {
    for (const auto& [name, rec] : facts["muon_momentum_layout"]["values"].items()) {
      if (!params[name].contains("momentum_buffer")) params[name]["momentum_buffer"] = rec;
    }
  }
  return params;
}

class MuonViewsTest : public ::testing::TestWithParam<std::string> {};

// zero/<param>/ holds fp32.pt and one <state>.pt per state of its group, by
// key (momentum_buffer.pt for Muon's, exp_avg.pt and exp_avg_sq.pt for
// Adam's), step.pt where the group keeps a step (at ZeRO-1/2, as the
// converter's stage-1/2 path writes it): each the whole param's live value.
TEST_P(MuonViewsTest, UniversalFilesAreTheLiveValues) {
  Env& env = *Env::Posix();
  const nlohmann::json& facts = ModernFacts(GetParam());
  auto c = Open(env, ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c);
  auto view = BuildUniversalView(env, c);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const bool stage3 = facts["zero_stage"].get<int>() == 3;
  const nlohmann::json live = LiveParams(facts);
  size_t compared = 0;
  for (const auto& [name, states] : live.items()) {
    const std::string dir = "global_step4_universal/zero/" + name;
    std::vector<std::string> want;
    for (const auto& [state, rec] : states.items()) want.push_back(state + ".pt");
    if (states.contains("exp_avg") && !stage3) want.push_back("step.pt");
    std::sort(want.begin(), want.end());
    EXPECT_EQ(testing::EntryNames(**view, testing::ResolvePath(**view, dir)), want) << name;
    for (const auto& [state, rec] : states.items()) {
      const Served t = TensorOf(testing::ReadViewFile(
          env, **view, testing::ResolvePath(**view, dir + "/" + state + ".pt")));
      std::vector<int64_t> shape = rec["shape"].get<std::vector<int64_t>>();
      // ZeRO-3's universal files are flat, as the converter's stage-3 path writes them.
      if (stage3) shape = {static_cast<int64_t>(t.bytes.size() / 4)};
      EXPECT_EQ(t.shape, shape) << name << " " << state;
      EXPECT_EQ(t.bytes, LiveBytes(rec)) << name << " " << state;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * 4 + 3 * 10 - (GetParam() == "z2_muon_fp32_ws2" ? 4 : 0));
}

// <tag>_fp32/pytorch_model.bin holds zero_to_fp32.py's tensors (the
// fixture's zero_to_fp32/), byte for byte; at ZeRO-1 ucfs keeps the frozen
// params zero_to_fp32.py leaves out, from the model states.
TEST_P(MuonViewsTest, ConsolidatedIsZeroToFp32s) {
  Env& env = *Env::Posix();
  auto c = Open(env, ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c);
  auto view = BuildUniversalView(env, c);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const testing::BinContents ours = testing::ReadBin(testing::ReadViewFile(
      env, **view, testing::ResolvePath(**view, "global_step4_fp32/pytorch_model.bin")));
  const testing::BinContents theirs = testing::ReadBin(
      testing::ReadFile(ModernDir(GetParam()) + "/zero_to_fp32/pytorch_model.bin"));
  ASSERT_FALSE(theirs.tensors.empty());
  for (const auto& [name, tensor] : theirs.tensors) {
    ASSERT_TRUE(ours.tensors.count(name)) << name;
    EXPECT_EQ(ours.tensors.at(name).second, tensor.second) << name;
  }
  const size_t frozen = ModernFacts(GetParam())["zero_stage"].get<int>() == 1 ? 2 : 0;
  EXPECT_EQ(ours.tensors.size(), theirs.tensors.size() + frozen);
}

// At every N from 1 to 7, and at 64 (where the last ranks' partitions are
// padding only, and hold no momentum buffer, as DeepSpeed makes none), the
// rank files read back as a checkpoint whose every state of every param
// equals the source's, with each ZeRO-1/2 rank's momentum_buffer the whole
// params its new partition touches (Open checks each buffer's length
// against the new partitions).
TEST_P(MuonViewsTest, ReshardAtNIsACheckpointOfTheSameValues) {
  Env& env = *Env::Posix();
  auto source = Open(env, ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(source);
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 64u}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    auto view = BuildReshardView(env, source, {n, std::nullopt});
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    MemEnv out;
    const std::string tag = source->files().tag;
    std::map<std::string, std::string> files;
    testing::ViewTree(env, **view, testing::ResolvePath(**view, tag), "", &files);
    for (const auto& [name, bytes] : files) out.WriteFile("/r/" + tag + "/" + name, bytes);
    out.WriteFile("/r/latest", tag);
    auto c = Checkpoint::Open(out, "/r");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->world_size(), n);
    ASSERT_EQ(c->params().size(), source->params().size());
    for (size_t p = 0; p < c->params().size(); ++p) {
      ASSERT_EQ(c->params()[p].name, source->params()[p].name);
      ASSERT_EQ(c->StatesOf(p).size(), source->StatesOf(p).size());
      for (size_t i = 0; i < c->StatesOf(p).size(); ++i) {
        const SubGroupState a = c->StatesOf(p)[i], b = source->StatesOf(p)[i];
        EXPECT_EQ(c->states()[a.state].name, source->states()[b.state].name);
        EXPECT_EQ(a.layout, b.layout);
        const uint64_t bytes = c->params()[p].numel * 4;
        std::vector<Extent> x, y;
        ASSERT_TRUE(c->MapState(p, a.state, 0, bytes, &x).ok());
        ASSERT_TRUE(source->MapState(p, b.state, 0, bytes, &y).ok());
        std::string ours;
        for (const Extent& e : x) {
          ours += *(*out.Open(c->sources()[e.file].path))->ReadString(e.offset, e.length);
        }
        EXPECT_EQ(ours, testing::ReadExtents(*source, y))
            << c->params()[p].name << " " << c->states()[a.state].name;
        // Every rank's copy of a whole param, not only the lowest's.
        if (a.layout != StateLayout::kWholeParams) continue;
        for (uint32_t r : c->WholeParamRanks(p)) {
          std::vector<Extent> copy;
          ASSERT_TRUE(c->MapWholeParamCopy(p, a.state, r, 0, bytes, &copy).ok());
          std::string theirs;
          for (const Extent& e : copy) {
            theirs += *(*out.Open(c->sources()[e.file].path))->ReadString(e.offset, e.length);
          }
          EXPECT_EQ(theirs, ours) << c->params()[p].name << " rank " << r;
        }
      }
    }
    ASSERT_EQ(c->scalar_states().size(), c->sub_groups().size());
    if (n == 64 && source->partitioning() == Partitioning::kFlatGroup) {
      EXPECT_EQ(c->WholeParamsNumel(0, 63), 0u);  // 618 elements in partitions of 10
      EXPECT_GT(c->WholeParamsNumel(0, 0), 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modern, MuonViewsTest,
                         ::testing::Values("muon_z1_fp32_ws2", "muon_z2_fp32_ws3",
                                           "muon_z3_fp32_ws2", "z2_muon_fp32_ws2"));

}  // namespace
}  // namespace ucfs
