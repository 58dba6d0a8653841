// Pickle writing: CPython's Pickler (Lib/pickle.py, protocol 2) re-enacted on
// a Document. Memo numbers are assigned in the order Python assigns them and
// containers are batched as Python batches them, which is what makes a
// parsed pickle come back byte for byte.
#include <bit>

#include "base/byte_order.h"
#include "ucfs/codec/pickle.h"

namespace ucfs::pickle {
namespace {

constexpr size_t kBatchSize = 1000;  // BATCHSIZE of CPython's _pickle.c
constexpr uint32_t kMaxDepth = 10000;

class Writer {
 public:
  Writer(const Document& doc, std::vector<NodeId>* persistent_ids)
      : doc_(doc), memo_(doc.size(), kUnset), persistent_ids_(persistent_ids) {}

  Result<std::string> Run() {
    out_ += "\x80\x02";
    UCFS_RETURN_IF_ERROR(Save(doc_.root()));
    out_ += '.';
    return std::move(out_);
  }

 private:
  static constexpr uint32_t kUnset = 0xffffffffu;

  void Put(NodeId id) {
    uint32_t idx = next_memo_++;
    memo_[id] = idx;
    if (idx < 256) {
      out_ += 'q';
      out_ += static_cast<char>(idx);
    } else {
      out_ += 'r';
      AppendLE32(&out_, idx);
    }
  }
  void GetMemo(uint32_t idx) {
    if (idx < 256) {
      out_ += 'h';
      out_ += static_cast<char>(idx);
    } else {
      out_ += 'j';
      AppendLE32(&out_, idx);
    }
  }
  void SaveInt(int64_t v) {
    if (v >= 0 && v <= 0xff) {
      out_ += 'K';
      out_ += static_cast<char>(v);
    } else if (v >= 0 && v <= 0xffff) {
      out_ += 'M';
      AppendLE16(&out_, static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      AppendLE32(&out_, static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {
      // LONG1 with the shortest two's-complement encoding (pickle.encode_long).
      std::string bytes;
      uint64_t u = static_cast<uint64_t>(v);
      for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
      while (bytes.size() > 1) {
        auto last = static_cast<uint8_t>(bytes.back());
        auto prev = static_cast<uint8_t>(bytes[bytes.size() - 2]);
        if ((last == 0x00 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80))) {
          bytes.pop_back();
        } else {
          break;
        }
      }
      out_ += '\x8a';
      out_ += static_cast<char>(bytes.size());
      out_ += bytes;
    }
  }
  void SaveLength(char short_op, char long_op, size_t n) {
    if (n < 256 && short_op != 0) {
      out_ += short_op;
      out_ += static_cast<char>(n);
    } else {
      out_ += long_op;
      AppendLE32(&out_, static_cast<uint32_t>(n));
    }
  }
  // CPython's C pickler batches three ways. Exact lists (batch_list_exact):
  // one item alone takes APPEND, otherwise every batch of up to 1000 is
  // MARK ... APPENDS. Exact dicts (batch_dict_exact): one pair alone takes
  // SETITEM, otherwise MARK ... SETITEMS batches are written while the last
  // one was full, so 1000 pairs end with an empty MARK SETITEMS. Items of a
  // REDUCE'd object come from an iterator (batch_list/batch_dict): a batch
  // of one takes APPEND/SETITEM. Reproducing all three is what keeps
  // round trips byte-exact.
  Status BatchedExactList(const std::vector<NodeId>& items) {
    if (items.size() == 1) {
      UCFS_RETURN_IF_ERROR(Save(items[0]));
      out_ += 'a';
      return Status::OK();
    }
    for (size_t i = 0; i < items.size();) {
      out_ += '(';
      for (size_t end = std::min(items.size(), i + kBatchSize); i < end; ++i) {
        UCFS_RETURN_IF_ERROR(Save(items[i]));
      }
      out_ += 'e';
    }
    return Status::OK();
  }
  // Also sets (ADDITEMS), which _pickle.c batches the same way.
  Status BatchedExactDict(const std::vector<NodeId>& kv, char add_op) {
    const size_t stride = add_op == 'u' ? 2 : 1;
    const size_t count = kv.size() / stride;
    if (count == 0) return Status::OK();
    if (count == 1 && add_op == 'u') {
      UCFS_RETURN_IF_ERROR(Save(kv[0]));
      UCFS_RETURN_IF_ERROR(Save(kv[1]));
      out_ += 's';
      return Status::OK();
    }
    size_t done = 0;
    size_t in_batch = 0;
    do {
      out_ += '(';
      in_batch = 0;
      for (; done < count && in_batch < kBatchSize; ++done, ++in_batch) {
        for (size_t j = 0; j < stride; ++j) UCFS_RETURN_IF_ERROR(Save(kv[done * stride + j]));
      }
      out_ += add_op;
    } while (in_batch == kBatchSize);
    return Status::OK();
  }
  Status Batched(const std::vector<NodeId>& items, size_t begin, size_t end, size_t stride,
                 char one_op, char many_op) {
    size_t count = (end - begin) / stride;
    for (size_t done = 0;; done += kBatchSize) {
      size_t n = std::min(kBatchSize, count - done);
      if (n > 1) out_ += '(';
      for (size_t i = 0; i < n * stride; ++i) {
        UCFS_RETURN_IF_ERROR(Save(items[begin + done * stride + i]));
      }
      if (n > 1) {
        out_ += many_op;
      } else if (n == 1) {
        out_ += one_op;
      }
      if (n < kBatchSize) return Status::OK();
    }
  }

  Status Save(NodeId id) {
    if (id == kNoNode || id >= doc_.size()) return Status::InvalidArgument("pickle: dangling node");
    if (memo_[id] != kUnset) {
      GetMemo(memo_[id]);
      return Status::OK();
    }
    if (++depth_ > kMaxDepth) return Status::InvalidArgument("pickle: object graph too deep");
    const Node& n = doc_.node(id);
    switch (n.kind) {
      case Kind::kNone:
        out_ += 'N';
        break;
      case Kind::kBool:
        out_ += n.scalar ? '\x88' : '\x89';
        break;
      case Kind::kInt:
        SaveInt(n.scalar);
        break;
      case Kind::kLong:
        SaveLong(n.text);
        break;
      case Kind::kFloat: {
        out_ += 'G';
        auto bits = static_cast<uint64_t>(n.scalar);
        for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
        break;
      }
      case Kind::kStr:
        SaveLength(0, 'X', n.text.size());
        out_ += n.text;
        Put(id);
        break;
      case Kind::kBytes:
        SaveLength('C', 'B', n.text.size());
        out_ += n.text;
        Put(id);
        break;
      case Kind::kTuple:
        UCFS_RETURN_IF_ERROR(SaveTuple(id, n));
        break;
      case Kind::kList:
        out_ += ']';
        Put(id);
        UCFS_RETURN_IF_ERROR(BatchedExactList(n.items));
        break;
      case Kind::kDict:
        out_ += '}';
        Put(id);
        UCFS_RETURN_IF_ERROR(BatchedExactDict(n.items, 'u'));
        break;
      case Kind::kSet:
      case Kind::kFrozenSet:
        UCFS_RETURN_IF_ERROR(SaveSet(id, n));
        break;
      case Kind::kGlobal:
        UCFS_RETURN_IF_ERROR(SaveGlobal(id, n));
        break;
      case Kind::kReduce:
      case Kind::kNewObj:
        UCFS_RETURN_IF_ERROR(SaveObject(id, n));
        break;
      case Kind::kPersistentId:
        if (persistent_ids_ != nullptr) persistent_ids_->push_back(id);
        UCFS_RETURN_IF_ERROR(Save(n.a));
        out_ += 'Q';
        break;
    }
    --depth_;
    return Status::OK();
  }

  // LONG1 or LONG4 with a kLong's bytes as they are.
  void SaveLong(const std::string& bytes) {
    if (bytes.size() < 256) {
      out_ += '\x8a';
      out_ += static_cast<char>(bytes.size());
    } else {
      out_ += '\x8b';
      AppendLE32(&out_, static_cast<uint32_t>(bytes.size()));
    }
    out_ += bytes;
  }

  // Only protocol-4 input has sets; write them back with its opcodes.
  Status SaveSet(NodeId id, const Node& n) {
    if (n.kind == Kind::kSet) {
      out_ += '\x8f';
      Put(id);
      UCFS_RETURN_IF_ERROR(BatchedExactDict(n.items, '\x90'));
    } else {
      out_ += '(';
      for (NodeId item : n.items) UCFS_RETURN_IF_ERROR(Save(item));
      out_ += '\x91';
      Put(id);
    }
    return Status::OK();
  }

  Status SaveGlobal(NodeId id, const Node& n) {
    // GLOBAL is newline-terminated text: such a name cannot be written.
    if (n.text.find('\n') != std::string::npos || n.name.find('\n') != std::string::npos) {
      return Status::InvalidArgument("pickle: a global's name contains a newline");
    }
    out_ += 'c';
    out_ += n.text;
    out_ += '\n';
    out_ += n.name;
    out_ += '\n';
    Put(id);
    return Status::OK();
  }

  // A REDUCE or NEWOBJ record: the call, then what APPENDS, SETITEMS and
  // BUILD added to its result.
  Status SaveObject(NodeId id, const Node& n) {
    UCFS_RETURN_IF_ERROR(Save(n.a));
    UCFS_RETURN_IF_ERROR(Save(n.b));
    out_ += n.kind == Kind::kReduce ? 'R' : '\x81';
    if (memo_[id] != kUnset) {
      // Reached itself through its arguments: Python pops and fetches.
      out_ += '0';
      GetMemo(memo_[id]);
    } else {
      Put(id);
    }
    UCFS_RETURN_IF_ERROR(Batched(n.items, 0, n.list_items, 1, 'a', 'e'));
    UCFS_RETURN_IF_ERROR(Batched(n.items, n.list_items, n.items.size(), 2, 's', 'u'));
    if (n.state != kNoNode) {
      UCFS_RETURN_IF_ERROR(Save(n.state));
      out_ += 'b';
    }
    return Status::OK();
  }

  Status SaveTuple(NodeId id, const Node& n) {
    if (n.items.empty()) {
      out_ += ')';
      return Status::OK();
    }
    const size_t count = n.items.size();
    if (count <= 3) {
      for (NodeId item : n.items) UCFS_RETURN_IF_ERROR(Save(item));
      if (memo_[id] != kUnset) {
        for (size_t i = 0; i < count; ++i) out_ += '0';
        GetMemo(memo_[id]);
        return Status::OK();
      }
      out_ += static_cast<char>(0x84 + count);  // TUPLE1..3
      Put(id);
      return Status::OK();
    }
    out_ += '(';
    for (NodeId item : n.items) UCFS_RETURN_IF_ERROR(Save(item));
    if (memo_[id] != kUnset) {
      out_ += '1';
      GetMemo(memo_[id]);
      return Status::OK();
    }
    out_ += 't';
    Put(id);
    return Status::OK();
  }

  const Document& doc_;
  std::vector<uint32_t> memo_;
  uint32_t next_memo_ = 0;
  uint32_t depth_ = 0;
  std::vector<NodeId>* persistent_ids_;
  std::string out_;
};

}  // namespace

Result<std::string> Write(const Document& doc, std::vector<NodeId>* persistent_ids) {
  if (doc.root() == kNoNode) return Status::InvalidArgument("pickle: document has no root");
  return Writer(doc, persistent_ids).Run();
}

}  // namespace ucfs::pickle
