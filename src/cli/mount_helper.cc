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

// The options that are ucfs's own, and the `ucfs mount` flag each becomes.
struct UcfsOption {
  std::string_view key;
  std::string_view value;  // empty: a flag that takes no value
  std::string_view help;
};
constexpr std::array<UcfsOption, 15> kUcfsOptions = {{
    {"world_size", "N", "--world-size N: the checkpoint as saved with N ranks"},
    {"upper", "DIR", "--upper DIR: writable, writes land in DIR"},
    {"layer", "DIR", "--layer DIR: an earlier upper, read under it (repeat)"},
    {"tag", "TAG", "--tag TAG: another tag than `latest` names"},
    {"sub_group_size", "N", "--sub-group-size N: the run's sub_group_size"},
    {"universal_info", "FILE", "--universal-info FILE: universal_checkpoint_info keys"},
    {"cache_dir", "DIR", "--cache-dir DIR: where the index lives"},
    {"weights_dtype", "DTYPE", "--weights-dtype DTYPE: the HF weights' dtype"},
    {"no_cache", "", "--no-cache: neither read nor write the index"},
    {"crc", "", "--crc: real CRC-32s in the zip records"},
    {"views", "", "--views: a writable run mount still shows the extra views"},
    {"no_rank_file_copies", "", "--no-rank-file-copies: new ranks get no per-rank files"},
    {"log_file", "FILE", "--log-file FILE: log there instead of syslog"},
    {"verbose", "", "-v: more log output"},
    {"debug", "", "-v: more log output"},
}};

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

std::optional<uint64_t> ParseUnsigned(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
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
  const UcfsOption* known = nullptr;
  for (const UcfsOption& o : kUcfsOptions) {
    if (o.key == key) known = &o;
  }
  if (known == nullptr) {
    r.mount.options.push_back(opt);
    return Status::OK();
  }
  if (known->value.empty()) {
    if (eq != std::string::npos) {
      return Status::InvalidArgument(opt + ": " + key + " takes no value");
    }
    if (key == "no_cache") r.mount.no_cache = true;
    if (key == "crc") r.mount.crc = true;
    if (key == "views") r.mount.views = true;
    if (key == "no_rank_file_copies") r.mount.no_rank_file_copies = true;
    if (key == "verbose" || key == "debug") ++r.verbosity;
    return Status::OK();
  }
  const std::string value = eq == std::string::npos ? "" : Unquote(opt.substr(eq + 1));
  if (value.empty()) {
    return Status::InvalidArgument(opt + ": needs a value (" + key + "=" +
                                   std::string(known->value) + ")");
  }
  if (key == "world_size") {
    auto n = ParseUnsigned(value);
    if (!n || *n < 1 || *n > kMaxWorldSize) {
      return Status::InvalidArgument(opt + ": the world size must be a number from 1 to " +
                                     std::to_string(kMaxWorldSize));
    }
    r.mount.world_size = static_cast<uint32_t>(*n);
  } else if (key == "sub_group_size") {
    auto n = ParseUnsigned(value);
    if (!n || *n == 0) return Status::InvalidArgument(opt + ": must be a positive number");
    r.mount.sub_group_size = *n;
  } else if (key == "universal_info") {
    r.mount.universal_info = value;
  } else if (key == "upper") {
    r.mount.upper = value;
  } else if (key == "layer") {
    r.mount.layers.push_back(value);
  } else if (key == "tag") {
    r.mount.tag = value;
  } else if (key == "cache_dir") {
    r.mount.cache_dir = value;
  } else if (key == "weights_dtype") {
    r.mount.weights_dtype = value;
  } else if (key == "log_file") {
    r.mount.log_file = value;
  }
  return Status::OK();
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
            ++r.verbosity;
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
  const MountArgs& m = r.mount;
  std::string cmd = "ucfs mount";
  auto add = [&cmd](std::string_view flag, std::string_view value = {}) {
    cmd += " ";
    cmd += flag;
    if (!value.empty()) cmd += " " + ShellQuote(value);
  };
  if (m.world_size) add("--world-size", std::to_string(*m.world_size));
  if (m.upper) add("--upper", *m.upper);
  for (const std::string& layer : m.layers) add("--layer", layer);
  if (m.tag) add("--tag", *m.tag);
  if (m.sub_group_size) add("--sub-group-size", std::to_string(*m.sub_group_size));
  if (m.universal_info) add("--universal-info", *m.universal_info);
  if (m.cache_dir) add("--cache-dir", *m.cache_dir);
  if (m.weights_dtype) add("--weights-dtype", *m.weights_dtype);
  if (m.no_cache) add("--no-cache");
  if (m.crc) add("--crc");
  if (m.views) add("--views");
  if (m.no_rank_file_copies) add("--no-rank-file-copies");
  if (!m.log_file.empty()) add("--log-file", m.log_file);
  for (int i = 0; i < r.verbosity; ++i) add("-v");
  if (!m.options.empty()) {
    std::string joined;
    for (const std::string& o : m.options) joined += (joined.empty() ? "" : ",") + o;
    add("-o", joined);
  }
  add(ShellQuote(m.checkpoint));
  add(ShellQuote(m.mountpoint));
  return cmd;
}

std::string MountHelperUsage(std::string_view program) {
  std::string u = "usage: " + std::string(program) +
                  " CKPT MNT [-fnsv] [-o OPTION[,OPTION...]] [-t fuse.ucfs]\n"
                  "mount(8)'s helper for type fuse.ucfs: mount -t fuse.ucfs CKPT MNT -o ...\n"
                  "ucfs options:\n";
  for (const UcfsOption& o : kUcfsOptions) {
    std::string name(o.key);
    if (!o.value.empty()) name += "=" + std::string(o.value);
    name.resize(std::max<size_t>(name.size() + 1, 20), ' ');
    u += "  " + name + std::string(o.help) + "\n";
  }
  u += "  ro                  read-only (the default without upper=; refused with it)\n"
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
  if (request->verbosity > 0 || request->fake) {
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
  const int rc = run_mount(std::move(request->mount), request->verbosity);
  if (rc == kMountOk) return kMountOk;
  return rc == kUcfsUsage ? kMountUsage : kMountFailure;
}

}  // namespace ucfs::cli
