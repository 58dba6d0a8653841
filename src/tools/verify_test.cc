#include "ucfs/tools/verify.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>

#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/zip.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::NodeId;
using Kind = VerifyProblem::Kind;
using testing::FixtureDir;

std::string Describe(const VerifyReport& r) {
  std::string out;
  for (const VerifyProblem& p : r.problems) {
    out += "  [" + std::string(KindName(p.kind)) + "] " + p.file + ": " + p.message + "\n";
  }
  return out.empty() ? "  (no problems)\n" : out;
}

// The trainable params of a fixture as its oracle recorded them.
const nlohmann::json& OracleParams(const nlohmann::json& oracle) {
  const auto& model = oracle["model"];
  return model.contains("trainable_params") ? model["trainable_params"] : model["params"];
}

double OracleStep(const nlohmann::json& oracle) {
  const auto& part = oracle["partitioning"];
  return part.contains("adam_step") ? part["adam_step"].get<double>()
                                    : part["adam_step_per_rank"][0].get<double>();
}

class VerifyFixtureTest : public ::testing::TestWithParam<std::string> {};

// Every fixture DeepSpeed wrote is clean: no problem, the oracle's world
// size and step, and every valid element of the three states scanned
// (numel x 3 x 4 bytes, padding excluded), however the scan is cut up.
TEST_P(VerifyFixtureTest, RealCheckpointsVerifyClean) {
  const auto& oracle = testing::Oracle(GetParam());
  uint64_t numel = 0;
  for (const auto& p : OracleParams(oracle)) numel += p["numel"].get<uint64_t>();
  for (unsigned threads : {1u, 3u}) {
    for (uint64_t chunk : {uint64_t{8} << 20, uint64_t{64}}) {
      std::atomic<uint64_t> announced{0}, reported{0};
      VerifyOptions options;
      options.threads = threads;
      options.chunk_bytes = chunk;
      options.on_scan_start = [&](uint64_t total) { announced = total; };
      options.on_bytes = [&](uint64_t n) { reported += n; };
      auto r = Verify(*Env::Posix(), FixtureDir(GetParam()) + "/checkpoint", options);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(r->ok()) << Describe(*r);
      EXPECT_EQ(r->world_size, oracle["world_size"].get<uint32_t>());
      ASSERT_TRUE(r->step.has_value());
      EXPECT_EQ(*r->step, OracleStep(oracle));
      EXPECT_EQ(r->files_checked, 2 * r->world_size);
      EXPECT_TRUE(r->scanned);
      EXPECT_EQ(r->params, OracleParams(oracle).size());
      EXPECT_EQ(r->states, (std::vector<std::string>{"fp32", "exp_avg", "exp_avg_sq"}));
      EXPECT_EQ(r->bytes_scanned, numel * 3 * 4) << "threads " << threads << " chunk " << chunk;
      EXPECT_EQ(announced, r->bytes_scanned);
      EXPECT_EQ(reported, r->bytes_scanned);
      EXPECT_TRUE(r->nonfinite.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VerifyFixtureTest, ::testing::ValuesIn(testing::FixtureNames()));

class FlatGroupVerifyTest : public ::testing::TestWithParam<std::string> {};

// ZeRO-1/2 checkpoints DeepSpeed wrote are clean: W optimizer files and one
// model-states file, the step, every valid element scanned (the fp32 and
// moments of every param: 936 elements x 3 states x 4 bytes).
TEST_P(FlatGroupVerifyTest, RealCheckpointsVerifyClean) {
  const auto& oracle = testing::Oracle(GetParam());
  VerifyOptions options;
  options.threads = 2;
  options.chunk_bytes = 64;
  auto r = Verify(*Env::Posix(), FixtureDir(GetParam()) + "/checkpoint", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Describe(*r);
  EXPECT_EQ(r->world_size, oracle["world_size"].get<uint32_t>());
  ASSERT_TRUE(r->step.has_value());
  EXPECT_EQ(*r->step, oracle["partitioning"]["adam_step"].get<double>());
  EXPECT_EQ(r->files_checked, r->world_size + 1);
  EXPECT_EQ(r->params, 12u);
  EXPECT_EQ(r->bytes_scanned, oracle["model"]["total_trainable_numel"].get<uint64_t>() * 3 * 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FlatGroupVerifyTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

TEST(Verify, NoCheckpointAtAllIsAnError) {
  MemEnv env;
  auto r = Verify(env, "/nowhere");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nowhere"), std::string::npos);
}

// --- broken checkpoints ----------------------------------------------------

class BrokenVerifyTest : public ::testing::Test {
 protected:
  void Load(const std::string& fixture) {
    fixture_ = fixture;
    ASSERT_TRUE(env_.CopyTreeFrom(FixtureDir(fixture) + "/checkpoint", "/ck").ok());
  }
  std::string Tag(const std::string& name) { return "/ck/global_step4/" + name; }
  std::string Optim(int rank) {
    return Tag("zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt");
  }
  std::string Model(int rank) {
    return Tag("zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_model_states.pt");
  }
  VerifyReport Run() {
    VerifyOptions options;
    options.threads = 2;
    auto r = Verify(env_, "/ck", options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : VerifyReport{};
  }
  void Edit(const std::string& file, const std::function<void(Document*)>& edit) {
    env_.WriteFile(file, testing::RepackTorchFile(*env_.Contents(file), edit));
  }

  // Where element `index` of a rank file's 1-D tensor at `path` (keys from
  // the pickle's root; an int key indexes a list or an int-keyed dict) is,
  // found with the zip directory and the pickle, not the checkpoint model.
  uint64_t ElementOffset(const std::string& file, const std::vector<std::string>& path,
                         uint64_t index) {
    auto f = env_.Open(file);
    EXPECT_TRUE(f.ok());
    auto archive = ZipArchive::Open(**f);
    EXPECT_TRUE(archive.ok()) << archive.status().ToString();
    auto doc = pickle::Parse(*ZipArchive::ReadRecord(**f, *archive->Find("data.pkl")));
    EXPECT_TRUE(doc.ok());
    NodeId n = doc->root();
    for (const std::string& key : path) {
      if (!key.empty() && std::isdigit(static_cast<unsigned char>(key[0]))) {
        const int64_t k = std::stoll(key);
        if (auto items = doc->SequenceItems(n)) {
          n = (*items)[k];
        } else {
          const auto entries = doc->MappingItems(n);
          for (const auto& [kk, v] : *entries) {
            if (doc->AsInt(kk) == k) n = v;
          }
        }
      } else {
        n = doc->Get(n, key);
      }
    }
    auto t = MatchTensor(*doc, n);
    EXPECT_TRUE(t.ok() && t->has_value());
    const ZipRecord* rec = archive->Find("data/" + (*t)->storage_key);
    EXPECT_NE(rec, nullptr);
    return rec->data_offset + (*t)->byte_offset() + index * (*t)->element_size();
  }

  void Poke(const std::string& file, uint64_t offset, float value) {
    std::string bytes = *env_.Contents(file);
    ASSERT_LE(offset + 4, bytes.size());
    std::memcpy(bytes.data() + offset, &value, 4);
    env_.WriteFile(file, std::move(bytes));
  }

  static std::vector<std::string> Flat(const std::string& state) {
    if (state == "fp32") return {"optimizer_state_dict", "fp32_flat_groups", "0"};
    return {"optimizer_state_dict", "optimizer_state_dict", "state", "0", state};
  }

  std::vector<const VerifyProblem*> Of(const VerifyReport& r, Kind kind) {
    std::vector<const VerifyProblem*> out;
    for (const VerifyProblem& p : r.problems) {
      if (p.kind == kind) out.push_back(&p);
    }
    return out;
  }

  std::string fixture_;
  MemEnv env_;
};

// Two missing ranks are both named, as missing, and nothing else is
// reported (Checkpoint::Open's error says the same).
TEST_F(BrokenVerifyTest, BigEndianRankFilesAreUnreadable) {
  Load("z3_fp32_ws2");
  env_.WriteFile(Model(1), testing::AddTorchRecord(*env_.Contents(Model(1)), "byteorder", "big"));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kUnreadable);
  EXPECT_EQ(r.problems[0].file, Model(1));
  EXPECT_NE(r.problems[0].message.find("not little-endian"), std::string::npos) << Describe(r);
}

TEST_F(BrokenVerifyTest, EveryMissingRankIsNamed) {
  Load("z3_fp32_ws4");
  env_.RemoveFile(Optim(1));
  env_.RemoveFile(Optim(3));
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kMissing);
  EXPECT_EQ(r.problems[0].file, Optim(1));
  EXPECT_EQ(r.problems[1].kind, Kind::kMissing);
  EXPECT_EQ(r.problems[1].file, Optim(3));
  EXPECT_FALSE(r.scanned);
  // The ranks still there are checked: their step.
  ASSERT_TRUE(r.step.has_value());
  EXPECT_EQ(*r.step, OracleStep(testing::Oracle(fixture_)));
}

// The last rank gone altogether: the pickles still say 4 ranks.
TEST_F(BrokenVerifyTest, MissingLastRankIsNotASmallerWorld) {
  Load("z3_bf16_ws4");
  env_.RemoveFile(Tag("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt"));
  env_.RemoveFile(Model(3));
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Tag("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt"));
  EXPECT_EQ(r.problems[1].file, Model(3));
  EXPECT_EQ(Of(r, Kind::kMissing).size(), 2u);
}

// DeepSpeed 0.14.5-0.17 saving with load_universal leaves only rank 0's
// model states: a plain resume needs the others.
TEST_F(BrokenVerifyTest, ModelStatesOfOtherRanksMissing) {
  Load("z3_fp32_ws3");
  env_.RemoveFile(Model(1));
  env_.RemoveFile(Model(2));
  const VerifyReport r = Run();
  ASSERT_EQ(Of(r, Kind::kMissing).size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Model(1));
  EXPECT_NE(r.problems[0].message.find("only rank 0's model states"), std::string::npos);
  EXPECT_TRUE(r.scanned);  // the model builds without them
}

TEST_F(BrokenVerifyTest, TruncatedRankFile) {
  Load("z3_bf16_ws3");
  const std::string name = Tag("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  const std::string bytes = *env_.Contents(name);
  for (size_t cut : {size_t{0}, bytes.size() / 2, bytes.size() - 1}) {
    env_.WriteFile(name, bytes.substr(0, cut));
    const VerifyReport r = Run();
    ASSERT_EQ(r.problems.size(), 1u) << "cut at " << cut << "\n" << Describe(r);
    EXPECT_EQ(r.problems[0].kind, Kind::kUnreadable);
    EXPECT_EQ(r.problems[0].file, name);
    EXPECT_EQ(r.world_size, 3u);
    EXPECT_FALSE(r.scanned);
  }
}

TEST_F(BrokenVerifyTest, TwoBrokenFilesAreBothReported) {
  Load("z3_fp32_ws4");
  env_.WriteFile(Optim(0), env_.Contents(Optim(0))->substr(0, 100));
  env_.WriteFile(Model(2), "not a zip");
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Optim(0));
  EXPECT_EQ(r.problems[1].file, Model(2));
  EXPECT_EQ(Of(r, Kind::kUnreadable).size(), 2u);
}

TEST_F(BrokenVerifyTest, PartitionCountDisagrees) {
  Load("z3_fp32_ws4");
  Edit(Optim(2), [](Document* doc) {
    NodeId pc = doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "partition_count");
    ASSERT_EQ(doc->AsInt(pc), 4);
    doc->mutable_node(pc).scalar = 5;
  });
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kWorldSize);
  EXPECT_EQ(r.problems[0].file, Optim(2));
  EXPECT_NE(r.problems[0].message.find("partition_count is 5"), std::string::npos);
}

// Files that all claim a world of 2^31 make one problem for the ranks far
// past the files, not one per rank (found by checkpoint_fuzz: verify ran out
// of memory).
TEST_F(BrokenVerifyTest, AbsurdWorldSizeIsOneRangeOfMissingRanks) {
  Load("z3_fp32_ws2");
  const int64_t claim = int64_t{1} << 31;
  for (uint32_t r = 0; r < 2; ++r) {
    Edit(Optim(r), [&](Document* doc) {
      NodeId pc = doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "partition_count");
      doc->mutable_node(pc).scalar = claim;
    });
    Edit(Model(r), [&](Document* doc) {
      doc->mutable_node(doc->Get(doc->root(), "dp_world_size")).scalar = claim;
    });
  }
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, uint32_t{1} << 31);
  // Ranks 2 to 65 one by one (two files each), the rest as one range.
  const auto missing = Of(r, Kind::kMissing);
  ASSERT_EQ(missing.size(), 1u + 2 * 64) << Describe(r);
  EXPECT_EQ(missing[0]->file, r.tag_dir);
  EXPECT_NE(missing[0]->message.find("ranks 66 to 2147483647"), std::string::npos)
      << missing[0]->message;
}

