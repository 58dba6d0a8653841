#include "ucfs/checkpoint/index.h"

#include <lmdb.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

namespace ucfs {
namespace {

// LMDB keys are at most 511 bytes; paths may be longer. The key is a hash
// of the path; the stored summary carries the full path, which is checked.
std::string KeyFor(const std::string& path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : path) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "summary/v1/%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Status LmdbError(const std::string& what, int rc) {
  return Status::IOError("index: " + what + ": " + mdb_strerror(rc));
}

}  // namespace

struct SummaryIndex::Lmdb {
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  ~Lmdb() {
    if (env != nullptr) mdb_env_close(env);
  }
};

std::string DefaultIndexDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return JoinPath(xdg, "ucfs");
  }
  const char* home = std::getenv("HOME");
  return JoinPath(JoinPath(home != nullptr ? home : "/tmp", ".cache"), "ucfs");
}

Result<int64_t> StatfsType(const std::string& path) {
  std::string p = path;
  while (true) {
    struct statfs st {};
    if (::statfs(p.c_str(), &st) == 0) return static_cast<int64_t>(st.f_type);
    if (errno != ENOENT || p.empty() || p == "/") return Status::FromErrno("statfs " + p, errno);
    const size_t slash = p.rfind('/');
    p = slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
  }
}

bool IsNetworkFsType(int64_t f_type) {
  constexpr int64_t kNetwork[] = {
      0x6969,      // NFS
      0xFF534D42,  // CIFS
      0xFE534D42,  // SMB2
      0x517B,      // SMB
      0x0BD00BD0,  // Lustre
      0x47504653,  // GPFS
      0x19830326,  // BeeGFS
      0x00C36400,  // Ceph
      0x5346414F,  // AFS
      0x6B414653,  // kAFS
      0xAAD7AAEA,  // Panasas
      0x01021997,  // 9p
      0x65735546,  // FUSE (sshfs, JuiceFS, gcsfuse, ...)
  };
  for (int64_t t : kNetwork) {
    if (f_type == t) return true;
  }
  return false;
}

IndexPlacement PlaceIndex(const std::optional<std::string>& requested, const FsTypeProbe& probe) {
  IndexPlacement out;
  out.dir = requested.value_or(DefaultIndexDir());
  auto on_network = [&probe](const std::string& dir) {
    auto type = probe(dir);
    return type.ok() && IsNetworkFsType(*type);
  };
  if (!on_network(out.dir)) return out;
  const std::string asked = out.dir;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && *runtime == '/' && !on_network(runtime)) {
    out.dir = JoinPath(runtime, "ucfs");
  } else {
    out.dir = "/var/tmp/ucfs-" + std::to_string(::getuid());
  }
  out.note = asked +
             " is on a network file system, where LMDB must not be used: the index is kept in " +
             out.dir;
  return out;
}

SummaryIndex::SummaryIndex(Env& env, std::unique_ptr<Lmdb> lmdb)
    : env_(env), lmdb_(std::move(lmdb)) {}

SummaryIndex::~SummaryIndex() = default;

Result<std::unique_ptr<SummaryIndex>> SummaryIndex::Open(Env& env, const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec) && !ec) {
    // Its own user's, like the index in it.
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  }
  if (ec) return Status::IOError("index: cannot create " + dir + ": " + ec.message());
  // In a shared directory (/var/tmp) another user may have made the name
  // first, to read the index or to plant one: only a directory of our own,
  // which no one else may write, is used.
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::FromErrno("index: " + dir, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 0022) != 0) {
    return Status::Unsafe("index: " + dir +
                          " is not a directory of this user's that only it may write; "
                          "not used");
  }
  auto lmdb = std::make_unique<Lmdb>();
  int rc = mdb_env_create(&lmdb->env);
  if (rc != 0) return LmdbError("mdb_env_create", rc);
  // The map is sparse: this bounds the index, it does not allocate it.
  mdb_env_set_mapsize(lmdb->env, size_t{4} << 30);
  // MDB_NOTLS: FUSE worker threads come and go; read transactions are not
  // tied to them.
  // 0600: the index holds the pickles of checkpoints only its user may
  // read (parameter names, run metadata).
  rc = mdb_env_open(lmdb->env, dir.c_str(), MDB_NOTLS, 0600);
  if (rc != 0) return LmdbError("cannot open " + dir, rc);
  MDB_txn* txn = nullptr;
  rc = mdb_txn_begin(lmdb->env, nullptr, 0, &txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", rc);
  rc = mdb_dbi_open(txn, nullptr, 0, &lmdb->dbi);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return LmdbError("mdb_dbi_open", rc);
  }
  rc = mdb_txn_commit(txn);
  if (rc != 0) return LmdbError("mdb_txn_commit", rc);
  return std::unique_ptr<SummaryIndex>(new SummaryIndex(env, std::move(lmdb)));
}

Result<TorchFileSummary> SummaryIndex::Summarize(const std::string& path) {
  UCFS_ASSIGN_OR_RETURN(FileStat stat, env_.Stat(path));
  const FileIdentity& identity = stat.identity;
  const std::string key = KeyFor(path);
  MDB_val k{key.size(), const_cast<char*>(key.data())};
  {
    MDB_txn* txn = nullptr;
    if (mdb_txn_begin(lmdb_->env, nullptr, MDB_RDONLY, &txn) == 0) {
      MDB_val v;
      if (mdb_get(txn, lmdb_->dbi, &k, &v) == 0) {
        auto cached =
            DecodeSummary(std::string_view(static_cast<const char*>(v.mv_data), v.mv_size));
        mdb_txn_abort(txn);
        if (cached.ok() && cached->path == path && cached->identity == identity) {
          ++hits_;
          cached->access = stat.access;
          return cached;
        }
        spdlog::debug("index: {} changed since it was indexed", path);
      } else {
        mdb_txn_abort(txn);
      }
    }
  }
  ++misses_;
  UCFS_ASSIGN_OR_RETURN(TorchFileSummary summary, SummarizeTorchFile(env_, path));
  // Stale if the file changed while we read it; don't cache that.
  if (!(summary.identity == identity)) return summary;
  std::string value = EncodeSummary(summary);
  MDB_val v{value.size(), value.data()};
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(lmdb_->env, nullptr, 0, &txn);
  if (rc == 0) rc = mdb_put(txn, lmdb_->dbi, &k, &v, 0);
  if (rc == 0) {
    rc = mdb_txn_commit(txn);
  } else if (txn != nullptr) {
    mdb_txn_abort(txn);
  }
  // A full or read-only index costs speed, not correctness.
  if (rc != 0) spdlog::warn("index: cannot store {}: {}", TerminalSafe(path), mdb_strerror(rc));
  return summary;
}

}  // namespace ucfs
