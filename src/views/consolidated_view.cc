#include "ucfs/views/consolidated_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/ds_version.h"
#include "ucfs/codec/dtype_cast.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/safetensors.h"
#include "ucfs/vfs/source_files.h"
#include "views/cast_state.h"
#include "views/consolidated_params.h"
#include "views/merged_runs.h"

namespace ucfs {
namespace {

// A tensor's bytes. Its shape and dtype come from a Checkpoint, which bounds
// every tensor and the whole model to 2^58 elements: the product fits.
uint64_t BytesOf(const ConsolidatedTensor& t) {
  return CheckedMul<uint64_t>(NumelOf(t.shape), Info(t.dtype).element_size)
      .value_or(kMaxFileQuantity);
}

}  // namespace

std::string ConsolidatedDirName(const std::string& tag) { return tag + "_fp32"; }

Result<ConsolidatedTensor> BufferTensor(const BufferInfo& b, uint32_t source, bool as_saved,
                                        std::shared_ptr<SourceFiles> files) {
  ConsolidatedTensor t;
  t.name = b.name;
  t.dtype = as_saved ? b.dtype : DType::kFloat32;
  t.shape = b.shape;
  if (b.dtype == DType::kFloat32 || as_saved) {
    StorageRun run;
    run.kind = StorageRun::Kind::kSource;
    run.source = source;
    run.source_offset = b.extent.offset;
    run.length = b.extent.length;
    t.storage.runs.push_back(run);
    return t;
  }
  // Widened on each read; a dtype with no widening fails now.
  std::string none;
  UCFS_RETURN_IF_ERROR(WidenToFloat32("", b.dtype, &none).Annotate("buffer " + b.name));
  t.storage.runs.push_back(WidenedRun(
      files, b.dtype, b.extent.length / Info(b.dtype).element_size, b.name,
      [source, extent = b.extent](uint64_t begin, uint64_t end, std::vector<Extent>* out) {
        out->push_back(Extent{source, extent.offset + begin, end - begin});
        return Status::OK();
      }));
  return t;
}

Status FinishStateDict(const std::vector<TiedParam>& tied_params,
                       std::vector<ConsolidatedTensor>* tensors) {
  std::vector<ConsolidatedTensor>& out = *tensors;
  // A name twice (a buffer listed twice, a buffer or frozen param with a
  // trainable param's name, an alias naming a tensor) would make a
  // safetensors header that drops one of them: refused (found by
  // checkpoint_fuzz).
  std::map<std::string, int> index;
  auto add_name = [&](size_t i) -> Status {
    if (!index.emplace(out[i].name, static_cast<int>(i)).second) {
      return Status::Corruption("'" + Printable(out[i].name) + "' is twice in the state dict");
    }
    return Status::OK();
  };
  for (size_t i = 0; i < out.size(); ++i) UCFS_RETURN_IF_ERROR(add_name(i));
  for (const TiedParam& tied : tied_params) {
    auto it = index.find(tied.canonical);
    if (it == index.end()) continue;  // as zero_to_fp32: only params it has
    ConsolidatedTensor t = out[static_cast<size_t>(it->second)];
    t.name = tied.alias;
    t.alias_of = it->second;
    out.push_back(std::move(t));
    UCFS_RETURN_IF_ERROR(add_name(out.size() - 1));
  }
  for (ConsolidatedTensor& t : out) t.storage.FillRunStarts();
  return Status::OK();
}

OtherTensors ZeroToFp32OtherTensors(std::string_view ds_version) {
  if (VersionAtLeast(ds_version, {0, 19, 8})) return OtherTensors::kFloatingToFloat32;
  if (VersionAtLeast(ds_version, {0, 19, 7})) return OtherTensors::kAllToFloat32;
  return OtherTensors::kBuffersToFloat32;
}

namespace {

// Zero_to_fp32's buffers: tensor rank 0's of each stage, the first stage's
// where stages share a name.
Status AddBuffers(const ParallelCheckpoint& c, OtherTensors others,
                  const std::shared_ptr<SourceFiles>& files, std::vector<ConsolidatedTensor>* out) {
  std::set<std::string> earlier_stages;
  for (uint32_t p = 0; p < c.degrees().pp; ++p) {
    const uint32_t m = p * c.degrees().tp;
    std::vector<std::string> names;
    for (const BufferInfo& b : c.shard(m).buffers()) {
      if (earlier_stages.contains(b.name)) continue;
      const bool as_saved = others == OtherTensors::kAsSaved ||
                            (others == OtherTensors::kFloatingToFloat32 && !IsFloating(b.dtype));
      UCFS_ASSIGN_OR_RETURN(ConsolidatedTensor t,
                            BufferTensor(b, c.source_base(m) + b.extent.file, as_saved, files));
      out->push_back(std::move(t));
      names.push_back(b.name);
    }
    earlier_stages.insert(names.begin(), names.end());
  }
  return Status::OK();
}

// The frozen params, in their own dtype or widened as `others` says; at
// T > 1 refused, as how their slices merge is not in the name table.
Status AddFrozenParams(const ParallelCheckpoint& c, OtherTensors others,
                       const std::shared_ptr<SourceFiles>& files,
                       std::vector<ConsolidatedTensor>* out) {
  const bool to_fp32 =
      others == OtherTensors::kAllToFloat32 || others == OtherTensors::kFloatingToFloat32;
  std::set<std::string> earlier_stages;
  for (uint32_t p = 0; p < c.degrees().pp; ++p) {
    const uint32_t m = p * c.degrees().tp;
    const Checkpoint& lead = c.shard(m);
    std::vector<std::string> names;
    for (uint32_t f = 0; f < lead.frozen_params().size(); ++f) {
      const FrozenParamInfo& info = lead.frozen_params()[f];
      if (c.degrees().tp > 1) {
        const std::string& file = lead.files().model_files[0];
        return Status::NotSupported(file + ": frozen param '" + Printable(info.name) + "' of a " +
                                    std::to_string(c.degrees().tp) +
                                    "-way tensor-parallel checkpoint: its slices are not merged")
            .WithFile(file);
      }
      if (earlier_stages.contains(info.name)) continue;
      names.push_back(info.name);
      ConsolidatedTensor t;
      t.name = info.name;
      t.shape = info.shape;
      if (to_fp32 && info.dtype != DType::kFloat32 && IsFloating(info.dtype)) {
        t.dtype = DType::kFloat32;
        t.storage.runs.push_back(
            WidenedRun(files, info.dtype, info.numel, info.name,
                       [&c, m, f](uint64_t begin, uint64_t end, std::vector<Extent>* extents) {
                         return c.MapShardFrozen(m, f, begin, end, extents);
                       }));
      } else {
        t.dtype = info.dtype;
        t.storage.runs.push_back(FrozenRun(m, f, info.numel * Info(info.dtype).element_size));
      }
      out->push_back(std::move(t));
    }
    earlier_stages.insert(names.begin(), names.end());
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<ConsolidatedTensor>> ConsolidatedStateDict(Env& env, const ParallelCheckpoint& c,
                                                              const StateDictOptions& options) {
  UCFS_RETURN_IF_ERROR(c.merge_status());
  const OtherTensors others =
      options.others.value_or(ZeroToFp32OtherTensors(c.shard(0).ds_version()));
  std::vector<ConsolidatedTensor> out;
  // One set of rank files, opened at first read, for every tensor ucfs computes.
  const auto files =
      std::make_shared<SourceFiles>(env, [&c](uint32_t i) { return c.sources()[i]; });
  UCFS_RETURN_IF_ERROR(AddBuffers(c, others, files, &out));
  UCFS_RETURN_IF_ERROR(AddFrozenParams(c, others, files, &out));
  UCFS_RETURN_IF_ERROR(AddParams(c, others, options, files, &out));
  // Tied aliases as each stage lists them, the first stage's where stages
  // list one alias.
  std::vector<TiedParam> tied;
  if (!options.drop_aliases) {
    for (uint32_t p = 0; p < c.degrees().pp; ++p) {
      const size_t earlier_stages = tied.size();
      for (const TiedParam& alias : c.shard(p * c.degrees().tp).tied_params()) {
        bool seen = false;
        for (size_t i = 0; i < earlier_stages; ++i) seen = seen || tied[i].alias == alias.alias;
        if (!seen) tied.push_back(alias);
      }
    }
  }
  UCFS_RETURN_IF_ERROR(FinishStateDict(tied, &out));
  return out;
}

Result<std::shared_ptr<SafetensorsContent>> SafetensorsContent::Make(
    std::shared_ptr<const StateMapper> mapper, std::vector<ConsolidatedTensor> tensors) {
  std::shared_ptr<SafetensorsContent> content(new SafetensorsContent());
  content->mapper_ = std::move(mapper);
  std::vector<SafetensorsEntry> entries;
  for (const ConsolidatedTensor& t : tensors) {
    // Checkpoint::Open bounds the model to 2^58 elements: BytesOf is exact.
    entries.push_back({t.name, t.dtype, t.shape, BytesOf(t)});
  }
  UCFS_ASSIGN_OR_RETURN(SafetensorsHeader header, MakeSafetensorsHeader(entries));
  content->header_ = std::move(header.bytes);
  content->data_starts_ = std::move(header.data_starts);
  content->data_size_ = header.data_size;
  for (ConsolidatedTensor& t : tensors) content->data_.push_back(std::move(t.storage));
  return content;
}

Status SafetensorsContent::Plan(uint64_t offset, uint64_t length,
                                std::vector<ReadPiece>* out) const {
  if (offset >= size()) return Status::OK();
  const uint64_t end = offset + std::min(length, size() - offset);
  if (offset < header_.size()) {
    ReadPiece p;
    p.kind = ReadPiece::Kind::kBytes;
    p.length = std::min<uint64_t>(end, header_.size()) - offset;
    p.bytes = std::string_view(header_).substr(offset, p.length);
    out->push_back(p);
  }
  if (end <= header_.size()) return Status::OK();  // a read within the header
  const uint64_t begin = std::max<uint64_t>(offset, header_.size()) - header_.size();
  const uint64_t stop = end - header_.size();
  if (begin >= stop) return Status::OK();
  size_t i = static_cast<size_t>(std::upper_bound(data_starts_.begin(), data_starts_.end(), begin) -
                                 data_starts_.begin());
  for (i = i == 0 ? 0 : i - 1; i < data_.size() && data_starts_[i] < stop; ++i) {
    const uint64_t start = data_starts_[i];
    const uint64_t a = std::max(begin, start) - start;
    const uint64_t b = std::min(stop, start + data_[i].size()) - start;
    if (a < b) UCFS_RETURN_IF_ERROR(PlanStorage(*mapper_, data_[i], a, b, out));
  }
  return Status::OK();
}

namespace {

// torch.save of `tensors` (aliases index into `tensors`) as zero_to_fp32
// writes it: an OrderedDict up to DeepSpeed 0.15.2, a plain dict of each
// shard after.
Result<std::shared_ptr<TorchFileContent>> PytorchModelBin(
    const ConsolidatedSource& source, const std::vector<ConsolidatedTensor>& tensors,
    bool plain_dict, const std::string& file_name, SourceFiles* crc_reader) {
  TorchPickleBuilder b;
  pickle::Document& doc = b.doc();
  const pickle::NodeId dict =
      plain_dict ? doc.AddDict({})
                 : doc.AddReduce(doc.Global("collections", "OrderedDict"), doc.AddTuple({}));
  std::vector<pickle::NodeId> node_of;
  for (const ConsolidatedTensor& t : tensors) {
    // A tied alias is the very tensor it is tied to, as in zero_to_fp32's dict.
    const pickle::NodeId tensor =
        t.alias_of >= 0 ? node_of[static_cast<size_t>(t.alias_of)]
                        : b.NewTensor(t.dtype, t.shape, t.requires_grad, t.storage.runs);
    node_of.push_back(tensor);
    doc.AppendPair(dict, doc.AddStr(t.name), tensor);
  }
  doc.set_root(dict);
  return b.Finish(source.mapper, source.style, ArchivePrefixFor(file_name), crc_reader);
}

// Hugging Face's split_torch_state_dict_into_shards, which zero_to_fp32
// shards with since DeepSpeed 0.15.3: tensors in state-dict order, a tensor
// over the limit in a shard of its own (appended at once, before the shard
// being filled), a new shard when the next tensor would tip it over; each
// tied alias then joins its tensor's shard, after its tensors. `total` is the
// sum over tensors that are not aliases.
std::vector<std::vector<size_t>> SplitLikeHuggingFace(
    const std::vector<ConsolidatedTensor>& tensors, uint64_t max_bytes, uint64_t* total) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  *total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].alias_of >= 0) continue;
    const uint64_t bytes = BytesOf(tensors[i]);
    *total += bytes;
    if (bytes > max_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes > max_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].alias_of < 0) continue;
    for (auto& shard : shards) {
      if (std::find(shard.begin(), shard.end(), static_cast<size_t>(tensors[i].alias_of)) !=
          shard.end()) {
        shard.push_back(i);
        break;
      }
    }
  }
  return shards;
}

