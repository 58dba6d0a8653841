#include "ucfs/checkpoint/checkpoint.h"

#include <spdlog/spdlog.h>

#include <bit>
#include <chrono>
#include <cstring>

#include "ucfs/base/checked_math.h"
#include "ucfs/checkpoint/partition.h"
#include "ucfs/codec/zip.h"

namespace ucfs {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

namespace {

// One rank file: its summary (zip records, data.pkl) and the parsed pickle.
struct TorchFile {
  TorchFileSummary summary;
  std::shared_ptr<Document> doc;

  const std::string& path() const { return summary.path; }
  Status Error(const std::string& what) const { return Status::Corruption(path() + ": " + what); }

  // Byte offset in the file of element 0 of `t`, after checking that the
  // tensor lies inside a stored record.
  Result<uint64_t> DataOffset(const TensorRef& t) const {
    UCFS_ASSIGN_OR_RETURN(const ZipRecord* rec, Record(t));
    auto offset = CheckedAdd(rec->data_offset, t.byte_offset());
    if (!offset) return Error("storage record '" + Printable(rec->name) + "': offset overflows");
    return *offset;
  }

  Result<const ZipRecord*> Record(const TensorRef& t) const {
    const ZipRecord* rec = summary.Find("data/" + t.storage_key);
    if (rec == nullptr) return Error("no storage record 'data/" + t.storage_key + "'");
    if (rec->method != 0) {
      return Status::NotSupported(path() + ": storage record '" + Printable(rec->name) +
                                  "' is compressed; ucfs serves tensor bytes in place and needs "
                                  "stored records (torch.save never compresses them)");
    }
    // storage_numel goes up to 2^63: the product may wrap.
    auto need = CheckedMul(t.storage_numel, t.element_size());
    if (!need || rec->size < *need) {
      return Error("storage record '" + Printable(rec->name) + "' holds " +
                   std::to_string(rec->size) + " bytes, its storage of " +
                   std::to_string(t.storage_numel) + " " + std::string(Info(t.dtype).torch_name) +
                   " elements needs " +
                   (need ? std::to_string(*need) : std::string("more than 2^64")));
    }
    return rec;
  }

  // A 0-dim tensor's value, from the summary's small records.
  Result<double> ScalarValue(const TensorRef& t) const {
    UCFS_RETURN_IF_ERROR(Record(t).status());
    const std::string* bytes = summary.SmallRecord("data/" + t.storage_key);
    auto end = CheckedAdd(t.byte_offset(), t.element_size());
    if (bytes == nullptr || !end || bytes->size() < *end) {
      return Error("scalar record 'data/" + t.storage_key + "' is not small");
    }
    auto v = DecodeScalar(bytes->data() + t.byte_offset(), t.dtype);
    if (!v.ok()) return v.status().Annotate(path());
    return v;
  }
};

Result<TorchFile> LoadTorchFile(TorchFileSource& source, const std::string& path) {
  auto start = std::chrono::steady_clock::now();
  TorchFile tf;
  UCFS_ASSIGN_OR_RETURN(tf.summary, source.Summarize(path));
  UCFS_RETURN_IF_ERROR(CheckTorchLoadable(tf.summary));
  auto doc = pickle::Parse(tf.summary.pickle);
  if (!doc.ok()) return doc.status().Annotate(path + ": data.pkl");
  tf.doc = std::make_shared<Document>(std::move(doc).value());
  spdlog::debug(
      "parsed {} ({} records, {} pickle bytes, {} values) in {:.3f} ms", path,
      tf.summary.records.size(), tf.summary.pickle.size(), tf.doc->size(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return tf;
}

// Elements of a param_shapes shape, or nullopt past 2^62 / 16: any state of
// the param, in any dtype up to 16 bytes, must have a byte size that fits
// (views multiply numel by the element size without checking again).
std::optional<uint64_t> CheckedNumel(const std::vector<int64_t>& shape) {
  return CheckedShapeProduct(shape, kMaxFileQuantity / 16);
}

// ZeroStageEnum is pickled as getattr(ZeroStageEnum, 'weights') by Python
// 3.11, as ZeroStageEnum(3) by older Pythons; some writers store a plain int.
std::optional<int> DecodeZeroStage(const Document& doc, NodeId id) {
  if (auto v = doc.AsInt(id)) return static_cast<int>(*v);
  if (id == pickle::kNoNode) return std::nullopt;
  const auto& n = doc.node(id);
  if (n.kind != Kind::kReduce) return std::nullopt;
  auto args = doc.SequenceItems(n.b);
  if (!args) return std::nullopt;
  if (doc.IsGlobal(n.a, "__builtin__", "getattr") || doc.IsGlobal(n.a, "builtins", "getattr")) {
    if (args->size() != 2) return std::nullopt;
    auto name = doc.AsStr((*args)[1]);
    if (!name) return std::nullopt;
    static constexpr std::pair<std::string_view, int> kNames[] = {{"disabled", 0},
                                                                  {"optimizer_states", 1},
                                                                  {"gradients", 2},
                                                                  {"weights", 3},
                                                                  {"max_stage", 3}};
    for (const auto& [k, v] : kNames) {
      if (*name == k) return v;
    }
    return std::nullopt;
  }
  if (doc.node(n.a).kind == Kind::kGlobal && doc.node(n.a).name == "ZeroStageEnum" &&
      args->size() == 1) {
    if (auto v = doc.AsInt((*args)[0])) return static_cast<int>(*v);
  }
  return std::nullopt;
}

}  // namespace

Result<double> DecodeScalar(const char* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return static_cast<double>(f);
    }
    case DType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::kBFloat16: {
      uint32_t bits =
          static_cast<uint32_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8))
          << 16;
      return static_cast<double>(std::bit_cast<float>(bits));
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<double>(v);
    }
    default:
      return Status::NotSupported("scalar state of dtype " + std::string(Info(dtype).torch_name));
  }
}

