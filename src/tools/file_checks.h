// The checks `ucfs verify` makes of any torch.save file of a checkpoint,
// whatever it holds (rank files, a pipeline's layer files). Internal to
// tools/.
#ifndef UCFS_TOOLS_FILE_CHECKS_H_
#define UCFS_TOOLS_FILE_CHECKS_H_

#include <functional>
#include <string>

#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/tools/verify.h"

namespace ucfs {

// Where verify's checks report what is wrong (message: what is wrong with
// `file`, without its name). Called from one thread at a time.
using ProblemSink =
    std::function<void(VerifyProblem::Kind kind, const std::string& file, std::string message)>;

// A number as messages give it, every digit a double has: "4", "7.5".
std::string ExactNumber(double v);

// Every tensor in the file, wherever it is in the pickle: its storage
// record exists and holds the whole storage, and the tensor lies inside
// its storage (MatchTensor). Checkpoint::Open checks the tensors it uses;
// this covers every tensor of every file. At most a few problems are
// listed one by one, then counted.
void CheckFileTensors(const std::string& path, const TorchFileSummary& summary,
                      const pickle::Document& d, const ProblemSink& problem);

}  // namespace ucfs

#endif  // UCFS_TOOLS_FILE_CHECKS_H_