// <tag>_fp32's .bin files, as the zero_to_fp32.py of the DeepSpeed version
// that saved the checkpoint writes them: one pytorch_model.bin up to 0.15.2;
// from 0.15.3 (its --max_shard_size, default 5GB) past the limit
// pytorch_model-0000k-of-0000n.bin with pytorch_model.bin.index.json.
Status AddPytorchModelBins(View& view, InodeId dir, const ConsolidatedSource& source,
                           const std::vector<ConsolidatedTensor>& tensors,
                           const ConsolidatedOptions& options, SourceFiles* crc_reader) {
  if (!VersionAtLeast(source.ds_version, {0, 15, 3})) {
    UCFS_ASSIGN_OR_RETURN(auto bin,
                          PytorchModelBin(source, tensors, false, "pytorch_model.bin", crc_reader));
    return view.AddFile(dir, "pytorch_model.bin", std::move(bin)).status();
  }
  uint64_t total = 0;
  const auto shards = SplitLikeHuggingFace(tensors, options.max_shard_bytes, &total);
  if (shards.size() <= 1) {
    UCFS_ASSIGN_OR_RETURN(auto bin,
                          PytorchModelBin(source, tensors, true, "pytorch_model.bin", crc_reader));
    return view.AddFile(dir, "pytorch_model.bin", std::move(bin)).status();
  }
  std::map<std::string, std::string> weight_map;
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "pytorch_model-%05zu-of-%05zu.bin", k + 1, shards.size());
    std::vector<ConsolidatedTensor> shard;
    std::map<size_t, int> index_in_shard;
    for (size_t i : shards[k]) {
      ConsolidatedTensor t = tensors[i];
      if (t.alias_of >= 0) t.alias_of = index_in_shard.at(static_cast<size_t>(t.alias_of));
      index_in_shard[i] = static_cast<int>(shard.size());
      weight_map[t.name] = name;
      shard.push_back(std::move(t));
    }
    UCFS_ASSIGN_OR_RETURN(auto bin, PytorchModelBin(source, shard, true, name, crc_reader));
    UCFS_RETURN_IF_ERROR(view.AddFile(dir, name, std::move(bin)).status());
  }
  return view
      .AddFile(dir, "pytorch_model.bin.index.json",
               std::make_shared<InlineContent>(ShardIndexJson(total, weight_map)))
      .status();
}

