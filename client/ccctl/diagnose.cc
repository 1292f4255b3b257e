#include "client/ccctl/diagnose.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ccl::ctl {
namespace {

using client::OpLog;
using client::OpRecord;
using client::WorkState;

bool Done(const OpRecord& record) {
  return record.state == WorkState::kCompleted ||
         record.state == WorkState::kFailed;
}

bool Is(const OpRecord& record, OpKind kind) { return record.kind == kind; }

std::string KindName(const OpRecord& record) {
  return record.kind ? std::string(OpKindName(*record.kind)) : "?";
}

std::string DTypeText(const OpRecord& record) {
  return record.dtype ? std::string(DTypeName(*record.dtype)) : "?";
}

// What must match across ranks at one seq (nops stand aside for p2p).
std::string Fingerprint(const OpRecord& record) {
  if (Is(record, OpKind::kSend) || Is(record, OpKind::kRecv) ||
      Is(record, OpKind::kNop)) {
    return "p2p";
  }
  return absl::StrCat(KindName(record), "/", DTypeText(record), "/",
                      record.count, "/", record.root);
}

}  // namespace

std::string DescribeRecord(const OpRecord& record) {
  std::string text = KindName(record);
  if (Is(record, OpKind::kBarrier) || Is(record, OpKind::kNop)) return text;
  if (record.count > 0 || record.work_id != 0) {
    absl::StrAppend(&text, " of ", record.count, " ", DTypeText(record));
  }
  if (Is(record, OpKind::kSend)) {
    absl::StrAppend(&text, " to ", record.peer);
  } else if (Is(record, OpKind::kRecv)) {
    absl::StrAppend(&text, " from ", record.peer);
  } else if (record.kind && HasRoot(*record.kind)) {
    absl::StrAppend(&text, " root ", record.root);
  }
  return text;
}

std::vector<std::string> Diagnose(const std::vector<OpLog>& logs,
                                  const std::vector<int>& group_to_world) {
  std::vector<std::string> lines;
  if (logs.empty()) return lines;

  // Each rank's frontier: its oldest op not done, else the seq it waits for.
  struct Standing {
    int rank = 0;
    int64_t frontier = 0;
    const OpRecord* pending = nullptr;
    const OpRecord* last_done = nullptr;
    int64_t now_us = 0;
  };
  std::vector<Standing> standings;
  for (const OpLog& log : logs) {
    Standing s;
    s.rank = log.rank;
    s.frontier = log.next_seq;
    s.now_us = log.now_unix_us;
    for (const OpRecord& record : log.records) {
      if (Done(record)) {
        if (s.last_done == nullptr || record.seq > s.last_done->seq) {
          s.last_done = &record;
        }
      } else if (s.pending == nullptr || record.seq < s.pending->seq) {
        s.pending = &record;
      }
    }
    if (s.pending != nullptr) s.frontier = s.pending->seq;
    standings.push_back(s);
  }

  // Ranks that ran different ops at the same seq.
  std::map<int64_t, std::map<std::string, std::vector<std::string>>> by_seq;
  for (const OpLog& log : logs) {
    for (const OpRecord& record : log.records) {
      by_seq[record.seq][Fingerprint(record)].push_back(
          absl::StrCat("rank ", log.rank, " ran ", DescribeRecord(record)));
    }
  }
  for (const auto& [seq, variants] : by_seq) {
    if (variants.size() < 2) continue;
    std::vector<std::string> parts;
    for (const auto& [fingerprint, ranks] : variants) {
      parts.push_back(absl::StrJoin(ranks, ", "));
    }
    lines.push_back(absl::StrCat("ranks disagree at seq ", seq, ": ",
                                 absl::StrJoin(parts, "; ")));
  }

  const bool all_idle =
      std::all_of(standings.begin(), standings.end(),
                  [](const Standing& s) { return s.pending == nullptr; });
  std::set<int64_t> frontiers;
  for (const Standing& s : standings) frontiers.insert(s.frontier);
  if (all_idle && frontiers.size() == 1) {
    std::string text =
        absl::StrCat("all ", standings.size(),
                     " ranks are idle, waiting for seq ", *frontiers.begin());
    if (standings[0].last_done != nullptr) {
      absl::StrAppend(&text, "; the last op was seq ",
                      standings[0].last_done->seq, " ",
                      DescribeRecord(*standings[0].last_done));
    }
    lines.push_back(text);
  } else {
    for (const Standing& s : standings) {
      std::string text = absl::StrCat("rank ", s.rank, " ");
      if (s.pending != nullptr) {
        const bool running = s.pending->state == WorkState::kRunning;
        const double waited_ms =
            (s.now_us - s.pending->timing.enqueued_unix_us) / 1e3;
        absl::StrAppend(&text, running ? "waits in" : "has queued", " seq ",
                        s.pending->seq, " ", DescribeRecord(*s.pending),
                        absl::StrFormat(" (for %.0f ms)", waited_ms));
        if (!running && s.pending->seq > 0) {
          absl::StrAppend(&text, ", behind seq ", s.pending->seq - 1);
        }
      } else {
        absl::StrAppend(&text, "is idle at seq ", s.frontier);
      }
      if (s.last_done != nullptr) {
        absl::StrAppend(&text, "; its last op is seq ", s.last_done->seq, " ",
                        DescribeRecord(*s.last_done));
      } else {
        absl::StrAppend(&text, "; it has run no op");
      }
      lines.push_back(text);
    }
    // Name the missing partner of a point-to-point op that waits.
    for (const Standing& s : standings) {
      if (s.pending == nullptr) continue;
      const OpRecord& waiting = *s.pending;
      if (!Is(waiting, OpKind::kSend) && !Is(waiting, OpKind::kRecv)) continue;
      const int peer_world =
          waiting.peer >= 0 &&
                  waiting.peer < static_cast<int>(group_to_world.size())
              ? group_to_world[waiting.peer]
              : waiting.peer;
      for (const OpLog& log : logs) {
        if (log.rank != peer_world) continue;
        bool matched = false;
        for (const OpRecord& record : log.records) {
          matched |= record.seq == waiting.seq &&
                     (Is(record, OpKind::kSend) || Is(record, OpKind::kRecv));
        }
        if (!matched) {
          lines.push_back(absl::StrCat(
              "rank ", s.rank, "'s ", KindName(waiting), " at seq ",
              waiting.seq, " has no partner: rank ", peer_world, " posted no ",
              Is(waiting, OpKind::kRecv) ? "send" : "recv", " at that seq"));
        }
      }
    }
  }

  // The latest failure on each rank.
  for (const OpLog& log : logs) {
    const OpRecord* failed = nullptr;
    for (const OpRecord& record : log.records) {
      if (record.state == WorkState::kFailed &&
          (failed == nullptr || record.seq >= failed->seq)) {
        failed = &record;
      }
    }
    if (failed != nullptr) {
      lines.push_back(absl::StrCat(
          "rank ", log.rank, ": seq ", failed->seq, " ",
          DescribeRecord(*failed),
          " failed: ", absl::StatusCodeToString(failed->error.code()), ": ",
          failed->error.message()));
    }
  }
  return lines;
}

}  // namespace ccl::ctl
