#include "checkpoint_work.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#ifndef UCFS_FUZZ_FIXTURES
#error "UCFS_FUZZ_FIXTURES must name tests/data/fixtures"
#endif

namespace ucfs_fuzz {

namespace {

std::vector<Fixture> LoadFixtures() {
  namespace fs = std::filesystem;
  const std::vector<fs::path> names = FixtureDirs("UCFS_FUZZ_FIXTURES", UCFS_FUZZ_FIXTURES);
  std::vector<Fixture> out;
  for (const fs::path& fixture_dir : names) {
    Fixture f;
    f.name = fixture_dir.filename().string();
    const fs::path root = fixture_dir / "checkpoint";
    const std::string tag = LatestTag(root);
    f.tag_dir = kRoot + "/" + tag;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<RankFile> optim, model;
    bool shared_model = false;  // ZeRO-1/2: mp_rank_00_model_states.pt
    for (const fs::path& p : files) {
      const std::string path = kRoot + "/" + fs::relative(p, root).string();
      std::string bytes = ReadWhole(p);
      auto rank = ucfs::ParseRankFileName(p.filename().string());
      if (p.filename() == ucfs::SharedModelFileName() && p.parent_path().filename() == tag) {
        // The model file of every rank: slot "rank 0" of kind kModel.
        rank = ucfs::RankFileName{ucfs::RankFileName::Kind::kModel, "", 0, 0};
        shared_model = true;
      }
      if (!rank || p.parent_path().filename() != tag) {
        f.other[path] = std::move(bytes);
        continue;
      }
      RankFile rf;
      rf.path = path;
      rf.kind = rank->kind;
      rf.rank = rank->dp_rank;
      rf.bytes = std::move(bytes);
      auto parsed = ParseArchive(rf.bytes);
      if (!parsed) Fail(path + " of fixture " + f.name + " does not parse");
      rf.parsed = std::make_shared<const Archive>(std::move(*parsed));
      if (rank->kind == ucfs::RankFileName::Kind::kOptim) f.optim_prefix = rank->prefix;
      (rank->kind == ucfs::RankFileName::Kind::kOptim ? optim : model).push_back(std::move(rf));
    }
    auto by_rank = [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; };
    std::sort(optim.begin(), optim.end(), by_rank);
    std::sort(model.begin(), model.end(), by_rank);
    if (shared_model != kFlatGroups) continue;  // the other target's fixture
    f.world = static_cast<uint32_t>(optim.size());
    if (f.world == 0 || model.size() != (kFlatGroups ? 1 : optim.size())) {
      Fail("fixture " + f.name + " is not whole");
    }
    for (auto& rf : optim) f.ranks.push_back(std::move(rf));
    for (auto& rf : model) f.ranks.push_back(std::move(rf));
    out.push_back(std::move(f));
  }
  if (out.empty()) Fail("no fixtures of this target's stages (set UCFS_FUZZ_FIXTURES)");
  return out;
}

}  // namespace

const std::vector<Fixture>& Fixtures() {
  static const std::vector<Fixture> fixtures = LoadFixtures();
  return fixtures;
}

std::vector<Slot*> Targets(Work& w, uint8_t target) {
  std::vector<Slot*> out;
  const uint32_t kind = target & 3;
  const bool all = (target & 4) != 0;
  const uint32_t rank = (target >> 3) % w.world();
  for (Slot& s : w.slots()) {
    const bool kind_ok = kind >= 2 || (kind == 0) == (s.kind == ucfs::RankFileName::Kind::kOptim);
    if (kind_ok && (all || s.rank == rank)) out.push_back(&s);
  }
  return out;
}

Slot& OneTarget(Work& w, uint8_t target) {
  return w.At(target & 1 ? ucfs::RankFileName::Kind::kModel : ucfs::RankFileName::Kind::kOptim,
              target >> 1);
}

}  // namespace ucfs_fuzz