// Builds a Checkpoint from its files. One method per part of the model, in
// the order they depend on each other.
class CheckpointBuilder {
 public:
  // Flat buffers (ranks x sub-groups x states) or frozen fragments (frozen
  // params x ranks) a checkpoint may have: 16M, far beyond any real run
  // (4096 ranks x 1000 sub-groups x 4 states), and 400 MB of slots.
  static constexpr uint64_t kMaxSlots = uint64_t{1} << 24;
  // Per-element optimizer states (exp_avg, exp_avg_sq, ...) a checkpoint may
  // have: each is looked up by name in every rank's every sub-group.
  static constexpr size_t kMaxStates = 64;

  CheckpointBuilder(Env& env, TorchFileSource& source) : env_(env), source_(source) {}

  Result<Checkpoint> Build(const std::string& path, const CheckpointOptions& options) {
    UCFS_ASSIGN_OR_RETURN(c_.files_, DiscoverCheckpoint(env_, path, options.tag));
    // DeepSpeed saves model states per rank at stage 3 only (engine.py
    // _get_ckpt_name); each rank file then says which optimizer wrote it.
    c_.partitioning_ =
        c_.files_.model_per_rank ? Partitioning::kPerParam : Partitioning::kFlatGroup;
    const uint32_t w = c_.world_size();
    c_.sources_.resize(2 * static_cast<size_t>(w));

    // Errors about one file say so (Status::WithFile): verify reports them
    // against it.
    const std::string& model0_path = c_.files_.model_files[0];
    UCFS_ASSIGN_OR_RETURN(TorchFile model0, Load(w, model0_path));
    UCFS_RETURN_IF_ERROR(ReadModelStates(model0).WithFile(model0_path));
    for (uint32_t r = 0; r < w; ++r) {
      const std::string& optim_path = c_.files_.optim_files[r];
      UCFS_ASSIGN_OR_RETURN(TorchFile optim, Load(r, optim_path));
      UCFS_RETURN_IF_ERROR(
          (flat_groups() ? ReadFlatGroupOptimizerStates(r, optim) : ReadOptimizerStates(r, optim))
              .WithFile(optim_path));
      if (r == 0) {
        c_.rank0_optim_ = optim.doc;
        c_.container_style_ = StyleOf(optim.summary);
        c_.rank0_optim_summary_ = std::make_shared<TorchFileSummary>(std::move(optim.summary));
      }
    }
    if (flat_groups()) {
      UCFS_RETURN_IF_ERROR(ReadBuffers(model0).WithFile(model0_path));
      UCFS_RETURN_IF_ERROR(ReadWholeFrozenParams(model0).WithFile(model0_path));
    } else {
      UCFS_RETURN_IF_ERROR(ReadFrozenFragments(model0).WithFile(model0_path));
      UCFS_RETURN_IF_ERROR(ReadBuffers(model0).WithFile(model0_path));
    }
    c_.rank0_model_ = model0.doc;
    c_.rank0_model_summary_ = std::make_shared<TorchFileSummary>(std::move(model0.summary));
    // Model files read for nothing else are still sources (passed through).
    for (uint32_t r = 1; r < w; ++r) {
      SourceFile& src = c_.sources_[w + r];
      if (src.path.empty() && !c_.files_.model_files[r].empty()) {
        src.path = c_.files_.model_files[r];
        UCFS_ASSIGN_OR_RETURN(FileStat st, env_.Stat(src.path));
        src.identity = st.identity;
        src.access = st.access;
      }
    }
    return std::move(c_);
  }

 private:
  // Summarises source `index` and parses its pickle.
  Result<TorchFile> Load(uint32_t index, const std::string& path) {
    auto loaded = LoadTorchFile(source_, path);
    if (!loaded.ok()) return loaded.status().WithFile(path);
    TorchFile tf = std::move(loaded).value();
    if (!tf.summary.legacy) {
      UCFS_RETURN_IF_ERROR(
          CheckRankFileIdentity(c_.files_, path, tf.summary.prefix).WithFile(path));
    }
    c_.sources_[index] = SourceFile{path, tf.summary.identity, tf.summary.access};
    return tf;
  }

  bool flat_groups() const { return c_.partitioning_ == Partitioning::kFlatGroup; }

