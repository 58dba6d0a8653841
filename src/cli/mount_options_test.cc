#include "cli/mount_options.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <set>

namespace ucfs::cli {
namespace {

// Each name once, and each option reachable: by a flag, a `-o` key, or both.
TEST(MountOptions, NamesAreUniqueAndEveryOptionIsReachable) {
  std::set<std::string_view> flags, keys;
  for (const MountOption& o : MountOptions()) {
    EXPECT_TRUE(!o.flags.empty() || !o.key.empty()) << o.help;
    EXPECT_FALSE(o.help.empty()) << o.flags;
    ASSERT_NE(o.take, nullptr) << o.flags;
    if (!o.flags.empty()) EXPECT_TRUE(flags.insert(o.flags).second) << o.flags;
    if (!o.key.empty()) EXPECT_TRUE(keys.insert(o.key).second) << o.key;
  }
}

// What an option takes, it gives back as its flag's value: the `ucfs mount`
// line a helper invocation stands for says what was asked.
TEST(MountOptions, EachGivesBackWhatItTook) {
  for (const MountOption& o : MountOptions()) {
    if (o.given == nullptr) continue;
    SCOPED_TRACE(std::string(o.flags));
    MountArgs args;
    EXPECT_TRUE(o.given(args).empty());
    const std::string value = o.value.empty() ? "" : o.value == "N" ? "3" : "x";
    ASSERT_TRUE(o.take(args, value).ok());
    EXPECT_EQ(o.given(args), std::vector<std::string>{value});
  }
}

TEST(MountOptions, TheCommandLineTakesThemIntoMountArgs) {
  CLI::App app;
  MountArgs args;
  AddMountOptions(app, &args, /*for_export=*/false);
  app.parse(std::vector<std::string>{"allow_other,ro", "-o", "-vv", "b", "--layer", "a", "--layer",
                                     "--crc", "3", "--world-size"});
  EXPECT_EQ(args.world_size, 3u);
  EXPECT_EQ(args.layers, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(args.crc);
  EXPECT_EQ(args.verbosity, 2);
  EXPECT_EQ(args.options, (std::vector<std::string>{"allow_other", "ro"}));
  // A bad value is refused naming the flag, as CLI11 refuses its own.
  CLI::App strict;
  MountArgs refused;
  AddMountOptions(strict, &refused, false);
  EXPECT_THROW(strict.parse(std::vector<std::string>{"0", "--world-size"}), CLI::ValidationError);
  // Export takes only what it can use.
  CLI::App export_app;
  MountArgs exported;
  AddMountOptions(export_app, &exported, /*for_export=*/true);
  EXPECT_THROW(export_app.parse(std::vector<std::string>{"/u", "--upper"}), CLI::ParseError);
}

TEST(MountOptions, RequestOfMakesPathsAbsolute) {
  MountArgs args;
  args.checkpoint = "ckpt/../ckpt";
  args.mountpoint = "mnt";
  args.layers = {"l"};
  args.upper = "u";
  args.weights_dtype = "bf16";
  auto r = RequestOf(args);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->checkpoint.starts_with("/"));
  EXPECT_TRUE(r->checkpoint.ends_with("/ckpt"));
  EXPECT_TRUE(r->mountpoint->ends_with("/mnt"));
  EXPECT_TRUE(r->layers[0].starts_with("/"));
  EXPECT_FALSE(r->extra_views);  // writable without --views
  EXPECT_EQ(r->weights_dtype, DType::kBFloat16);
  args.weights_dtype = "int8";
  EXPECT_FALSE(RequestOf(args).ok());
}

}  // namespace
}  // namespace ucfs::cli
