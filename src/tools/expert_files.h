// The MoE expert files of a checkpoint with expert groups
// (layer_<L>_expert_<E>_mp_rank_<MM>_model_states.pt: one per MoE layer and
// global expert, holding that expert's module tensors), which DeepSpeed's
// load_checkpoint reads for every live expert at any world size and the
// reshard view passes through. Internal to tools/.
#ifndef UCFS_TOOLS_EXPERT_FILES_H_
#define UCFS_TOOLS_EXPERT_FILES_H_

#include "tools/file_checks.h"
#include "ucfs/base/env.h"
#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs {

// For each MoE layer L of rank 0's model states' `num_experts` (one count
// per layer) and each expert g below its count: the file is there (else
// kMissing, naming it), a torch.save zip whose tensors lie in their
// records (else kUnreadable / kTensor); an expert file of a layer or
// expert past those counts is kStructure. Nothing without expert groups,
// or at ZeRO-3, where AutoEP keeps its experts in the rank files.
void CheckExpertFiles(Env& env, const Checkpoint& c, const ProblemSink& problem);

}  // namespace ucfs

#endif  // UCFS_TOOLS_EXPERT_FILES_H_
