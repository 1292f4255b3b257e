#include "client/ccctl/trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/ccctl/commands.h"

namespace ccl::ctl {
namespace {

using Json = nlohmann::ordered_json;

// Clock readings per rank; the shortest round trip of these is kept.
constexpr int kClockProbes = 5;

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }
double Round1(double v) { return std::round(v * 10.0) / 10.0; }

std::string TraceKindName(const OpRecord& record) {
  return record.kind ? std::string(OpKindName(*record.kind)) : "op?";
}

std::string StateName(WorkState state) {
  return state == WorkState::kUnknown ? "unspecified"
                                      : std::string(WorkStateName(state));
}

bool IsKind(const OpRecord& record, OpKind kind) { return record.kind == kind; }
bool Rooted(const OpRecord& r) { return r.kind && HasRoot(*r.kind); }
bool PointToPoint(const OpRecord& r) {
  return IsKind(r, OpKind::kSend) || IsKind(r, OpKind::kRecv);
}
bool Reduction(const OpRecord& r) { return r.kind && IsReduction(*r.kind); }

int ToWorld(const std::vector<int>& ranks, int group_rank) {
  return group_rank >= 0 && group_rank < static_cast<int>(ranks.size())
             ? ranks[group_rank]
             : group_rank;
}

struct Slice {
  int rank = 0;
  std::string group;
  const OpRecord* record = nullptr;
  const std::vector<int>* ranks = nullptr;
  double start = 0, end = 0, ts = 0, dur = 0;
  // Index of the slice's event in traceEvents, to add to its args later.
  size_t event = 0;
};

double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::map<int, RankClock> AlignClocks(const std::map<int, ClockSample>& samples,
                                     const std::map<int, std::string>& hosts) {
  auto host_of = [&](int rank) {
    auto it = hosts.find(rank);
    return it != hosts.end() && !it->second.empty()
               ? it->second
               : absl::StrCat("rank", rank);
  };
  std::map<std::string, ClockSample> best;
  for (const auto& [rank, sample] : samples) {
    auto [it, added] = best.emplace(host_of(rank), sample);
    if (!added && sample.rtt_us < it->second.rtt_us) it->second = sample;
  }
  std::map<int, RankClock> clocks;
  for (const auto& [rank, unused] : samples) {
    const ClockSample& b = best[host_of(rank)];
    RankClock clock;
    auto it = hosts.find(rank);
    clock.host = it != hosts.end() ? it->second : "";
    clock.offset_us = Round1(b.offset_us);
    clock.uncertainty_us = Round1(b.rtt_us / 2);
    clock.applied = std::abs(b.offset_us) > b.rtt_us / 2;
    clocks[rank] = clock;
  }
  return clocks;
}

namespace {

// Groups in the order their rows are shown (the world first) and each
// one's row (tid) in every rank's process.
struct GroupRows {
  std::vector<std::string> names;
  std::map<std::string, int> tids;
  // 0 for a group the client was not told of (a log of a group since
  // destroyed): such slices share one row.
  int TidOf(const std::string& group) const {
    auto it = tids.find(group);
    return it == tids.end() ? 0 : it->second;
  }
};

GroupRows RowsOf(const std::map<std::string, std::vector<int>>& groups) {
  GroupRows rows;
  for (const auto& [name, unused] : groups) rows.names.push_back(name);
  std::stable_sort(rows.names.begin(), rows.names.end(),
                   [](const std::string& a, const std::string& b) {
                     return std::make_tuple(a != "world", a) <
                            std::make_tuple(b != "world", b);
                   });
  for (size_t i = 0; i < rows.names.size(); ++i) {
    rows.tids[rows.names[i]] = static_cast<int>(i) + 1;
  }
  return rows;
}

// One slice per op record that was queued, on the client's clock.
std::vector<Slice> SlicesOf(
    const std::vector<TraceLog>& logs,
    const std::map<std::string, std::vector<int>>& groups,
    const std::map<int, RankClock>& clocks) {
  static const std::vector<int> kNoRanks;
  std::vector<Slice> slices;
  for (const TraceLog& entry : logs) {
    double offset = 0;
    if (auto it = clocks.find(entry.rank);
        it != clocks.end() && it->second.applied) {
      offset = it->second.offset_us;
    }
    const double now = static_cast<double>(entry.log.now_unix_us) - offset;
    auto group_it = groups.find(entry.group);
    for (const OpRecord& record : entry.log.records) {
      // A nop only takes a seq on a rank with no part in a p2p op; a record
      // without a time was refused before it was queued.
      if (IsKind(record, OpKind::kNop)) continue;
      if (record.timing.enqueued_unix_us <= 0) continue;
      const double enqueued =
          static_cast<double>(record.timing.enqueued_unix_us) - offset;
      Slice s;
      s.rank = entry.rank;
      s.group = entry.group;
      s.record = &record;
      s.ranks = group_it != groups.end() ? &group_it->second : &kNoRanks;
      s.start = enqueued + record.timing.queue_us;
      const bool done = record.state == WorkState::kCompleted ||
                        record.state == WorkState::kFailed;
      s.end = std::max(done ? enqueued + record.timing.total_us : now, s.start);
      slices.push_back(s);
    }
  }
  return slices;
}

// Each rank a process, each of its groups a thread of it.
void AddNames(const std::map<int, std::string>& members,
              const std::map<std::string, std::vector<int>>& groups,
              const GroupRows& rows, Json& events) {
  for (const auto& [rank, description] : members) {
    events.push_back(
        {{"ph", "M"},
         {"name", "process_name"},
         {"pid", rank},
         {"args",
          {{"name", absl::StrCat("rank ", rank, " (", description, ")")}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", rank},
                      {"args", {{"sort_index", rank}}}});
    for (const std::string& g : rows.names) {
      const std::vector<int>& ranks = groups.at(g);
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
      const int tid = rows.TidOf(g);
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", tid},
                        {"args", {{"name", absl::StrCat("group ", g)}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_sort_index"},
                        {"pid", rank},
                        {"tid", tid},
                        {"args", {{"sort_index", tid}}}});
    }
  }
}

// What an op's slice shows when selected.
Json ArgsOf(const Slice& s) {
  const OpRecord& r = *s.record;
  Json args = {
      {"group", s.group},
      {"seq", r.seq},
      {"generation", r.generation},
      {"state", StateName(r.state)},
      {"dtype", r.dtype ? std::string(DTypeName(*r.dtype)) : "unspecified"},
      {"count", r.count},
      {"bytes",
       r.count * static_cast<int64_t>(r.dtype ? DTypeSize(*r.dtype) : 0)},
      {"queue_us", Round3(r.timing.queue_us)},
      {"device_us", Round3(r.timing.device_us)},
      {"total_us", Round3(r.timing.total_us)},
      {"enqueued_unix_us", r.timing.enqueued_unix_us},
      {"work_id", r.work_id},
  };
  if (!r.input.empty()) args["input"] = r.input;
  if (!r.output.empty()) args["output"] = r.output;
  if (Rooted(r)) args["root"] = ToWorld(*s.ranks, r.root);
  if (PointToPoint(r)) args["peer"] = ToWorld(*s.ranks, r.peer);
  if (Reduction(r)) {
    args["reduce_op"] =
        r.reduce ? std::string(ReduceOpName(*r.reduce)) : "unspecified";
  }
  if (!r.error.ok()) {
    args["error"] = absl::StrCat(absl::StatusCodeToString(r.error.code()), ": ",
                                 r.error.message());
  }
  return args;
}

// Each slice as a complete event from `base`, a failed one with an instant
// mark at its end; each slice learns its event's index.
void AddSlices(std::vector<Slice>& slices, double base, const GroupRows& rows,
               Json& events) {
  for (Slice& s : slices) {
    const OpRecord& r = *s.record;
    const std::string kind = TraceKindName(r);
    const bool failed = r.state == WorkState::kFailed;
    const bool running =
        r.state == WorkState::kQueued || r.state == WorkState::kRunning;
    const Json args = ArgsOf(s);
    const int tid = rows.TidOf(s.group);
    s.ts = Round3(s.start - base);
    s.dur = Round3(s.end - s.start);
    Json event = {{"ph", "X"},
                  {"cat", "op"},
                  {"name", kind + (failed    ? " FAILED"
                                   : running ? " (running)"
                                             : "")},
                  {"pid", s.rank},
                  {"tid", tid},
                  {"ts", s.ts},
                  {"dur", s.dur},
                  {"args", args}};
    if (failed) event["cname"] = "terrible";
    s.event = events.size();
    events.push_back(event);
    if (failed) {
      events.push_back(
          {{"ph", "i"},
           {"s", "t"},
           {"cat", "error"},
           {"name", absl::StrCat(kind, " failed: ",
                                 absl::StatusCodeToString(r.error.code()))},
           {"pid", s.rank},
           {"tid", tid},
           {"ts", Round3(s.ts + s.dur)},
           {"args", {{"error", args.value("error", "")}}}});
    }
  }
}

// Flow arrows between the ranks of one op: send to recv, and from the last
// rank to arrive at a collective to each rank it kept waiting.
void AddArrows(std::vector<Slice>& slices, const GroupRows& rows,
               Json& events) {
  std::map<std::tuple<int64_t, std::string, int64_t>, std::vector<Slice*>> ops;
  for (Slice& s : slices) {
    ops[{s.record->generation, s.group, s.record->seq}].push_back(&s);
  }
  int next_id = 1;
  // From early in the source (when it arrived, or the data left) to late in
  // the destination (when it was let go): forward in time.
  auto arrow = [&](const Slice& from, const Slice& to, const std::string& g,
                   int64_t seq) {
    const std::string name = absl::StrCat(g, " seq ", seq);
    events.push_back({{"ph", "s"},
                      {"cat", "flow"},
                      {"name", name},
                      {"id", next_id},
                      {"pid", from.rank},
                      {"tid", rows.TidOf(from.group)},
                      {"ts", Round3(from.ts + from.dur * 0.05)}});
    events.push_back({{"ph", "f"},
                      {"cat", "flow"},
                      {"name", name},
                      {"id", next_id},
                      {"pid", to.rank},
                      {"tid", rows.TidOf(to.group)},
                      {"ts", Round3(to.ts + to.dur * 0.95)},
                      {"bp", "e"}});
    ++next_id;
  };
  for (auto& [key, members_of_op] : ops) {
    if (members_of_op.size() < 2) continue;
    std::stable_sort(
        members_of_op.begin(), members_of_op.end(),
        [](const Slice* a, const Slice* b) { return a->rank < b->rank; });
    const auto& [generation, group, seq] = key;
    bool p2p = false;
    for (const Slice* s : members_of_op) {
      p2p = p2p || PointToPoint(*s->record);
    }
    if (p2p) {
      for (const Slice* send : members_of_op) {
        if (!IsKind(*send->record, OpKind::kSend)) continue;
        const int peer = ToWorld(*send->ranks, send->record->peer);
        for (const Slice* recv : members_of_op) {
          if (IsKind(*recv->record, OpKind::kRecv) && recv->rank == peer) {
            arrow(*send, *recv, group, seq);
          }
        }
      }
      continue;
    }
    // The last to start kept the others waiting (ties: the lowest rank).
    const Slice* last = members_of_op.front();
    for (const Slice* s : members_of_op) {
      if (s->start > last->start) last = s;
    }
    for (const Slice* s : members_of_op) {
      events[s->event]["args"]["last_arrival"] = last->rank;
      if (s != last) arrow(*last, *s, group, seq);
    }
  }
}

}  // namespace

Json BuildTrace(const std::vector<TraceLog>& logs,
                const std::map<std::string, std::vector<int>>& groups,
                const std::map<int, RankClock>& clocks,
                const std::map<int, std::string>& members,
                const std::string& generator, const std::string& coordinator) {
  const GroupRows rows = RowsOf(groups);
  std::vector<Slice> slices = SlicesOf(logs, groups, clocks);
  double base = NowUs();
  if (!slices.empty()) {
    base = std::min_element(
               slices.begin(), slices.end(),
               [](const Slice& a, const Slice& b) { return a.start < b.start; })
               ->start;
  }
  Json events = Json::array();
  AddNames(members, groups, rows, events);
  std::stable_sort(
      slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
        return std::tie(a.start, a.rank) < std::tie(b.start, b.rank);
      });
  AddSlices(slices, base, rows, events);
  AddArrows(slices, rows, events);

  Json clock_doc = Json::object();
  for (const auto& [rank, clock] : clocks) {
    clock_doc[absl::StrCat(rank)] = {{"host", clock.host},
                                     {"offset_us", clock.offset_us},
                                     {"uncertainty_us", clock.uncertainty_us},
                                     {"applied", clock.applied}};
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"generator", generator},
            {"coordinator", coordinator},
            {"time_base_unix_us", Round1(base)},
            {"clock",
             "microseconds on the client's wall clock since "
             "time_base_unix_us; worker clocks aligned by their "
             "shortest-round-trip reading (see docs/python.md)"},
            {"clocks", clock_doc}}}};
}

