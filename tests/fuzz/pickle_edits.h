// The edits of a mutation program on one pickle: select a node (the root, a
// named path, the k-th node of a kind, a part of the k-th tensor, the k-th
// torch.Size, any node), descend into its children, then one action:
// replace it, change a scalar, edit a sequence or mapping, wrap, unwrap, or
// make it a global.
#ifndef UCFS_TESTS_FUZZ_PICKLE_EDITS_H_
#define UCFS_TESTS_FUZZ_PICKLE_EDITS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "mutation_support.h"
#include "pickle_surgery.h"
#include "ucfs/codec/pickle.h"

namespace ucfs_fuzz {

// One step of an edit: an action (a descent or the terminal one) and its
// operands.
struct Step {
  uint8_t action = 0;
  uint8_t a = 0, b = 0, c = 0, d = 0;
  uint64_t raw = 0;
};

// Which files (`target`, read by Targets), which node, what to do there.
struct Edit {
  uint8_t target = 0;
  uint8_t selector = 0, k1 = 0, k2 = 0;
  std::vector<Step> steps;  // descents, then one terminal action
};

// Reads an edit's operands from the program.
Edit ReadEdit(Program& prog);
// Applies it to `doc`; `other` (another rank's file, may be null) gives nodes
// to copy, `paths` the named paths selector 1 picks from. Returns whether the
// Document changed.
bool ApplyEdit(Document& doc, const Edit& e, const Document* other,
               std::span<const NamedPath> paths);

}  // namespace ucfs_fuzz

#endif  // UCFS_TESTS_FUZZ_PICKLE_EDITS_H_
