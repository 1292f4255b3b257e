#include "server/core/arrival_check.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/core/types.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kWindow = std::chrono::seconds(1);
constexpr auto kProbe = std::chrono::milliseconds(500);
constexpr size_t kMaxChecked = 64;
static_assert(kProbe + kWindow <= kArrivalCheckTime,
              "kArrivalCheckTime is what callers leave the diagnosis");

// One non-blocking connect per address, all waited for together until
// `kProbe` has passed. Returns, per index, "" when it connected, else why
// not. Addresses that do not parse or resolve are skipped ("").
std::vector<std::string> Connect(const std::vector<std::string>& addresses) {
  std::vector<std::string> result(addresses.size());
  std::vector<int> fds(addresses.size(), -1);
  for (size_t i = 0; i < addresses.size(); ++i) {
    const std::string& address = addresses[i];
    const size_t colon = address.rfind(':');
    if (address.empty() || colon == std::string::npos) continue;
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    const std::string port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 ||
        found == nullptr) {
      continue;
    }
    const int fd =
        socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      if (connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        close(fd);
      } else if (errno == EINPROGRESS) {
        fds[i] = fd;
      } else {
        result[i] = std::strerror(errno);
        close(fd);
      }
    }
    freeaddrinfo(found);
  }
  const Clock::time_point deadline = Clock::now() + kProbe;
  while (true) {
    std::vector<pollfd> pending;
    std::vector<size_t> index;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i] < 0) continue;
      pending.push_back({fds[i], POLLOUT, 0});
      index.push_back(i);
    }
    if (pending.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) {
      for (size_t i : index) {
        result[i] =
            absl::StrCat("connect timed out after ", kProbe.count(), " ms");
        close(fds[i]);
        fds[i] = -1;
      }
      break;
    }
    if (poll(pending.data(), pending.size(), static_cast<int>(left.count())) <
        0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t k = 0; k < pending.size(); ++k) {
      if (pending[k].revents == 0) continue;
      const size_t i = index[k];
      int error = 0;
      socklen_t length = sizeof(error);
      getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) result[i] = std::strerror(error);
      close(fds[i]);
      fds[i] = -1;
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  return result;
}

// What `world_rank`'s heartbeats last said of `group` (ProgressKey): every
// op below the returned seq has ended there. Empty when it never said (an
// older worker or coordinator, a test's store).
std::optional<int64_t> FinishedBelow(KvStore& kv, const std::string& group,
                                     int world_rank) {
  auto value =
      kv.Get(ProgressKey(group, world_rank), std::chrono::milliseconds(1));
  int64_t seq = 0;
  if (!value.ok() || !absl::SimpleAtoi(*value, &seq)) return std::nullopt;
  return seq;
}

// Whether every key appeared by `until`, read every kPoll: for a store that
// no longer parks waits (a generation that ended).
bool PollForKeys(KvStore& kv, const std::vector<std::string>& keys,
                 Clock::time_point until) {
  constexpr auto kPoll = std::chrono::milliseconds(50);
  while (true) {
    bool all = true;
    for (const std::string& key : keys) {
      if (!kv.Get(key, std::chrono::milliseconds(1)).ok()) {
        all = false;
        break;
      }
    }
    if (all) return true;
    if (Clock::now() + kPoll > until) return false;
    std::this_thread::sleep_for(kPoll);
  }
}

// The check of one rank of one group: whom it cannot reach, who else
// reached the failed op, and where the missing ones last were.
class ArrivalChecker {
 public:
  ArrivalChecker(KvStore* kv, std::string group, int group_rank,
                 std::vector<int> world_ranks)
      : kv_(*kv),
        group_(std::move(group)),
        group_rank_(group_rank),
        world_ranks_(std::move(world_ranks)),
        checked_(std::min(world_ranks_.size(), kMaxChecked + 1)) {}

