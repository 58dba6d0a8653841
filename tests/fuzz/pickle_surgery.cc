#include "pickle_surgery.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ucfs/codec/torch_tensor.h"

namespace ucfs_fuzz {

namespace {

size_t PrefixChildren(const Node& n) {
  return (n.a != kNoNode) + (n.b != kNoNode) + (n.state != kNoNode);
}

}  // namespace

std::vector<NodeId*> Children(Document& doc, NodeId id) {
  Node& n = doc.mutable_node(id);
  std::vector<NodeId*> out;
  if (n.a != kNoNode) out.push_back(&n.a);
  if (n.b != kNoNode) out.push_back(&n.b);
  if (n.state != kNoNode) out.push_back(&n.state);
  for (NodeId& item : n.items) out.push_back(&item);
  return out;
}

void Replace(Document& doc, const Place& at, NodeId with) {
  if (at.parent == kNoNode) {
    doc.set_root(with);
    return;
  }
  auto children = Children(doc, at.parent);
  if (at.slot < children.size()) *children[at.slot] = with;
}

bool Reaches(const Document& doc, NodeId from, NodeId target) {
  std::vector<bool> seen(doc.size());
  std::vector<NodeId> stack = {from};
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (id == kNoNode || id >= doc.size() || seen[id]) continue;
    if (id == target) return true;
    seen[id] = true;
    const Node& n = doc.node(id);
    stack.push_back(n.a);
    stack.push_back(n.b);
    stack.push_back(n.state);
    stack.insert(stack.end(), n.items.begin(), n.items.end());
  }
  return false;
}

Place PlaceOf(Document& doc, NodeId id) {
  Place p;
  p.node = id;
  if (id == doc.root()) return p;
  for (NodeId i = 0; i < doc.size(); ++i) {
    auto children = Children(doc, i);
    for (size_t s = 0; s < children.size(); ++s) {
      if (*children[s] == id) {
        p.parent = i;
        p.slot = s;
        return p;
      }
    }
  }
  p.node = kNoNode;  // unreachable from anything: editing it would change nothing
  return p;
}

Place ChildPlace(Document& doc, NodeId parent, size_t j) {
  Place p;
  auto children = Children(doc, parent);
  if (children.empty()) return p;
  p.parent = parent;
  p.slot = j % children.size();
  p.node = *children[p.slot];
  return p;
}

bool IsMappingNode(const Document& doc, NodeId id) {
  if (id == kNoNode) return false;
  const Node& n = doc.node(id);
  return n.kind == Kind::kDict ||
         ((n.kind == Kind::kReduce || n.kind == Kind::kNewObj) && n.items.size() > n.list_items);
}

Place Element(Document& doc, NodeId id, size_t k) {
  Place p;
  if (id == kNoNode) return p;
  const Node& n = doc.node(id);
  if (IsMappingNode(doc, id)) {
    const size_t begin = n.kind == Kind::kDict ? 0 : n.list_items;
    const size_t pairs = (n.items.size() - begin) / 2;
    if (pairs == 0) return p;
    const size_t item = begin + 2 * (k % pairs) + 1;
    p.parent = id;
    p.slot = PrefixChildren(n) + item;
    p.node = n.items[item];
    return p;
  }
  if (n.kind == Kind::kList || n.kind == Kind::kTuple || n.kind == Kind::kSet ||
      n.kind == Kind::kFrozenSet) {
    if (n.items.empty()) return p;
    p.parent = id;
    p.slot = k % n.items.size();
    p.node = n.items[p.slot];
  }
  return p;
}

Place Field(Document& doc, NodeId id, std::string_view key) {
  Place p;
  if (!IsMappingNode(doc, id)) return p;
  const Node& n = doc.node(id);
  const size_t begin = n.kind == Kind::kDict ? 0 : n.list_items;
  for (size_t i = begin; i + 1 < n.items.size(); i += 2) {
    auto s = doc.AsStr(n.items[i]);
    if (s && *s == key) {
      p.parent = id;
      p.slot = PrefixChildren(n) + i + 1;
      p.node = n.items[i + 1];
      return p;
    }
  }
  return p;
}

Place NamedPlace(Document& doc, std::span<const NamedPath> paths, size_t index, uint8_t k1,
                 uint8_t k2) {
  Place p;
  p.node = doc.root();
  const uint8_t ks[2] = {k1, k2};
  size_t next_k = 0;
  if (paths.empty()) return Place{};
  const NamedPath& path = paths[index % paths.size()];
  for (const char* seg : path) {
    if (seg == nullptr) break;
    p = std::string_view(seg) == "*" ? Element(doc, p.node, ks[next_k++ % 2])
                                     : Field(doc, p.node, seg);
    if (p.node == kNoNode) return p;
  }
  return p;
}

bool IsTensorCall(const Document& doc, NodeId id) {
  auto t = ucfs::MatchTensor(doc, id);
  return t.ok() && t->has_value();
}

