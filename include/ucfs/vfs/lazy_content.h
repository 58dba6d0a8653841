// LazyContent: a file whose content is built on first use and kept in a
// bounded cache.
//
// The reshard view at N ranks shows 2N rank files, each laid out from a
// pickle made once for its kind. Built up front they cost memory in proportion to N
// (150 KB a pair for a 220M-parameter model: 650 MB at N = 4096) and
// mount time; built on first stat or read, with at most a budget of bytes kept,
// the daemon stays flat at any N. Only the size is remembered for good.
#ifndef UCFS_VFS_LAZY_CONTENT_H_
#define UCFS_VFS_LAZY_CONTENT_H_

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "ucfs/base/status.h"
#include "ucfs/base/thread_annotations.h"
#include "ucfs/vfs/view.h"

namespace ucfs {

using ContentFactory = std::function<Result<std::shared_ptr<const FileContent>>()>;

// The built contents of many LazyContents, at most `max_bytes` of them
// (FileContent::memory(), each counted as at least kMinEntryBytes), the
// least recently used dropped first; the one built last is always kept.
// Sized by bytes, not files: a built rank file of a 70B model with one
// sub-group per param holds 0.7 MB of zip headers, a toy's 3 KB. Thread-safe; builds run outside
// its lock.
class ContentCache {
 public:
  static constexpr uint64_t kMinEntryBytes = 1024;
  explicit ContentCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  Result<std::shared_ptr<const FileContent>> Get(const void* key, const ContentFactory& make);
  size_t size();
  uint64_t bytes();   // what the kept contents count for
  uint64_t builds();  // how many times a factory ran

 private:
  struct Entry {
    const void* key;
    std::shared_ptr<const FileContent> content;
    uint64_t bytes;
  };
  const uint64_t max_bytes_;
  Mutex mu_;                                   // a leaf: no call is made under it
  std::list<Entry> lru_ UCFS_GUARDED_BY(mu_);  // most recent first
  std::unordered_map<const void*, std::list<Entry>::iterator> index_ UCFS_GUARDED_BY(mu_);
  uint64_t bytes_ UCFS_GUARDED_BY(mu_) = 0;
  uint64_t builds_ UCFS_GUARDED_BY(mu_) = 0;
};

class LazyContent final : public FileContent {
 public:
  LazyContent(ContentFactory make, std::shared_ptr<ContentCache> cache)
      : make_(std::move(make)), cache_(std::move(cache)) {}

  // Builds the content the first time (0 if that fails; Plan then says why).
  uint64_t size() const override;
  Status Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const override;

 private:
  Result<std::shared_ptr<const FileContent>> Built() const;

  ContentFactory make_;
  std::shared_ptr<ContentCache> cache_;
  mutable std::once_flag sized_;
  mutable uint64_t size_ = 0;
};

}  // namespace ucfs

#endif  // UCFS_VFS_LAZY_CONTENT_H_
