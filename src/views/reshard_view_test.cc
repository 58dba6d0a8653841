#include "ucfs/views/reshard_view.h"

#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/codec/describe.h"
#include "ucfs/codec/zip.h"
#include "ucfs/views/torch_pickle_builder.h"

namespace ucfs {
namespace {

using testing::FixtureDir;

std::shared_ptr<const Checkpoint> Open(Env& env, const std::string& path) {
  auto c = Checkpoint::Open(env, path);
  EXPECT_TRUE(c.ok()) << path << ": " << c.status().ToString();
  return std::make_shared<const Checkpoint>(std::move(c).value());
}

// Writes the view's tag directory and `latest` into `out` under /r, so the
// generated files can be read back as a checkpoint.
void Materialize(Env& env, View& view, const std::string& tag, MemEnv* out) {
  SourceFiles reader(env, [&](uint32_t i) { return view.source(i); });
  auto read = [&](InodeId node) {
    auto attr = view.GetAttr(node);
    std::vector<ReadPiece> pieces;
    EXPECT_TRUE(view.Plan(node, 0, attr->size, &pieces).ok());
    std::string bytes;
    EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
    EXPECT_EQ(bytes.size(), attr->size);
    return bytes;
  };
  out->WriteFile("/r/latest", read(*view.Lookup(kRootInode, "latest")));
  const InodeId dir = *view.Lookup(kRootInode, tag);
  const auto entries = view.ReadDir(dir);
  ASSERT_TRUE(entries.ok());
  for (const auto& [name, attr] : *entries) {
    out->WriteFile("/r/" + tag + "/" + name, read(attr.inode));
  }
}

std::string FullState(const Checkpoint& c, size_t p, size_t s) {
  std::vector<Extent> extents;
  EXPECT_TRUE(
      c.MapState(p, s, 0, c.params()[p].numel * Info(c.states()[s].dtype).element_size, &extents)
          .ok());
  std::string out;
  for (const Extent& e : extents)
    out += *(*Env::Posix()->Open(c.sources()[e.file].path))->ReadString(e.offset, e.length);
  return out;
}

class ReshardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReshardTest, SameWorldSizeReproducesTheSubGroups) {
  auto c = Open(*Env::Posix(), FixtureDir(GetParam()) + "/checkpoint");
  auto layout = PlanReshard(*c, {c->world_size(), std::nullopt});
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->sub_groups.size(), c->sub_groups().size());
  for (size_t k = 0; k < c->sub_groups().size(); ++k) {
    EXPECT_EQ(layout->sub_groups[k].params, c->sub_groups()[k].params);
    EXPECT_EQ(layout->sub_groups[k].partition_numel, c->sub_groups()[k].partition_numel);
    EXPECT_EQ(layout->sub_groups[k].param_group, c->sub_groups()[k].param_group);
  }
}

// For every world size 1..8 the generated rank files are themselves a valid
// ZeRO-3 checkpoint (read back with ucfs's own model) whose every state of
// every parameter, frozen values, tied params and step equal the source's.
TEST_P(ReshardTest, GeneratedFilesAreAValidCheckpointWithTheSameState) {
  Env& env = *Env::Posix();
  auto source = Open(env, FixtureDir(GetParam()) + "/checkpoint");
  for (uint32_t n = 1; n <= 8; ++n) {
    SCOPED_TRACE("N=" + std::to_string(n));
    auto view = BuildReshardView(env, source, {n, std::nullopt});
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    MemEnv out;
    Materialize(env, **view, source->files().tag, &out);
    auto c = Checkpoint::Open(out, "/r");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->world_size(), n);
    ASSERT_EQ(c->params().size(), source->params().size());
    ASSERT_EQ(c->states().size(), source->states().size());
    for (size_t p = 0; p < c->params().size(); ++p) {
      EXPECT_EQ(c->params()[p].name, source->params()[p].name);
      EXPECT_EQ(c->params()[p].shape, source->params()[p].shape);
      EXPECT_EQ(c->params()[p].param_group, source->params()[p].param_group);
      for (size_t s = 0; s < c->states().size(); ++s) {
        EXPECT_EQ(c->states()[s].requires_grad, source->states()[s].requires_grad);
        std::vector<Extent> extents;
        ASSERT_TRUE(c->MapState(p, s, 0, c->params()[p].numel * 4, &extents).ok());
        std::string ours;
        for (const Extent& e : extents) {
          ours += *(*out.Open(c->sources()[e.file].path))->ReadString(e.offset, e.length);
        }
        EXPECT_EQ(ours, FullState(*source, p, s)) << c->params()[p].name;
      }
    }
    ASSERT_EQ(c->frozen_params().size(), source->frozen_params().size());
    for (size_t f = 0; f < c->frozen_params().size(); ++f) {
      const FrozenParamInfo& info = source->frozen_params()[f];
      EXPECT_EQ(c->frozen_params()[f].partition_numel, PartitionNumel(info.numel, n));
      const uint64_t bytes = info.numel * Info(info.dtype).element_size;
      std::vector<Extent> a, b;
      ASSERT_TRUE(c->MapFrozen(f, 0, bytes, &a).ok());
      ASSERT_TRUE(source->MapFrozen(f, 0, bytes, &b).ok());
      std::string x, y;
      for (const Extent& e : a)
        x += *(*out.Open(c->sources()[e.file].path))->ReadString(e.offset, e.length);
      for (const Extent& e : b)
        y += *(*env.Open(source->sources()[e.file].path))->ReadString(e.offset, e.length);
      EXPECT_EQ(x, y) << info.name;
    }
    ASSERT_EQ(c->tied_params().size(), source->tied_params().size());
    ASSERT_EQ(c->buffers().size(), source->buffers().size());
    for (const auto& group : c->scalar_states()) {
      ASSERT_EQ(group.size(), 1u);
      EXPECT_EQ(group[0].value, source->scalar_states()[0][0].value);
      EXPECT_TRUE(group[0].is_tensor);
    }
  }
}

