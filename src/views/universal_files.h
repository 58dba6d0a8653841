// The files of a universal checkpoint that do not depend on how a param's
// slices merge, shared by the data-parallel universal view and the
// tensor- and pipeline-parallel one (and `latest`, by the reshard view
// too). Private to src/view/.
#ifndef UCFS_VIEWS_UNIVERSAL_FILES_H_
#define UCFS_VIEWS_UNIVERSAL_FILES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "ucfs/base/status.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/views/torch_file_content.h"

namespace ucfs {

// ds_to_universal's optimizer_state.pt: rank 0's optimizer_state_dict plus
// a 'param_groups' key (at ZeRO-1/2 without the sharded entries). Its
// sources are `ckpt`'s own indices.
Result<std::shared_ptr<TorchFileContent>> OptimizerStateFile(std::shared_ptr<const Checkpoint> ckpt,
                                                             SourceFiles* crc_reader);

// step.pt: the step of a param's group, as rank 0 saved it (a 0-dim tensor,
// or a Python number from an older torch); its extent's file is source
// `source_base` + extent.file of `mapper`.
Result<std::shared_ptr<TorchFileContent>> StepFile(std::shared_ptr<const StateMapper> mapper,
                                                   const ContainerStyle& style,
                                                   const ScalarState& step, uint32_t source_base,
                                                   SourceFiles* crc_reader);

// That a param's name can name its directory (ds_to_universal.py makes one
// per param).
Status CheckParamDirectoryName(const Checkpoint& c, const std::string& name);

// What ds_to_universal.py of DeepSpeed >= 0.19.8 writes at ZeRO-1/2 besides
// the merged states: zero/<name>/fp32.pt, {'param': tensor.float()}, for
// each tensor of the model states' module that has none (frozen params,
// buffers, tied aliases), as universal restore needs their values. Nothing
// for older versions or at ZeRO-3.
Status AddModuleTensorFiles(View& view, InodeId zero, const std::shared_ptr<const Checkpoint>& ckpt,
                            const std::shared_ptr<SourceFiles>& files, SourceFiles* crc_reader);

// The universal view's top: the root passed through (a tag directory alone
// shown as a root of it, with `latest`), latest_universal, and
// <tag>_universal/zero/; the zero directory's inode, *udir the other's.
// File `name` holding `text` at the view's root, made from the root's
// `latest` (its time) where `latest` names the tag shown
// (--tag may show another): `latest` of the reshard view, latest_universal.
Status AddLatestFile(Env& env, View& view, const CheckpointFiles& files, std::string_view name,
                     const std::string& text);

// The top made by AddLatestFile.
Result<InodeId> AddUniversalTop(Env& env, View& view, const CheckpointFiles& files, InodeId* udir);

// Warns (the user, once per view built) where a universal checkpoint of
// `c` would resume wrongly at another tensor-parallel degree.
void WarnIfUnsafeAtAnotherTensorDegree(const ParallelCheckpoint& c);

}  // namespace ucfs

#endif  // UCFS_VIEWS_UNIVERSAL_FILES_H_
