// `ucfs verify`: a checkpoint checked before anyone trusts it
// (include/ucfs/tools/verify.h), reported as text or JSON.
#ifndef UCFS_CLI_VERIFY_COMMAND_H_
#define UCFS_CLI_VERIFY_COMMAND_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ucfs/tools/verify.h"

namespace ucfs::cli {

struct VerifyArgs {
  std::string checkpoint;
  std::optional<std::string> tag;
  std::optional<std::string> universal_info;  // --universal-info FILE
  bool json = false;
  unsigned threads = 0;  // 0: one per CPU
};

// Returns the process exit status: 0 when nothing is wrong (warnings, such
// as a run unsafe to load at another tensor-parallel degree, are printed
// and leave it 0), 1 when a problem was found or there is no checkpoint to
// verify. The report goes to
// stdout, the progress line and errors to stderr.
int RunVerify(const VerifyArgs& args);

// The report as `ucfs verify` prints it.
std::string VerifyText(const VerifyReport& report);
nlohmann::ordered_json VerifyJson(const VerifyReport& report);

}  // namespace ucfs::cli

#endif  // UCFS_CLI_VERIFY_COMMAND_H_
