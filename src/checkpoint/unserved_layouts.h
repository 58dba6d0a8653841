// Layouts of DeepSpeed checkpoints that ucfs recognises and refuses, each
// by name, before anything of them is served: their files look like the
// ones ucfs reads, but their bytes are not where those would be, so a view
// of them would serve wrong values without an error. Each refusal names
// the file that shows the layout, the layout, and why.
//
//   ZenFlow (zero_optimization.zenflow)   flat buffers of 2-D params
//                                         transposed before flattening
//   MiCS (zero_optimization.mics_shard_size > 0, DeepSpeed <= 0.18)
//                                         optimizer files of one shard
//                                         group, fewer than the ranks
//   NVMe offload (<tag>/offloaded_tensors/)
//                                         optimizer states in swap files
//   FastCheckpointEngine's parallel writers (<file>-<writer>.<n>)
//                                         each rank file in n parts
//   ZeRO-1/2 elastic_checkpoint (base_optimizer_state a list)
//                                         each group's states without
//                                         their padding
//   parameter alignment's paddings (param_alignment_paddings) that
//   follow no rule, where the ds_config does not say whether it is on
//                                         params not where DeepSpeed's
//                                         arithmetic puts them
//   AutoEP folded into AutoTP, or saved in another stage's format (ds_autoep_layers)
//                                         expert params partitioned over
//                                         fewer ranks than the others
//
// Private to src/checkpoint/.
#ifndef UCFS_CHECKPOINT_UNSERVED_LAYOUTS_H_
#define UCFS_CHECKPOINT_UNSERVED_LAYOUTS_H_

#include <string>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/codec/pickle.h"

namespace ucfs {

// From the run's config saved in model-states file `file` (its ds_config
// dict, `ds_config`): ZenFlow and MiCS. OK where neither is on.
Status RefuseUnservedConfig(const pickle::Document& doc, pickle::NodeId ds_config,
                            const std::string& file);

// From an entry of tag directory `tag_dir`: NVMe offload's
// offloaded_tensors/ and FastCheckpointEngine's split rank files. OK for
// any other entry.
Status RefuseUnservedTagEntry(const std::string& tag_dir, const DirEntry& entry);

// ZeRO-1/2's optimizer file `file` saved with elastic_checkpoint.
Status RefuseElasticCheckpoint(const std::string& file);

// ZeRO-1/2's optimizer file `file` whose param_alignment_paddings follow
// no rule (`what`: the first that does not), with no ds_config setting to
// check them against (param_alignment.cc).
Status RefuseUnmatchedParamAlignment(const std::string& file, const std::string& what);

// From a model-states file: AutoEP's ds_autoep_layers other than the
// layout of its stage (`per_rank_model_states`: ZeRO-3's).
Status RefuseUnservedModelStates(const pickle::Document& doc, const std::string& file,
                                 bool per_rank_model_states);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_UNSERVED_LAYOUTS_H_