  // Rank 0's model states: the parameter table's names and shapes, frozen
  // and tied params, and run metadata.
  Status ReadModelStates(const TorchFile& tf) {
    const Document& doc = *tf.doc;
    const NodeId root = doc.root();
    if (!doc.MappingItems(root)) return tf.Error("top-level object is not a dict");

    const NodeId shapes = doc.Get(root, "param_shapes");
    auto groups = doc.SequenceItems(shapes);
    if (!groups) {
      return tf.Error("no 'param_shapes' list: not the model states of a ZeRO checkpoint");
    }
    for (NodeId group : *groups) {
      auto items = doc.MappingItems(group);
      if (!items) return tf.Error("param_shapes holds a " + doc.Repr(group, 60) + ", not a dict");
      SubGroupInfo sg;
      uint64_t offset = 0;
      for (const auto& [k, v] : *items) {
        auto name = doc.AsStr(k);
        auto shape = MatchShape(doc, v);
        if (!name || !shape) {
          return tf.Error("param_shapes entry " + doc.Repr(k, 60) + " is not name -> torch.Size");
        }
        if (HasParam(std::string(*name))) {
          return tf.Error("param_shapes lists '" + Printable(*name) + "' twice");
        }
        auto numel = CheckedNumel(*shape);
        if (!numel) {
          return tf.Error("param '" + Printable(*name) + "' of shape " + ShapeString(*shape) +
                          " has more than 2^58 elements");
        }
        UCFS_RETURN_IF_ERROR(CountElements(tf, *name, *numel));
        ParamInfo p;
        p.name = std::string(*name);
        p.shape = std::move(*shape);
        p.numel = *numel;
        p.partition_numel = PartitionNumel(p.numel, c_.world_size());
        p.sub_group = static_cast<uint32_t>(c_.sub_groups_.size());
        p.offset = offset;
        // ZeRO-3 packs each param's slot, ZeRO-1/2 the whole param.
        auto next =
            CheckedAdd(offset, flat_groups() ? p.numel : p.partition_numel, kMaxFileQuantity / 16);
        if (!next) {
          return tf.Error("sub-group " + std::to_string(c_.sub_groups_.size()) +
                          " holds more than 2^58 elements per rank (at '" + Printable(p.name) +
                          "')");
        }
        offset = *next;
        sg.params.push_back(static_cast<uint32_t>(c_.params_.size()));
        c_.params_.push_back(std::move(p));
      }
      if (sg.params.empty()) {
        // DeepSpeed makes no empty sub-group (stage3.py) and cannot flatten
        // an empty param group (stage_1_and_2.py): the views could not
        // write this checkpoint back (found by checkpoint_fuzz: a reshard
        // view at N=1 dropped it, and its files no longer opened).
        return tf.Error("param_shapes[" + std::to_string(c_.sub_groups_.size()) +
                        "] lists no parameter");
      }
      if (flat_groups()) {
        // Stage 1/2: one flat buffer per param group, sub-group k = group k.
        sg.param_group = static_cast<uint32_t>(c_.sub_groups_.size());
        sg.numel = offset;
        sg.partition_numel = FlatPartitionNumel(offset, c_.world_size());
        for (uint32_t p : sg.params) {
          c_.params_[p].partition_numel = sg.partition_numel;
          c_.params_[p].param_group = sg.param_group;
        }
      } else {
        sg.partition_numel = offset;
        for (uint32_t p : sg.params) sg.numel += c_.params_[p].numel;
      }
      c_.sub_groups_.push_back(std::move(sg));
    }
    if (flat_groups()) c_.param_group_count_ = static_cast<uint32_t>(c_.sub_groups_.size());

    if (auto frozen = doc.MappingItems(doc.Get(root, "frozen_param_shapes"))) {
      for (const auto& [k, v] : *frozen) {
        auto name = doc.AsStr(k);
        auto shape = MatchShape(doc, v);
        if (!name || !shape) return tf.Error("frozen_param_shapes entry is not name -> torch.Size");
        auto numel = CheckedNumel(*shape);
        if (!numel) {
          return tf.Error("frozen param '" + Printable(*name) + "' of shape " +
                          ShapeString(*shape) + " has more than 2^58 elements");
        }
        UCFS_RETURN_IF_ERROR(CountElements(tf, *name, *numel));
        FrozenParamInfo f;
        f.name = std::string(*name);
        f.shape = std::move(*shape);
        f.numel = *numel;
        f.partition_numel = flat_groups() ? f.numel : PartitionNumel(f.numel, c_.world_size());
        c_.frozen_.push_back(std::move(f));
      }
    }
    if (auto shared = doc.MappingItems(doc.Get(root, "shared_params"))) {
      for (const auto& [k, v] : *shared) {
        auto alias = doc.AsStr(k);
        auto canonical = doc.AsStr(v);
        if (!alias || !canonical) return tf.Error("shared_params is not a dict of names");
        c_.tied_.push_back({std::string(*alias), std::string(*canonical)});
      }
    }
    if (auto v = doc.AsStr(doc.Get(root, "ds_version"))) c_.ds_version_ = std::string(*v);
    c_.global_steps_ = doc.AsInt(doc.Get(root, "global_steps"));
    if (auto dp = doc.AsInt(doc.Get(root, "dp_world_size"))) {
      // ZeRO-1/2 have no model file per rank to show a missing last rank:
      // the world size the files imply is then one too small.
      if (flat_groups() && *dp > static_cast<int64_t>(c_.world_size())) {
        const std::string missing = JoinPath(
            c_.files_.tag_dir,
            RankFileNameFor(RankFileName::Kind::kOptim, c_.files_.optim_prefix, c_.world_size()));
        return Status::NotFound(missing + ": missing: " + std::string(BaseName(tf.path())) +
                                " says dp_world_size " + std::to_string(*dp))
            .WithFile(missing);
      }
      if (*dp != static_cast<int64_t>(c_.world_size())) {
        return tf.Error("inconsistent world size: dp_world_size is " + std::to_string(*dp) +
                        " but the tag directory has optimizer files for " +
                        std::to_string(c_.world_size()) + " ranks");
      }
    }
    NodeId zero_cfg = doc.Get(doc.Get(root, "ds_config"), "zero_optimization");
    if (auto sgs = doc.AsNumber(doc.Get(zero_cfg, "sub_group_size")); sgs && *sgs >= 0) {
      // A float in the JSON (1e20: never split) may not fit: as good as infinite.
      c_.sub_group_size_ = *sgs < 0x1p64 ? static_cast<uint64_t>(*sgs) : UINT64_MAX;
    }
    c_.round_robin_gradients_ =
        doc.AsInt(doc.Get(zero_cfg, "round_robin_gradients")).value_or(0) != 0;
    // The module's entries are placeholders in the training dtype.
    if (auto module = doc.MappingItems(doc.Get(root, "module"))) {
      for (const auto& [k, v] : *module) {
        auto name = doc.AsStr(k);
        if (!name || !HasParam(std::string(*name))) continue;
        UCFS_ASSIGN_OR_RETURN(auto t, MatchIn(tf, v));
        if (t) {
          c_.lp_dtype_ = t->dtype;
          break;
        }
      }
    }
    return Status::OK();
  }

