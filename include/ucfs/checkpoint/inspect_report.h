// What `ucfs inspect` prints about a checkpoint, as text or JSON.
#ifndef UCFS_CHECKPOINT_INSPECT_REPORT_H_
#define UCFS_CHECKPOINT_INSPECT_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs {

nlohmann::ordered_json InspectJson(const Checkpoint& ckpt);
std::string InspectText(const Checkpoint& ckpt);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_INSPECT_REPORT_H_
