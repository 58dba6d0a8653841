// The read path's reply for view files: their pieces as libfuse buffers,
// source bytes spliced from the shards' fds (src/README.md, "The read
// path").
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "fuse/server.h"

namespace ucfs::fuse {
namespace {

// Zeros for padding pieces: a read is at most max_pages (1 MiB), so one
// static page run covers any piece.
constexpr size_t kZeroBytes = size_t{4} << 20;
const char* Zeros() {
  static const std::vector<char>* zeros = new std::vector<char>(kZeroBytes, 0);
  return zeros->data();
}

// Asks the kernel for the source pieces of [offset, offset + length) of
// view file `ino` (POSIX_FADV_WILLNEED), without waiting for them.
void Prefetch(Server& s, InodeId ino, uint64_t offset, uint64_t length) {
  std::vector<ReadPiece> pieces;
  if (!s.view.Plan(ino, offset, length, &pieces).ok()) return;
  SourcesOfRead sources(s.sources);
  for (const ReadPiece& p : pieces) {
    if (p.kind != ReadPiece::Kind::kSource) continue;
    const int fd = SourceFd(sources, p.source);
    if (fd >= 0) {
      ::posix_fadvise(fd, static_cast<off_t>(p.offset), static_cast<off_t>(p.length),
                      POSIX_FADV_WILLNEED);
    }
  }
}

}  // namespace

void ReplyViewRead(fuse_req_t req, Server& s, InodeId ino, size_t size, off_t offset) {
  const uint64_t begin = static_cast<uint64_t>(offset);
  // Keep the source ranges of the next window on their way (ReadAhead),
  // once this request is answered: a cold file's first read would
  // otherwise wait behind the page allocation and I/O submission of the
  // first two windows of every shard (16 ms of a first tensor's 4 KiB,
  // bench/first_tensor.sh).
  struct PrefetchAfterReply {
    Server& s;
    InodeId ino;
    std::optional<ReadAhead::Range> ahead;
    ~PrefetchAfterReply() {
      if (ahead) Prefetch(s, ino, ahead->offset, ahead->length);
    }
  } prefetch{s, ino, s.read_ahead.Next(ino, begin, size)};
  std::vector<ReadPiece> pieces;
  Status st = s.view.Plan(ino, begin, size, &pieces);
  if (!st.ok()) {
    spdlog::error("read of inode {} at {}: {}", ino, offset, TerminalSafe(st.ToString()));
    fuse_reply_err(req, EIO);
    return;
  }
  // Zero pieces longer than the zero page run are split.
  size_t count = 0;
  for (const ReadPiece& p : pieces) {
    count += p.kind == ReadPiece::Kind::kZeros ? (p.length + kZeroBytes - 1) / kZeroBytes : 1;
  }
  if (count == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  std::vector<char> storage(sizeof(fuse_bufvec) + (count - 1) * sizeof(fuse_buf));
  auto* bufv = reinterpret_cast<fuse_bufvec*>(storage.data());
  bufv->count = count;
  bufv->idx = 0;
  bufv->off = 0;
  size_t i = 0;
  SourcesOfRead sources(s.sources);
  for (const ReadPiece& p : pieces) {
    switch (p.kind) {
      case ReadPiece::Kind::kBytes: {
        fuse_buf& b = bufv->buf[i++];
        b = fuse_buf{};
        b.size = p.length;
        b.mem = const_cast<char*>(p.bytes.data());
        break;
      }
      case ReadPiece::Kind::kZeros:
        for (uint64_t left = p.length; left > 0;) {
          fuse_buf& b = bufv->buf[i++];
          b = fuse_buf{};
          b.size = std::min<uint64_t>(left, kZeroBytes);
          b.mem = const_cast<char*>(Zeros());
          left -= b.size;
        }
        break;
      case ReadPiece::Kind::kSource: {
        const int fd = SourceFd(sources, p.source);
        if (fd < 0) {
          fuse_reply_err(req, -fd);
          return;
        }
        fuse_buf& b = bufv->buf[i++];
        b = fuse_buf{};
        b.size = p.length;
        b.flags =
            static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY);
        b.fd = fd;
        b.pos = static_cast<off_t>(p.offset);
        break;
      }
    }
  }
  fuse_reply_data(req, bufv, FUSE_BUF_SPLICE_MOVE);
  // The bytes now live in this file's page cache (kept across opens); the
  // source pages they came from would only be a second copy. Dropping them
  // halves the memory a full read costs and leaves the page cache to others.
  if (s.options.drop_source_pages) {
    for (size_t j = 0; j < bufv->count; ++j) {
      const fuse_buf& b = bufv->buf[j];
      if (b.flags & FUSE_BUF_IS_FD) {
        ::posix_fadvise(b.fd, b.pos, static_cast<off_t>(b.size), POSIX_FADV_DONTNEED);
      }
    }
  }
}

}  // namespace ucfs::fuse
