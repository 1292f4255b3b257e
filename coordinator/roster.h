// The ranks of the world and who holds them. Besides the members it keeps
// the counts and indexes that answer every question a registration or a
// heartbeat asks in O(1) or O(log n): is the world complete, is every member
// ready, which is the lowest free rank, which rank a worker id holds. With
// them, forming a world of n ranks costs O(n log n) in all, not O(n^2).
//
// Every change of a member's presence or state goes through the Roster, so
// the counts stay exact; a Member's other fields belong to the core.
//
// Not thread-safe: CoordinatorCore calls it under its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/types.h"
#include "coordinator/types.h"

namespace ccl::coordinator {

class Roster {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  class Member : public WorkerPlace {
   public:
    MemberState state() const { return state_; }
    // Holds the rank: joining or ready (lost and left members keep their
    // slot, so that they can be described, until someone takes it).
    bool live() const {
      return state_ == MemberState::kJoining || state_ == MemberState::kReady;
    }

    uint64_t serial = 0;  // Tells registrations of one rank apart.
    TimePoint last_seen;
    std::string worker_id;
    // Issued at registration (CoordinatorCore::Register); proves the worker.
    std::string secret;
    int64_t tensor_count = 0;
    int64_t tensor_bytes = 0;
    int64_t resume_generation = 0;
    std::map<std::string, int64_t> resume_next_seq;
    int64_t known_generation = 0;
    // What this member's heartbeats published in generation
    // progress_generation (ProgressKey), so a key is set only on a change.
    int64_t progress_generation = 0;
    std::map<std::string, int64_t> published_progress;
    // Parked Register calls of this registration (a worker that reconnects
    // while joining has more than one).
    std::vector<WaitId> register_waits;

   private:
    friend class Roster;
    MemberState state_ = MemberState::kJoining;
  };

  explicit Roster(int size);

  int size() const { return static_cast<int>(slots_.size()); }
  // Null for a rank out of range or nobody's.
  Member* Find(int rank);
  const Member* Find(int rank) const;
  bool IsLive(int rank) const;

  // Puts a new joining member at `rank`, replacing whoever was there.
  Member& Take(int rank, std::string worker_id, uint64_t serial);
  void Clear(int rank);
  void SetState(int rank, MemberState state);

  std::optional<int> RankOf(const std::string& worker_id) const;
  std::optional<int> LowestFree() const;
  // The first `limit` ranks nobody live holds, ascending.
  std::vector<int> Missing(size_t limit) const;
  int live() const { return size() - static_cast<int>(free_.size()); }
  int ready() const { return ready_; }
  // Changes whenever a member comes, goes or changes state, or Touch is
  // called (a member's address changed): snapshots of the world are reused
  // while it stays the same.
  uint64_t version() const { return version_; }
  void Touch() { ++version_; }
  bool complete() const { return free_.empty(); }
  bool all_ready() const { return ready_ == size(); }

  // Keeps the ready members only, renumbered in rank order (an elastic
  // shrink), and returns the ranks that were dropped. The caller makes sure
  // nobody is joining.
  std::vector<int> KeepReady();

 private:
  void Index(int rank, bool was_live, bool was_ready);

  std::vector<std::optional<Member>> slots_;
  std::unordered_map<std::string, int> rank_of_worker_;
  // Ranks nobody live holds.
  std::set<int> free_;
  int ready_ = 0;
  uint64_t version_ = 0;
};

}  // namespace ccl::coordinator