std::string ShardName(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

}  // namespace

Status AddConsolidatedDir(Env& env, View& view, InodeId parent,
                          std::shared_ptr<const ParallelCheckpoint> checkpoint,
                          const ConsolidatedOptions& options) {
  UCFS_ASSIGN_OR_RETURN(std::vector<ConsolidatedTensor> tensors,
                        ConsolidatedStateDict(env, *checkpoint));
  const Checkpoint& first = checkpoint->shard(0);
  UCFS_ASSIGN_OR_RETURN(InodeId dir,
                        view.AddDirectory(parent, ConsolidatedDirName(first.files().tag)));
  const ConsolidatedSource source{checkpoint, first.container_style(), first.ds_version()};
  std::unique_ptr<SourceFiles> crc_reader;
  if (options.compute_crc) {
    crc_reader = std::make_unique<SourceFiles>(
        env, [c = checkpoint.get()](uint32_t i) { return c->sources()[i]; });
  }
  return AddConsolidatedFiles(view, dir, source, tensors, options, crc_reader.get());
}

Status AddConsolidatedFiles(View& view, InodeId dir, const ConsolidatedSource& source,
                            const std::vector<ConsolidatedTensor>& tensors,
                            const ConsolidatedOptions& options, SourceFiles* crc_reader) {
  UCFS_RETURN_IF_ERROR(AddPytorchModelBins(view, dir, source, tensors, options, crc_reader));
  UCFS_ASSIGN_OR_RETURN(std::vector<NamedContent> files,
                        SafetensorsFiles(source.mapper, tensors, options.max_shard_bytes));
  for (NamedContent& f : files) {
    UCFS_RETURN_IF_ERROR(view.AddFile(dir, f.name, std::move(f.content)).status());
  }
  return Status::OK();
}

