// The checkpoint model's answers: where any byte range of a parameter's
// state lies in the rank files (checkpoint.h). The model is built by
// CheckpointBuilder (checkpoint_builder.h).
#include "ucfs/checkpoint/checkpoint.h"

#include <algorithm>

#include "checkpoint/checkpoint_builder.h"
#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/partition.h"

namespace ucfs {

Result<Checkpoint> Checkpoint::Open(Env& env, const std::string& path,
                                    const CheckpointOptions& options) {
  DirectTorchFileSource direct(env);
  TorchFileSource& source = options.source != nullptr ? *options.source : direct;
  return CheckpointBuilder(env, source).Build(path, options);
}

Result<Checkpoint> Checkpoint::OpenShard(Env& env, CheckpointFiles files, TorchFileSource* source) {
  DirectTorchFileSource direct(env);
  return CheckpointBuilder(env, source != nullptr ? *source : direct).BuildFrom(std::move(files));
}

Status Checkpoint::MapShardState(uint32_t shard, size_t param, size_t state, uint64_t begin,
                                 uint64_t end, std::vector<Extent>* out) const {
  if (shard != 0) return Status::InvalidArgument("a checkpoint has shard group 0 only");
  return MapState(param, state, begin, end, out);
}

Status Checkpoint::MapShardFrozen(uint32_t shard, size_t frozen, uint64_t begin, uint64_t end,
                                  std::vector<Extent>* out) const {
  if (shard != 0) return Status::InvalidArgument("a checkpoint has shard group 0 only");
  return MapFrozen(frozen, begin, end, out);
}

std::optional<size_t> Checkpoint::FindParam(std::string_view name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return i;
  }
  return std::nullopt;
}

std::optional<size_t> Checkpoint::FindState(std::string_view name) const {
  for (size_t i = 0; i < states_.size(); ++i) {
    if (states_[i].name == name) return i;
  }
  return std::nullopt;
}

const std::vector<SubGroupState>& Checkpoint::StatesOf(size_t param) const {
  return group_states_[params_[param].sub_group];
}

std::optional<StateLayout> Checkpoint::LayoutOf(size_t param, size_t state) const {
  if (param >= params_.size()) return std::nullopt;
  for (const SubGroupState& s : StatesOf(param)) {
    if (s.state == state) return s.layout;
  }
  return std::nullopt;
}

uint64_t Checkpoint::WholeParamsNumel(size_t k, uint32_t rank) const {
  const size_t i = k * world_size() + rank;
  return i < whole_rank_numel_.size() ? whole_rank_numel_[i] : 0;
}

std::optional<size_t> Checkpoint::FindFrozen(std::string_view name) const {
  for (size_t i = 0; i < frozen_.size(); ++i) {
    if (frozen_[i].name == name) return i;
  }
  return std::nullopt;
}

std::vector<RankPiece> Checkpoint::PlaceElements(uint64_t numel, uint64_t partition_numel,
                                                 uint64_t flat_offset, uint64_t first,
                                                 uint64_t last,
                                                 const std::vector<uint32_t>* members) const {
  const bool remap = members != nullptr && !members->empty();
  if (partitioning_ == Partitioning::kPerParam) {
    // An expert param is cut over its EDP group (members), rank k of it
    // members[k].
    std::vector<RankPiece> pieces = SplitByRank(
        numel, remap ? static_cast<uint32_t>(members->size()) : world_size(), first, last);
    for (RankPiece& piece : pieces) {
      if (remap) piece.rank = (*members)[piece.rank];
    }
    return pieces;
  }
  // The flat offsets fit: Open bounds every group to 2^58 elements.
  std::vector<RankPiece> pieces =
      SplitFlatByRank(partition_numel, flat_offset + first, flat_offset + last);
  for (RankPiece& piece : pieces) {
    piece.global_begin -= flat_offset;
    // Partition k of an expert family is its EDP group's k-th rank; past
    // the last, an index MapPieces refuses.
    if (remap) {
      piece.rank = piece.rank < members->size() ? (*members)[piece.rank] : world_size();
    }
  }
  return pieces;
}

uint32_t Checkpoint::expert_parallel() const {
  uint32_t ep = 1;
  for (const SubGroupInfo& sg : sub_groups_) ep = std::max(ep, sg.expert_parallel);
  return ep;
}

