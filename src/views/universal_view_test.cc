#include "ucfs/views/universal_view.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <random>

#include "test_support.h"
#include "ucfs/checkpoint/merge_rules.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/views/torch_pickle_builder.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;
using testing::FixtureDir;
constexpr auto Resolve = testing::ResolvePath;
using testing::ReadFile;

struct Mounted {
  std::shared_ptr<const Checkpoint> checkpoint;
  std::unique_ptr<View> view;
};

Mounted Build(Env& env, const std::string& path, bool crc) {
  auto c = Checkpoint::Open(env, path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  Mounted m;
  m.checkpoint = std::make_shared<const Checkpoint>(std::move(c).value());
  UniversalViewOptions options;
  options.compute_crc = crc;
  auto v = BuildUniversalView(env, m.checkpoint, options);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  m.view = std::move(v).value();
  return m;
}

std::string ReadRange(Env& env, View& view, InodeId node, uint64_t offset, uint64_t length) {
  std::vector<ReadPiece> pieces;
  Status s = view.Plan(node, offset, length, &pieces);
  EXPECT_TRUE(s.ok()) << s.ToString();
  SourceFiles reader(env, [&](uint32_t i) { return view.source(i); });
  std::string out;
  s = reader.Read(pieces, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::string ReadAll(Env& env, View& view, const std::string& path) {
  InodeId node = Resolve(view, path);
  auto attr = view.GetAttr(node);
  EXPECT_TRUE(attr.ok());
  std::string bytes = ReadRange(env, view, node, 0, attr->size);
  EXPECT_EQ(bytes.size(), attr->size) << path;
  return bytes;
}

// Where the fixture keeps DeepSpeed's (or the rebuilt) universal output.
std::string ReferenceUniversalDir(const std::string& fixture) {
  const std::string ds = FixtureDir(fixture) + "/checkpoint/global_step4_universal";
  return fs::exists(ds) ? ds : FixtureDir(fixture) + "/expected/global_step4_universal";
}

class UniversalViewTest : public ::testing::TestWithParam<std::string> {};

// With real CRCs, every file the view synthesises is byte for byte the file
// DeepSpeed's tools wrote — except the per-param files its abs() bug made
// longer, which hold exactly numel elements here and equal the reference's
// first numel.
TEST_P(UniversalViewTest, FilesAreByteIdenticalToTheReference) {
  Env& env = *Env::Posix();
  Mounted m = Build(env, FixtureDir(GetParam()) + "/checkpoint", /*crc=*/true);
  const std::string ref_dir = ReferenceUniversalDir(GetParam());
  EXPECT_EQ(ReadAll(env, *m.view, "latest_universal"), "global_step4_universal");

  size_t identical = 0, abs_bug = 0;
  for (const ParamInfo& p : m.checkpoint->params()) {
    for (const StateInfo& s : m.checkpoint->states()) {
      const std::string rel = "global_step4_universal/zero/" + p.name + "/" + s.name + ".pt";
      const std::string ours = ReadAll(env, *m.view, rel);
      const std::string theirs = ReadFile(ref_dir + "/zero/" + p.name + "/" + s.name + ".pt");
      if (ours == theirs) {
        ++identical;
        continue;
      }
      // Only the abs() bug may differ: a longer reference tensor.
      ++abs_bug;
      const auto ref = testing::LoadReference(
          testing::ReferenceManifest()[GetParam()]["ds_to_universal"][p.name][s.name]);
      ASSERT_GT(ref.shape[0], static_cast<int64_t>(p.numel)) << rel;
      // Our file holds a tensor of exactly numel elements with the reference's values.
      MemEnv mem;
      mem.WriteFile("/f.pt", ours);
      auto file = mem.Open("/f.pt");
      auto archive = ZipArchive::Open(**file);
      ASSERT_TRUE(archive.ok());
      auto doc = pickle::Parse(*ZipArchive::ReadRecord(**file, *archive->Find("data.pkl")));
      ASSERT_TRUE(doc.ok());
      auto t = MatchTensor(*doc, doc->root());
      ASSERT_TRUE(t.ok() && t->has_value());
      EXPECT_EQ((*t)->shape, std::vector<int64_t>{static_cast<int64_t>(p.numel)});
      EXPECT_EQ(*ZipArchive::ReadRecord(**file, *archive->Find("data/0")),
                ref.bytes.substr(0, p.numel * 4));
    }
  }
  const bool ws4_tiny = GetParam() == "z3_fp32_ws4" || GetParam() == "z3_bf16_ws4";
  EXPECT_EQ(abs_bug, ws4_tiny ? 3u : 0u);  // fc1.bias: fp32, exp_avg, exp_avg_sq
  EXPECT_EQ(identical + abs_bug, m.checkpoint->params().size() * m.checkpoint->states().size());

  EXPECT_EQ(ReadAll(env, *m.view, "global_step4_universal/zero/optimizer_state.pt"),
            ReadFile(ref_dir + "/zero/optimizer_state.pt"));
  for (uint32_t r = 0; r < m.checkpoint->world_size(); ++r) {
    const std::string name = "zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_model_states.pt";
    EXPECT_EQ(ReadAll(env, *m.view, "global_step4_universal/" + name),
              ReadFile(ref_dir + "/" + name));
  }
}

// Without CRCs (the default) files differ from the CRC'd ones only in CRC
// fields: same size, same data.
TEST_P(UniversalViewTest, DefaultFilesDifferOnlyInCrcFields) {
  Env& env = *Env::Posix();
  Mounted with = Build(env, FixtureDir(GetParam()) + "/checkpoint", true);
  Mounted without = Build(env, FixtureDir(GetParam()) + "/checkpoint", false);
  const ParamInfo& p = with.checkpoint->params()[0];
  for (const std::string& rel : {"global_step4_universal/zero/" + p.name + "/exp_avg.pt",
                                 std::string("global_step4_universal/zero/optimizer_state.pt")}) {
    const std::string a = ReadAll(env, *with.view, rel);
    const std::string b = ReadAll(env, *without.view, rel);
    ASSERT_EQ(a.size(), b.size());
    MemEnv mem;
    mem.WriteFile("/a", a);
    mem.WriteFile("/b", b);
    auto ra = ZipArchive::Open(**mem.Open("/a"));
    auto rb = ZipArchive::Open(**mem.Open("/b"));
    ASSERT_TRUE(ra.ok() && rb.ok());
    size_t diffs = 0;
    for (size_t i = 0; i < a.size(); ++i) diffs += a[i] != b[i];
    EXPECT_GT(diffs, 0u);
    for (size_t i = 0; i < ra->records().size(); ++i) {
      EXPECT_EQ(rb->records()[i].crc32, 0u);
      EXPECT_EQ(ra->records()[i].data_offset, rb->records()[i].data_offset);
      EXPECT_EQ(*ZipArchive::ReadRecord(**mem.Open("/a"), ra->records()[i]),
                *ZipArchive::ReadRecord(**mem.Open("/b"), rb->records()[i]));
    }
  }
}

// Any byte range of any file equals the same range of the whole file.
TEST_P(UniversalViewTest, RandomRangesMatchWholeFileReads) {
  Env& env = *Env::Posix();
  Mounted m = Build(env, FixtureDir(GetParam()) + "/checkpoint", false);
  std::mt19937 rng(7);
  std::vector<std::string> files = {"global_step4_universal/zero/optimizer_state.pt"};
  for (const ParamInfo& p : m.checkpoint->params()) {
    files.push_back("global_step4_universal/zero/" + p.name + "/fp32.pt");
  }
  for (const auto& rel : files) {
    const std::string whole = ReadAll(env, *m.view, rel);
    const InodeId node = Resolve(*m.view, rel);
    for (int i = 0; i < 50; ++i) {
      const uint64_t a = rng() % (whole.size() + 1);
      const uint64_t n = rng() % (whole.size() + 10);
      EXPECT_EQ(ReadRange(env, *m.view, node, a, n), whole.substr(a, n)) << rel << " @" << a;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, UniversalViewTest, ::testing::ValuesIn(testing::FixtureNames()));

// The names of the files and directories below `dir`, relative to it.
std::vector<std::string> TreeBelow(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    out.push_back(fs::relative(e.path(), dir).string() + (e.is_directory() ? "/" : ""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> ViewTreeBelow(View& view, InodeId dir, const std::string& prefix) {
  std::vector<std::string> out;
  auto entries = view.ReadDir(dir);
  EXPECT_TRUE(entries.ok());
  for (const auto& [name, attr] : *entries) {
    if (name == "." || name == "..") continue;
    const bool is_dir = attr.is_dir;
    out.push_back(prefix + name + (is_dir ? "/" : ""));
    if (is_dir) {
      auto sub = ViewTreeBelow(view, *view.Lookup(dir, name), prefix + name + "/");
      out.insert(out.end(), sub.begin(), sub.end());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// That directory `utag` of `view` holds exactly the files of `ref_dir`/
// `utag`, byte for byte; how many files it compared.
size_t ExpectTreeIsTheReference(Env& env, View& view, const std::string& ref_dir,
                                const std::string& utag) {
  const std::vector<std::string> theirs = TreeBelow(ref_dir + "/" + utag);
  EXPECT_EQ(ViewTreeBelow(view, Resolve(view, utag), ""), theirs);
  size_t files = 0;
  for (const std::string& rel : theirs) {
    if (rel.back() == '/') continue;
    EXPECT_EQ(ReadAll(env, view, utag + "/" + rel), ReadFile(ref_dir + "/" + utag + "/" + rel))
        << rel;
    ++files;
  }
  return files;
}

class FlatGroupUniversalViewTest : public ::testing::TestWithParam<std::string> {};

// ZeRO-1/2: the universal tree holds exactly the reference's files
// (expected/: byte-identical to what ds_to_universal.py wrote before it
// crashed, and complete), and with real CRCs each is byte for byte the
// reference's: the {'cat_dim', 'param'} dicts, step.pt, optimizer_state.pt
// and the model states.
TEST_P(FlatGroupUniversalViewTest, TreeIsByteIdenticalToTheReference) {
  Env& env = *Env::Posix();
  Mounted m = Build(env, FixtureDir(GetParam()) + "/checkpoint", /*crc=*/true);
  const std::string ref_dir = FixtureDir(GetParam()) + "/expected";
  EXPECT_EQ(ReadAll(env, *m.view, "latest_universal"), ReadFile(ref_dir + "/latest_universal"));
  const std::string utag = "global_step4_universal";
  const size_t files = ExpectTreeIsTheReference(env, *m.view, ref_dir, utag);
  // 12 params x {fp32, exp_avg, exp_avg_sq, step}, optimizer_state.pt, the model states.
  EXPECT_EQ(files, 12u * 4 + 2);
}

// Any byte range of any file equals the same range of the whole file.
TEST_P(FlatGroupUniversalViewTest, RandomRangesMatchWholeFileReads) {
  Env& env = *Env::Posix();
  Mounted m = Build(env, FixtureDir(GetParam()) + "/checkpoint", false);
  std::mt19937 rng(11);
  for (const ParamInfo& p : m.checkpoint->params()) {
    for (const char* state : {"fp32", "exp_avg_sq", "step"}) {
      const std::string rel = "global_step4_universal/zero/" + p.name + "/" + state + ".pt";
      const std::string whole = ReadAll(env, *m.view, rel);
      const InodeId node = Resolve(*m.view, rel);
      for (int i = 0; i < 20; ++i) {
        const uint64_t a = rng() % (whole.size() + 1);
        const uint64_t n = rng() % (whole.size() + 10);
        EXPECT_EQ(ReadRange(env, *m.view, node, a, n), whole.substr(a, n)) << rel << " @" << a;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FlatGroupUniversalViewTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

// A Megatron-DeepSpeed run saved at T = 1 (tensor-parallel in name only:
// mp_rank_00) carries universal_checkpoint_info, whose rules the converter
// lays each param's dict out by: the vocabulary cut to original_vocab_size
// rows with vocab_tensor (its storage keeps the padded row), Megatron's
// T = 1 patterns having no replicated or row-parallel lists. Byte for byte
// DeepSpeed 0.14.5's output (deepspeed_universal/; right for a load at
// T = 1).
TEST(UniversalView, AMegatronRunAtOneTensorRankIsLaidOutByItsPatterns) {
  Env& env = *Env::Posix();
  const std::string dir = testing::TpFixtureDir("tp1_z1_megatron_d2");
  Mounted m = Build(env, dir + "/checkpoint", /*crc=*/true);
  const std::string ref_dir = dir + "/deepspeed_universal";
  const std::string utag = "global_step4_universal";
  const size_t files = ExpectTreeIsTheReference(env, *m.view, ref_dir, utag);
  EXPECT_EQ(files, 28u * 4 + 2);
}

// With the row-parallel and replicated patterns supplied (--universal-info)
// it is the universal checkpoint Megatron's T > 1 lists make of it (the
// converter's output for the same run saved with them, expected/), which
// DeepSpeed resumes at T = 2 (tests/deepspeed/tpp_check.sh).
TEST(UniversalView, SuppliedPatternsMakeItSafeAtAnotherTensorDegree) {
  Env& env = *Env::Posix();
  const std::string dir = testing::TpFixtureDir("tp1_z1_megatron_d2");
  CheckpointOptions options;
  options.universal_info = std::make_shared<const SuppliedUniversalInfo>(SuppliedUniversalInfo{
      dir + "/universal_info_rows.json", ReadFile(dir + "/universal_info_rows.json")});
  auto opened = Checkpoint::Open(env, dir + "/checkpoint", options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto ckpt = std::make_shared<const Checkpoint>(std::move(opened).value());
  UniversalViewOptions view_options;
  view_options.compute_crc = true;
  auto view = BuildUniversalView(env, ckpt, view_options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(ExpectTreeIsTheReference(env, **view, dir + "/expected", "global_step4_universal"),
            28u * 4 + 2);
}

// The merges Megatron never asks for, at T = 1 (make_merge_rules_fixture.py):
// an averaged param (the converter's 0 + s0, then / 1) and two SubparamShape
// merges (their dataclass pickled into every file) are the converter's
// bytes.
TEST(UniversalView, AveragedAndSubParamMergesAtOneTensorRankAreTheConverters) {
  Env& env = *Env::Posix();
  const std::string dir = testing::TpFixtureDir("tp1_z1_megatron_d2_merges");
  Mounted m = Build(env, dir + "/checkpoint", /*crc=*/true);
  EXPECT_EQ(ExpectTreeIsTheReference(env, *m.view, dir + "/expected", "global_step4_universal"),
            28u * 4 + 2);
}

TEST(UniversalView, RootShowsTheSourceWithTheUniversalTreeOnTop) {
  Env& env = *Env::Posix();
  Mounted m = Build(env, FixtureDir("z3_fp32_ws2") + "/checkpoint", false);
  auto entries = m.view->ReadDir(kRootInode);
  ASSERT_TRUE(entries.ok());
  std::vector<std::string> names;
  for (const auto& [name, attr] : *entries) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"global_step4", "global_step4_fp32", "global_step4_universal",
                                      "latest", "latest_universal"}));
  EXPECT_EQ(ReadAll(env, *m.view, "latest"), "global_step4");
  // The source's own tag directory, passed through.
  const std::string rank1 = "global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt";
  EXPECT_EQ(ReadAll(env, *m.view, rank1),
            ReadFile(FixtureDir("z3_fp32_ws2") + "/checkpoint/" + rank1));
  auto zero = m.view->ReadDir(Resolve(*m.view, "global_step4_universal/zero"));
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->size(), 5u);  // 4 params + optimizer_state.pt
  auto attr = m.view->GetAttr(Resolve(*m.view, "global_step4_universal/zero/fc1.bias/fp32.pt"));
  ASSERT_TRUE(attr.ok());
  EXPECT_FALSE(attr->is_dir);
  // Built from the rank files (all of one mode in the fixture): their mode,
  // without execute bits.
  const auto rank_mode = static_cast<uint32_t>(
      fs::status(FixtureDir("z3_fp32_ws2") + "/checkpoint/" + rank1).permissions());
  EXPECT_EQ(attr->mode, rank_mode & 0666u);
  auto xattrs = m.view->Xattrs(attr->inode);
  ASSERT_TRUE(xattrs.ok());
  std::map<std::string, std::string> x;
  for (const auto& [k, v] : *xattrs) x[k] = v;
  EXPECT_EQ(x["user.ucfs.shape"], "[5]");
  EXPECT_EQ(x["user.ucfs.dtype"], "float32");
  EXPECT_EQ(x["user.ucfs.source_ranks"], "0-1");
  EXPECT_FALSE(m.view->Lookup(kRootInode, "nope").ok());
}

TEST(UniversalView, TagDirectoryWithoutRootGetsOne) {
  Env& env = *Env::Posix();
  Mounted m = Build(env, FixtureDir("z3_bf16_ws3") + "/checkpoint/global_step4", false);
  EXPECT_EQ(ReadAll(env, *m.view, "latest"), "global_step4");
  EXPECT_EQ(ReadAll(env, *m.view, "latest_universal"), "global_step4_universal");
  Resolve(*m.view, "global_step4/bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt");
}

TEST(UniversalView, UnsafeParamNamesAreRefused) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(FixtureDir("z3_fp32_ws2") + "/checkpoint/global_step4", "/ck/t").ok());
  env.WriteFile("/ck/latest", "t");
  const std::string model0 = "/ck/t/zero_pp_rank_0_mp_rank_00_model_states.pt";
  // Rename embed.weight to "../evil" in rank 0's param_shapes.
  env.WriteFile(model0, testing::RepackTorchFile(*env.Contents(model0), [](pickle::Document* doc) {
                  auto groups = doc->SequenceItems(doc->Get(doc->root(), "param_shapes"));
                  auto items = doc->MappingItems((*groups)[0]);
                  doc->mutable_node((*items)[0].first).text = "../evil";
                }));
  auto c = Checkpoint::Open(env, "/ck");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto v = BuildUniversalView(env, std::make_shared<const Checkpoint>(std::move(c).value()));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("parameter name '../evil' cannot be a directory name"),
            std::string::npos)
      << v.status().ToString();
}

// Any other per-element optimizer state gets its own file: here amsgrad's
// max_exp_avg_sq, added to every rank's state as another reference to the
// exp_avg_sq tensor.
TEST(UniversalView, EveryPerElementStateGetsAFile) {
  MemEnv env;
  ASSERT_TRUE(
      env.CopyTreeFrom(FixtureDir("z3_fp32_ws2") + "/checkpoint/global_step4", "/ck/t").ok());
  env.WriteFile("/ck/latest", "t");
  for (int r = 0; r < 2; ++r) {
    const std::string path =
        "/ck/t/zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_optim_states.pt";
    env.WriteFile(
        path, testing::RepackTorchFile(*env.Contents(path), [](pickle::Document* doc) {
          const pickle::NodeId state = doc->Get(
              doc->Get(doc->Get(doc->root(), "optimizer_state_dict"), "optimizer_state_dict"),
              "state");
          const pickle::NodeId group0 = doc->MappingItems(state)->front().second;
          const pickle::NodeId sq = doc->Get(group0, "exp_avg_sq");
          doc->mutable_node(group0).items.push_back(doc->AddStr("max_exp_avg_sq"));
          doc->mutable_node(group0).items.push_back(sq);
        }));
  }
  Mounted m = Build(env, "/ck", false);
  ASSERT_EQ(m.checkpoint->states().size(), 4u);
  EXPECT_EQ(m.checkpoint->states()[3].name, "max_exp_avg_sq");
  auto record = [&](const std::string& rel) {
    MemEnv mem;
    mem.WriteFile("/f.pt", ReadAll(env, *m.view, rel));
    auto file = mem.Open("/f.pt");
    auto archive = ZipArchive::Open(**file);
    EXPECT_TRUE(archive.ok());
    EXPECT_EQ(archive->prefix(), std::string(BaseName(rel)).substr(0, BaseName(rel).size() - 3));
    return *ZipArchive::ReadRecord(**file, *archive->Find("data/0"));
  };
  for (const ParamInfo& p : m.checkpoint->params()) {
    const std::string dir = "t_universal/zero/" + p.name + "/";
    EXPECT_EQ(record(dir + "max_exp_avg_sq.pt"), record(dir + "exp_avg_sq.pt")) << p.name;
  }
}

}  // namespace
}  // namespace ucfs
