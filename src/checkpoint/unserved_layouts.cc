#include "checkpoint/unserved_layouts.h"

#include <cctype>
#include <string_view>

#include "ucfs/base/path.h"
#include "ucfs/checkpoint/checkpoint_layout.h"

namespace ucfs {
namespace {

Status Refuse(const std::string& file, const std::string& layout, const std::string& why) {
  return Status::NotSupported(file + ": " + layout + ": " + why +
                              "; ucfs refuses it rather than serve values from the wrong bytes")
      .WithFile(file);
}

// "<digits>" consumed from the front of *s.
bool ConsumeDigits(std::string_view* s) {
  size_t n = 0;
  while (n < s->size() && std::isdigit(static_cast<unsigned char>((*s)[n]))) ++n;
  s->remove_prefix(n);
  return n > 0;
}

// FastCheckpointEngine's writers (model_checkpointing/writer_factory.py)
// name their parts f'{file_path}-{writer_rank}.{num_parallel_writers}'.
bool IsSplitRankFile(std::string_view name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string_view::npos) return false;
  const std::string_view file = name.substr(0, dash);
  std::string_view part = name.substr(dash + 1);
  if (!ConsumeDigits(&part) || part.empty() || part.front() != '.') return false;
  part.remove_prefix(1);
  if (!ConsumeDigits(&part) || !part.empty() || !file.ends_with(".pt")) return false;
  return ParseRankFileName(file) || ParseLayerFileName(file) ||
         (file.starts_with("mp_rank_") && file.ends_with("_model_states.pt"));
}

}  // namespace

Status RefuseUnservedConfig(const pickle::Document& doc, pickle::NodeId ds_config,
                            const std::string& file) {
  const pickle::NodeId zero = doc.Get(ds_config, "zero_optimization");
  const pickle::NodeId zenflow = doc.Get(zero, "zenflow");
  if (zenflow != pickle::kNoNode && doc.node(zenflow).kind != pickle::Kind::kNone) {
    return Refuse(file, "a ZenFlow run (zero_optimization.zenflow in its ds_config)",
                  "ZenFlow transposes every 2-D param before flattening it into the optimizer's "
                  "flat buffers, which neither DeepSpeed's converters nor ucfs undo");
  }
  if (auto mics = doc.AsNumber(doc.Get(zero, "mics_shard_size")); mics && *mics > 0) {
    return Refuse(file,
                  "a MiCS run (zero_optimization.mics_shard_size " +
                      std::to_string(static_cast<int64_t>(*mics)) + " in its ds_config)",
                  "MiCS partitions over shard groups, and only one group's ranks save optimizer "
                  "files, so the files are not one rank each");
  }
  return Status::OK();
}

Status RefuseUnservedTagEntry(const std::string& tag_dir, const DirEntry& entry) {
  if (entry.is_dir && entry.name == "offloaded_tensors") {
    return Refuse(JoinPath(tag_dir, entry.name),
                  "optimizer states offloaded to NVMe (zero_optimization.offload_optimizer "
                  "device nvme)",
                  "the states are DeepSpeed's swap files in this directory, not in the rank files");
  }
  if (!entry.is_dir && IsSplitRankFile(entry.name)) {
    return Refuse(JoinPath(tag_dir, entry.name),
                  "a rank file written in parts by FastCheckpointEngine's parallel writers "
                  "(<file>-<writer>.<writers>)",
                  "ucfs reads each rank file whole, as DeepSpeed's default engine writes it");
  }
  return Status::OK();
}

Status RefuseElasticCheckpoint(const std::string& file) {
  return Refuse(file,
                "a ZeRO-1/2 elastic_checkpoint save (base_optimizer_state is a list of each "
                "param group's states)",
                "its states are saved without their partitions' padding, a layout ucfs has no "
                "checkpoint written by DeepSpeed to check against");
}

Status RefuseUnmatchedParamAlignment(const std::string& file, const std::string& what) {
  return Refuse(file,
                "parameter alignment's paddings of no known rule (" + what +
                    "; its ds_config does not say whether zero_optimization.parameter_alignment "
                    "is on)",
                "ucfs lays each param out where DeepSpeed's own arithmetic puts it, and these "
                "paddings follow none it knows");
}

Status RefuseUnservedModelStates(const pickle::Document& doc, const std::string& file,
                                 bool per_rank_model_states) {
  const pickle::NodeId layers = doc.Get(doc.root(), "ds_autoep_layers");
  if (layers == pickle::kNoNode || doc.node(layers).kind == pickle::Kind::kNone) {
    return Status::OK();
  }
  auto entries = doc.SequenceItems(layers);
  if (!entries) {
    return Refuse(file, "an AutoEP run whose ds_autoep_layers is no list",
                  "DeepSpeed 0.19.8 saves one dict per AutoEP layer");
  }
  // ZeRO-1/2 AutoEP saves its experts per global expert
  // (checkpoint_format 'per_expert_files'), ZeRO-3 partitions them over
  // their EDP groups ('zero3_partitioned'); with AutoTP they are folded
  // into its ranks (a 'folding' key), laid out otherwise.
  const std::string_view served = per_rank_model_states ? "zero3_partitioned" : "per_expert_files";
  for (pickle::NodeId entry : *entries) {
    const std::optional<std::string_view> format = doc.AsStr(doc.Get(entry, "checkpoint_format"));
    if (doc.Get(entry, "folding") != pickle::kNoNode) {
      return Refuse(file, "AutoEP experts folded into AutoTP ranks (ds_autoep_layers 'folding')",
                    "each rank then holds a share of other ranks' experts, which ucfs does not "
                    "yet lay out");
    }
    if (format != served) {
      return Refuse(file,
                    "AutoEP experts saved as " +
                        (format ? "'" + Printable(*format) + "'" : std::string("no known format")) +
                        " (ds_autoep_layers checkpoint_format)",
                    std::string("ucfs serves '") + std::string(served) + "' at ZeRO stage " +
                        (per_rank_model_states ? "3" : "1 or 2"));
    }
  }
  return Status::OK();
}

}  // namespace ucfs