Place TensorPart(Document& doc, NodeId call, uint8_t part) {
  Place p;
  if (call == kNoNode) return p;
  // Through _rebuild_parameter to the plain tensor.
  if (doc.IsGlobal(doc.node(call).a, "torch._utils", "_rebuild_parameter")) {
    auto args = doc.SequenceItems(doc.node(call).b);
    if (args && !args->empty() && part >= 13) return ChildPlace(doc, doc.node(call).b, 1);
    if (args && !args->empty()) call = (*args)[0];
  }
  const Node& c = doc.node(call);
  if (c.kind != Kind::kReduce || c.b == kNoNode) return p;
  const NodeId args = c.b;
  auto items = doc.SequenceItems(args);
  if (!items || items->empty()) return p;
  const NodeId pid = (*items)[0];
  const NodeId pid_tuple = doc.node(pid).kind == Kind::kPersistentId ? doc.node(pid).a : kNoNode;
  auto in_args = [&](size_t i) {
    Place q;
    if (i < doc.node(args).items.size()) {
      q.parent = args;
      q.slot = i;
      q.node = doc.node(args).items[i];
    }
    return q;
  };
  auto in_pid = [&](size_t i) {
    Place q;
    if (pid_tuple != kNoNode && i < doc.node(pid_tuple).items.size()) {
      q.parent = pid_tuple;
      q.slot = i;
      q.node = doc.node(pid_tuple).items[i];
    }
    return q;
  };
  switch (part % 14) {
    case 0:
      return in_pid(1);  // storage class
    case 1:
      return in_pid(2);  // storage key
    case 2:
      return in_pid(3);  // location
    case 3:
      return in_pid(4);  // storage numel
    case 4:
      return in_args(1);  // storage offset
    case 5:
      return in_args(2);  // size
    case 6:
      return in_args(3);  // stride
    case 7:
      return in_args(4);  // requires_grad
    case 8:
      p.node = args;
      p.parent = call;
      p.slot = c.a != kNoNode ? 1 : 0;  // b comes after a
      return p;
    case 9: {
      Place q = in_args(0);  // the persistent id itself
      return q;
    }
    case 10:
      return ChildPlace(doc, call, 0);  // the rebuild function
    case 11: {
      Place size = in_args(2);  // torch.Size's dims tuple
      if (size.node != kNoNode && doc.node(size.node).kind == Kind::kReduce) {
        auto sargs = doc.SequenceItems(doc.node(size.node).b);
        if (sargs && !sargs->empty()) return Element(doc, doc.node(size.node).b, 0);
      }
      return size;
    }
    case 12:
      p = PlaceOf(doc, call);
      return p;
    default:
      return in_pid(0);  // 'storage'
  }
}

NodeId KthOfKind(const Document& doc, Kind kind, size_t k) {
  std::vector<NodeId> found;
  for (NodeId i = 0; i < doc.size(); ++i) {
    if (doc.node(i).kind == kind) found.push_back(i);
  }
  return found.empty() ? kNoNode : found[k % found.size()];
}

NodeId KthTensor(const Document& doc, size_t k) {
  std::vector<NodeId> found;
  for (NodeId i = 0; i < doc.size(); ++i) {
    if (IsTensorCall(doc, i)) found.push_back(i);
  }
  return found.empty() ? kNoNode : found[k % found.size()];
}

NodeId KthSize(const Document& doc, size_t k) {
  std::vector<NodeId> found;
  for (NodeId i = 0; i < doc.size(); ++i) {
    const Node& n = doc.node(i);
    if (n.kind == Kind::kReduce && doc.IsGlobal(n.a, "torch", "Size")) found.push_back(i);
  }
  return found.empty() ? kNoNode : found[k % found.size()];
}

NodeId PlainCall(const Document& doc, NodeId id) {
  if (id == kNoNode || doc.node(id).kind != Kind::kReduce) return kNoNode;
  if (doc.IsGlobal(doc.node(id).a, "torch._utils", "_rebuild_parameter")) {
    auto args = doc.SequenceItems(doc.node(id).b);
    return args && !args->empty() ? PlainCall(doc, (*args)[0]) : kNoNode;
  }
  return doc.node(id).b == kNoNode ? kNoNode : id;
}

std::vector<NodeId> TensorsBelow(const Document& doc, NodeId id) {
  std::vector<NodeId> out;
  std::vector<bool> seen(doc.size());
  std::vector<NodeId> stack = {id};
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (n == kNoNode || n >= doc.size() || seen[n]) continue;
    seen[n] = true;
    if (IsTensorCall(doc, n)) {
      out.push_back(n);
      continue;
    }
    const Node& node = doc.node(n);
    stack.push_back(node.a);
    stack.push_back(node.b);
    stack.push_back(node.state);
    stack.insert(stack.end(), node.items.begin(), node.items.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ucfs_fuzz
