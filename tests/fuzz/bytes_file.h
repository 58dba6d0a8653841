// Bytes in memory as a RandomAccessFile, without copying them: the fuzz
// input, or a torch file a target edits. Shared by the fuzz targets.
#ifndef UCFS_TESTS_FUZZ_BYTES_FILE_H_
#define UCFS_TESTS_FUZZ_BYTES_FILE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ucfs/base/env.h"

namespace ucfs_fuzz {

class BytesFile final : public ucfs::RandomAccessFile {
 public:
  // `data` must outlive the file; `path` names it in messages.
  BytesFile(std::string_view data, std::string path) : data_(data), path_(std::move(path)) {}
  ucfs::Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const override {
    *bytes_read = 0;
    if (offset >= data_.size()) return ucfs::Status::OK();
    *bytes_read = static_cast<size_t>(std::min<uint64_t>(n, data_.size() - offset));
    std::memcpy(buf, data_.data() + offset, *bytes_read);
    return ucfs::Status::OK();
  }
  uint64_t Size() const override { return data_.size(); }
  const std::string& path() const override { return path_; }

 private:
  std::string_view data_;
  std::string path_;
};

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_BYTES_FILE_H_
