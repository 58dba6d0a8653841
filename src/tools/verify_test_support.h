// What verify's tests share: a report's problems as text (for failure
// messages), the step a fixture's oracle recorded, and a fixture copied into
// a MemEnv to break (BrokenVerifyTest).
#ifndef UCFS_SRC_TOOLS_VERIFY_TEST_SUPPORT_H_
#define UCFS_SRC_TOOLS_VERIFY_TEST_SUPPORT_H_

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"
#include "ucfs/base/env.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"
#include "ucfs/tools/verify.h"

namespace ucfs::verify_testing {

// Every problem and warning of a report, one per line.
inline std::string Describe(const VerifyReport& r) {
  std::string out;
  for (const auto* list : {&r.problems, &r.warnings}) {
    for (const VerifyProblem& p : *list) {
      out += "  [" + std::string(KindName(p.kind)) + "] " + p.file + ": " + p.message + "\n";
    }
  }
  return out.empty() ? "  (no problems)\n" : out;
}

// The trainable params of a fixture as its ORACLE.json recorded them.
inline const nlohmann::json& OracleParams(const nlohmann::json& oracle) {
  const auto& model = oracle["model"];
  return model.contains("trainable_params") ? model["trainable_params"] : model["params"];
}

// The optimizer step a fixture's ORACLE.json recorded.
inline double OracleStep(const nlohmann::json& oracle) {
  const auto& part = oracle["partitioning"];
  return part.contains("adam_step") ? part["adam_step"].get<double>()
                                    : part["adam_step_per_rank"][0].get<double>();
}

using Kind = VerifyProblem::Kind;

class BrokenVerifyTest : public ::testing::Test {
 protected:
  void Load(const std::string& fixture) {
    fixture_ = fixture;
    ASSERT_TRUE(env_.CopyTreeFrom(testing::FixtureDir(fixture) + "/checkpoint", "/ck").ok());
  }
  std::string Tag(const std::string& name) { return "/ck/global_step4/" + name; }
  std::string Optim(int rank) {
    return Tag("zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.pt");
  }
  std::string Model(int rank) {
    return Tag("zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_model_states.pt");
  }
  VerifyReport Run() {
    VerifyOptions options;
    options.threads = 2;
    auto r = Verify(env_, "/ck", options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : VerifyReport{};
  }
  void Edit(const std::string& file, const std::function<void(pickle::Document*)>& edit) {
    env_.WriteFile(file, testing::RepackTorchFile(*env_.Contents(file), edit));
  }

  // Where element `index` of a rank file's 1-D tensor at `path` (keys from
  // the pickle's root; an int key indexes a list or an int-keyed dict) is,
  // found with the zip directory and the pickle, not the checkpoint model.
  uint64_t ElementOffset(const std::string& file, const std::vector<std::string>& path,
                         uint64_t index) {
    auto f = env_.Open(file);
    EXPECT_TRUE(f.ok());
    auto archive = ZipArchive::Open(**f);
    EXPECT_TRUE(archive.ok()) << archive.status().ToString();
    auto doc = pickle::Parse(*ZipArchive::ReadRecord(**f, *archive->Find("data.pkl")));
    EXPECT_TRUE(doc.ok());
    pickle::NodeId n = doc->root();
    for (const std::string& key : path) {
      if (!key.empty() && std::isdigit(static_cast<unsigned char>(key[0]))) {
        const int64_t k = std::stoll(key);
        if (auto items = doc->SequenceItems(n)) {
          n = (*items)[k];
        } else {
          const auto entries = doc->MappingItems(n);
          for (const auto& [kk, v] : *entries) {
            if (doc->AsInt(kk) == k) n = v;
          }
        }
      } else {
        n = doc->Get(n, key);
      }
    }
    auto t = MatchTensor(*doc, n);
    EXPECT_TRUE(t.ok() && t->has_value());
    const ZipRecord* rec = archive->Find("data/" + (*t)->storage_key);
    EXPECT_NE(rec, nullptr);
    return rec->data_offset + (*t)->byte_offset() + index * (*t)->element_size();
  }

  void Poke(const std::string& file, uint64_t offset, float value) {
    std::string bytes = *env_.Contents(file);
    ASSERT_LE(offset + 4, bytes.size());
    std::memcpy(bytes.data() + offset, &value, 4);
    env_.WriteFile(file, std::move(bytes));
  }

  static std::vector<std::string> Flat(const std::string& state) {
    if (state == "fp32") return {"optimizer_state_dict", "fp32_flat_groups", "0"};
    return {"optimizer_state_dict", "optimizer_state_dict", "state", "0", state};
  }

  std::vector<const VerifyProblem*> Of(const VerifyReport& r, Kind kind) {
    std::vector<const VerifyProblem*> out;
    for (const VerifyProblem& p : r.problems) {
      if (p.kind == kind) out.push_back(&p);
    }
    return out;
  }

  std::string fixture_;
  MemEnv env_;
};

}  // namespace ucfs::verify_testing

#endif  // UCFS_SRC_TOOLS_VERIFY_TEST_SUPPORT_H_
