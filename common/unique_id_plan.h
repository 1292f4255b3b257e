// How the NCCL unique ids of one communicator are made and handed out
// through the KV store. Header-only and free of CUDA, so that the unit tests,
// the coordinator (which answers a world's registrations with the ids, see
// RegisterRequest.nccl_ranks_per_root) and its rendezvous benchmark (which
// plays this protocol for thousands of simulated ranks) use the very same
// plan as the backend.
//
// Small worlds use one id: rank 0 calls ncclGetUniqueId and posts it under
// UniqueIdKey(prefix), everyone else reads it (ncclCommInitRankConfig).
// Above ranks_per_root ranks, one NCCL bootstrap root would have to accept a
// connection from every rank, so the world uses ncclCommInitRankScalable
// (NCCL >= 2.23) with one id per block of about ranks_per_root consecutive
// ranks, and at most kMaxUniqueIds ids: every rank must be given every id,
// so the ids' total size is paid once per rank; above 16,384 ranks the
// blocks grow instead. The first rank of each block makes that block's id
// (its root is then near the ranks that contact it) and posts it under
// UniqueIdKey(prefix, block); rank 0 collects them all and posts the list
// under UniqueIdListKey(prefix) (PackUniqueIds, in block order); every
// other rank reads that one key. So
// each rank makes a constant number of KV calls, whatever the world size,
// and no single rank's root serves the whole world. The blocks are NCCL's
// own: ranks [FirstRankOfRoot(i), FirstRankOfRoot(i + 1)) bootstrap through
// id i.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ccl::nccl {

// sizeof(ncclUniqueId) (NCCL_UNIQUE_ID_BYTES); nccl_host.cc checks it.
inline constexpr size_t kUniqueIdBytes = 128;

// PyTorch's default (TORCH_NCCL_RANKS_PER_ROOT) as well; the environment
// variable CCL_NCCL_RANKS_PER_ROOT overrides it, 0 meaning "always one id".
inline constexpr int kDefaultRanksPerRoot = 128;
// 16 KiB of ids per rank: 256 MiB handed out to a world of 16,384 ranks.
inline constexpr int kMaxUniqueIds = 128;
inline constexpr char kRanksPerRootEnv[] = "CCL_NCCL_RANKS_PER_ROOT";

struct UniqueIdPlan {
  int ids = 1;           // unique ids (bootstrap roots) of the communicator
  int block = 0;         // the block of this rank, so the id it bootstraps by
  bool posts = false;    // makes and posts the id of its block
  bool gathers = false;  // collects every id and posts the list (rank 0)
};

// `text` is the environment variable's value, or null when it is unset.
inline absl::StatusOr<int> ParseRanksPerRoot(const char* text) {
  if (text == nullptr || *text == '\0') return kDefaultRanksPerRoot;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kRanksPerRootEnv, "='", text,
        "' is not a rank count; use a number >= 1, or 0 for a single "
        "unique id"));
  }
  return value;
}

inline int UniqueIdCount(int world_size, int ranks_per_root) {
  if (world_size <= 1 || ranks_per_root <= 0) return 1;
  const int ids = (world_size + ranks_per_root - 1) / ranks_per_root;
  return ids < kMaxUniqueIds ? ids : kMaxUniqueIds;
}

// NCCL's partition: `ids` blocks of consecutive ranks, the first
// world_size % ids of them one rank longer.
inline int FirstRankOfBlock(int block, int world_size, int ids) {
  const int base = world_size / ids;
  const int longer = world_size % ids;
  return block * base + (block < longer ? block : longer);
}

inline int BlockOfRank(int rank, int world_size, int ids) {
  const int base = world_size / ids;
  const int longer = world_size % ids;
  const int in_longer = longer * (base + 1);
  if (rank < in_longer) return rank / (base + 1);
  return longer + (rank - in_longer) / base;
}

inline UniqueIdPlan PlanUniqueIds(int rank, int world_size,
                                  int ranks_per_root) {
  UniqueIdPlan plan;
  plan.ids = UniqueIdCount(world_size, ranks_per_root);
  plan.block = plan.ids == 1 ? 0 : BlockOfRank(rank, world_size, plan.ids);
  plan.posts = rank == FirstRankOfBlock(plan.block, world_size, plan.ids);
  plan.gathers = plan.ids > 1 && rank == 0;
  return plan;
}

// The prefix of a generation's world communicator ("gen3/world"): the
// worker builds it there, and the coordinator reads its ids for the
// registrations that ask.
inline std::string WorldPrefix(int64_t generation) {
  return absl::StrCat("gen", generation, "/world");
}

// Keys under the communicator's prefix ("gen3/world").
inline std::string UniqueIdKey(const std::string& prefix) {
  return absl::StrCat("nccl/", prefix, "/id");
}
inline std::string UniqueIdKey(const std::string& prefix, int block) {
  return absl::StrCat("nccl/", prefix, "/id/", block);
}
inline std::string UniqueIdListKey(const std::string& prefix) {
  return absl::StrCat("nccl/", prefix, "/ids");
}

// The value of UniqueIdListKey: per id, one byte of length and the id's
// bytes up to its last non-zero one. ncclGetUniqueId zeroes the id before
// copying its bootstrap handle in (a 64-bit magic and a socket address,
// plus a rank count in newer NCCLs: 40 bytes at most, 16 for IPv4), so an
// id packs into at most 41 bytes instead of 128. Every rank of a large
// world receives the list (128 ids at 16,384 ranks: 16 KiB raw, 256 MiB
// for the world; about 5 KiB packed); exact for any id, whatever its bytes.
// `ids` are kUniqueIdBytes each.
inline std::string PackUniqueIds(const std::vector<std::string>& ids) {
  std::string out;
  out.reserve(ids.size() * 48);
  for (const std::string& id : ids) {
    size_t length = id.size();
    while (length > 0 && id[length - 1] == '\0') --length;
    out.push_back(static_cast<char>(length));
    out.append(id, 0, length);
  }
  return out;
}

inline absl::StatusOr<std::vector<std::string>> UnpackUniqueIds(
    std::string_view packed, int count) {
  std::vector<std::string> ids;
  ids.reserve(count > 0 ? static_cast<size_t>(count) : 0);
  size_t at = 0;
  while (at < packed.size() && static_cast<int>(ids.size()) < count) {
    const size_t length = static_cast<unsigned char>(packed[at++]);
    if (length > kUniqueIdBytes || at + length > packed.size()) break;
    std::string& id = ids.emplace_back(packed.substr(at, length));
    id.resize(kUniqueIdBytes, '\0');
    at += length;
  }
  if (count < 1 || static_cast<int>(ids.size()) != count ||
      at != packed.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the packed list of ", count, " NCCL unique ids (", packed.size(),
        " bytes) does not hold exactly ", count, " ids"));
  }
  return ids;
}

// The one key a rank that posts nothing reads: the id, or the list.
inline std::string UniqueIdReadKey(const std::string& prefix,
                                   const UniqueIdPlan& plan) {
  return plan.ids == 1 ? UniqueIdKey(prefix) : UniqueIdListKey(prefix);
}

}  // namespace ccl::nccl