  // Adds a param's, frozen param's or buffer's elements to the model's
  // total, which must stay below 2^58 so that any sum of tensor sizes a view
  // makes (a consolidated file, an index's total_size) fits in 2^62 bytes.
  Status CountElements(const TorchFile& tf, std::string_view name, uint64_t numel) {
    auto total = CheckedAdd(total_elements_, numel, kMaxFileQuantity / 16);
    if (!total) {
      return tf.Error("the model has more than 2^58 elements in all (at '" + Printable(name) +
                      "')");
    }
    total_elements_ = *total;
    return Status::OK();
  }

  bool HasParam(const std::string& name) const {
    for (const auto& p : c_.params_) {
      if (p.name == name) return true;
    }
    return false;
  }

  // MatchTensor, with the file named in its errors.
  static Result<std::optional<TensorRef>> MatchIn(const TorchFile& tf, NodeId id) {
    auto t = MatchTensor(*tf.doc, id);
    if (!t.ok()) return t.status().Annotate(tf.path());
    return t;
  }

  Result<TensorRef> RequireTensor(const TorchFile& tf, NodeId id, const std::string& what) {
    auto t = MatchTensor(*tf.doc, id);
    if (!t.ok()) return t.status().Annotate(tf.path() + ": " + what);
    if (!t->has_value()) return tf.Error(what + " is not a tensor");
    return std::move(**t);
  }

  // One rank's optimizer file: its flat buffers and per-element states.
  Status ReadOptimizerStates(uint32_t rank, const TorchFile& tf) {
    const Document& doc = *tf.doc;
    const NodeId osd = doc.Get(doc.root(), "optimizer_state_dict");
    if (!doc.MappingItems(osd)) return tf.Error("no 'optimizer_state_dict' dict");
    auto stage = DecodeZeroStage(doc, doc.Get(osd, "zero_stage"));
    if (!stage) return tf.Error("no readable 'zero_stage'");
    if (rank == 0) {
      c_.zero_stage_ = *stage;
      c_.optimizer_class_ = "DeepSpeedZeroOptimizer_Stage3";
    }
    if (*stage != 3) {
      return tf.Error("zero_stage is " + std::to_string(*stage) +
                      ", but the tag directory has a model-states file per rank, as only ZeRO "
                      "stage 3 saves them");
    }
    const NodeId pc = doc.Get(osd, "partition_count");
    std::optional<int64_t> partition_count = doc.AsInt(pc);
    if (!partition_count) {
      // ZeRO-1/2 style: one count per group, all equal.
      if (auto counts = doc.SequenceItems(pc); counts && !counts->empty()) {
        partition_count = doc.AsInt(counts->front());
      }
    }
    if (!partition_count) return tf.Error("no 'partition_count'");
    if (*partition_count != static_cast<int64_t>(c_.world_size())) {
      return tf.Error("inconsistent world size: partition_count is " +
                      std::to_string(*partition_count) + " but the tag directory has " +
                      std::to_string(c_.world_size()) + " ranks of optimizer files");
    }
    auto flats = doc.SequenceItems(doc.Get(osd, "fp32_flat_groups"));
    if (!flats) return tf.Error("no 'fp32_flat_groups' list");
    const size_t groups = c_.sub_groups_.size();
    if (flats->size() != groups) {
      return tf.Error(std::to_string(flats->size()) + " fp32_flat_groups, but param_shapes in " +
                      std::string(BaseName(c_.files_.model_files[0])) + " has " +
                      std::to_string(groups) + " sub-groups");
    }
    if (groups == 0) return tf.Error("no trainable parameters: param_shapes is empty");
    const NodeId inner = doc.Get(osd, "optimizer_state_dict");
    const NodeId state = doc.Get(inner, "state");
    auto state_items = doc.MappingItems(state);

    // torch.optim keys the state of sub-group k by k.
    auto per_group = [&](size_t k) {
      NodeId found = pickle::kNoNode;
      if (state_items) {
        for (const auto& [key, value] : *state_items) {
          if (doc.AsInt(key) == static_cast<int64_t>(k)) found = value;
        }
      }
      return found;
    };
    if (rank == 0) {
      UCFS_ASSIGN_OR_RETURN(TensorRef flat0, RequireTensor(tf, (*flats)[0], "fp32_flat_groups[0]"));
      UCFS_RETURN_IF_ERROR(DefineStates(tf, flat0, per_group(0), flat0.numel(), flat0.numel()));
      UCFS_RETURN_IF_ERROR(ReadParamGroups(tf, doc.Get(inner, "param_groups")));
      UCFS_RETURN_IF_ERROR(AllocateSlots(tf));
    }
    return ReadFlatBuffers(rank, tf, *flats, "fp32_flat_groups", per_group);
  }

