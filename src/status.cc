#include "ucfs/status.h"

#include <cerrno>
#include <cstring>

namespace ucfs {

Status Status::FromErrno(std::string_view context, int err) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  return Posix(err, std::move(msg));
}

Status Status::Posix(int err, std::string msg) {
  Code code = Code::kIOError;
  switch (err) {
    case ENOENT:
      code = Code::kNotFound;
      break;
    case EEXIST:
    case EINVAL:
    case EISDIR:
    case ENOTDIR:
    case ENOTEMPTY:
    case EPERM:
      code = Code::kInvalidArgument;
      break;
    case EXDEV:
    case ENOTSUP:
      code = Code::kNotSupported;
      break;
    default:
      break;
  }
  return Status(code, std::move(msg), err);
}

std::string_view CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kCorruption:
      return "Corruption";
    case Status::Code::kNotSupported:
      return "NotSupported";
    case Status::Code::kInvalidArgument:
      return "InvalidArgument";
    case Status::Code::kIOError:
      return "IOError";
    case Status::Code::kUnsafe:
      return "Unsafe";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  Status out(code_, std::move(msg), errno_);
  out.file_ = file_;
  return out;
}

Status Status::WithFile(std::string_view file) const {
  if (ok() || !file_.empty() || file.empty()) return *this;
  Status out = *this;
  out.file_ = std::string(file);
  const bool named = message_.size() > file.size() + 1 && message_.starts_with(file) &&
                     message_.compare(file.size(), 2, ": ") == 0;
  if (!named) out.message_ = out.file_ + ": " + message_;
  return out;
}

std::string Status::MessageAbout(std::string_view file) const {
  const Status about = WithFile(file);
  return std::string(about.file() == file ? about.what() : std::string_view(about.message_));
}

std::string_view Status::what() const {
  std::string_view m(message_);
  if (!file_.empty() && m.starts_with(file_) && m.substr(file_.size()).starts_with(": ")) {
    m.remove_prefix(file_.size() + 2);
  }
  return m;
}

}  // namespace ucfs