TEST_F(BrokenVerifyTest, DpWorldSizeDisagreesInAFileOpenNeverReads) {
  Load("z3_fp32_ws3");
  Edit(Model(2),
       [](Document* doc) { doc->mutable_node(doc->Get(doc->root(), "dp_world_size")).scalar = 6; });
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kWorldSize);
  EXPECT_EQ(r.problems[0].file, Model(2));
  EXPECT_NE(r.problems[0].message.find("dp_world_size is 6"), std::string::npos);
  EXPECT_TRUE(r.scanned);
}

TEST_F(BrokenVerifyTest, StrayRankBeyondTheWorldSize) {
  Load("z3_fp32_ws4");
  env_.WriteFile(Optim(4), *env_.Contents(Optim(3)));
  const VerifyReport r = Run();
  EXPECT_EQ(r.world_size, 4u);
  // A copy of rank 3's file: beyond the world size, and saved as rank 3.
  ASSERT_EQ(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kUnreadable);
  EXPECT_EQ(r.problems[0].file, Optim(4));
  EXPECT_NE(r.problems[0].message.find("was saved as zero_pp_rank_3_mp_rank_00_optim_states.pt"),
            std::string::npos);
  EXPECT_EQ(r.problems[1].kind, Kind::kWorldSize);
  EXPECT_EQ(r.problems[1].file, Optim(4));
}

