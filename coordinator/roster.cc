#include "coordinator/roster.h"

#include <utility>

namespace ccl::coordinator {

Roster::Roster(int size) : slots_(static_cast<size_t>(size)) {
  for (int rank = 0; rank < size; ++rank) free_.insert(free_.end(), rank);
}

Roster::Member* Roster::Find(int rank) {
  if (rank < 0 || rank >= size() || !slots_[rank].has_value()) return nullptr;
  return &*slots_[rank];
}

const Roster::Member* Roster::Find(int rank) const {
  if (rank < 0 || rank >= size() || !slots_[rank].has_value()) return nullptr;
  return &*slots_[rank];
}

bool Roster::IsLive(int rank) const {
  const Member* member = Find(rank);
  return member != nullptr && member->live();
}

void Roster::Index(int rank, bool was_live, bool was_ready) {
  ++version_;
  const Member* member = Find(rank);
  const bool live = member != nullptr && member->live();
  const bool ready = member != nullptr && member->state_ == MemberState::kReady;
  if (live && !was_live) free_.erase(rank);
  if (!live && was_live) free_.insert(rank);
  ready_ += static_cast<int>(ready) - static_cast<int>(was_ready);
}

Roster::Member& Roster::Take(int rank, std::string worker_id, uint64_t serial) {
  Clear(rank);
  Member& member = slots_[rank].emplace();
  member.serial = serial;
  member.worker_id = std::move(worker_id);
  if (!member.worker_id.empty()) rank_of_worker_[member.worker_id] = rank;
  Index(rank, /*was_live=*/false, /*was_ready=*/false);
  return member;
}

void Roster::Clear(int rank) {
  Member* member = Find(rank);
  if (member == nullptr) return;
  const bool was_live = member->live();
  const bool was_ready = member->state_ == MemberState::kReady;
  auto it = rank_of_worker_.find(member->worker_id);
  if (it != rank_of_worker_.end() && it->second == rank) {
    rank_of_worker_.erase(it);
  }
  slots_[rank].reset();
  Index(rank, was_live, was_ready);
}

void Roster::SetState(int rank, MemberState state) {
  Member* member = Find(rank);
  if (member == nullptr) return;
  const bool was_live = member->live();
  const bool was_ready = member->state_ == MemberState::kReady;
  member->state_ = state;
  Index(rank, was_live, was_ready);
}

std::optional<int> Roster::RankOf(const std::string& worker_id) const {
  if (worker_id.empty()) return std::nullopt;
  auto it = rank_of_worker_.find(worker_id);
  if (it == rank_of_worker_.end()) return std::nullopt;
  return it->second;
}

std::optional<int> Roster::LowestFree() const {
  if (free_.empty()) return std::nullopt;
  return *free_.begin();
}

std::vector<int> Roster::Missing(size_t limit) const {
  std::vector<int> out;
  for (auto it = free_.begin(); it != free_.end() && out.size() < limit; ++it) {
    out.push_back(*it);
  }
  return out;
}

std::vector<int> Roster::KeepReady() {
  std::vector<std::optional<Member>> kept;
  std::vector<int> dropped;
  for (int rank = 0; rank < size(); ++rank) {
    auto& slot = slots_[rank];
    if (slot.has_value() && slot->state_ == MemberState::kReady) {
      kept.push_back(std::move(slot));
    } else {
      dropped.push_back(rank);
    }
  }
  ++version_;
  slots_ = std::move(kept);
  rank_of_worker_.clear();
  free_.clear();
  ready_ = size();
  for (int rank = 0; rank < size(); ++rank) {
    if (!slots_[rank]->worker_id.empty()) {
      rank_of_worker_[slots_[rank]->worker_id] = rank;
    }
  }
  return dropped;
}

}  // namespace ccl::coordinator