  Executor::Diagnosed operator()(int64_t seq, Executor::Arrival arrival) const {
    using Arrival = Executor::Arrival;
    std::vector<std::string> parts;
    Executor::Diagnosed diagnosed;
    const auto answer = [&] {
      diagnosed.why = absl::StrJoin(parts, "; ");
      return diagnosed;
    };
    // First of all, before the probe: a peer that lost this rank's
    // connections in the abort just before waits for this to know the op
    // timed out here.
    const std::string timed_out_key =
        absl::StrCat("timedout/", group_, "/", seq);
    if (arrival == Arrival::kAfterTimeout) {
      (void)kv_.Set(timed_out_key, Name(group_rank_));
    }
    std::vector<std::string> unreachable_ranks;
    if (std::string cut = Unreachable(unreachable_ranks); !cut.empty()) {
      parts.push_back(std::move(cut));
    }
    if (arrival == Arrival::kNever) return answer();
    const Clock::time_point window_end = Clock::now() + kWindow;
    if (arrival == Arrival::kIfAPeerTimedOut) {
      // A peer this rank cannot reach is gone, not at its deadline: the
      // others still wait in the op and would be misnamed as missing.
      if (!unreachable_ranks.empty()) return answer();
      auto who = kv_.Get(timed_out_key, kWindow);
      if (!who.ok()) return answer();
      diagnosed.peer_timed_out = true;
      parts.push_back(absl::StrCat(
          "rank ", *who, " of group ", group_, " timed out on seq ", seq,
          " and gave the op up, which closed its connections to this rank"));
    }
    // Which ranks never reached the op, and whom the others cannot reach.
    const std::string base = absl::StrCat("reached/", group_, "/", seq, "/");
    if (!kv_.Set(absl::StrCat(base, group_rank_),
                 absl::StrCat("1;", absl::StrJoin(unreachable_ranks, ",")))
             .ok()) {
      return answer();
    }
    std::vector<std::string> others;
    for (size_t r = 0; r < checked_; ++r) {
      if (static_cast<int>(r) != group_rank_) {
        others.push_back(absl::StrCat(base, r));
      }
    }
    if (others.empty()) return answer();
    const bool everyone = AwaitMarks(others, window_end);
    ReadMarks(seq, base, everyone, parts);
    return answer();
  }

 private:
  std::string Name(size_t r) const {
    return group_ == kWorldGroup
               ? absl::StrCat(r)
               : absl::StrCat(r, " (world rank ", world_ranks_[r], ")");
  }

  // The peers this rank cannot connect to, as a sentence (empty if none);
  // their group ranks into `ranks`.
  std::string Unreachable(std::vector<std::string>& ranks) const {
    std::vector<size_t> peers;
    std::vector<std::string> addresses;
    for (size_t r = 0; r < checked_; ++r) {
      if (static_cast<int>(r) == group_rank_) continue;
      auto address = kv_.Get(PeerAddressKey(world_ranks_[r]),
                             std::chrono::milliseconds(1));
      if (!address.ok()) continue;  // an older worker, or a test's store
      peers.push_back(r);
      addresses.push_back(*address);
    }
    const std::vector<std::string> reached = Connect(addresses);
    std::vector<std::string> unreachable;
    for (size_t k = 0; k < peers.size(); ++k) {
      if (reached[k].empty()) continue;
      unreachable.push_back(absl::StrCat("rank ", Name(peers[k]), " (",
                                         addresses[k], "): ", reached[k]));
      ranks.push_back(absl::StrCat(peers[k]));
    }
    if (unreachable.empty()) return "";
    return absl::StrCat(
        "unreachable from rank ", Name(group_rank_), " of group ", group_, ": ",
        absl::StrJoin(unreachable, "; "),
        " (a link that drops or rejects packets, or a worker that is gone)");
  }