// Issue 10: rank files swapped by name were not detected. torch.save names
// the archive's top folder after the file, so each still says which it is.
TEST_F(BrokenVerifyTest, SwappedRankFilesAreNamedBoth) {
  Load("z3_fp32_ws2");
  const std::string zero = *env_.Contents(Optim(0));
  env_.WriteFile(Optim(0), *env_.Contents(Optim(1)));
  env_.WriteFile(Optim(1), zero);
  const VerifyReport r = Run();
  EXPECT_FALSE(r.ok());
  ASSERT_GE(r.problems.size(), 2u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Optim(0));
  EXPECT_NE(r.problems[0].message.find("was saved as zero_pp_rank_1_mp_rank_00_optim_states.pt"),
            std::string::npos)
      << Describe(r);
  EXPECT_NE(r.problems[0].message.find(Optim(1) + " is the file of that name here"),
            std::string::npos)
      << Describe(r);
  EXPECT_EQ(r.problems[1].file, Optim(1));
}

// Issue 10: verify said OK on a file torch.load refuses, whose version
// record says 999 (torch accepts 1 to 10).
TEST_F(BrokenVerifyTest, UnsupportedVersionRecord) {
  Load("z3_fp32_ws2");
  env_.WriteFile(Model(1),
                 testing::ReplaceTorchRecord(*env_.Contents(Model(1)), "version", "999\n"));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].file, Model(1));
  EXPECT_NE(r.problems[0].message.find("'version' record says 999\\x0a, not a file format "
                                       "version torch.load supports (1 to 10)"),
            std::string::npos)
      << Describe(r);
}

