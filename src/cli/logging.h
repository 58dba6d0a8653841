// Where ucfs's log goes: stderr for commands (stdout stays clean for
// --json), --log-file or syslog for a mount's daemon; quiet by default,
// each -v more.
#ifndef UCFS_CLI_LOGGING_H_
#define UCFS_CLI_LOGGING_H_

#include <string>

namespace ucfs::cli {

void SetUpLogging(int verbosity, const std::string& log_file, bool daemon);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_LOGGING_H_