namespace {

struct TraceArgs {
  std::string out = "-";
  std::string groups;
  int limit = 0;
};

int DebugTrace(Globals& globals, const TraceArgs& args) {
  if (args.limit < 0) {
    return Fail(absl::InvalidArgumentError("--limit must be >= 0"), true);
  }
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  auto known = (*client)->Groups();
  if (!known.ok()) return Fail(known.status());
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> wanted;
  if (!args.groups.empty()) {
    wanted = absl::StrSplit(args.groups, ',', absl::SkipEmpty());
  }
  for (const GroupInfo& g : *known) {
    if (wanted.empty() ||
        std::find(wanted.begin(), wanted.end(), g.name) != wanted.end()) {
      groups[g.name] = g.ranks;
    }
  }
  for (const std::string& g : wanted) {
    if (!groups.count(g)) {
      std::vector<std::string> names;
      for (const auto& info : *known) names.push_back(info.name);
      return Fail(absl::NotFoundError(absl::StrCat(
          "no group named '", g,
          "' in the cluster (known: ", absl::StrJoin(names, ", "), ")")));
    }
  }

  std::vector<std::string> errors;
  std::map<int, ClockSample> samples;
  std::map<int, std::string> hosts, members;
  for (const auto& member : (*client)->world().members) {
    const int rank = member.rank;
    hosts[rank] = member.host;
    members[rank] = absl::StrCat(DeviceName(member.device), " @ ",
                                 member.host.empty() ? "?" : member.host);
    ClockSample best;
    absl::Status failed;
    // One rank at a time: a reading's round trip bounds its error.
    for (int i = 0; i < kClockProbes && failed.ok(); ++i) {
      const double t0 = NowUs();
      auto logs = (*client)->OpLogs({rank}, "world", 1);
      const double t1 = NowUs();
      const auto& log = logs.front().result;
      if (!log.ok()) {
        failed = log.status();
        break;
      }
      ClockSample sample{log->now_unix_us - (t0 + t1) / 2, t1 - t0};
      if (i == 0 || sample.rtt_us < best.rtt_us) best = sample;
    }
    if (failed.ok()) {
      samples[rank] = best;
    } else {
      errors.push_back(absl::StrCat("rank ", rank, ": ", StatusText(failed)));
    }
  }

  std::vector<TraceLog> logs;
  for (const auto& [group, ranks] : groups) {
    std::vector<int> answering;
    for (int rank : ranks) {
      if (samples.count(rank)) answering.push_back(rank);  // else named above
    }
    for (auto& r : (*client)->OpLogs(answering, group, args.limit)) {
      if (!r.result.ok()) {
        errors.push_back(
            absl::StrCat("rank ", r.rank, ": ", StatusText(r.result.status())));
        continue;
      }
      logs.push_back({r.rank, group, *std::move(r.result)});
    }
  }
  Json trace =
      BuildTrace(logs, groups, AlignClocks(samples, hosts), members,
                 "ccctl debug trace", (*client)->options().coordinator);
  if (!errors.empty()) trace["otherData"]["errors"] = errors;
  for (const std::string& error : errors) {
    std::cerr << "ccctl: " << error << "\n";
  }
  const std::string text = trace.dump(1) + "\n";
  if (args.out == "-") {
    std::cout << text;
  } else {
    std::ofstream file(args.out);
    file << text;
    if (!file.flush()) {
      return Fail(absl::UnavailableError(
          absl::StrCat("cannot write the trace to '", args.out, "'")));
    }
    int slices = 0, flows = 0;
    for (const auto& e : trace["traceEvents"]) {
      slices += e["ph"] == "X";
      flows += e["ph"] == "s";
    }
    std::cout << "wrote " << args.out << ": " << slices << " ops, " << flows
              << " flows, " << samples.size() << " ranks; open it in "
              << "https://ui.perfetto.dev or chrome://tracing\n";
  }
  return errors.empty() ? kExitOk : kExitFailure;
}

}  // namespace

void AddDebugTraceCommand(CLI::App& debug, Globals& globals, int& exit_code) {
  auto args = std::make_shared<TraceArgs>();
  auto* trace = debug.add_subcommand(
      "trace",
      "every rank's flight recorder as a Chrome/Perfetto trace (JSON); open "
      "it in ui.perfetto.dev or chrome://tracing");
  trace->add_option("-o,--out", args->out, "file to write; - for stdout")
      ->capture_default_str();
  trace->add_option("--groups", args->groups,
                    "comma-separated groups (default: every group)");
  trace
      ->add_option("--limit,-n", args->limit,
                   "most recent ops per rank and group (0: all kept)")
      ->capture_default_str();
  trace->callback([&, args] { exit_code = DebugTrace(globals, *args); });
}

}  // namespace ccl::ctl