std::optional<RankBuffer> FindBufferOnRank(const std::vector<SubGroupInfo>& sub_groups,
                                           uint32_t buffer, uint32_t rank) {
  for (size_t k = 0; k < sub_groups.size(); ++k) {
    const SubGroupInfo& sg = sub_groups[k];
    if (sg.file_buffer != buffer) continue;
    // Sub-groups are bounded by the slot table (kMaxSlots): k fits.
    const auto index = static_cast<uint32_t>(k);
    if (sg.members.empty()) return RankBuffer{index, rank};
    auto it = std::find(sg.members.begin(), sg.members.end(), rank);
    if (it != sg.members.end()) {
      return RankBuffer{index, static_cast<uint32_t>(it - sg.members.begin())};
    }
  }
  return std::nullopt;
}

std::optional<size_t> Checkpoint::SubGroupOnRank(uint32_t buffer, uint32_t rank) const {
  auto found = FindBufferOnRank(sub_groups_, buffer, rank);
  return found ? std::optional<size_t>(found->sub_group) : std::nullopt;
}

Status Checkpoint::MapPieces(uint32_t element_size, uint64_t slot_element_offset, const Slot* slots,
                             size_t slot_stride, uint64_t begin, uint64_t end,
                             const std::vector<RankPiece>& pieces, std::vector<Extent>* out) const {
  for (const RankPiece& piece : pieces) {
    if (piece.rank >= world_size()) {
      return Status::Corruption("a tensor's elements lie past the last rank's partition");
    }
    const Slot* slot = slots + piece.rank * slot_stride;
    if (!slot->present) {
      return Status::NotFound("rank " + std::to_string(piece.rank) + "'s file is missing");
    }
    uint64_t byte_begin = std::max(begin, piece.global_begin * element_size);
    uint64_t byte_end = std::min(end, (piece.global_begin + piece.count) * element_size);
    // Bounded by Open (the slot's elements lie inside its record), and
    // checked all the same: a wrapped offset would serve other bytes.
    auto in_slot = CheckedAdd(slot_element_offset, piece.slot_offset);
    auto offset =
        in_slot ? CheckedMulAdd<uint64_t>(*in_slot, element_size, slot->offset) : std::nullopt;
    if (offset) offset = CheckedAdd(*offset, byte_begin - piece.global_begin * element_size);
    if (!offset) {
      return Status::Corruption("rank " + std::to_string(piece.rank) +
                                "'s slice of a tensor lies past 2^64 bytes of its file");
    }
    Extent e{slot->file, *offset, byte_end - byte_begin};
    if (!out->empty() && out->back().file == e.file &&
        out->back().offset + out->back().length == e.offset) {
      out->back().length += e.length;
    } else {
      out->push_back(e);
    }
  }
  return Status::OK();
}

namespace {

// The whole elements covering bytes [begin, end) of a tensor of `numel`
// elements, after checking the range.
Result<std::pair<uint64_t, uint64_t>> ElementsCovering(uint64_t numel, uint32_t element_size,
                                                       uint64_t begin, uint64_t end) {
  // numel * element_size fits: Open bounds every numel to 2^58 elements.
  const uint64_t total = CheckedMul<uint64_t>(numel, element_size).value_or(0);
  if (begin > end || end > total) {
    return Status::InvalidArgument("byte range [" + std::to_string(begin) + ", " +
                                   std::to_string(end) + ") outside a tensor of " +
                                   std::to_string(total) + " bytes");
  }
  return std::make_pair(begin / element_size, (end + element_size - 1) / element_size);
}

}  // namespace

