#include "cli/mount_helper.h"

#include <gtest/gtest.h>

namespace ucfs::cli {
namespace {

HelperRequest Parse(const std::vector<std::string>& args) {
  auto r = ParseMountHelperArgs(args);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : HelperRequest{};
}

std::string ErrorOf(const std::vector<std::string>& args) {
  auto r = ParseMountHelperArgs(args);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(MountHelper, KnowsItsNames) {
  EXPECT_TRUE(IsMountHelper("/sbin/mount.fuse.ucfs"));
  EXPECT_TRUE(IsMountHelper("mount.ucfs"));
  EXPECT_TRUE(IsMountHelper("/usr/sbin/mount.ucfs"));
  EXPECT_FALSE(IsMountHelper("/usr/bin/ucfs"));
  EXPECT_FALSE(IsMountHelper("mount.fuse.ucfs2"));
  EXPECT_FALSE(IsMountHelper("/sbin/mount.fuse.ucfs/ucfs"));
}

// Exactly what util-linux 2.38's mount(8) passes for
// `mount -t fuse.ucfs -o world_size=4,upper=/x,tag=global_step100 SRC MNT`.
TEST(MountHelper, MapsUcfsOptionsOntoMountArgs) {
  HelperRequest r =
      Parse({"/ckpt/run7", "/mnt/run7", "-o", "rw,world_size=4,upper=/x,tag=global_step100"});
  EXPECT_EQ(r.mount.checkpoint, "/ckpt/run7");
  EXPECT_EQ(r.mount.mountpoint, "/mnt/run7");
  EXPECT_EQ(r.mount.world_size, 4u);
  EXPECT_EQ(r.mount.upper, "/x");
  EXPECT_EQ(r.mount.tag, "global_step100");
  EXPECT_TRUE(r.mount.options.empty());
  EXPECT_FALSE(r.mount.foreground);
  EXPECT_FALSE(r.fake);
  EXPECT_EQ(EquivalentCommand(r),
            "ucfs mount --world-size 4 --upper /x --tag global_step100 /ckpt/run7 /mnt/run7");

  // Layers stack in the order given, each over the ones before it.
  r = Parse({"a", "b", "-o", "world_size=2,layer=/u1,upper=/u3", "-o", "layer=/u2"});
  EXPECT_EQ(r.mount.layers, (std::vector<std::string>{"/u1", "/u2"}));
  EXPECT_EQ(EquivalentCommand(r),
            "ucfs mount --world-size 2 --upper /u3 --layer /u1 --layer /u2 a b");

  r = Parse({"a", "b", "-o",
             "sub_group_size=1000000000,cache_dir=/c,no_cache,crc,log_file=/l,verbose,debug"});
  EXPECT_EQ(r.mount.sub_group_size, 1000000000u);
  EXPECT_EQ(r.mount.cache_dir, "/c");
  EXPECT_TRUE(r.mount.no_cache);
  EXPECT_TRUE(r.mount.crc);
  EXPECT_EQ(r.mount.log_file, "/l");
  EXPECT_EQ(r.mount.verbosity, 2);
}

// An fstab line's options as mount(8) hands them over (`user` expanded
// into noexec,nosuid,nodev), and the same options given by hand.
TEST(MountHelper, DropsWhatOnlyMountUsesAndPassesTheRestToLibfuse) {
  HelperRequest r = Parse({"/ckpt/run7", "/mnt/run7", "-o",
                           "rw,noexec,nosuid,nodev,world_size=4,upper=/x,user,_netdev"});
  EXPECT_EQ(r.mount.options, (std::vector<std::string>{"noexec", "nosuid", "nodev"}));
  r = Parse({"s", "m", "-o",
             "defaults,auto,noauto,user,users,nouser,owner,group,_netdev,nofail,rw,user=alice,"
             "x-systemd.automount,x-systemd.requires=/ckpt,X-mount.mkdir,comment=systemd.x,"
             "noatime,relatime,atime,nodiratime,strictatime,lazytime"});
  EXPECT_TRUE(r.mount.options.empty());
  r = Parse({"s", "m", "-o", "allow_other,default_permissions,max_read=4096,bogus=1"});
  EXPECT_EQ(r.mount.options, (std::vector<std::string>{"allow_other", "default_permissions",
                                                       "max_read=4096", "bogus=1"}));
  EXPECT_EQ(EquivalentCommand(r),
            "ucfs mount -o allow_other,default_permissions,max_read=4096,bogus=1 s m");
}

TEST(MountHelper, AcceptsMountsFlagsAnywhere) {
  HelperRequest r = Parse({"s", "m", "-s", "-n", "-v", "-o", "world_size=2", "-t", "fuse.ucfs"});
  EXPECT_EQ(r.mount.verbosity, 1);
  EXPECT_FALSE(r.fake);
  EXPECT_EQ(r.mount.world_size, 2u);
  r = Parse({"-sfnv", "-oworld_size=3", "s", "-o", "tag=t", "m", "-t", "ucfs"});
  EXPECT_TRUE(r.fake);
  EXPECT_EQ(r.mount.verbosity, 1);
  EXPECT_EQ(r.mount.world_size, 3u);
  EXPECT_EQ(r.mount.tag, "t");
  EXPECT_EQ(r.mount.checkpoint, "s");
  EXPECT_EQ(r.mount.mountpoint, "m");
  EXPECT_TRUE(Parse({"--help"}).help);
}

TEST(MountHelper, QuotedValuesMayHoldCommas) {
  HelperRequest r = Parse({"s", "m", "-o", "upper=\"/data/a,b\",world_size=2"});
  EXPECT_EQ(r.mount.upper, "/data/a,b");
  EXPECT_EQ(r.mount.world_size, 2u);
  r.mount.upper = "/data/it's";
  EXPECT_EQ(EquivalentCommand(r), "ucfs mount --world-size 2 --upper '/data/it'\\''s' s m");
}

TEST(MountHelper, ReadOnlyIsTheDefaultAndContradictsUpper) {
  EXPECT_TRUE(Parse({"s", "m", "-o", "ro,world_size=2"}).mount.options.empty());
  const std::string e = ErrorOf({"s", "m", "-o", "ro,upper=/x"});
  EXPECT_NE(e.find("ro and upper=/x"), std::string::npos) << e;
  EXPECT_NE(ErrorOf({"s", "m", "-o", "upper=/x", "-o", "ro"}).find("ro and upper"),
            std::string::npos);
}

TEST(MountHelper, ErrorsNameTheOffendingArgument) {
  EXPECT_NE(ErrorOf({"s", "m", "-o", "world_size=0"}).find("world_size=0"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-o", "world_size=4x"}).find("world_size=4x"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-o", "world_size=2000000"}).find("1 to 1048576"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-o", "upper="}).find("upper=DIR"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-o", "tag"}).find("tag=TAG"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-o", "crc=1"}).find("takes no value"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-o", "sub_group_size=-1"}).find("sub_group_size=-1"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-t", "fuse.sshfs"}).find("fuse.sshfs"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-x"}).find("-x"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "--version"}).find("unknown option --version"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-o"}).find("-o needs an argument"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "-N", "/proc/1/ns/mnt"}).find("namespaces"), std::string::npos);
  EXPECT_NE(ErrorOf({"s"}).find("expected CKPT MNT"), std::string::npos);
  EXPECT_NE(ErrorOf({"s", "m", "extra"}).find("expected CKPT MNT"), std::string::npos);
}

