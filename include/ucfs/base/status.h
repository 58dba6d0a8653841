// Status and Result<T>: how every fallible operation in ucfs reports failure.
//
// Modelled on LevelDB's Status: cheap when OK, a code plus a human message
// otherwise. Messages name the file and what is wrong, because they are shown
// to the user as they are ("zero_pp_rank_3_...optim_states.pt: truncated:
// central directory ends past end of file"). The file is also kept apart
// (file(), what()), so a caller that reports problems per file (verify)
// never parses it back out of the text.
#ifndef UCFS_BASE_STATUS_H_
#define UCFS_BASE_STATUS_H_

#include <cassert>
#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ucfs {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,         // a file or key that must exist does not
    kCorruption,       // malformed or truncated input
    kNotSupported,     // valid input in a form ucfs does not handle (yet)
    kInvalidArgument,  // the caller asked for something impossible
    kIOError,          // the operating system failed us
    kUnsafe,           // input tried something ucfs refuses on principle
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status NotSupported(std::string msg) {
    return Status(Code::kNotSupported, std::move(msg));
  }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  // An error from errno: "<context>: <strerror(err)>", keeping `err` for
  // callers that must answer with an errno (the FUSE adapter).
  static Status FromErrno(std::string_view context, int err);
  // FromErrno(context, errno): the error of the call just made.
  static Status LastErrno(std::string_view context) { return FromErrno(context, errno); }
  // An error with a given errno and message; the code follows the errno.
  static Status Posix(int err, std::string msg);
  static Status Unsafe(std::string msg) { return Status(Code::kUnsafe, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // The errno this status carries (FromErrno, Posix), or 0.
  int posix_errno() const { return errno_; }
  // "Corruption: <message>", or "OK".
  std::string ToString() const;

  // The same status with "<context>: " in front of the message; OK stays OK.
  // Used to add where in a file an error is as it travels up from a codec.
  Status Annotate(std::string_view context) const;

  // The same status, about `file`: "<file>: " in front of the message unless
  // it already starts so, and file() set. A status already about a file
  // keeps it (the innermost file is the one at fault); OK stays OK.
  Status WithFile(std::string_view file) const;
  // The file this status is about (WithFile), or "".
  const std::string& file() const { return file_; }
  // The message without the file in front: what is wrong with it.
  std::string_view what() const;
  // The message as said of `file` by a caller that shows the file apart:
  // what is wrong, if the status is about `file` or about no file; the
  // whole message if it is about another file.
  std::string MessageAbout(std::string_view file) const;

  bool operator==(const Status& other) const = default;

 private:
  Status(Code code, std::string msg, int err = 0)
      : code_(code), message_(std::move(msg)), errno_(err) {}
  Code code_ = Code::kOk;
  std::string message_;
  int errno_ = 0;
  std::string file_;
};

std::string_view CodeName(Status::Code code);

// `s` made safe to show on a terminal and in a log line: control characters
// (C0, DEL, and UTF-8-encoded C1, which terminals may obey as escape
// sequences), NUL (which would cut a C string) and backslashes are escaped
// as \xNN / \\, and text past `max_bytes` is cut with a note of the full
// length. For names from files (parameter names, record names, `latest`)
// wherever they go into a message.
std::string Printable(std::string_view s, size_t max_bytes = 256);
// A whole message made safe for a terminal: control characters (but not the
// newlines of a multi-line report when `keep_newlines`) escaped as \xNN,
// nothing cut, backslashes kept (the names in it were escaped by Printable).
std::string TerminalSafe(std::string_view message, bool keep_newlines = false);

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ucfs

#define UCFS_CONCAT_INNER_(a, b) a##b
#define UCFS_CONCAT_(a, b) UCFS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (a Status) is not OK.
#define UCFS_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::ucfs::Status ucfs_status_ = (expr);        \
    if (!ucfs_status_.ok()) return ucfs_status_; \
  } while (0)

// `lhs = value of expr` (a Result<T>), or returns its Status.
#define UCFS_ASSIGN_OR_RETURN(lhs, expr) \
  UCFS_ASSIGN_OR_RETURN_IMPL_(UCFS_CONCAT_(ucfs_result_, __LINE__), lhs, expr)
#define UCFS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#endif  // UCFS_BASE_STATUS_H_
