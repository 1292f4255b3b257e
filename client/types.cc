#include "client/types.h"

#include <array>
#include <utility>

namespace ccl::client {
namespace {

constexpr std::array<std::pair<std::string_view, FillKind>, 10> kFills = {{
    {"zeros", FillKind::kZeros},
    {"ones", FillKind::kOnes},
    {"constant", FillKind::kConstant},
    {"rank", FillKind::kRank},
    {"rank+1", FillKind::kRankPlusOne},
    {"arange", FillKind::kArange},
    {"arange+rank", FillKind::kArangePlusRank},
    {"random", FillKind::kRandom},
    {"affine", FillKind::kAffine},
    {"empty", FillKind::kUninitialized},
}};

}  // namespace

std::string FillKindName(FillKind kind) {
  for (const auto& [name, known] : kFills) {
    if (known == kind) return std::string(name);
  }
  return "?";
}

std::optional<FillKind> FillKindByName(std::string_view name) {
  for (const auto& [known, kind] : kFills) {
    if (name == known) return kind;
  }
  return std::nullopt;
}

}  // namespace ccl::client
