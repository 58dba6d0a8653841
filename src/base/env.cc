#include "ucfs/base/env.h"

#include <string>

#include "ucfs/base/write_env.h"

namespace ucfs {

Status RandomAccessFile::ReadExact(uint64_t offset, size_t n, char* buf) const {
  size_t got = 0;
  UCFS_RETURN_IF_ERROR(Read(offset, n, buf, &got));
  if (got != n) {
    return Status::Corruption("truncated: wanted " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + ", file has " + std::to_string(Size()) +
                              " bytes")
        .WithFile(path());
  }
  return Status::OK();
}

Result<FileStat> RandomAccessFile::Stat() const {
  FileStat st;
  st.identity.size = Size();
  st.access = FileAccess{0444, 0, 0};
  return st;
}

Result<std::string> RandomAccessFile::ReadString(uint64_t offset, size_t n) const {
  std::string out(n, '\0');
  UCFS_RETURN_IF_ERROR(ReadExact(offset, n, out.data()));
  return out;
}

Result<std::string> Env::ReadSmallFile(const std::string& path, size_t max_bytes) {
  UCFS_ASSIGN_OR_RETURN(auto file, Open(path));
  if (file->Size() > max_bytes) {
    return Status::InvalidArgument(path + ": " + std::to_string(file->Size()) +
                                   " bytes, more than the " + std::to_string(max_bytes) +
                                   " expected of this file");
  }
  return file->ReadString(0, file->Size());
}

Result<LinkInfo> Env::ReadLink(const std::string& path) {
  return Status::InvalidArgument(path + ": not a symbolic link");
}

bool Env::IsDirectory(const std::string& path) {
  auto st = Stat(path);
  return st.ok() && st->is_dir;
}

Result<std::string> Env::RealPath(const std::string& path) {
  return Status::NotSupported(path + ": this Env resolves no paths");
}

Result<std::shared_ptr<Env>> Env::Confine(const std::string& dir) {
  return Status::NotSupported(dir + ": this Env confines to no directory");
}

WriteEnv* Env::Writer() { return WriteEnv::Posix(); }

Result<bool> Env::MakeDir(const std::string& path, uint32_t, int64_t) {
  return Status::NotSupported(path + ": this Env makes no directories");
}

}  // namespace ucfs