Status Checkpoint::MapState(size_t param, size_t state, uint64_t begin, uint64_t end,
                            std::vector<Extent>* out) const {
  if (param >= params_.size() || state >= states_.size()) {
    return Status::InvalidArgument("no such parameter or state");
  }
  const ParamInfo& p = params_[param];
  const std::optional<StateLayout> layout = LayoutOf(param, state);
  if (!layout) {
    return Status::NotFound("parameter '" + Printable(p.name) + "' has no state '" +
                            Printable(states_[state].name) + "' (its flat buffer " +
                            std::to_string(p.sub_group) + " keeps other states)");
  }
  const uint32_t es = Info(states_[state].dtype).element_size;
  UCFS_ASSIGN_OR_RETURN(auto elements, ElementsCovering(p.numel, es, begin, end));
  if (begin == end) return Status::OK();
  const size_t stride = sub_groups_.size() * states_.size();
  const Slot* slots = &flat_slots_[p.sub_group * states_.size() + state];
  if (*layout == StateLayout::kWholeParams) {
    // The whole param, from the lowest rank holding it (whole_params.h).
    const std::vector<RankPiece> piece = {{whole_first_rank_[param], elements.first,
                                           elements.second - elements.first, elements.first}};
    return MapPieces(es, whole_offset_[param], slots, stride, begin, end, piece, out);
  }
  const bool per_param = partitioning_ == Partitioning::kPerParam;
  // Rank r's slot is flat_slots_[(r * groups + sub_group) * states + state].
  return MapPieces(
      es, per_param ? p.offset : 0, slots, stride, begin, end,
      PlaceElements(p.numel, p.partition_numel, per_param ? 0 : p.offset, elements.first,
                    elements.second, &sub_groups_[p.sub_group].members),
      out);
}

std::vector<uint32_t> Checkpoint::WholeParamRanks(size_t param) const {
  std::vector<uint32_t> ranks;
  if (param >= params_.size() || params_[param].numel == 0 ||
      partitioning_ != Partitioning::kFlatGroup) {
    return ranks;
  }
  const ParamInfo& p = params_[param];
  for (const RankPiece& piece : PlaceElements(p.numel, p.partition_numel, p.offset, 0, p.numel,
                                              &sub_groups_[p.sub_group].members)) {
    if (piece.rank < world_size()) ranks.push_back(piece.rank);
  }
  return ranks;
}

Status Checkpoint::MapWholeParamCopy(size_t param, size_t state, uint32_t rank, uint64_t begin,
                                     uint64_t end, std::vector<Extent>* out) const {
  if (param >= params_.size() || state >= states_.size() ||
      LayoutOf(param, state) != StateLayout::kWholeParams) {
    return Status::InvalidArgument("not a whole-params state of a parameter");
  }
  const std::vector<uint32_t> ranks = WholeParamRanks(param);
  if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " holds no copy of '" +
                                   Printable(params_[param].name) + "'");
  }
  const ParamInfo& p = params_[param];
  const uint32_t es = Info(states_[state].dtype).element_size;
  UCFS_ASSIGN_OR_RETURN(auto elements, ElementsCovering(p.numel, es, begin, end));
  if (begin == end) return Status::OK();
  // On every rank but its first the param starts before the partition, so
  // it comes first in that rank's buffer.
  const uint64_t at = rank == whole_first_rank_[param] ? whole_offset_[param] : 0;
  const std::vector<RankPiece> piece = {
      {rank, elements.first, elements.second - elements.first, elements.first}};
  return MapPieces(es, at, &flat_slots_[p.sub_group * states_.size() + state],
                   sub_groups_.size() * states_.size(), begin, end, piece, out);
}

std::vector<uint64_t> Checkpoint::ElementsPerRank(size_t param) const {
  std::vector<uint64_t> counts(world_size());
  if (param >= params_.size()) return counts;
  const ParamInfo& p = params_[param];
  const bool per_param = partitioning_ == Partitioning::kPerParam;
  for (const RankPiece& piece : PlaceElements(p.numel, p.partition_numel, per_param ? 0 : p.offset,
                                              0, p.numel, &sub_groups_[p.sub_group].members)) {
    if (piece.rank < counts.size()) counts[piece.rank] += piece.count;
  }
  return counts;
}

Status Checkpoint::MapFrozen(size_t frozen, uint64_t begin, uint64_t end,
                             std::vector<Extent>* out) const {
  if (frozen >= frozen_.size()) return Status::InvalidArgument("no such frozen parameter");
  const FrozenParamInfo& f = frozen_[frozen];
  const uint32_t es = Info(f.dtype).element_size;
  UCFS_ASSIGN_OR_RETURN(auto elements, ElementsCovering(f.numel, es, begin, end));
  if (begin == end) return Status::OK();
  return MapPieces(es, 0, &frozen_slots_[frozen * world_size()], 1, begin, end,
                   PlaceElements(f.numel, f.partition_numel, 0, elements.first, elements.second),
                   out);
}

}  // namespace ucfs