  // One rank's optimizer file at ZeRO stage 1 or 2: per param group, its
  // partition of the fp32 weights (single_partition_of_fp32_groups) and of
  // the base optimizer's states (base_optimizer_state).
  Status ReadFlatGroupOptimizerStates(uint32_t rank, const TorchFile& tf) {
    const Document& doc = *tf.doc;
    const NodeId osd = doc.Get(doc.root(), "optimizer_state_dict");
    if (!doc.MappingItems(osd)) return tf.Error("no 'optimizer_state_dict' dict");
    // DeepSpeedZeroOptimizer records its stage; BF16_Optimizer does not (its
    // stage is the config's: 0 or 1).
    int stage = 0;
    std::string optimizer_class;
    if (const NodeId zs = doc.Get(osd, "zero_stage"); zs != pickle::kNoNode) {
      auto decoded = DecodeZeroStage(doc, zs);
      if (!decoded) return tf.Error("no readable 'zero_stage'");
      stage = *decoded;
      optimizer_class = "DeepSpeedZeroOptimizer";
      if (stage == 3) {
        return tf.Error("zero_stage is 3, but the tag directory has " + SharedModelFileName() +
                        " and no per-rank model states, as only ZeRO stages 0-2 save them");
      }
    } else {
      const NodeId zero_cfg = doc.Get(doc.Get(doc.root(), "ds_config"), "zero_optimization");
      stage = static_cast<int>(doc.AsInt(doc.Get(zero_cfg, "stage")).value_or(0));
      optimizer_class = "BF16_Optimizer";
    }
    if (rank == 0) {
      c_.zero_stage_ = stage;
      c_.optimizer_class_ = optimizer_class;
    } else if (optimizer_class != c_.optimizer_class_ || stage != c_.zero_stage_) {
      return tf.Error("written by " + optimizer_class + " at ZeRO stage " + std::to_string(stage) +
                      ", but rank 0's by " + c_.optimizer_class_ + " at stage " +
                      std::to_string(c_.zero_stage_) + ": files of different runs");
    }

    // One count per param group; expert (MoE) groups may be partitioned over
    // fewer ranks than the others.
    const NodeId pc = doc.Get(osd, "partition_count");
    std::vector<NodeId> counts;
    if (auto items = doc.SequenceItems(pc)) {
      counts = *items;
    } else if (doc.AsInt(pc)) {
      counts = {pc};
    }
    if (counts.empty()) return tf.Error("no 'partition_count'");
    for (NodeId id : counts) {
      auto count = doc.AsInt(id);
      if (!count) return tf.Error("partition_count holds " + doc.Repr(id, 40) + ", not a number");
      if (*count != static_cast<int64_t>(c_.world_size())) {
        return tf.Error("inconsistent world size: partition_count is " + doc.Repr(pc, 80) +
                        " but the tag directory has " + std::to_string(c_.world_size()) +
                        " ranks of optimizer files (param groups partitioned over fewer ranks, "
                        "as MoE expert groups are, are not supported)");
      }
    }

    auto flats = doc.SequenceItems(doc.Get(osd, "single_partition_of_fp32_groups"));
    if (!flats) return tf.Error("no 'single_partition_of_fp32_groups' list");
    const size_t groups = c_.sub_groups_.size();
    if (flats->size() != groups) {
      return tf.Error(std::to_string(flats->size()) +
                      " single_partition_of_fp32_groups, but param_shapes in " +
                      std::string(BaseName(c_.files_.model_files[0])) + " has " +
                      std::to_string(groups) + " param groups");
    }
    if (groups == 0) return tf.Error("no trainable parameters: param_shapes is empty");

    // base_optimizer_state is torch's optimizer.state_dict() ({'state': {k:
    // ...}, 'param_groups': [...]}), or with elastic_checkpoint a list of
    // each group's state without its padding.
    const NodeId base = doc.Get(osd, "base_optimizer_state");
    std::optional<std::vector<std::pair<NodeId, NodeId>>> state_items;
    std::optional<std::vector<NodeId>> elastic_items;
    if (doc.MappingItems(base)) {
      state_items = doc.MappingItems(doc.Get(base, "state"));
    } else {
      elastic_items = doc.SequenceItems(base);
      if (!elastic_items) return tf.Error("no 'base_optimizer_state' dict or list");
    }
    auto per_group = [&](size_t k) {
      NodeId found = pickle::kNoNode;
      if (elastic_items) {
        if (k < elastic_items->size()) found = (*elastic_items)[k];
      } else if (state_items) {
        for (const auto& [key, value] : *state_items) {
          if (doc.AsInt(key) == static_cast<int64_t>(k)) found = value;
        }
      }
      return found;
    };
    if (rank == 0) {
      UCFS_ASSIGN_OR_RETURN(TensorRef flat0,
                            RequireTensor(tf, (*flats)[0], "single_partition_of_fp32_groups[0]"));
      const SubGroupInfo& g0 = c_.sub_groups_[0];
      UCFS_RETURN_IF_ERROR(DefineStates(tf, flat0, per_group(0),
                                        FlatValidNumel(g0.numel, c_.world_size(), 0),
                                        g0.partition_numel));
      UCFS_RETURN_IF_ERROR(AllocateSlots(tf));
    }
    return ReadFlatBuffers(rank, tf, *flats, "single_partition_of_fp32_groups", per_group);
  }

  // One slot per rank, flat buffer and state: bounded before allocating, as
  // every count comes from the files.
  Status AllocateSlots(const TorchFile& tf) {
    const size_t groups = c_.sub_groups_.size();
    auto slots = CheckedMul<uint64_t>(c_.world_size(), groups);
    if (slots) slots = CheckedMul<uint64_t>(*slots, c_.states_.size(), kMaxSlots);
    if (!slots) {
      return tf.Error(std::to_string(groups) + " flat buffers of " +
                      std::to_string(c_.states_.size()) + " states at world size " +
                      std::to_string(c_.world_size()) + " are more than " +
                      std::to_string(kMaxSlots) + " in all");
    }
    c_.flat_slots_.resize(*slots);
    c_.scalars_.resize(groups);
    return Status::OK();
  }

