#include "cli/progress.h"

#include <unistd.h>

#include <cmath>

namespace ucfs::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Progress::Progress(std::string what, uint64_t total_bytes, std::FILE* out)
    : what_(std::move(what)),
      total_(total_bytes),
      out_(out),
      tty_(::isatty(::fileno(out)) != 0),
      start_(Clock::now()),
      last_draw_(start_) {}

std::string Progress::Bytes(double bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 5) {
    bytes /= 1000;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return buf;
}

std::string Progress::Duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

void Progress::Add(uint64_t bytes) {
  std::lock_guard lock(mu_);
  done_ += bytes;
  DrawLocked(false);
}

void Progress::DrawLocked(bool force) {
  const auto now = Clock::now();
  // A terminal redraws 5 times a second; a log gets a line every 5 s.
  const double every = tty_ ? 0.2 : 5.0;
  if (!force && Seconds(now - last_draw_) < every) return;
  last_draw_ = now;
  const double elapsed = std::max(1e-9, Seconds(now - start_));
  const double rate = static_cast<double>(done_) / elapsed;
  const double pct =
      total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done_) / static_cast<double>(total_);
  std::string eta = "--:--";
  if (rate > 0 && done_ < total_) eta = Duration(static_cast<double>(total_ - done_) / rate);
  std::fprintf(out_, "%s%s %s / %s  %3.0f%%  %s/s  ETA %s%s", tty_ ? "\r\033[K" : "", what_.c_str(),
               Bytes(static_cast<double>(done_)).c_str(),
               Bytes(static_cast<double>(total_)).c_str(), pct, Bytes(rate).c_str(), eta.c_str(),
               tty_ ? "" : "\n");
  std::fflush(out_);
}

void Progress::Finish(const std::string& summary) {
  std::lock_guard lock(mu_);
  std::fprintf(out_, "%s%s\n", tty_ ? "\r\033[K" : "", summary.c_str());
  std::fflush(out_);
}

}  // namespace ucfs::cli
