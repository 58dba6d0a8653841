#include "cli/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>

namespace ucfs::cli {
namespace {

spdlog::level::level_enum LevelFor(int verbosity) {
  return verbosity >= 2   ? spdlog::level::trace
         : verbosity == 1 ? spdlog::level::debug
                          : spdlog::level::warn;
}

}  // namespace

void SetUpLogging(int verbosity, const std::string& log_file, bool daemon) {
  spdlog::drop("ucfs");
  std::shared_ptr<spdlog::logger> logger;
  if (!log_file.empty()) {
    logger = spdlog::basic_logger_mt("ucfs", log_file);
    logger->flush_on(spdlog::level::info);
  } else if (daemon) {
    logger = spdlog::syslog_logger_mt("ucfs", "ucfs", LOG_PID);
  } else {
    logger = spdlog::stderr_color_mt("ucfs");
    logger->set_pattern("ucfs: %^%l%$: %v");
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(LevelFor(verbosity));
}

}  // namespace ucfs::cli