  // Rank `rank`'s copy of every flat buffer: `flats[k]` holds the fp32
  // weights of buffer k, per_group(k) the optimizer's state of it.
  template <typename PerGroup>
  Status ReadFlatBuffers(uint32_t rank, const TorchFile& tf, const std::vector<NodeId>& flats,
                         const std::string& flats_name, const PerGroup& per_group) {
    const Document& doc = *tf.doc;
    for (size_t k = 0; k < c_.sub_groups_.size(); ++k) {
      const std::string where = flats_name + "[" + std::to_string(k) + "]";
      UCFS_ASSIGN_OR_RETURN(TensorRef flat, RequireTensor(tf, flats[k], where));
      UCFS_RETURN_IF_ERROR(SetSlot(tf, rank, k, 0, flat, where));
      const NodeId state = per_group(k);
      for (size_t s = 1; s < c_.states_.size(); ++s) {
        const std::string what =
            "optimizer state[" + std::to_string(k) + "]['" + Printable(c_.states_[s].name) + "']";
        const NodeId v = doc.Get(state, c_.states_[s].name);
        if (v == pickle::kNoNode) return tf.Error("no " + what);
        UCFS_ASSIGN_OR_RETURN(TensorRef t, RequireTensor(tf, v, what));
        UCFS_RETURN_IF_ERROR(SetSlot(tf, rank, k, s, t, what));
      }
      if (rank == 0) UCFS_RETURN_IF_ERROR(ReadScalars(tf, k, state));
    }
    return Status::OK();
  }

  // The per-element states, from rank 0's first flat buffer: "fp32", then
  // every 1-D state tensor of a partition's length (between min_numel and
  // max_numel elements), in the optimizer's order.
  Status DefineStates(const TorchFile& tf, const TensorRef& flat, NodeId state0, uint64_t min_numel,
                      uint64_t max_numel) {
    c_.states_.push_back({"fp32", flat.dtype, flat.requires_grad});
    if (state0 == pickle::kNoNode) return Status::OK();
    const Document& doc = *tf.doc;
    auto entries = doc.MappingItems(state0);
    if (!entries) return tf.Error("optimizer state[0] is not a dict");
    for (const auto& [name, v] : *entries) {
      auto n = doc.AsStr(name);
      if (!n) continue;
      UCFS_ASSIGN_OR_RETURN(auto t, MatchIn(tf, v));
      if (t && t->shape.size() == 1 && t->numel() >= min_numel && t->numel() <= max_numel) {
        // Adam has 2, the optimizers DeepSpeed knows at most a few; every
        // rank and sub-group is then searched for each by name.
        if (c_.states_.size() > kMaxStates) {
          return tf.Error("optimizer state[0] has more than " + std::to_string(kMaxStates) +
                          " per-element states");
        }
        c_.states_.push_back({std::string(*n), t->dtype, t->requires_grad});
      }
    }
    return Status::OK();
  }

  Status ReadParamGroups(const TorchFile& tf, NodeId param_groups) {
    const Document& doc = *tf.doc;
    auto groups = doc.SequenceItems(param_groups);
    std::vector<int> owner(c_.sub_groups_.size(), -1);
    if (groups) {
      for (size_t g = 0; g < groups->size(); ++g) {
        auto ids = doc.SequenceItems(doc.Get((*groups)[g], "params"));
        if (!ids) return tf.Error("param_groups[" + std::to_string(g) + "] has no 'params' list");
        for (NodeId id : *ids) {
          auto k = doc.AsInt(id);
          if (!k || *k < 0 || static_cast<size_t>(*k) >= owner.size() || owner[*k] >= 0) {
            return tf.Error("param_groups[" + std::to_string(g) + "]['params'] names sub-group " +
                            doc.Repr(id, 20) + ", which is out of range or listed twice");
          }
          owner[*k] = static_cast<int>(g);
        }
      }
      c_.param_group_count_ = static_cast<uint32_t>(groups->size());
    } else {
      c_.param_group_count_ = 1;
    }
    for (size_t k = 0; k < owner.size(); ++k) {
      if (owner[k] < 0) {
        if (groups) {
          return tf.Error("sub-group " + std::to_string(k) + " belongs to no param group");
        }
        owner[k] = 0;
      }
      c_.sub_groups_[k].param_group = static_cast<uint32_t>(owner[k]);
      for (uint32_t p : c_.sub_groups_[k].params)
        c_.params_[p].param_group = static_cast<uint32_t>(owner[k]);
    }
    return Status::OK();
  }

  Status SetSlot(const TorchFile& tf, uint32_t rank, size_t k, size_t s, const TensorRef& t,
                 const std::string& what) {
    const SubGroupInfo& sg = c_.sub_groups_[k];
    if (flat_groups()) {
      // A partition may be saved without its padding (DeepSpeedZeroOptimizer
      // drops it from the fp32 weights; elastic checkpoints from every
      // state), never without a valid element.
      const uint64_t valid = FlatValidNumel(sg.numel, c_.world_size(), rank);
      if (t.shape.size() != 1 || t.numel() < valid || t.numel() > sg.partition_numel ||
          !t.contiguous()) {
        return tf.Error(what + " has shape " + ShapeString(t.shape) + ", but param group " +
                        std::to_string(k) + " (" + std::to_string(sg.numel) +
                        " elements) has partitions of " + std::to_string(sg.partition_numel) +
                        " at world size " + std::to_string(c_.world_size()) + ", " +
                        std::to_string(valid) + " of them valid on rank " + std::to_string(rank));
      }
    } else if (t.shape.size() != 1 || t.numel() != sg.partition_numel || !t.contiguous()) {
      return tf.Error(what + " has shape " + ShapeString(t.shape) + ", but sub-group " +
                      std::to_string(k) + "'s params need a flat buffer of " +
                      std::to_string(sg.partition_numel) + " elements at world size " +
                      std::to_string(c_.world_size()));
    }
    if (t.dtype != c_.states_[s].dtype) {
      return tf.Error(what + " is " + std::string(Info(t.dtype).torch_name) + " but rank 0's is " +
                      std::string(Info(c_.states_[s].dtype).torch_name));
    }
    UCFS_ASSIGN_OR_RETURN(uint64_t offset, tf.DataOffset(t));
    Checkpoint::Slot& slot =
        c_.flat_slots_[(rank * c_.sub_groups_.size() + k) * c_.states_.size() + s];
    slot.file = rank;
    slot.offset = offset;
    slot.present = true;
    return Status::OK();
  }