// Files built lazily through a cache of one give the same bytes as files
// all kept built: a rebuilt rank file is the same file.
TEST_P(ReshardTest, ATinyCacheServesTheSameBytes) {
  Env& env = *Env::Posix();
  auto source = Open(env, FixtureDir(GetParam()) + "/checkpoint");
  ReshardOptions roomy{5, std::nullopt, 64};
  ReshardOptions tiny{5, std::nullopt, 1};
  auto a = BuildReshardView(env, source, roomy);
  auto b = BuildReshardView(env, source, tiny);
  ASSERT_TRUE(a.ok() && b.ok());
  MemEnv x, y;
  Materialize(env, **a, source->files().tag, &x);
  Materialize(env, **b, source->files().tag, &y);
  // Twice, so every file of `b` is built more than once.
  MemEnv y2;
  Materialize(env, **b, source->files().tag, &y2);
  const std::string dir = "/r/" + source->files().tag;
  auto names = x.ListDir(dir);
  ASSERT_TRUE(names.ok());
  ASSERT_EQ(names->size(), 10u);
  for (const auto& d : *names) {
    const std::string path = dir + "/" + d.name;
    const uint64_t size = x.Stat(path)->identity.size;
    const std::string want = *(*x.Open(path))->ReadString(0, size);
    EXPECT_EQ(*(*y.Open(path))->ReadString(0, size), want) << d.name;
    EXPECT_EQ(*(*y2.Open(path))->ReadString(0, size), want) << d.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReshardTest, ::testing::ValuesIn(testing::FixtureNames()));

// The records of a torch.save file: name -> bytes.
std::map<std::string, std::string> Records(Env& env, const std::string& path) {
  std::map<std::string, std::string> out;
  auto file = env.Open(path);
  EXPECT_TRUE(file.ok()) << path;
  if (!file.ok()) return out;
  auto archive = ZipArchive::Open(**file);
  EXPECT_TRUE(archive.ok()) << path << ": " << archive.status().ToString();
  if (!archive.ok()) return out;
  for (const ZipRecord& rec : archive->records()) {
    auto bytes = ZipArchive::ReadRecord(**file, rec);
    EXPECT_TRUE(bytes.ok()) << path << " " << rec.name << ": " << bytes.status().ToString();
    if (bytes.ok()) out[rec.name] = std::move(bytes).value();
  }
  return out;
}

class FlatGroupReshardTest : public ::testing::TestWithParam<std::string> {};

// ZeRO-1/2 at the checkpoint's own world size: every rank file and the
// model states hold exactly DeepSpeed's own records — data.pkl byte for
// byte (the same pickle: fp32 partitions as views of the padded partition,
// group_paddings, partition_count, param_slice_mappings' fragment_address
// objects, dp_world_size) and every storage.
TEST_P(FlatGroupReshardTest, AtTheSameWorldSizeTheFilesAreDeepSpeeds) {
  Env& env = *Env::Posix();
  auto source = Open(env, FixtureDir(GetParam()) + "/checkpoint");
  auto view = BuildReshardView(env, source, {source->world_size(), std::nullopt});
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  MemEnv out;
  Materialize(env, **view, source->files().tag, &out);
  const std::string tag_dir = source->files().tag_dir;
  size_t files = 0;
  const auto entries = env.ListDir(tag_dir);
  ASSERT_TRUE(entries.ok());
  for (const auto& e : *entries) {
    SCOPED_TRACE(e.name);
    const auto theirs = Records(env, tag_dir + "/" + e.name);
    const auto ours = Records(out, "/r/" + source->files().tag + "/" + e.name);
    ASSERT_EQ(ours.size(), theirs.size());
    for (const auto& [name, bytes] : theirs) {
      ASSERT_TRUE(ours.contains(name)) << name;
      EXPECT_EQ(ours.at(name), bytes) << name;
    }
    ++files;
  }
  EXPECT_EQ(files, source->world_size() + 1);
}

// At every world size 1..8 the files are a ZeRO-1/2 checkpoint of N ranks
// (read back with ucfs's own model) holding the same state: every state of
// every param, the frozen params, buffers, tied params and the step.
TEST_P(FlatGroupReshardTest, GeneratedFilesAreAValidCheckpointWithTheSameState) {
  Env& env = *Env::Posix();
  auto source = Open(env, FixtureDir(GetParam()) + "/checkpoint");
  for (uint32_t n = 1; n <= 8; ++n) {
    SCOPED_TRACE("N=" + std::to_string(n));
    auto view = BuildReshardView(env, source, {n, std::nullopt});
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    MemEnv out;
    Materialize(env, **view, source->files().tag, &out);
    auto c = Checkpoint::Open(out, "/r");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->world_size(), n);
    EXPECT_EQ(c->partitioning(), Partitioning::kFlatGroup);
    EXPECT_EQ(c->optimizer_class(), source->optimizer_class());
    ASSERT_EQ(c->sub_groups().size(), source->sub_groups().size());
    for (size_t k = 0; k < c->sub_groups().size(); ++k) {
      EXPECT_EQ(c->sub_groups()[k].partition_numel,
                FlatPartitionNumel(source->sub_groups()[k].numel, n));
    }
    ASSERT_EQ(c->params().size(), source->params().size());
    ASSERT_EQ(c->states().size(), source->states().size());
    for (size_t p = 0; p < c->params().size(); ++p) {
      EXPECT_EQ(c->params()[p].name, source->params()[p].name);
      EXPECT_EQ(c->params()[p].offset, source->params()[p].offset);
      for (size_t s = 0; s < c->states().size(); ++s) {
        std::vector<Extent> extents;
        ASSERT_TRUE(c->MapState(p, s, 0, c->params()[p].numel * 4, &extents).ok());
        std::string ours;
        for (const Extent& e : extents) {
          ours += *(*out.Open(c->sources()[e.file].path))->ReadString(e.offset, e.length);
        }
        EXPECT_EQ(ours, FullState(*source, p, s)) << c->params()[p].name;
      }
    }
    ASSERT_EQ(c->frozen_params().size(), source->frozen_params().size());
    ASSERT_EQ(c->buffers().size(), source->buffers().size());
    ASSERT_EQ(c->tied_params().size(), source->tied_params().size());
    for (size_t k = 0; k < c->scalar_states().size(); ++k) {
      ASSERT_EQ(c->scalar_states()[k].size(), 1u);
      EXPECT_EQ(c->scalar_states()[k][0].value, source->scalar_states()[k][0].value);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FlatGroupReshardTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

// round_robin_gradients orders each group's flat buffer by the world size:
// the view refuses other world sizes rather than guess, and still serves
// the checkpoint's own.
TEST(FlatGroupReshard, RoundRobinGradientsOnlyAtTheSameWorldSize) {
  MemEnv env;
  ASSERT_TRUE(env.CopyTreeFrom(FixtureDir("z2_tricky_fp32_ws2") + "/checkpoint", "/ck").ok());
  const std::string model = "/ck/global_step4/mp_rank_00_model_states.pt";
  env.WriteFile(model, testing::RepackTorchFile(*env.Contents(model), [](pickle::Document* d) {
                  const pickle::NodeId zero =
                      d->Get(d->Get(d->root(), "ds_config"), "zero_optimization");
                  d->AppendPair(zero, d->AddStr("round_robin_gradients"), d->AddBool(true));
                }));
  auto c = Open(env, "/ck");
  EXPECT_TRUE(c->round_robin_gradients());
  EXPECT_TRUE(PlanReshard(*c, {2, std::nullopt}).ok());
  auto other = PlanReshard(*c, {3, std::nullopt});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), Status::Code::kNotSupported);
  EXPECT_NE(other.status().message().find("round_robin_gradients"), std::string::npos);
}

// The sub-group split at every world size DeepSpeed trained the tricky model
// with, as DeepSpeed made it (ORACLE.json world_size_structures), and the
// structure DeepSpeed's own files at 2 and 3 ranks have.
TEST(Reshard, SplitMatchesDeepSpeedAtEveryWorldSize) {
  Env& env = *Env::Posix();
  auto source = Open(env, FixtureDir("z3_tricky_fp32_ws4") + "/checkpoint");
  const auto& oracle = testing::Oracle("z3_tricky_fp32_ws4");
  for (const auto& [ws, structure] : oracle["world_size_structures"].items()) {
    auto layout = PlanReshard(*source, {static_cast<uint32_t>(std::stoul(ws)), std::nullopt});
    ASSERT_TRUE(layout.ok());
    ASSERT_EQ(layout->sub_groups.size(), structure["sub_groups"].size()) << ws;
    for (size_t k = 0; k < layout->sub_groups.size(); ++k) {
      const auto& expected = structure["sub_groups"][k];
      EXPECT_EQ(layout->sub_groups[k].partition_numel, expected["fp32_flat_numel"].get<uint64_t>());
      EXPECT_EQ(layout->sub_groups[k].param_group, expected["param_group"].get<uint32_t>());
      std::vector<std::string> names;
      for (uint32_t p : layout->sub_groups[k].params) names.push_back(source->params()[p].name);
      EXPECT_EQ(names, expected["params"].get<std::vector<std::string>>()) << ws << " " << k;
    }
  }
  for (uint32_t ws : {2u, 3u}) {
    auto theirs = Open(env, FixtureDir("z3_tricky_fp32_ws4") + "/siblings/ws" + std::to_string(ws) +
                                "/checkpoint");
    auto view = BuildReshardView(env, source, {ws, std::nullopt});
    ASSERT_TRUE(view.ok());
    MemEnv out;
    Materialize(env, **view, "global_step4", &out);
    auto ours = Checkpoint::Open(out, "/r");
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    ASSERT_EQ(ours->sub_groups().size(), theirs->sub_groups().size());
    for (size_t k = 0; k < ours->sub_groups().size(); ++k) {
      EXPECT_EQ(ours->sub_groups()[k].params, theirs->sub_groups()[k].params);
      EXPECT_EQ(ours->sub_groups()[k].partition_numel, theirs->sub_groups()[k].partition_numel);
      EXPECT_EQ(ours->sub_groups()[k].param_group, theirs->sub_groups()[k].param_group);
    }
    for (size_t f = 0; f < ours->frozen_params().size(); ++f) {
      EXPECT_EQ(ours->frozen_params()[f].partition_numel,
                theirs->frozen_params()[f].partition_numel);
    }
    // Every rank's files have DeepSpeed's keys, in DeepSpeed's order, with
    // tensors of the same shapes (values differ: another run).
    for (uint32_t r = 0; r < ws; ++r) {
      for (auto kind : {RankFileName::Kind::kOptim, RankFileName::Kind::kModel}) {
        const std::string name = RankFileNameFor(kind, "", r);
        auto a = SummarizeTorchFile(out, "/r/global_step4/" + name);
        auto b =
            SummarizeTorchFile(env, FixtureDir("z3_tricky_fp32_ws4") + "/siblings/ws" +
                                        std::to_string(ws) + "/checkpoint/global_step4/" + name);
        ASSERT_TRUE(a.ok() && b.ok());
        auto da = pickle::Parse(a->pickle);
        auto db = pickle::Parse(b->pickle);
        ASSERT_TRUE(da.ok() && db.ok());
        for (const char* key : {"ds_config"}) {  // the batch per GPU differs by world size
          for (auto* d : {&*da, &*db}) {
            auto items = d->MappingItems(d->root());
            for (const auto& [k, v] : *items) {
              if (d->AsStr(k) == std::string_view(key)) d->mutable_node(v) = pickle::Node{};
            }
          }
        }
        DescribeOptions options;
        options.storage_details = false;
        EXPECT_EQ(Describe(*da, da->root(), options).value(),
                  Describe(*db, db->root(), options).value())
            << name << " at " << ws;
      }
    }
  }
}

}  // namespace
}  // namespace ucfs
