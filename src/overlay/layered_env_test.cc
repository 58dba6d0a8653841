#include "ucfs/overlay/layered_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>

#include "test_support.h"
#include "ucfs/overlay/overlay.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

// A tree as path -> contents (nullopt for a directory).
using Tree = std::map<std::string, std::optional<std::string>>;

Tree Walk(Env& env, const std::string& top) {
  Tree tree;
  auto walk = [&](auto&& self, const std::string& dir, const std::string& rel) -> void {
    auto entries = env.ListDir(dir);
    EXPECT_TRUE(entries.ok()) << dir << ": " << entries.status().ToString();
    if (!entries.ok()) return;
    for (const DirEntry& e : *entries) {
      const std::string path = JoinPath(dir, e.name);
      const std::string shown = rel.empty() ? e.name : rel + "/" + e.name;
      auto st = env.Stat(path);
      EXPECT_TRUE(st.ok()) << path << ": " << st.status().ToString();
      if (!st.ok()) continue;
      EXPECT_EQ(st->is_dir, e.is_dir) << path;
      if (st->is_dir) {
        tree[shown] = std::nullopt;
        self(self, path, shown);
        continue;
      }
      auto file = env.Open(path);
      EXPECT_TRUE(file.ok()) << path << ": " << file.status().ToString();
      if (!file.ok()) continue;
      auto bytes = (*file)->ReadString(0, (*file)->Size());
      EXPECT_TRUE(bytes.ok());
      tree[shown] = bytes.ok() ? *bytes : "";
    }
  };
  walk(walk, top, "");
  return tree;
}

class LayeredMemEnvTest : public ::testing::Test {
 protected:
  // The source at /src, layers at /u1 (older) and /u2.
  std::shared_ptr<MemEnv> mem_ = std::make_shared<MemEnv>();
  std::unique_ptr<Env> Layered(int layers) {
    std::vector<EnvLayer> list;
    if (layers >= 1) list.push_back({mem_, "/u1"});
    if (layers >= 2) list.push_back({mem_, "/u2"});
    return NewLayeredEnv(mem_, "/src", std::move(list));
  }
};

TEST_F(LayeredMemEnvTest, UpperEntriesShadowAndAdd) {
  mem_->WriteFile("/src/latest", "global_step4");
  mem_->WriteFile("/src/global_step4/a.pt", "A4");
  mem_->WriteFile("/u1/latest", "global_step8");
  mem_->WriteFile("/u1/global_step8/a.pt", "A8");
  mem_->WriteFile("/u1/global_step4/extra", "E");
  auto env = Layered(1);
  const Tree expected = {{"global_step4", std::nullopt}, {"global_step4/a.pt", "A4"},
                         {"global_step4/extra", "E"},    {"global_step8", std::nullopt},
                         {"global_step8/a.pt", "A8"},    {"latest", "global_step8"}};
  EXPECT_EQ(Walk(*env, "/src"), expected);
}

// Messages name where a path lies: the top layer holding it, the source
// for what no layer holds, the path itself outside the source.
TEST_F(LayeredMemEnvTest, WhereNamesTheLayerThatHoldsAPath) {
  mem_->WriteFile("/src/global_step4/a.pt", "A4");
  mem_->WriteFile("/u1/global_step8/a.pt", "A8");
  mem_->WriteFile("/u2/global_step8/b.pt", "B8");
  auto env = Layered(2);
  EXPECT_EQ(env->Where("/src/global_step8/a.pt"), "/u1/global_step8/a.pt");
  EXPECT_EQ(env->Where("/src/global_step8/b.pt"), "/u2/global_step8/b.pt");
  EXPECT_EQ(env->Where("/src/global_step8"), "/u2/global_step8");
  EXPECT_EQ(env->Where("/src/global_step4/a.pt"), "/src/global_step4/a.pt");
  EXPECT_EQ(env->Where("/elsewhere/x"), "/elsewhere/x");
}