int Main(std::vector<std::string> args, const RunMountFn& run) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return MountHelperMain(static_cast<int>(argv.size()), argv.data(), run);
}

// The exit statuses are mount(8)'s, as its helpers' must be.
TEST(MountHelper, ReturnsMountsExitStatuses) {
  MountArgs seen;
  int rc_from_ucfs = 0;
  auto run = [&](MountArgs a) {
    seen = std::move(a);
    return rc_from_ucfs;
  };
  const std::vector<std::string> good = {"mount.fuse.ucfs", "/ckpt", "/mnt", "-o", "world_size=3"};
  EXPECT_EQ(Main(good, run), 0);
  EXPECT_EQ(seen.world_size, 3u);
  EXPECT_EQ(seen.mountpoint, "/mnt");
  rc_from_ucfs = 1;  // unreadable checkpoint, or not mounted
  EXPECT_EQ(Main(good, run), 32);
  rc_from_ucfs = 2;  // bad usage
  EXPECT_EQ(Main(good, run), 1);

  bool ran = false;
  auto never = [&](MountArgs) {
    ran = true;
    return 0;
  };
  EXPECT_EQ(Main({"mount.fuse.ucfs", "/ckpt"}, never), 1);
  EXPECT_EQ(Main({"mount.ucfs", "/ckpt", "/mnt", "-o", "ro,upper=/u"}, never), 1);
  EXPECT_EQ(Main({"mount.ucfs", "/ckpt", "/mnt", "-f", "-o", "world_size=3"}, never), 0);
  EXPECT_FALSE(ran);  // mount -f mounts nothing
}

TEST(MountHelper, UsageListsEveryUcfsOption) {
  const std::string u = MountHelperUsage("mount.fuse.ucfs");
  for (const char* o :
       {"world_size=N", "upper=DIR", "layer=DIR", "tag=TAG", "sub_group_size=N", "cache_dir=DIR",
        "index_dir=DIR", "no_cache", "crc", "log_file=FILE", "verbose", "debug"}) {
    EXPECT_NE(u.find(std::string("  ") + o + " "), std::string::npos) << o;
  }
}

}  // namespace
}  // namespace ucfs::cli
