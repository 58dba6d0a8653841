// The rank files of the reshard view at N (reshard_view.h), each a
// torch.save file laid out from rank 0's pickle with the new ranks'
// partitions: ZeRO-1/2's flat groups (reshard_flat_groups.cc) and ZeRO-3's
// sub-groups (reshard_zero3.cc). Private to view/.
#ifndef UCFS_VIEWS_RESHARD_RANK_FILES_H_
#define UCFS_VIEWS_RESHARD_RANK_FILES_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/torch_file_content.h"
#include "ucfs/views/torch_pickle_builder.h"

namespace ucfs {

// Rank 0's optimizer pickle copied into `b` as its root (the nodes copied
// in `copied`, TorchPickleBuilder::Copy), for a new rank's file to change.
Result<pickle::NodeId> CopyRankZeroOptimizer(const Checkpoint& c, TorchPickleBuilder& b,
                                             std::vector<pickle::NodeId>* copied);

// The same for rank 0's model states (ZeRO-1/2's one file).
Result<pickle::NodeId> CopyRankZeroModelStates(const Checkpoint& c, TorchPickleBuilder& b,
                                               std::vector<pickle::NodeId>* copied);

// ZeRO-1/2: rank `rank`'s optimizer file at the layout's world size, and
// the one model-states file (rank 0's, with dp_world_size N).
Result<std::shared_ptr<TorchFileContent>> FlatGroupOptimizerFile(
    std::shared_ptr<const Checkpoint> ckpt, const ReshardLayout& layout, uint32_t rank);
Result<std::shared_ptr<TorchFileContent>> SharedModelFile(std::shared_ptr<const Checkpoint> ckpt,
                                                          const ReshardLayout& layout);

// ZeRO-3: rank `rank`'s optimizer and model-states files, laid out from
// pickles made once for every rank (`templates`, shared by a checkpoint's
// rank files).
struct RankFileTemplates;
std::shared_ptr<RankFileTemplates> NewRankFileTemplates();
Result<std::shared_ptr<TorchFileContent>> OptimizerFile(std::shared_ptr<const Checkpoint> ckpt,
                                                        const ReshardLayout& layout, uint32_t rank,
                                                        RankFileTemplates& templates);
Result<std::shared_ptr<TorchFileContent>> ModelFile(std::shared_ptr<const Checkpoint> ckpt,
                                                    const ReshardLayout& layout, uint32_t rank,
                                                    RankFileTemplates& templates);

}  // namespace ucfs

#endif  // UCFS_VIEWS_RESHARD_RANK_FILES_H_
