#include "ucfs/base/bytes_file.h"

#include <algorithm>
#include <utility>

namespace ucfs {

namespace {

class BytesFile final : public RandomAccessFile {
 public:
  BytesFile(std::string path, std::shared_ptr<const std::string> bytes, FileStat stat)
      : path_(std::move(path)), bytes_(std::move(bytes)), stat_(stat) {}
  Status Read(uint64_t offset, size_t n, char* buf, size_t* bytes_read) const override {
    *bytes_read = 0;
    if (offset >= bytes_->size()) return Status::OK();
    *bytes_read = std::min<uint64_t>(n, bytes_->size() - offset);
    std::copy_n(bytes_->data() + offset, *bytes_read, buf);
    return Status::OK();
  }
  uint64_t Size() const override { return bytes_->size(); }
  Result<FileStat> Stat() const override { return stat_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<const std::string> bytes_;
  FileStat stat_;
};

}  // namespace

std::unique_ptr<RandomAccessFile> NewBytesFile(std::string path,
                                               std::shared_ptr<const std::string> bytes,
                                               FileStat stat) {
  return std::make_unique<BytesFile>(std::move(path), std::move(bytes), stat);
}

}  // namespace ucfs
