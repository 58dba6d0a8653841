// ds_to_universal.py of DeepSpeed 0.19.8 at ZeRO-1/2, after merging the
// optimizer's states: "ZeRO may not create optimizer fragments for
// parameters that have not received a gradient. Universal restore still
// needs their model values." For every entry of the model states' module
// with no zero/<name>/fp32.pt yet:
//
//     torch.save({'param': tensor.float()}, zero/<name>/fp32.pt)
//
// A float32 tensor's .float() is the tensor itself, so torch.save writes it
// as saved (its whole storage, offset and strides): its pickle is copied and
// its bytes are the model-states file's. Any other dtype becomes a new
// contiguous float32 tensor, widened as it is read.
#include <set>
#include <string>

#include "ucfs/checkpoint/ds_version.h"
#include "ucfs/views/torch_pickle_builder.h"
#include "views/cast_state.h"
#include "views/universal_files.h"

namespace ucfs {

using pickle::Document;
using pickle::NodeId;

namespace {

Result<std::shared_ptr<TorchFileContent>> ModuleTensorFile(
    const std::shared_ptr<const Checkpoint>& ckpt, const std::string& name, NodeId value,
    const TensorRef& t, const std::shared_ptr<SourceFiles>& files, SourceFiles* crc_reader) {
  // The model-states file of ZeRO-1/2 is source W (checkpoint.h).
  const uint32_t model_source = ckpt->world_size();
  TorchPickleBuilder builder;
  Document& doc = builder.doc();
  NodeId tensor = pickle::kNoNode;
  if (t.dtype == DType::kFloat32) {
    std::vector<NodeId> copied;
    UCFS_ASSIGN_OR_RETURN(tensor, builder.Copy(ckpt->rank0_model(), value,
                                               ckpt->rank0_model_summary(), model_source, &copied));
  } else {
    const std::string& path = ckpt->rank0_model_summary().path;
    if (!t.contiguous()) {
      return Status::NotSupported(path + ": module tensor '" + Printable(name) +
                                  "' is not contiguous: its float32 copy is not made");
    }
    const ZipRecord* record = ckpt->rank0_model_summary().Find("data/" + t.storage_key);
    if (record == nullptr) {
      return Status::Corruption(path + ": no storage record for module tensor '" + Printable(name) +
                                "'");
    }
    const uint64_t at = record->data_offset + t.byte_offset();
    const uint64_t bytes = t.byte_size();
    if (t.byte_offset() > record->size || bytes > record->size - t.byte_offset()) {
      return Status::Corruption(path + ": module tensor '" + Printable(name) +
                                "' lies outside its storage record");
    }
    auto widened = std::make_shared<const WidenedToFloat32>(
        files, t.dtype, t.numel(), name,
        [model_source, at, bytes](uint64_t begin, uint64_t end, std::vector<Extent>* out) {
          if (begin > end || end > bytes) return Status::InvalidArgument("past a module tensor");
          out->push_back({model_source, at + begin, end - begin});
          return Status::OK();
        });
    const uint64_t length = widened->size();
    tensor = builder.NewTensor(DType::kFloat32, t.shape, t.requires_grad,
                               {ComputedRun(std::move(widened), length)});
  }
  doc.set_root(doc.AddDict({doc.AddStr("param"), tensor}));
  return builder.Finish(ckpt, "fp32", crc_reader);
}

}  // namespace

Status AddModuleTensorFiles(View& view, InodeId zero, const std::shared_ptr<const Checkpoint>& ckpt,
                            const std::shared_ptr<SourceFiles>& files, SourceFiles* crc_reader) {
  if (ckpt->partitioning() != Partitioning::kFlatGroup ||
      !VersionAtLeast(ckpt->ds_version(), {0, 19, 8})) {
    return Status::OK();
  }
  std::set<std::string> written;
  for (const ParamInfo& p : ckpt->params()) written.insert(p.name);
  const Document& doc = ckpt->rank0_model();
  auto module = doc.MappingItems(doc.Get(doc.root(), "module"));
  if (!module) return Status::OK();  // pipeline stages keep theirs in layer files
  for (const auto& [key, value] : *module) {
    auto name = doc.AsStr(key);
    if (!name || written.contains(std::string(*name))) continue;
    auto t = MatchTensor(doc, value);
    if (!t.ok()) return t.status().Annotate(ckpt->rank0_model_summary().path);
    if (!t->has_value()) continue;  // .float() of no tensor: the converter fails there
    const std::string n(*name);
    UCFS_RETURN_IF_ERROR(CheckParamDirectoryName(*ckpt, n));
    written.insert(n);
    UCFS_ASSIGN_OR_RETURN(auto content, ModuleTensorFile(ckpt, n, value, **t, files, crc_reader));
    UCFS_ASSIGN_OR_RETURN(InodeId dir, view.AddDirectory(zero, n));
    std::vector<Xattr> xattrs = {{"user.ucfs.param", n},
                                 {"user.ucfs.state", "fp32"},
                                 {"user.ucfs.dtype", "float32"},
                                 {"user.ucfs.shape", ShapeString((*t)->shape)}};
    UCFS_RETURN_IF_ERROR(
        view.AddFile(dir, "fp32.pt", std::move(content), std::move(xattrs)).status());
  }
  return Status::OK();
}

}  // namespace ucfs
