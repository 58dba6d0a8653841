#include "ucfs/vfs/view.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "test_support.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

TEST(StrictestAccess, IntersectsModesAndKeepsOnlyASharedOwner) {
  const FileAccess fallback{0444, 7, 8};
  EXPECT_EQ(StrictestAccess({}, fallback), fallback);
  EXPECT_EQ(StrictestAccess({{0644, 10, 20}, {0640, 10, 20}}, fallback),
            (FileAccess{0640, 10, 20}));
  EXPECT_EQ(StrictestAccess({{0600, 10, 20}, {0644, 10, 20}}, fallback),
            (FileAccess{0600, 10, 20}));
  // Owners differ: nobody keeps owner bits (root reads anyway).
  EXPECT_EQ(StrictestAccess({{0644, 10, 20}, {0644, 11, 20}}, fallback), (FileAccess{0044, 0, 20}));
  // Groups differ: no group bits.
  EXPECT_EQ(StrictestAccess({{0640, 10, 20}, {0640, 10, 21}}, fallback), (FileAccess{0600, 10, 0}));
  EXPECT_EQ(StrictestAccess({{06755, 10, 20}}, fallback).mode & 0777, 0755u);
}

// A view's built entries may be read by whoever may read every source they
// are built from; source entries show their own owner and mode.
TEST(View, AttributesFollowTheSources) {
  MemEnv env;
  env.WriteFile("/ckpt/a.pt", "aaaa");
  env.WriteFile("/ckpt/b.pt", "bbbb");
  env.WriteFile("/ckpt/run.sh", "#!/bin/sh\n");
  env.SetAccess("/ckpt/a.pt", {0640, 1000, 100});
  env.SetAccess("/ckpt/b.pt", {0600, 1000, 100});
  env.SetAccess("/ckpt/run.sh", {0750, 1000, 100});
  View view(env, 0);
  for (const char* path : {"/ckpt/a.pt", "/ckpt/b.pt"}) {
    auto st = env.Stat(path);
    ASSERT_TRUE(st.ok());
    view.AddSource(SourceFile{path, st->identity, st->access});
  }
  view.BackRootBy("/ckpt");
  const InodeId dir = *view.AddDirectory(kRootInode, "built");
  const InodeId file = *view.AddFile(dir, "x.pt", std::make_shared<InlineContent>("x"));
  EXPECT_EQ(view.BuiltAccess(), (FileAccess{0600, 1000, 100}));
  auto f = view.GetAttr(file);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->mode, 0600u);
  EXPECT_EQ(f->uid, 1000u);
  EXPECT_EQ(f->gid, 100u);
  auto d = view.GetAttr(dir);
  EXPECT_EQ(d->mode, 0700u);  // searchable by who may read
  auto script = view.Lookup(kRootInode, "run.sh");
  ASSERT_TRUE(script.ok());
  EXPECT_EQ(view.GetAttr(*script)->mode, 0750u);  // a source file keeps its x bits
  auto listed = view.ReadDir(kRootInode);
  ASSERT_TRUE(listed.ok());
  for (const auto& [name, attr] : *listed) {
    EXPECT_EQ(attr.uid, 1000u) << name;
    if (name == "a.pt") EXPECT_EQ(attr.mode, 0640u);
    if (name == "built") EXPECT_EQ(attr.mode, 0700u);
  }
}

TEST(View, AViewOfNothingBelongsToItsMaker) {
  MemEnv env;
  View view(env, 0);
  const InodeId file = *view.AddFile(kRootInode, "f", std::make_shared<InlineContent>("x"));
  auto a = view.GetAttr(file);
  EXPECT_EQ(a->mode, 0444u);
  EXPECT_EQ(a->uid, ::getuid());
}

// Symlinks in a source directory are shown as links, whatever they point to:
// the kernel resolves them for whoever looks, and the view never reads
// through one.
TEST(View, SourceSymlinksAreShownAsLinks) {
  const std::string base = testing::FreshTempDir("view_symlinks");
  const std::string root = base + "/ckpt";
  fs::create_directories(root + "/epoch=0-step=4.ckpt");
  testing::WriteFile(base + "/secret", "the secret");
  testing::WriteFile(root + "/zero_to_fp32.py", "print()");
  fs::create_symlink("zero_to_fp32.py", root + "/inside");
  fs::create_symlink("../secret", root + "/outside");
  fs::create_symlink("nowhere", root + "/dangling");
  fs::create_symlink("epoch=0-step=4.ckpt", root + "/last.ckpt");
  auto env = NewConfinedPosixEnv(fs::canonical(root).string());
  ASSERT_TRUE(env.ok());
  View view(**env, 0);
  view.BackRootBy(fs::canonical(root).string());
  auto listed = view.ReadDir(kRootInode);
  ASSERT_TRUE(listed.ok());
  std::map<std::string, Attr> attrs;
  for (const auto& [name, attr] : *listed) attrs[name] = attr;
  const std::map<std::string, std::string> links = {{"dangling", "nowhere"},
                                                    {"inside", "zero_to_fp32.py"},
                                                    {"last.ckpt", "epoch=0-step=4.ckpt"},
                                                    {"outside", "../secret"}};
  ASSERT_EQ(attrs.size(), links.size() + 2);
  for (const auto& [name, target] : links) {
    const Attr& a = attrs[name];
    EXPECT_TRUE(a.is_symlink) << name;
    EXPECT_FALSE(a.is_dir) << name;
    EXPECT_EQ(a.size, target.size()) << name;
    EXPECT_EQ(*view.ReadLink(a.inode), target) << name;
    std::vector<ReadPiece> pieces;
    EXPECT_FALSE(view.Plan(a.inode, 0, 100, &pieces).ok()) << name;
  }
  EXPECT_TRUE(attrs["epoch=0-step=4.ckpt"].is_dir);
  EXPECT_FALSE(attrs["zero_to_fp32.py"].is_symlink);
  EXPECT_FALSE(view.ReadLink(attrs["zero_to_fp32.py"].inode).ok());
  // A link is no directory to look into.
  EXPECT_FALSE(view.Lookup(attrs["last.ckpt"].inode, "anything").ok());
}

}  // namespace
}  // namespace ucfs
