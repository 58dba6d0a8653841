// The pieces `ucfs inspect`'s reports of a data-parallel checkpoint and of
// a tensor- and pipeline-parallel grid share. Internal to the reports.
#ifndef UCFS_CHECKPOINT_INSPECT_FORMAT_H_
#define UCFS_CHECKPOINT_INSPECT_FORMAT_H_

#include <string>
#include <vector>

#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs::inspect {

inline bool FlatGroups(const Checkpoint& c) { return c.partitioning() == Partitioning::kFlatGroup; }
// The step of the first sub-group that keeps one (Muon's group keeps none),
// "-" before the first step.
std::string FormatStep(const Checkpoint& c);
// The states: "fp32, exp_avg, exp_avg_sq" where every param group has the
// same; else per param group, "group 0: fp32, momentum_buffer (whole params
// per rank); group 1: fp32, exp_avg, exp_avg_sq".
std::string StatesText(const Checkpoint& c);
// "DeepSpeedZeroOptimizer" or, where ds_config names it, "Muon via
// DeepSpeedZeroOptimizer".
std::string OptimizerText(const Checkpoint& c);
// Rows rendered as left-aligned columns, each line led by `indent`.
std::string Table(const std::vector<std::vector<std::string>>& rows, const std::string& indent);
// ZeRO-3: "2 param group(s), 5 sub-group(s), sub_group_size 100";
// ZeRO-1/2: "2 param group(s) of 831, 105 elements, partitions of 416, 54".
std::string GroupsText(const Checkpoint& c);
// The expert groups (MoE): EP and EDP sizes, the ranks of each EP rank's
// EDP group; empty without experts.
std::string ExpertsText(const Checkpoint& c);
// How rank 0's optimizer file was written: "torch >= 2.7 zip, 4096-byte
// alignment", "torch legacy (non-zip)".
std::string ContainerText(const Checkpoint& c);

}  // namespace ucfs::inspect

#endif  // UCFS_CHECKPOINT_INSPECT_FORMAT_H_
