#include "ucfs/codec/describe.h"

#include "ucfs/codec/torch_tensor.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::Kind;
using pickle::NodeId;

class Describer {
 public:
  Describer(const Document& doc, const DescribeOptions& options) : doc_(doc), options_(options) {}

  // Depth is bounded: documents from Parse are acyclic and at most
  // ParseLimits::max_depth deep.
  void Emit(NodeId id, int indent) {
    if (over_budget_) return;
    if (++values_ > options_.max_values || out_.size() > options_.max_output_bytes) {
      over_budget_ = true;
      return;
    }
    if (id == pickle::kNoNode) {
      out_ += "<none>";
      return;
    }
    auto tensor = MatchTensor(doc_, id);
    if (tensor.ok() && tensor->has_value()) {
      EmitTensor(**tensor);
      return;
    }
    const auto& n = doc_.node(id);
    if (auto shape = MatchShape(doc_, id); shape && n.kind == Kind::kReduce) {
      out_ += "torch.Size(" + doc_.Repr(doc_.node(n.b).items[0]) + ")";
      return;
    }
    const bool is_mapping =
        n.kind == Kind::kDict ||
        ((n.kind == Kind::kReduce || n.kind == Kind::kNewObj) &&
         (n.items.size() > n.list_items || doc_.IsGlobal(n.a, "collections", "OrderedDict")));
    if (auto items = doc_.MappingItems(id); items && is_mapping) {
      std::string head = n.kind == Kind::kDict ? "" : CallName(n) + " ";
      if (items->empty()) {
        out_ += head + "{}";
        return;
      }
      out_ += head + "{\n";
      size_t shown = 0;
      for (const auto& [k, v] : *items) {
        if (shown++ == options_.max_items) {
          Line(indent + 2, "... " + std::to_string(items->size() - options_.max_items) + " more");
          break;
        }
        out_.append(indent + 2, ' ');
        out_ += doc_.Repr(k, 120) + ": ";
        Emit(v, indent + 2);
        out_ += ",\n";
      }
      out_.append(indent, ' ');
      out_ += "}";
      if (n.state != pickle::kNoNode) {
        out_ += " state=";
        Emit(n.state, indent);
      }
      return;
    }
    if (n.kind == Kind::kList || n.kind == Kind::kTuple) {
      const bool scalars_only = AllScalars(n.items);
      const char* open = n.kind == Kind::kList ? "[" : "(";
      const char* close = n.kind == Kind::kList ? "]" : (n.items.size() == 1 ? ",)" : ")");
      if (n.items.empty() || scalars_only) {
        out_ += doc_.Repr(id, 200);
        return;
      }
      out_ += std::string(open) + "\n";
      size_t shown = 0;
      for (NodeId item : n.items) {
        if (shown++ == options_.max_items) {
          Line(indent + 2, "... " + std::to_string(n.items.size() - options_.max_items) + " more");
          break;
        }
        out_.append(indent + 2, ' ');
        Emit(item, indent + 2);
        out_ += ",\n";
      }
      out_.append(indent, ' ');
      out_ += close;
      return;
    }
    if (n.kind == Kind::kNewObj || (n.kind == Kind::kReduce && n.state != pickle::kNoNode)) {
      out_ += CallName(n);
      if (n.state != pickle::kNoNode) {
        out_ += " state=";
        Emit(n.state, indent);
      }
      return;
    }
    out_ += doc_.Repr(id, 200);
  }

  Result<std::string> Take() {
    if (over_budget_) {
      return Status::InvalidArgument(
          "the pickle renders as more than " + std::to_string(options_.max_values) + " values or " +
          std::to_string(options_.max_output_bytes >> 20) +
          " MiB: it references shared values so many times (a 'billion laughs' pickle?) that "
          "ucfs will not expand it");
    }
    return std::move(out_);
  }

 private:
  void Line(int indent, const std::string& text) {
    out_.append(indent, ' ');
    out_ += text + "\n";
  }
  std::string CallName(const pickle::Node& n) {
    const auto& callable = doc_.node(n.a);
    std::string name = callable.kind == Kind::kGlobal
                           ? Printable(callable.text) + "." + Printable(callable.name)
                           : "?";
    auto args = doc_.SequenceItems(n.b);
    if (args && !args->empty()) name += doc_.Repr(n.b, 80);
    return name;
  }
  bool AllScalars(const std::vector<NodeId>& items) {
    for (NodeId i : items) {
      Kind k = doc_.node(i).kind;
      if (k != Kind::kInt && k != Kind::kFloat && k != Kind::kBool && k != Kind::kNone &&
          k != Kind::kStr) {
        return false;
      }
    }
    return true;
  }
  void EmitTensor(const TensorRef& t) {
    out_ += "tensor(" + std::string(Info(t.dtype).torch_name) + "[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      out_ += (i ? ", " : "") + std::to_string(t.shape[i]);
    out_ += "]";
    if (t.requires_grad) out_ += ", requires_grad";
    if (options_.storage_details) {
      out_ += ", storage '" + Printable(t.storage_key) + "' " + Printable(t.location) + " of " +
              std::to_string(t.storage_numel);
      if (t.storage_offset) out_ += " at " + std::to_string(t.storage_offset);
    }
    out_ += ")";
  }

  const Document& doc_;
  const DescribeOptions& options_;
  std::string out_;
  size_t values_ = 0;  // Emit calls: values shown, shared ones each time
  bool over_budget_ = false;
};

}  // namespace

Result<std::string> Describe(const Document& doc, NodeId id, const DescribeOptions& options) {
  Describer d(doc, options);
  d.Emit(id, 0);
  UCFS_ASSIGN_OR_RETURN(std::string out, d.Take());
  return out + "\n";
}

}  // namespace ucfs