Result<std::vector<NamedContent>> SafetensorsFiles(std::shared_ptr<const StateMapper> mapper,
                                                   const std::vector<ConsolidatedTensor>& tensors,
                                                   uint64_t max_shard_bytes) {
  // Split as the .bin files are; safetensors cannot alias, so each tied
  // alias is a copy in its tensor's shard, and counts.
  uint64_t unique = 0;
  const auto split = SplitLikeHuggingFace(tensors, max_shard_bytes, &unique);
  std::vector<std::vector<ConsolidatedTensor>> shards;
  uint64_t total = 0;
  for (const auto& indices : split) {
    shards.emplace_back();
    for (size_t i : indices) {
      ConsolidatedTensor t = tensors[i];
      t.alias_of = -1;
      total += BytesOf(t);
      shards.back().push_back(std::move(t));
    }
  }
  std::vector<NamedContent> out;
  if (shards.size() <= 1) {
    UCFS_ASSIGN_OR_RETURN(
        auto st, SafetensorsContent::Make(mapper, shards.empty() ? std::vector<ConsolidatedTensor>{}
                                                                 : std::move(shards[0])));
    out.push_back({"model.safetensors", std::move(st)});
    return out;
  }
  std::map<std::string, std::string> weight_map;  // sorted, as json.dumps(sort_keys=True)
  for (size_t k = 0; k < shards.size(); ++k) {
    for (const ConsolidatedTensor& t : shards[k]) weight_map[t.name] = ShardName(k, shards.size());
    UCFS_ASSIGN_OR_RETURN(auto st, SafetensorsContent::Make(mapper, std::move(shards[k])));
    out.push_back({ShardName(k, shards.size()), std::move(st)});
  }
  out.push_back({"model.safetensors.index.json",
                 std::make_shared<InlineContent>(ShardIndexJson(total, weight_map))});
  return out;
}

void AddConsolidatedDirOrWarn(Env& env, View& view,
                              std::shared_ptr<const ParallelCheckpoint> checkpoint,
                              const ConsolidatedOptions& options) {
  const std::string name = ConsolidatedDirName(checkpoint->shard(0).files().tag);
  Status s = AddConsolidatedDir(env, view, kRootInode, std::move(checkpoint), options);
  if (!s.ok()) spdlog::warn("no {} directory: {}", name, TerminalSafe(s.message()));
}

}  // namespace ucfs