  // Whether every other rank marked the op before `window_end`.
  bool AwaitMarks(const std::vector<std::string>& others,
                  Clock::time_point window_end) const {
    const auto window_left =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     window_end - Clock::now()));
    absl::Status waited = kv_.Wait(others, window_left);
    if (absl::IsAborted(waited)) {
      // The generation ended (a re-form asked by a rank done with its own
      // check, or by one that lost a peer). The coordinator answers a wait
      // in an ended generation at once, yet keeps its keys readable for
      // one more: the marks are read again until the window ends, else
      // a rank still on its way to marking would be named as missing.
      return PollForKeys(kv_, others, window_end);
    }
    return waited.ok();
  }

  // The other ranks' marks read: who cannot reach whom, who finished the
  // op, who never reached it and where it last was.
  void ReadMarks(int64_t seq, const std::string& base, bool everyone,
                 std::vector<std::string>& parts) const {
    std::vector<std::string> missing;
    std::vector<std::string> finished;
    std::vector<std::string> heard;  // where the missing ones last were
    std::vector<std::string> cut;
    for (size_t r = 0; r < checked_; ++r) {
      if (static_cast<int>(r) == group_rank_) continue;
      auto mark = kv_.Get(absl::StrCat(base, r), std::chrono::milliseconds(1));
      if (!mark.ok()) {
        // No mark: it never got this far, or it finished the op (a rank
        // that ran it to its end leaves none), which its heartbeats tell.
        const std::optional<int64_t> done_below =
            FinishedBelow(kv_, group_, world_ranks_[r]);
        if (done_below && *done_below > seq) {
          finished.push_back(Name(r));
          continue;
        }
        missing.push_back(Name(r));
        if (done_below) {
          heard.push_back(absl::StrCat(
              "rank ", Name(r),
              *done_below == 0
                  ? std::string(" had finished no op of the group yet")
                  : absl::StrCat(" had finished every seq below ",
                                 *done_below)));
        }
        continue;
      }
      const size_t semi = mark->find(';');
      if (semi == std::string::npos || semi + 1 >= mark->size()) continue;
      std::vector<std::string> theirs;
      for (absl::string_view peer :
           absl::StrSplit(mark->substr(semi + 1), ',', absl::SkipEmpty())) {
        size_t p = 0;
        if (absl::SimpleAtoi(peer, &p) && p < world_ranks_.size()) {
          theirs.push_back(Name(p));
        }
      }
      if (!theirs.empty()) {
        cut.push_back(absl::StrCat("rank ", Name(r), " cannot reach rank",
                                   theirs.size() == 1 ? " " : "s ",
                                   absl::StrJoin(theirs, ", ")));
      }
    }
    if (!cut.empty()) parts.push_back(absl::StrJoin(cut, "; "));
    if (!finished.empty()) {
      parts.push_back(absl::StrCat(
          finished.size() == 1 ? "rank " : "ranks ",
          absl::StrJoin(finished, ", "), " of group ", group_, " finished seq ",
          seq, " (", finished.size() == 1 ? "its" : "their",
          " last heartbeat said so): this rank's side of the op failed"));
    }
    if (everyone || (missing.empty() && finished.empty())) {
      parts.push_back(absl::StrCat("every rank of group ", group_,
                                   " reached seq ", seq, " and failed there"));
    } else if (!missing.empty()) {
      parts.push_back(absl::StrCat(
          missing.size() == 1 ? "rank " : "ranks ",
          absl::StrJoin(missing, ", "), " of group ", group_,
          " never reached seq ", seq,
          " (no report within 1 s of this rank's failure: dead, stopped, or "
          "still on an earlier op; `ccctl debug ops` shows where each rank "
          "is)"));
      if (!heard.empty()) {
        parts.push_back(
            absl::StrCat("last heartbeats: ", absl::StrJoin(heard, "; ")));
      }
    }
  }

  KvStore& kv_;
  const std::string group_;
  const int group_rank_;
  const std::vector<int> world_ranks_;
  // Ranks beyond the first kMaxChecked + 1 are not probed or awaited.
  const size_t checked_;
};

}  // namespace

Executor::Diagnosis ArrivalCheck(KvStore* kv, std::string group, int group_rank,
                                 std::vector<int> world_ranks) {
  if (kv == nullptr) return nullptr;
  auto checker = std::make_shared<const ArrivalChecker>(
      kv, std::move(group), group_rank, std::move(world_ranks));
  return [checker](int64_t seq, Executor::Arrival arrival) {
    return (*checker)(seq, arrival);
  };
}

}  // namespace ccl
