// A mutation program run on a checkpoint: each op an opcode byte (mod
// kNumOps; see checkpoint_fuzz.cc for the list) and its operands, at most
// kMaxOps; a program that runs out of bytes reads zeros.
#ifndef UCFS_TESTS_FUZZ_CHECKPOINT_PROGRAM_H_
#define UCFS_TESTS_FUZZ_CHECKPOINT_PROGRAM_H_

#include <cstddef>

#include "checkpoint_work.h"
#include "mutation_support.h"

namespace ucfs_fuzz {

constexpr size_t kMaxOps = 48;

void RunProgram(Program& prog, Work& w);

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_CHECKPOINT_PROGRAM_H_