// torch.optim's step is a 0-dim tensor: its stored bytes edited on rank 1.
TEST_F(BrokenVerifyTest, StepTensorDiffersOnOneRank) {
  Load("z3_fp32_ws3");
  const double step = OracleStep(testing::Oracle(fixture_));
  Poke(Optim(1), ElementOffset(Optim(1), Flat("step"), 0), static_cast<float>(step + 1));
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kStep);
  EXPECT_EQ(r.problems[0].file, Optim(1));
  EXPECT_NE(r.problems[0].message.find("is " + std::to_string(static_cast<int>(step + 1)) +
                                       " in sub-group 0"),
            std::string::npos)
      << r.problems[0].message;
  ASSERT_TRUE(r.step.has_value());
  EXPECT_EQ(*r.step, step);
  EXPECT_TRUE(r.scanned);
}

// DeepSpeed's FusedAdam keeps a Python int; one sub-group of six on rank 3.
TEST_F(BrokenVerifyTest, StepNumberDiffersInOneSubGroup) {
  Load("z3_tricky_fp32_ws4");
  Edit(Optim(3), [](Document* doc) {
    NodeId state = doc->Get(
        doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "optimizer_state_dict"), "state");
    const auto entries = doc->MappingItems(state);
    for (const auto& [k, v] : *entries) {
      if (doc->AsInt(k) == 4) {
        pickle::Node n;
        n.kind = pickle::Kind::kInt;
        n.scalar = 7;
        doc->mutable_node(doc->Get(v, "step")) = n;
      }
    }
  });
  const VerifyReport r = Run();
  ASSERT_EQ(r.problems.size(), 1u) << Describe(r);
  EXPECT_EQ(r.problems[0].kind, Kind::kStep);
  EXPECT_EQ(r.problems[0].file, Optim(3));
  EXPECT_NE(r.problems[0].message.find("is 7 in sub-group 4"), std::string::npos)
      << r.problems[0].message;
  EXPECT_EQ(*r.step, OracleStep(testing::Oracle(fixture_)));
}

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