TEST_F(LayeredMemEnvTest, WhiteoutsHideWhatLiesBelowOnly) {
  mem_->WriteFile("/src/keep", "K");
  mem_->WriteFile("/src/gone", "G");
  mem_->WriteFile("/src/ckpt-4/tag/a.pt", "A");
  mem_->WriteFile("/u1/.wh.gone", "");
  mem_->WriteFile("/u1/.wh.ckpt-4", "");
  auto env = Layered(1);
  EXPECT_EQ(Walk(*env, "/src"), (Tree{{"keep", "K"}}));
  // Nor is anything below a whited-out directory reachable by its path.
  EXPECT_EQ(env->Stat("/src/ckpt-4/tag/a.pt").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(env->Open("/src/gone").status().code(), Status::Code::kNotFound);
}

TEST_F(LayeredMemEnvTest, OpaqueDirectoriesHideTheirOldContents) {
  mem_->WriteFile("/src/ckpt/old.pt", "old");
  mem_->WriteFile("/u1/ckpt/.wh..opq", "");
  mem_->WriteFile("/u1/ckpt/new.pt", "new");
  auto env = Layered(1);
  EXPECT_EQ(Walk(*env, "/src"), (Tree{{"ckpt", std::nullopt}, {"ckpt/new.pt", "new"}}));
  EXPECT_FALSE(env->Stat("/src/ckpt/old.pt").ok());
}

TEST_F(LayeredMemEnvTest, EscapedNamesShowAndBookkeepingDoesNot) {
  mem_->WriteFile("/src/.wh.odd", "source's own odd name");
  mem_->WriteFile("/u1/.wh..wh.e..wh.mine", "M");
  mem_->WriteFile("/u1/.wh..wh.copyup.123", "half a copy");
  mem_->WriteFile("/u1/.wh..wh.w..wh.odd", "");
  mem_->WriteFile("/u1/dir/.wh..wh.e..wh.deep/f", "F");
  auto env = Layered(1);
  EXPECT_EQ(Walk(*env, "/src"), (Tree{{".wh.mine", "M"},
                                      {"dir", std::nullopt},
                                      {"dir/.wh.deep", std::nullopt},
                                      {"dir/.wh.deep/f", "F"}}));
}

TEST_F(LayeredMemEnvTest, LaterLayersLieOverEarlierOnes) {
  mem_->WriteFile("/src/latest", "s");
  mem_->WriteFile("/src/a/f", "src");
  mem_->WriteFile("/u1/latest", "u1");
  mem_->WriteFile("/u1/b", "a file in u1");
  mem_->WriteFile("/u1/c/f", "u1's c");
  mem_->WriteFile("/u2/.wh.a", "");
  mem_->WriteFile("/u2/b/f", "a directory in u2 over u1's file");
  mem_->WriteFile("/u2/c", "a file in u2 over u1's directory");
  auto env = Layered(2);
  EXPECT_EQ(Walk(*env, "/src"), (Tree{{"b", std::nullopt},
                                      {"b/f", "a directory in u2 over u1's file"},
                                      {"c", "a file in u2 over u1's directory"},
                                      {"latest", "u1"}}));
  // With the older layer alone, as the mount that wrote u2 saw it.
  EXPECT_EQ(Walk(*Layered(1), "/src"), (Tree{{"a", std::nullopt},
                                             {"a/f", "src"},
                                             {"b", "a file in u1"},
                                             {"c", std::nullopt},
                                             {"c/f", "u1's c"},
                                             {"latest", "u1"}}));
}

TEST_F(LayeredMemEnvTest, PathsOutsideTheSourceAreTheBaseEnvs) {
  mem_->WriteFile("/src/x", "X");
  mem_->WriteFile("/srcfoo/y", "Y");  // a sibling sharing the prefix
  mem_->WriteFile("/u1/.wh.x", "");
  auto env = Layered(1);
  EXPECT_FALSE(env->Stat("/src/x").ok());
  auto y = env->Open("/srcfoo/y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(*(*y)->ReadString(0, 1), "Y");
}

// The layered env shows exactly what the writable mount showed: made by a
// real Overlay over a view of a real source directory.
TEST(LayeredEnv, ShowsWhatTheMountThatWroteTheLayerShowed) {
  const std::string base = testing::FreshTempDir("layered_env_roundtrip");
  const std::string src = base + "/src", upper = base + "/upper";
  fs::create_directories(src + "/checkpoint-4/global_step4");
  fs::create_directories(src + "/checkpoint-8/global_step8");
  fs::create_directories(src + "/runs");
  testing::WriteFile(src + "/checkpoint-4/latest", "global_step4");
  testing::WriteFile(src + "/checkpoint-4/global_step4/mp_rank_00_model_states.pt", "m4");
  testing::WriteFile(src + "/checkpoint-8/latest", "global_step8");
  testing::WriteFile(src + "/checkpoint-8/global_step8/mp_rank_00_model_states.pt", "m8");
  testing::WriteFile(src + "/runs/events", "ev");

  auto view = std::make_shared<View>(*Env::Posix(), 1);
  view->BackRootBy(src);
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  Overlay& overlay = **o;
  auto write = [&](const std::string& path, const std::string& text) {
    auto fd = overlay.OpenWrite(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_TRUE(fd.ok()) << path << ": " << fd.status().ToString();
    ASSERT_EQ(::write(fd->get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  };
  // HF rotation: the oldest checkpoint goes; a new one is saved.
  for (const char* f :
       {"checkpoint-4/global_step4/mp_rank_00_model_states.pt", "checkpoint-4/latest"}) {
    ASSERT_TRUE(overlay.Unlink(f).ok()) << f;
  }
  ASSERT_TRUE(overlay.RemoveDir("checkpoint-4/global_step4").ok());
  ASSERT_TRUE(overlay.RemoveDir("checkpoint-4").ok());
  ASSERT_TRUE(overlay.MakeDir("checkpoint-12", 0755).ok());
  ASSERT_TRUE(overlay.MakeDir("checkpoint-12/global_step12", 0755).ok());
  write("checkpoint-12/global_step12/mp_rank_00_model_states.pt", "m12");
  write("checkpoint-12/latest", "global_step12");
  // A directory deleted and made again is opaque; a changed file is copied
  // up; a name in the whiteouts' namespace is escaped.
  ASSERT_TRUE(overlay.Unlink("runs/events").ok());
  ASSERT_TRUE(overlay.RemoveDir("runs").ok());
  ASSERT_TRUE(overlay.MakeDir("runs", 0755).ok());
  write("runs/events2", "ev2");
  write("checkpoint-8/latest", "global_step8\n");
  write(".wh.notes", "n");

  Tree mounted;
  SourceFiles reader(*Env::Posix(), [&](uint32_t i) { return view->source(i); });
  auto walk = [&](auto&& self, const std::string& dir) -> void {
    auto entries = overlay.ReadDir(dir);
    ASSERT_TRUE(entries.ok()) << dir << ": " << entries.status().ToString();
    for (const auto& [name, e] : *entries) {
      const std::string path = dir.empty() ? name : dir + "/" + name;
      if (e.is_dir) {
        mounted[path] = std::nullopt;
        self(self, path);
      } else if (e.in_upper) {
        mounted[path] = testing::ReadFile(e.upper_path);
      } else {
        std::vector<ReadPiece> pieces;
        ASSERT_TRUE(view->Plan(e.lower, 0, view->GetAttr(e.lower)->size, &pieces).ok());
        std::string bytes;
        ASSERT_TRUE(reader.Read(pieces, &bytes).ok());
        mounted[path] = bytes;
      }
    }
  };
  walk(walk, "");
  ASSERT_FALSE(mounted.contains("checkpoint-4"));
  ASSERT_TRUE(mounted.contains("checkpoint-12/global_step12/mp_rank_00_model_states.pt"));

  std::shared_ptr<Env> posix(Env::Posix(), [](Env*) {});
  auto layered = NewLayeredEnv(posix, src, {{posix, upper}});
  EXPECT_EQ(Walk(*layered, src), mounted);
}

}  // namespace
}  // namespace ucfs
