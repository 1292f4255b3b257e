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

std::string WorkStateName(WorkState state) {
  switch (state) {
    case WorkState::kQueued:
      return "queued";
    case WorkState::kRunning:
      return "running";
    case WorkState::kCompleted:
      return "completed";
    case WorkState::kFailed:
      return "failed";
    case WorkState::kUnknown:
      break;
  }
  return "unknown";
}

std::string MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kJoining:
      return "joining";
    case MemberState::kReady:
      return "ready";
    case MemberState::kLost:
      return "lost";
    case MemberState::kLeft:
      return "left";
    case MemberState::kUnknown:
      break;
  }
  return "unknown";
}

std::string WorldStateName(WorldState state) {
  switch (state) {
    case WorldState::kForming:
      return "forming";
    case WorldState::kComplete:
      return "complete";
    case WorldState::kDegraded:
      return "degraded";
    case WorldState::kUnknown:
      break;
  }
  return "unknown";
}

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
