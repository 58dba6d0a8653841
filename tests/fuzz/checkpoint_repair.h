// kRepair: makes the optimizer files of a mutated ZeRO-3 checkpoint agree with
// rank 0's param_shapes again (flat buffers and states resized with their
// storage records, sub-groups added or dropped, param_groups fixed, frozen
// fragments resized), so that shape edits reach the views instead of stopping
// at Checkpoint::Open.
#ifndef UCFS_TESTS_FUZZ_CHECKPOINT_REPAIR_H_
#define UCFS_TESTS_FUZZ_CHECKPOINT_REPAIR_H_

#include <cstdint>

#include "checkpoint_work.h"

namespace ucfs_fuzz {

// `flags` bit 1: also resize the model files' frozen fragments; the others
// choose how the optimizer files are fixed. Nothing for ZeRO-1/2 (their
// partitions follow other rules).
void Repair(Work& w, uint8_t flags);

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_CHECKPOINT_REPAIR_H_
