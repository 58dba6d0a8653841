#include "ucfs/base/status.h"

#include <algorithm>
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

std::string Printable(std::string_view s, size_t max_bytes) {
  std::string out;
  const size_t n = std::min(s.size(), max_bytes);
  out.reserve(n + 16);
  auto hex = [&out](unsigned char c) {
    static constexpr char kDigits[] = "0123456789abcdef";
    out += "\\x";
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  };
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      hex(c);
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == 0xc2 && i + 1 < n && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      hex(c);  // U+0080..U+009F: C1 controls, CSI among them
      hex(static_cast<unsigned char>(s[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_bytes) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string TerminalSafe(std::string_view message, bool keep_newlines) {
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size(); ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    const bool c1 = c == 0xc2 && i + 1 < message.size() &&
                    static_cast<unsigned char>(message[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(message[i + 1]) <= 0x9f;
    if ((c < 0x20 && !(keep_newlines && c == '\n')) || c == 0x7f || c1) {
      out += Printable(message.substr(i, c1 ? 2 : 1));
      if (c1) ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
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
