#include "cli/mount_helper.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "cli/mount_options.h"
#include "ucfs/base/path.h"

namespace ucfs::cli {
namespace {

// mount(8)'s exit statuses (mount(8), "RETURN CODES"): a helper's status
// becomes mount's, and systemd and scripts read them as mount's.
constexpr int kMountOk = 0;
constexpr int kMountUsage = 1;
constexpr int kMountFailure = 32;

// `ucfs mount`'s own exit statuses (main.cc).
constexpr int kUcfsUsage = 2;

// Options mount(8) and fstab use for themselves (when, and by whom, to
// mount): they mean nothing to the kernel, and libfuse would refuse them.
constexpr std::array<std::string_view, 11> kMountOnly = {"defaults", "auto",   "noauto", "user",
                                                         "users",    "nouser", "owner",  "group",
                                                         "_netdev",  "nofail", "rw"};
// Prefixes of the same kind: x-systemd.* and other x-/X- annotations,
// comment=, and user=NAME (libmount's record of who mounted).
constexpr std::array<std::string_view, 4> kMountOnlyPrefixes = {"x-", "X-", "comment=", "user="};
// ucfs keeps no access times, so these change nothing; libfuse 3.14
// refuses several of them (relatime, nodiratime, ...).
constexpr std::array<std::string_view, 10> kAtimeOptions = {
    "atime",         "noatime",  "relatime",   "norelatime", "strictatime",
    "nostrictatime", "lazytime", "nolazytime", "diratime",   "nodiratime"};

template <size_t N>
bool Contains(const std::array<std::string_view, N>& list, std::string_view s) {
  for (std::string_view x : list) {
    if (x == s) return true;
  }
  return false;
}

// Splits an -o string at the commas outside double quotes, as libmount
// does (`upper="/data/a,b"`).
std::vector<std::string> SplitOptions(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : s) {
    if (c == '"') quoted = !quoted;
    if (c == ',' && !quoted) {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(std::move(cur));
  return out;
}

std::string Unquote(std::string_view v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return std::string(v);
}

// Applies one -o option: a ucfs option becomes its MountArgs field, a
// mount(8)-only one is dropped, anything else goes to libfuse, which names
// the options it does not know when it refuses them.
Status ApplyOption(const std::string& opt, HelperRequest& r, bool& read_only) {
  if (opt.empty() || Contains(kMountOnly, opt) || Contains(kAtimeOptions, opt)) return Status::OK();
  for (std::string_view p : kMountOnlyPrefixes) {
    if (opt.starts_with(p)) return Status::OK();
  }
  if (opt == "ro") {
    read_only = true;
    return Status::OK();
  }
  const size_t eq = opt.find('=');
  const std::string key = opt.substr(0, eq);
  const MountOption* known = nullptr;
  for (const MountOption& o : MountOptions()) {
    if (!o.key.empty() && o.key == key) known = &o;
  }
  if (known == nullptr) {
    r.mount.options.push_back(opt);
    return Status::OK();
  }
  if (known->value.empty() && eq != std::string::npos) {
    return Status::InvalidArgument(opt + ": " + key + " takes no value");
  }
  const std::string value = eq == std::string::npos ? "" : Unquote(opt.substr(eq + 1));
  if (!known->value.empty() && value.empty()) {
    return Status::InvalidArgument(opt + ": needs a value (" + key + "=" +
                                   std::string(known->value) + ")");
  }
  return known->take(r.mount, value).Annotate(opt);
}

// Single quotes for the shell, where needed.
std::string ShellQuote(std::string_view s) {
  bool plain = !s.empty();
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("_-./=:,@%+").find(c) != std::string_view::npos;
    plain = plain && ok;
  }
  if (plain) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

}  // namespace

bool IsMountHelper(std::string_view argv0) {
  const std::string_view name = BaseName(argv0);
  return name == "mount.fuse.ucfs" || name == "mount.ucfs";
}

Result<HelperRequest> ParseMountHelperArgs(const std::vector<std::string>& args) {
  HelperRequest r;
  bool read_only = false;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      r.help = true;
      return r;
    }
    if (a == "-o" || a == "-t" || a == "-N") {
      if (i + 1 == args.size()) return Status::InvalidArgument(a + " needs an argument");
    }
    if (a == "-o" || (a.starts_with("-o") && a.size() > 2)) {
      const std::string opts = a == "-o" ? args[++i] : a.substr(2);
      for (const std::string& opt : SplitOptions(opts)) {
        if (Status s = ApplyOption(opt, r, read_only); !s.ok()) return s;
      }
    } else if (a == "-t") {
      const std::string& type = args[++i];
      if (type != "fuse.ucfs" && type != "ucfs") {
        return Status::InvalidArgument("-t " + type + ": this helper mounts type fuse.ucfs");
      }
    } else if (a == "-N") {
      // Entering another mount namespace is left to nsenter(1).
      return Status::NotSupported("-N " + args[i + 1] + ": mount namespaces are not supported");
    } else if (a.starts_with("--")) {
      return Status::InvalidArgument("unknown option " + a);
    } else if (a.size() > 1 && a[0] == '-') {
      for (char c : std::string_view(a).substr(1)) {
        switch (c) {
          case 'v':
            ++r.mount.verbosity;
            break;
          case 'f':
            r.fake = true;
            break;
          case 's':  // sloppy: there is nothing ucfs is strict about that -s could relax
          case 'n':  // no mtab: the kernel's mount table is the only one
            break;
          default:
            return Status::InvalidArgument("unknown flag -" + std::string(1, c) + " in " + a);
        }
      }
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) {
    return Status::InvalidArgument("expected CKPT MNT, got " + std::to_string(positional.size()) +
                                   " operand(s)");
  }
  r.mount.checkpoint = positional[0];
  r.mount.mountpoint = positional[1];
  if (read_only && r.mount.upper) {
    return Status::InvalidArgument("ro and upper=" + *r.mount.upper +
                                   " contradict each other: upper= makes the mount writable "
                                   "(drop one of them)");
  }
  return r;
}

std::string EquivalentCommand(const HelperRequest& r) {
  std::string cmd = "ucfs mount";
  auto add = [&cmd](std::string_view flag, std::string_view value = {}) {
    cmd += " ";
    cmd += flag;
    if (!value.empty()) cmd += " " + ShellQuote(value);
  };
  for (const MountOption& o : MountOptions()) {
    if (o.given == nullptr) continue;
    // The short name where there is one (-v, -o), as people write them.
    const std::string_view flag = o.flags.substr(0, o.flags.find(','));
    for (const std::string& value : o.given(r.mount)) add(flag, value);
  }
  add(ShellQuote(r.mount.checkpoint));
  add(ShellQuote(r.mount.mountpoint));
  return cmd;
}

std::string MountHelperUsage(std::string_view program) {
  std::string u = "usage: " + std::string(program) +
                  " CKPT MNT [-fnsv] [-o OPTION[,OPTION...]] [-t fuse.ucfs]\n"
                  "mount(8)'s helper for type fuse.ucfs: mount -t fuse.ucfs CKPT MNT -o ...\n"
                  "ucfs options:\n";
  for (const MountOption& o : MountOptions()) {
    if (o.key.empty()) continue;
    std::string name(o.key);
    if (!o.value.empty()) name += "=" + std::string(o.value);
    name.resize(std::max<size_t>(name.size() + 1, 22), ' ');
    const std::string_view flag = o.flags.substr(o.flags.rfind(',') + 1);
    u += "  " + name + (flag.empty() ? "" : std::string(flag) + ": ") + std::string(o.help) + "\n";
  }
  u += "  ro                    read-only (the default without upper=; refused with it)\n"
       "mount(8)'s own options (defaults, noauto, user, _netdev, nofail, x-*, ...) and atime\n"
       "options are accepted and ignored; any other option goes to libfuse (allow_other, ...).\n";
  return u;
}

int MountHelperMain(int argc, char** argv, const RunMountFn& run_mount) {
  const std::string program(BaseName(argc > 0 ? argv[0] : "mount.fuse.ucfs"));
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  auto request = ParseMountHelperArgs(args);
  if (!request.ok()) {
    const std::string usage = MountHelperUsage(program);
    std::fprintf(stderr, "%s: %s\n%s", program.c_str(), request.status().message().c_str(),
                 usage.substr(0, usage.find('\n') + 1).c_str());
    return kMountUsage;
  }
  if (request->help) {
    std::fputs(MountHelperUsage(program).c_str(), stdout);
    return kMountOk;
  }
  if (request->mount.verbosity > 0 || request->fake) {
    std::fprintf(stderr, "%s: %s%s\n", program.c_str(), request->fake ? "would run " : "",
                 EquivalentCommand(*request).c_str());
  }
  if (request->fake) return kMountOk;
  // mount(8) at boot or under systemd may run us without HOME; the index
  // belongs in the user's cache, not in /tmp where it would otherwise go.
  if (!request->mount.cache_dir && std::getenv("XDG_CACHE_HOME") == nullptr &&
      std::getenv("HOME") == nullptr) {
    if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) {
      ::setenv("HOME", pw->pw_dir, 0);
    }
  }
  const int rc = run_mount(std::move(request->mount));
  if (rc == kMountOk) return kMountOk;
  return rc == kUcfsUsage ? kMountUsage : kMountFailure;
}

}  // namespace ucfs::cli
