// A progress line for long commands (export, verify): bytes done of a
// total, rate and ETA. On a terminal it redraws one line in place; on
// anything else (a log, CI) it prints a plain line every few seconds.
#ifndef UCFS_CLI_PROGRESS_H_
#define UCFS_CLI_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace ucfs::cli {

class Progress {
 public:
  // `what` names the work ("exporting"); output goes to `out` (stderr).
  Progress(std::string what, uint64_t total_bytes, std::FILE* out = stderr);
  // Adds finished bytes; thread-safe, cheap when nothing is drawn.
  void Add(uint64_t bytes);
  // The final line (always printed).
  void Finish(const std::string& summary);

  // "1.2 GB", "812 MB/s", "1:05" — exposed for tests.
  static std::string Bytes(double bytes);
  static std::string Duration(double seconds);

 private:
  void DrawLocked(bool force);

  const std::string what_;
  const uint64_t total_;
  std::FILE* const out_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  uint64_t done_ = 0;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace ucfs::cli

#endif  // UCFS_CLI_PROGRESS_H_
