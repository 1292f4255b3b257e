#include "server/core/arrival_check.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/types.h"

namespace ccl {

Executor::Diagnosis ArrivalCheck(KvStore* kv, std::string group, int group_rank,
                                 std::vector<int> world_ranks) {
  if (kv == nullptr) return nullptr;
  return [kv, group = std::move(group), group_rank,
          world_ranks = std::move(world_ranks)](int64_t seq) -> std::string {
    constexpr auto kWindow = std::chrono::seconds(1);
    constexpr size_t kMaxChecked = 64;
    const std::string base = absl::StrCat("reached/", group, "/", seq, "/");
    if (!kv->Set(absl::StrCat(base, group_rank), "1").ok()) return "";
    std::vector<std::string> others;
    for (size_t r = 0; r < world_ranks.size() && others.size() < kMaxChecked;
         ++r) {
      if (static_cast<int>(r) != group_rank) {
        others.push_back(absl::StrCat(base, r));
      }
    }
    if (others.empty()) return "";
    if (kv->Wait(others, kWindow).ok()) {
      return absl::StrCat("every rank of group ", group, " reached seq ", seq,
                          " and failed there");
    }
    std::vector<std::string> missing;
    for (size_t r = 0; r < world_ranks.size() && r < kMaxChecked + 1; ++r) {
      if (static_cast<int>(r) == group_rank) continue;
      if (kv->Get(absl::StrCat(base, r), std::chrono::milliseconds(1)).ok()) {
        continue;
      }
      missing.push_back(
          group == kWorldGroup
              ? absl::StrCat(r)
              : absl::StrCat(r, " (world rank ", world_ranks[r], ")"));
    }
    if (missing.empty()) return "";
    return absl::StrCat(
        missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
        " of group ", group, " never reached seq ", seq,
        " (no report within 1 s of this rank's failure: dead, stopped, or "
        "still on an earlier op; `ccctl debug ops` shows where each rank is)");
  };
}

}  // namespace ccl