  Status ReadScalars(const TorchFile& tf, size_t k, NodeId per_group) {
    const Document& doc = *tf.doc;
    auto entries = doc.MappingItems(per_group);
    if (!entries) return Status::OK();
    for (const auto& [name, v] : *entries) {
      auto n = doc.AsStr(name);
      if (!n) continue;
      ScalarState s;
      s.name = std::string(*n);
      if (auto num = doc.AsNumber(v)) {
        s.value = *num;
        s.dtype = doc.node(v).kind == Kind::kFloat ? DType::kFloat64 : DType::kInt64;
      } else {
        UCFS_ASSIGN_OR_RETURN(auto t, MatchIn(tf, v));
        if (!t || t->numel() != 1 || !t->shape.empty()) continue;  // per-element, or not ours
        UCFS_ASSIGN_OR_RETURN(s.value, tf.ScalarValue(*t));
        UCFS_ASSIGN_OR_RETURN(uint64_t offset, tf.DataOffset(*t));
        s.extent = Extent{0, offset, t->element_size()};  // rank 0's optimizer file is source 0
        s.is_tensor = true;
        s.dtype = t->dtype;
      }
      c_.scalars_[k].push_back(std::move(s));
    }
    return Status::OK();
  }

  // Each rank's frozen_param_fragments: this rank's partition of each frozen
  // param, in the model-states file.
  Status ReadFrozenFragments(const TorchFile& model0) {
    const uint32_t w = c_.world_size();
    auto slots = CheckedMul<uint64_t>(c_.frozen_.size(), w, kMaxSlots);
    if (!slots) {
      return model0.Error(std::to_string(c_.frozen_.size()) + " frozen params at world size " +
                          std::to_string(w) + " are more than " + std::to_string(kMaxSlots) +
                          " fragments in all");
    }
    c_.frozen_slots_.resize(*slots);
    if (c_.frozen_.empty()) return Status::OK();
    for (uint32_t r = 0; r < w; ++r) {
      const std::string& path = c_.files_.model_files[r];
      if (path.empty()) {
        spdlog::warn(
            "{}: missing, so frozen parameters cannot be read",
            JoinPath(c_.files_.tag_dir, RankFileNameFor(RankFileName::Kind::kModel, "", r)));
        continue;
      }
      TorchFile loaded;
      const TorchFile* tf = &model0;
      if (r > 0) {
        UCFS_ASSIGN_OR_RETURN(loaded, Load(w + r, path));
        tf = &loaded;
      }
      const NodeId fragments = tf->doc->Get(tf->doc->root(), "frozen_param_fragments");
      for (size_t f = 0; f < c_.frozen_.size(); ++f) {
        FrozenParamInfo& info = c_.frozen_[f];
        const std::string what = "frozen_param_fragments['" + Printable(info.name) + "']";
        const NodeId v = tf->doc->Get(fragments, info.name);
        if (v == pickle::kNoNode) return tf->Error("no " + what);
        UCFS_ASSIGN_OR_RETURN(TensorRef t, RequireTensor(*tf, v, what));
        if (t.numel() < info.partition_numel || !t.contiguous()) {
          return tf->Error(what + " has " + std::to_string(t.numel()) +
                           " elements, the partition of " + std::to_string(info.numel) + " over " +
                           std::to_string(w) + " ranks needs " +
                           std::to_string(info.partition_numel));
        }
        if (r == 0) {
          info.dtype = t.dtype;
        } else if (t.dtype != info.dtype) {
          return tf->Error(what + " dtype differs from rank 0's");
        }
        UCFS_ASSIGN_OR_RETURN(uint64_t offset, tf->DataOffset(t));
        c_.frozen_slots_[f * w + r] = {w + r, offset, true};
      }
    }
    return Status::OK();
  }

  // ZeRO-1/2 model states hold the whole model: a frozen parameter is its
  // module entry (stage 2 also lists it in frozen_param_shapes and keeps a
  // copy in frozen_param_fragments; stage 1 and BF16_Optimizer do neither,
  // so there every module entry that is no trainable param, buffer or tied
  // alias is one).
  Status ReadWholeFrozenParams(const TorchFile& model0) {
    const Document& doc = *model0.doc;
    const NodeId root = doc.root();
    auto module = doc.MappingItems(doc.Get(root, "module"));
    std::vector<Checkpoint::Slot> found(c_.frozen_.size());
    if (module) {
      for (const auto& [k, v] : *module) {
        auto name = doc.AsStr(k);
        if (!name) return model0.Error("module holds a key that is not a string");
        const std::string n(*name);
        if (HasParam(n) || IsBuffer(n) || IsTiedAlias(n)) continue;
        const std::string what = "module['" + Printable(n) + "']";
        UCFS_ASSIGN_OR_RETURN(TensorRef t, RequireTensor(model0, v, what));
        auto f = c_.FindFrozen(n);
        if (!f) {
          auto numel = CheckedNumel(t.shape);
          if (!numel) return model0.Error(what + " has more than 2^58 elements");
          UCFS_RETURN_IF_ERROR(CountElements(model0, n, *numel));
          FrozenParamInfo info;
          info.name = n;
          info.shape = t.shape;
          info.numel = *numel;
          info.partition_numel = *numel;
          c_.frozen_.push_back(std::move(info));
          found.emplace_back();
          f = c_.frozen_.size() - 1;
        }
        FrozenParamInfo& info = c_.frozen_[*f];
        if (t.shape != info.shape || !t.contiguous()) {
          return model0.Error("frozen param " + what + " has shape " + ShapeString(t.shape) +
                              (t.contiguous() ? "" : " (not contiguous)") +
                              ", but frozen_param_shapes says " + ShapeString(info.shape));
        }
        info.dtype = t.dtype;
        UCFS_ASSIGN_OR_RETURN(uint64_t offset, model0.DataOffset(t));
        found[*f] = {c_.world_size(), offset, true};  // rank 0's model file is source W
      }
    }
    for (size_t f = 0; f < c_.frozen_.size(); ++f) {
      if (!found[f].present) {
        return model0.Error("frozen param '" + Printable(c_.frozen_[f].name) +
                            "' of frozen_param_shapes is not in module");
      }
    }
    // The whole tensor is "rank 0's fragment" (FlatGroup placement with
    // P = numel puts every element on rank 0).
    const uint32_t w = c_.world_size();
    auto slots = CheckedMul<uint64_t>(c_.frozen_.size(), w, kMaxSlots);
    if (!slots) {
      return model0.Error(std::to_string(c_.frozen_.size()) + " frozen params at world size " +
                          std::to_string(w) + " are more than " + std::to_string(kMaxSlots) +
                          " fragments in all");
    }
    c_.frozen_slots_.assign(*slots, Checkpoint::Slot{});
    for (size_t f = 0; f < c_.frozen_.size(); ++f) c_.frozen_slots_[f * w] = found[f];
    return Status::OK();
  }

  bool IsBuffer(const std::string& name) const {
    for (const auto& b : c_.buffers_) {
      if (b.name == name) return true;
    }
    return false;
  }

  bool IsTiedAlias(const std::string& name) const {
    for (const auto& t : c_.tied_) {
      if (t.alias == name) return true;
    }
    return false;
  }

  // Persistent buffers are real tensors in rank 0's module.
  Status ReadBuffers(const TorchFile& model0) {
    const Document& doc = *model0.doc;
    auto names = doc.SequenceItems(doc.Get(doc.root(), "buffer_names"));
    if (!names) return Status::OK();
    const NodeId module = doc.Get(doc.root(), "module");
    for (NodeId n : *names) {
      auto name = doc.AsStr(n);
      if (!name) return model0.Error("buffer_names holds a non-string");
      const std::string what = "module['" + Printable(*name) + "']";
      const NodeId v = doc.Get(module, *name);
      if (v == pickle::kNoNode) return model0.Error("buffer " + what + " is missing");
      UCFS_ASSIGN_OR_RETURN(TensorRef t, RequireTensor(model0, v, what));
      if (!t.contiguous()) return model0.Error("buffer " + what + " is not contiguous");
      UCFS_RETURN_IF_ERROR(CountElements(model0, *name, t.numel()));
      UCFS_ASSIGN_OR_RETURN(uint64_t offset, model0.DataOffset(t));
      c_.buffers_.push_back(
          {std::string(*name), t.shape, t.dtype, Extent{c_.world_size(), offset, t.byte_size()}});
    }
    return Status::OK();
  }

  Env& env_;
  TorchFileSource& source_;
  Checkpoint c_;
  uint64_t total_elements_ = 0;  // CountElements
};

Result<Checkpoint> Checkpoint::Open(Env& env, const std::string& path,
                                    const CheckpointOptions& options) {
  DirectTorchFileSource direct(env);
  TorchFileSource& source = options.source != nullptr ? *options.source : direct;
  return CheckpointBuilder(env, source).Build(path, options);
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

std::optional<size_t> Checkpoint::FindFrozen(std::string_view name) const {
  for (size_t i = 0; i < frozen_.size(); ++i) {
    if (frozen_[i].name == name) return i;
  }
  return std::nullopt;
}

std::vector<RankPiece> Checkpoint::PlaceElements(uint64_t numel, uint64_t partition_numel,
                                                 uint64_t flat_offset, uint64_t first,
                                                 uint64_t last) const {
  if (partitioning_ == Partitioning::kPerParam) {
    return SplitByRank(numel, world_size(), first, last);
  }
  // The flat offsets fit: Open bounds every group to 2^58 elements.
  std::vector<RankPiece> pieces =
      SplitFlatByRank(partition_numel, flat_offset + first, flat_offset + last);
  for (RankPiece& piece : pieces) piece.global_begin -= flat_offset;
  return pieces;
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
  const uint32_t es = Info(states_[state].dtype).element_size;
  UCFS_ASSIGN_OR_RETURN(auto elements, ElementsCovering(p.numel, es, begin, end));
  if (begin == end) return Status::OK();
  const bool per_param = partitioning_ == Partitioning::kPerParam;
  // Rank r's slot is flat_slots_[(r * groups + sub_group) * states + state].
  const size_t stride = sub_groups_.size() * states_.size();
  return MapPieces(es, per_param ? p.offset : 0, &flat_slots_[p.sub_group * states_.size() + state],
                   stride, begin, end,
                   PlaceElements(p.numel, p.partition_numel, per_param ? 0 : p.offset,
                                 elements.first, elements.second),
                   out);
}

std::vector<uint64_t> Checkpoint::ElementsPerRank(size_t param) const {
  std::vector<uint64_t> counts(world_size());
  if (param >= params_.size()) return counts;
  const ParamInfo& p = params_[param];
  const bool per_param = partitioning_ == Partitioning::kPerParam;
  for (const RankPiece& piece :
       PlaceElements(p.numel, p.partition_numel, per_param ? 0 : p.offset, 0, p.numel)) {
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
