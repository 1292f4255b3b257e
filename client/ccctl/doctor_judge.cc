#include "client/ccctl/doctor_judge.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ccl::ctl::doctor {

namespace {

// Round `round` of the circle method over n members (see RoundRobin).
std::vector<std::pair<int, int>> RoundOf(int n, int round) {
  // An odd count gets a phantom member; whoever meets it sits out.
  const int m = n % 2 == 0 ? n : n + 1;
  std::vector<std::pair<int, int>> pairs;
  auto add = [&](int a, int b) {
    if (a >= n || b >= n) return;
    pairs.emplace_back(std::min(a, b), std::max(a, b));
  };
  // Member m-1 stays put; the others turn around it one place per round.
  add(m - 1, round);
  for (int k = 1; k < m / 2; ++k) {
    add((round + k) % (m - 1), (round - k + m - 1) % (m - 1));
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

int RoundCount(int n) { return n < 2 ? 0 : (n % 2 == 0 ? n - 1 : n); }

}  // namespace

Rounds RoundRobin(int n) {
  Rounds rounds;
  for (int round = 0; round < RoundCount(n); ++round) {
    rounds.push_back(RoundOf(n, round));
  }
  return rounds;
}

Rounds SampledRounds(int n, int count) {
  const int total = RoundCount(n);
  if (count >= total) return RoundRobin(n);
  Rounds rounds;
  // Spread over the schedule: consecutive rounds pair a member with
  // neighbours of each other's; spread ones with members far apart.
  for (int k = 0; k < count; ++k) {
    rounds.push_back(RoundOf(n, static_cast<int>(int64_t{k} * total / count)));
  }
  return rounds;
}

const char* BlameName(Blame blame) {
  switch (blame) {
    case Blame::kRank:
      return "rank";
    case Blame::kLink:
      return "link";
    case Blame::kHost:
      return "host";
    case Blame::kCluster:
      return "cluster";
  }
  return "rank";
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return (lower + upper) / 2;
}

double RobustSigma(const std::vector<double>& values) {
  if (values.empty()) return 0;
  const double median = Median(values);
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::fabs(v - median));
  return 1.4826 * Median(std::move(deviations));
}

std::vector<Skew> MeasureSkew(const std::vector<Rank>& ranks,
                              const std::vector<CollectiveTimes>& ops) {
  std::vector<std::vector<double>> lateness(ranks.size()), times(ranks.size());
  for (const CollectiveTimes& op : ops) {
    if (op.device_us.size() != ranks.size()) continue;
    const double longest =
        *std::max_element(op.device_us.begin(), op.device_us.end());
    for (size_t i = 0; i < ranks.size(); ++i) {
      lateness[i].push_back(longest - op.device_us[i]);
      times[i].push_back(op.device_us[i]);
    }
  }
  std::vector<Skew> skew;
  if (ops.empty()) return skew;
  for (size_t i = 0; i < ranks.size(); ++i) {
    skew.push_back(
        {ranks[i].rank, Median(lateness[i]), Median(std::move(times[i]))});
  }
  return skew;
}

namespace {

// A cell against its saved self: bandwidth now over then, latency then over
// now, the worse of the two where both were measured; 0 when neither can be
// compared.
double BaselineRatio(const Cell& now, const Cell& then) {
  if (then.broken()) return 0;
  const double bw = then.bandwidth_gbps > 0 && now.bandwidth_gbps > 0
                        ? now.bandwidth_gbps / then.bandwidth_gbps
                        : 0;
  const double lat = then.latency_us > 0 && now.latency_us > 0
                         ? then.latency_us / now.latency_us
                         : 0;
  if (bw > 0 && lat > 0) return std::min(bw, lat);
  return std::max(bw, lat);
}

// One metric's cells as "goodness" (higher is better: a bandwidth, the
// inverse of a latency, a ratio to the baseline), by member index.
struct Sample {
  int src = 0;
  int dst = 0;
  double good = 0;
};

struct Metric {
  std::string name;
  // Slow when good < reference * (1 - tolerance).
  double tolerance = 0;
  // The figure a person reads, from a goodness: GB/s, us, a ratio.
  double (*shown)(double good) = nullptr;
  std::string unit;
  // A single stall multiplies one small op's time: latencies have heavier
  // tails than bandwidths (see LogSpread).
  bool heavy_tailed = false;
};

// A rank's figure in a class: the upper quartile of its cells (the best of
// few). A rank slow with every peer is slow even there, while one slow link,
// or a slow peer, leaves it alone: those are the links' to answer.
double UpperQuartile(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t rank = (3 * values.size() + 3) / 4;  // ceil(0.75 n), >= 1
  return values[std::min(rank, values.size()) - 1];
}

// The ordinary spread of comparable figures on a log scale (bandwidths and
// latencies vary by factors, not by amounts), estimated two ways: 1.4826
// times the median absolute deviation of all of them, and of the half above
// the median alone. Slow figures a fault made widen the first (a slow
// rank's two figures among a 4-rank group's 8 did, until a rank at a fifth
// of its peers passed); fast ones widen the second (a rank sending three
// times as fast as the rest did, until a link at a fifteenth passed:
// doctor_faults link run 16 of seed 20261206). So the narrower of the two,
// the confirmation guarding against what chance then names; latencies, whose
// tails are heavier (one stall multiplies a small op's time; the healthy
// runs of doctor_faults named single 4x latency cells otherwise), take the
// wider. An estimate from m figures is itself off by a share of it: widened
// by 0.3 / sqrt(m), so a few lucky figures do not make it short.
double LogSpread(const std::vector<double>& values, bool heavy_tailed) {
  std::vector<double> logs;
  for (double v : values) {
    if (v > 0) logs.push_back(std::log(v));
  }
  if (logs.empty()) return 0;
  const double two_sided = RobustSigma(logs);
  const double median = Median(logs);
  std::vector<double> above;
  for (double l : logs) {
    if (l >= median) above.push_back(l - median);
  }
  const double upper = 1.4826 * Median(std::move(above));
  const double sigma =
      heavy_tailed ? std::max(two_sided, upper) : std::min(two_sided, upper);
  const double m = static_cast<double>(logs.size());
  return sigma * (1 + 0.3 / std::sqrt(m));
}

// Many figures are judged at once (a matrix of n (n - 1)), so the yardstick
// grows with their number: at least `sigmas`, and enough that a healthy
// group of normal spread names nothing in about 99 runs of 100 however
// large. A run judges about ten such families (ranks and links, by
// bandwidth and latency, within and between hosts): each gets 0.001, shared
// by its figures (a Bonferroni bound: 4.3 deviations for 8 ranks' 56 cells,
// 6 for 1,024 ranks').
// The upper normal quantile of p (Abramowitz and Stegun 26.2.23, within
// 4.5e-4), 0 < p < 0.5.
double UpperNormalQuantile(double p) {
  const double t = std::sqrt(-2 * std::log(p));
  return t - (2.515517 + 0.802853 * t + 0.010328 * t * t) /
                 (1 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t);
}

double DeviationsFor(size_t figures, double sigmas) {
  if (figures == 0) return sigmas;
  return std::max(sigmas,
                  UpperNormalQuantile(0.001 / static_cast<double>(figures)));
}

// Whether `mine` lie below `others` as a whole, by the Mann-Whitney rank
// sum (normal approximation, continuity corrected) at one-sided level
// `alpha`: how a rank slow with every peer shows when its peers' own
// figures spread too widely for the quartile test (4 ranks on a loaded
// machine: each healthy rank's best figure varied 2.6x while the throttled
// one's cells sat at a fifth, all below every other).
bool RanksBelow(const std::vector<double>& mine,
                const std::vector<double>& others, double alpha) {
  if (mine.size() < 3 || others.size() < 3) return false;
  double u = 0;
  for (double a : mine) {
    for (double b : others) u += a > b ? 1 : (a == b ? 0.5 : 0);
  }
  const double n1 = static_cast<double>(mine.size());
  const double n2 = static_cast<double>(others.size());
  const double mean = n1 * n2 / 2;
  const double sd = std::sqrt(n1 * n2 * (n1 + n2 + 1) / 12);
  return (u + 0.5 - mean) / sd < -UpperNormalQuantile(alpha);
}

// Whether a figure is far below the median of `values`: below it by more
// than the tolerance, and by more than DeviationsFor(values) times the
// class's `log_spread`.
class SlowTest {
 public:
  SlowTest(const std::vector<double>& values, double log_spread,
           double tolerance, double sigmas)
      : reference_(Median(values)), floor_(reference_ * (1 - tolerance)) {
    if (reference_ <= 0) return;
    log_limit_ = std::log(reference_) -
                 DeviationsFor(values.size(), sigmas) * log_spread;
  }
  double reference() const { return reference_; }
  bool operator()(double good) const {
    return good > 0 && good < floor_ && std::log(good) < log_limit_;
  }

 private:
  double reference_;
  double floor_;
  double log_limit_ = 0;
};

double Identity(double good) { return good; }
double Inverse(double good) { return good > 0 ? 1 / good : 0; }

std::string Shown(const Metric& metric, double good) {
  return absl::StrFormat("%.3g%s", metric.shown(good), metric.unit);
}

class Judgement {
 public:
  Judgement(const std::vector<Rank>& ranks, const Thresholds& thresholds)
      : ranks_(ranks), thresholds_(thresholds) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      index_of_[ranks[i].rank] = static_cast<int>(i);
    }
  }

  int IndexOf(int rank) const {
    auto it = index_of_.find(rank);
    return it == index_of_.end() ? -1 : it->second;
  }
  bool SameHost(int a, int b) const { return ranks_[a].host == ranks_[b].host; }
  std::vector<Finding>& findings() { return findings_; }

  // Pairs that failed or moved wrong bytes. A rank most of whose pairs
  // broke is the culprit; otherwise each broken pair is a link of its own.
  // Returns the member indices blamed, whose other cells say nothing.
  std::set<int> JudgeBroken(const std::vector<Cell>& cells) {
    std::vector<int> broken(ranks_.size(), 0), total(ranks_.size(), 0);
    for (const Cell& cell : cells) {
      const int s = IndexOf(cell.src), d = IndexOf(cell.dst);
      if (s < 0 || d < 0) continue;
      ++total[s];
      ++total[d];
      if (cell.broken()) {
        ++broken[s];
        ++broken[d];
      }
    }
    std::set<int> blamed;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      // With two ranks every failure touches both: no rank stands out.
      if (ranks_.size() > 2 && broken[i] >= 2 && 2 * broken[i] > total[i]) {
        blamed.insert(static_cast<int>(i));
      }
    }
    for (int i : FoldIntoHosts(blamed, "errors", [](int) { return 0.0; })) {
      Finding finding;
      finding.blame = Blame::kRank;
      finding.ranks = {ranks_[i].rank};
      finding.host = ranks_[i].host;
      finding.metric = "errors";
      finding.direction = "both";
      finding.value = broken[i];
      finding.reference = total[i];
      finding.score = 0;
      finding.evidence = absl::StrCat(
          broken[i], " of its ", total[i],
          " directed pairs failed: ", FirstError(cells, ranks_[i].rank));
      finding.next_step = absl::StrCat(
          "look at rank ", ranks_[i].rank,
          "'s worker log and `ccctl debug ops`"
          " for the failure; a rank every pair fails with is broken itself");
      findings_.push_back(std::move(finding));
    }
    std::map<std::pair<int, int>, std::vector<const Cell*>> links;
    for (const Cell& cell : cells) {
      const int s = IndexOf(cell.src), d = IndexOf(cell.dst);
      if (!cell.broken() || s < 0 || d < 0 || blamed.count(s) ||
          blamed.count(d)) {
        continue;
      }
      links[{std::min(cell.src, cell.dst), std::max(cell.src, cell.dst)}]
          .push_back(&cell);
    }
    for (const auto& [pair, broken_cells] : links) {
      Finding finding;
      finding.blame = Blame::kLink;
      finding.ranks = {broken_cells[0]->src, broken_cells[0]->dst};
      finding.metric = "errors";
      finding.value = static_cast<double>(broken_cells.size());
      finding.reference = 2;
      finding.score = 0;
      const Cell& first = *broken_cells[0];
      finding.evidence =
          first.wrong > 0
              ? absl::StrCat(first.src, " -> ", first.dst, " delivered ",
                             first.wrong, " wrong elements")
              : absl::StrCat(first.src, " -> ", first.dst,
                             " failed: ", first.error);
      finding.next_step = absl::StrCat(
          "run `ccctl bench sendrecv -c 1` between ranks ", pair.first, " and ",
          pair.second, " (a group of the two) to see it again");
      findings_.push_back(std::move(finding));
    }
    return blamed;
  }

  // Per class (false: between hosts, true: within a host), the samples.
  using Classes = std::map<bool, std::vector<const Sample*>>;
  // A rank flagged slow: its directions, classes and worst score.
  struct Flag {
    bool send = false, recv = false;
    double score = 1, value = 0, reference = 0;
    std::set<bool> classes;
  };

  // Ranks (per direction) and then links whose figure is far below their
  // comparable peers'. `excluded`: member indices already blamed.
  void JudgeSpeed(const Metric& metric, const std::vector<Sample>& samples,
                  std::set<int> excluded) {
    Classes by_class;
    for (const Sample& sample : samples) {
      if (excluded.count(sample.src) || excluded.count(sample.dst)) continue;
      by_class[SameHost(sample.src, sample.dst)].push_back(&sample);
    }
    std::map<int, Flag> flagged = FlagSlowRanks(metric, by_class);
    std::set<int> blamed;
    for (const auto& [i, flag] : flagged) blamed.insert(i);
    NameRanks(metric, blamed, flagged);
    // Links: what is slow between ranks that are otherwise fine.
    for (int i : blamed) excluded.insert(i);
    JudgeLinks(metric, by_class, excluded);
  }

  // Member index -> flag, for each rank slow with its peers: by the upper
  // quartile of its cells, or by their rank sum against the others'.
  std::map<int, Flag> FlagSlowRanks(const Metric& metric,
                                    const Classes& by_class) {
    std::map<int, Flag> flagged;
    for (const auto& [within, class_samples] : by_class) {
      if (class_samples.size() < 3) continue;  // nothing to compare with
      std::vector<std::vector<double>> sent(ranks_.size()),
          received(ranks_.size());
      for (const Sample* s : class_samples) {
        sent[s->src].push_back(s->good);
        received[s->dst].push_back(s->good);
      }
      std::vector<double> send_score(ranks_.size(), -1),
          recv_score(ranks_.size(), -1), scores;
      for (size_t i = 0; i < ranks_.size(); ++i) {
        // One peer in a class (the other rank of a two-rank host) cannot
        // tell the rank from its peer: such a pair is the links' to judge.
        if (sent[i].size() >= 2) {
          send_score[i] = UpperQuartile(sent[i]);
          scores.push_back(send_score[i]);
        }
        if (received[i].size() >= 2) {
          recv_score[i] = UpperQuartile(received[i]);
          scores.push_back(recv_score[i]);
        }
      }
      const SlowTest slow(scores, LogSpread(scores, metric.heavy_tailed),
                          metric.tolerance, thresholds_.sigmas);
      const double reference = slow.reference();
      for (size_t i = 0; i < ranks_.size(); ++i) {
        const bool send = slow(send_score[i]), recv = slow(recv_score[i]);
        if (!send && !recv) continue;
        Flag& flag = flagged[static_cast<int>(i)];
        flag.send = flag.send || send;
        flag.recv = flag.recv || recv;
        flag.classes.insert(within);
        const double worst = send && recv
                                 ? std::min(send_score[i], recv_score[i])
                                 : (send ? send_score[i] : recv_score[i]);
        if (reference > 0 && worst / reference < flag.score) {
          flag.score = worst / reference;
          flag.value = worst;
          flag.reference = reference;
        }
      }
      // Slow with its peers as a whole, against the cells it is not in: at
      // level 0.02 shared by the ranks (the confirmation guards against
      // what chance names), in the directions below the others' median by
      // the tolerance.
      for (size_t i = 0; i < ranks_.size(); ++i) {
        std::vector<double> mine, others, sends, receives;
        for (const Sample* s : class_samples) {
          const bool from = s->src == static_cast<int>(i);
          const bool to = s->dst == static_cast<int>(i);
          (from || to ? mine : others).push_back(s->good);
          if (from) sends.push_back(s->good);
          if (to) receives.push_back(s->good);
        }
        if (!RanksBelow(mine, others, 0.02 / ranks_.size())) continue;
        const double median_others = Median(others);
        const double floor = median_others * (1 - metric.tolerance);
        const double send = Median(sends), recv = Median(receives);
        const bool slow_send = send < floor, slow_recv = recv < floor;
        if (median_others <= 0 || (!slow_send && !slow_recv)) continue;
        Flag& flag = flagged[static_cast<int>(i)];
        flag.send = flag.send || slow_send;
        flag.recv = flag.recv || slow_recv;
        flag.classes.insert(within);
        const double typical = slow_send && slow_recv ? std::min(send, recv)
                               : slow_send            ? send
                                                      : recv;
        if (typical / median_others < flag.score) {
          flag.score = typical / median_others;
          flag.value = typical;
          flag.reference = median_others;
        }
      }
    }
    return flagged;
  }

  // The findings of the flagged ranks (or of their hosts, where a host's
  // ranks are all slow).
  void NameRanks(const Metric& metric, const std::set<int>& blamed,
                 std::map<int, Flag>& flagged) {
    const std::set<int> as_ranks = FoldIntoHosts(
        blamed, metric.name, [&](int i) { return flagged[i].score; });
    for (int i : as_ranks) {
      const Flag& flag = flagged[i];
      Finding finding;
      finding.blame = Blame::kRank;
      finding.ranks = {ranks_[i].rank};
      finding.host = ranks_[i].host;
      finding.metric = metric.name;
      finding.direction = flag.send && flag.recv ? "both"
                          : flag.send            ? "send"
                                                 : "recv";
      finding.value = metric.shown(flag.value);
      finding.reference = metric.shown(flag.reference);
      finding.score = flag.score;
      const std::string where = flag.classes.size() == 2 ? "to every peer"
                                : *flag.classes.begin()  ? "within its host"
                                                         : "to other hosts";
      finding.evidence =
          absl::StrCat("its ", metric.name, " ",
                       finding.direction == "both"   ? "sending and receiving"
                       : finding.direction == "send" ? "sending"
                                                     : "receiving",
                       " ", where, " is at best ", Shown(metric, flag.value),
                       " (upper quartile) against ",
                       Shown(metric, flag.reference), " for its peers");
      finding.next_step =
          finding.direction == "send"
              ? absl::StrCat("rank ", ranks_[i].rank,
                             " is slow only as a sender: check its outgoing "
                             "path (a rate limit, a down-trained link)")
              : absl::StrCat(
                    "rank ", ranks_[i].rank, " on ", ranks_[i].host,
                    " is slow with every peer: check its device, its CPU "
                    "share and its network link, then re-run the doctor");
      findings_.push_back(std::move(finding));
    }
  }

  // Links whose figure is far below comparable links', between ranks
  // that are otherwise fine (`excluded`: blamed already).
  void JudgeLinks(const Metric& metric, const Classes& by_class,
                  const std::set<int>& excluded) {
    std::map<std::pair<int, int>, std::vector<std::pair<const Sample*, double>>>
        slow_links;
    for (const auto& [within, class_samples] : by_class) {
      std::vector<double> goods;
      std::vector<const Sample*> kept;
      for (const Sample* s : class_samples) {
        if (excluded.count(s->src) || excluded.count(s->dst)) continue;
        goods.push_back(s->good);
        kept.push_back(s);
      }
      if (goods.size() < 3) continue;
      const SlowTest slow(goods, LogSpread(goods, metric.heavy_tailed),
                          metric.tolerance, thresholds_.sigmas);
      const double reference = slow.reference();
      for (const Sample* s : kept) {
        if (slow(s->good)) {
          slow_links[{std::min(s->src, s->dst), std::max(s->src, s->dst)}]
              .emplace_back(s, reference);
        }
      }
    }
    for (auto& [pair, slow] : slow_links) {
      std::sort(slow.begin(), slow.end(), [](const auto& a, const auto& b) {
        return a.first->good / a.second < b.first->good / b.second;
      });
      const Sample& worst = *slow[0].first;
      const double reference = slow[0].second;
      Finding finding;
      finding.blame = Blame::kLink;
      finding.ranks = {ranks_[worst.src].rank, ranks_[worst.dst].rank};
      finding.host = SameHost(worst.src, worst.dst)
                         ? ranks_[worst.src].host
                         : absl::StrCat(ranks_[worst.src].host, " - ",
                                        ranks_[worst.dst].host);
      finding.metric = metric.name;
      finding.value = metric.shown(worst.good);
      finding.reference = metric.shown(reference);
      finding.score = reference > 0 ? worst.good / reference : 0;
      finding.evidence =
          absl::StrCat(finding.ranks[0], " -> ", finding.ranks[1], " ",
                       metric.name, " ", Shown(metric, worst.good), " against ",
                       Shown(metric, reference), " for comparable links",
                       slow.size() == 2 ? " (both directions slow)"
                                        : " (the other direction is normal)");
      finding.next_step = absl::StrCat(
          "both ranks are fine with other peers: check the path between "
          "them (",
          finding.host,
          "); re-run `ccctl doctor` on a group of the two to confirm");
      findings_.push_back(std::move(finding));
    }
  }

  // Late arrivals in the collectives: a rank the others wait for.
  void JudgeArrival(const std::vector<Skew>& skew) {
    if (skew.size() < 3) return;
    std::vector<double> lateness, times;
    for (const Skew& s : skew) {
      lateness.push_back(s.median_lateness_us);
      times.push_back(s.median_time_us + s.median_lateness_us);
    }
    const double reference = Median(lateness);
    const double sigma = RobustSigma(lateness);
    const double op_time = Median(times);
    for (size_t i = 0; i < skew.size(); ++i) {
      const double late = skew[i].median_lateness_us;
      if (late <= thresholds_.arrival_share * op_time ||
          late <= reference + thresholds_.sigmas * sigma) {
        continue;
      }
      Finding finding;
      finding.blame = Blame::kRank;
      finding.ranks = {skew[i].rank};
      finding.host = ranks_[i].host;
      finding.metric = "arrival";
      finding.value = late;
      finding.reference = reference;
      finding.score = op_time > 0 ? std::max(0.0, 1 - late / op_time) : 0;
      finding.evidence = absl::StrFormat(
          "it starts each all_reduce %.0f us after the first rank (median; "
          "the others %.0f us), so the others spend %.0f%% of the op waiting "
          "for it",
          late, reference, op_time > 0 ? 100 * late / op_time : 0);
      finding.next_step = absl::StrCat(
          "rank ", skew[i].rank,
          " is slow to arrive, not slow to move data: check its host's load "
          "and its CPU quota, and its queue in `ccctl debug ops`");
      findings_.push_back(std::move(finding));
    }
  }

 private:
  // Hosts of two or more ranks all of which are `blamed` become one host
  // finding each; returns the rest, to be reported as ranks.
  // A host's score is its worst rank's.
  std::set<int> FoldIntoHosts(const std::set<int>& blamed,
                              const std::string& metric,
                              const std::function<double(int)>& score_of) {
    std::map<std::string, std::vector<int>> by_host;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      by_host[ranks_[i].host].push_back(static_cast<int>(i));
    }
    if (by_host.size() < 2) return blamed;
    std::set<int> rest = blamed;
    for (const auto& [host, members] : by_host) {
      if (members.size() < 2 ||
          !std::all_of(members.begin(), members.end(),
                       [&](int i) { return blamed.count(i) > 0; })) {
        continue;
      }
      Finding finding;
      finding.blame = Blame::kHost;
      finding.host = host;
      for (int i : members) {
        finding.ranks.push_back(ranks_[i].rank);
        rest.erase(i);
      }
      finding.metric = metric;
      finding.score = 1;
      for (int i : members)
        finding.score = std::min(finding.score, score_of(i));
      finding.evidence = absl::StrCat("every rank of host ", host, " (",
                                      absl::StrJoin(finding.ranks, ", "),
                                      ") is slow by ", metric);
      finding.next_step = absl::StrCat(
          "the fault is the host's, not one device's: check ", host,
          "'s network (NIC, cable, switch port, traffic shaping) and load");
      findings_.push_back(std::move(finding));
    }
    return rest;
  }

  static std::string FirstError(const std::vector<Cell>& cells, int rank) {
    for (const Cell& cell : cells) {
      if ((cell.src == rank || cell.dst == rank) && cell.broken()) {
        return cell.wrong > 0
                   ? absl::StrCat(cell.src, " -> ", cell.dst, ": ", cell.wrong,
                                  " wrong elements")
                   : absl::StrCat(cell.src, " -> ", cell.dst, ": ", cell.error);
      }
    }
    return "";
  }

  const std::vector<Rank>& ranks_;
  const Thresholds& thresholds_;
  std::map<int, int> index_of_;
  std::vector<Finding> findings_;
};

// One finding per blamed thing, worst first; what a blamed host explains
// (its ranks' findings) and what a blamed rank or host explains (links with
// one end there) are not named again but add their evidence to it.
std::vector<Finding> Consolidate(std::vector<Finding> findings) {
  std::stable_sort(
      findings.begin(), findings.end(),
      [](const Finding& a, const Finding& b) { return a.score < b.score; });
  const size_t none = findings.size();
  // The first host finding of each rank, and the first rank finding.
  std::map<int, size_t> host_of, rank_of;
  std::map<std::string, size_t> first_host;
  std::map<std::vector<int>, size_t> first_link;
  size_t first_cluster = none;
  for (size_t i = 0; i < findings.size(); ++i) {
    const Finding& f = findings[i];
    if (f.blame == Blame::kHost) {
      first_host.emplace(f.host, i);
      for (int r : f.ranks) host_of.emplace(r, first_host[f.host]);
    } else if (f.blame == Blame::kRank) {
      rank_of.emplace(f.ranks[0], i);
    } else if (f.blame == Blame::kLink) {
      first_link.emplace(std::vector<int>{std::min(f.ranks[0], f.ranks[1]),
                                          std::max(f.ranks[0], f.ranks[1])},
                         i);
    } else if (first_cluster == none) {
      first_cluster = i;
    }
  }
  auto explainer = [&](int rank) {
    if (auto it = host_of.find(rank); it != host_of.end()) return it->second;
    if (auto it = rank_of.find(rank); it != rank_of.end()) return it->second;
    return none;
  };
  auto owner = [&](size_t i) -> size_t {
    const Finding& f = findings[i];
    switch (f.blame) {
      case Blame::kHost:
        return first_host[f.host];
      case Blame::kRank:
        return explainer(f.ranks[0]);
      case Blame::kLink:
        for (int end : f.ranks) {
          if (size_t o = explainer(end); o != none) return o;
        }
        return first_link[{std::min(f.ranks[0], f.ranks[1]),
                           std::max(f.ranks[0], f.ranks[1])}];
      case Blame::kCluster:
        return first_cluster;
    }
    return i;
  };
  std::vector<Finding> out;
  std::map<size_t, size_t> placed;  // owner -> index in out
  for (size_t i = 0; i < findings.size(); ++i) {
    const size_t o = owner(i);
    auto [it, inserted] = placed.emplace(o, out.size());
    if (inserted) out.push_back(findings[o]);
    if (i == o) continue;
    Finding& kept = out[it->second];
    const Finding& f = findings[i];
    kept.score = std::min(kept.score, f.score);
    if (kept.blame == f.blame && !f.direction.empty() &&
        f.direction != kept.direction) {
      kept.direction = "both";
    }
    absl::StrAppend(&kept.evidence, "; also by ", f.metric, ": ", f.evidence);
    kept.also_by.push_back(f.metric);
  }
  return out;
}

}  // namespace

Verdict Judge(const std::vector<Rank>& ranks, const std::vector<Cell>& cells,
              const std::vector<CollectiveTimes>& collective_runs,
              const Thresholds& thresholds, const std::vector<Cell>* baseline) {
  Verdict verdict;
  Judgement judgement(ranks, thresholds);
  const std::set<int> broken = judgement.JudgeBroken(cells);

  auto samples_of = [&](auto goodness) {
    std::vector<Sample> samples;
    for (const Cell& cell : cells) {
      const int s = judgement.IndexOf(cell.src),
                d = judgement.IndexOf(cell.dst);
      if (s < 0 || d < 0 || cell.broken()) continue;
      const double good = goodness(cell);
      if (good > 0) samples.push_back({s, d, good});
    }
    return samples;
  };
  const Metric bandwidth{"bandwidth", thresholds.bandwidth_tolerance, Identity,
                         " GB/s"};
  // A latency (1 + t) times its reference is an inverse 1 / (1 + t) of it.
  const Metric latency{"latency", 1 - 1 / (1 + thresholds.latency_tolerance),
                       Inverse, " us", /*heavy_tailed=*/true};
  // Against peers always: a baseline taken on a quieter day must not hide
  // a rank that is slow today next to its peers.
  judgement.JudgeSpeed(
      bandwidth, samples_of([](const Cell& c) { return c.bandwidth_gbps; }),
      broken);
  judgement.JudgeSpeed(latency, samples_of([](const Cell& c) {
                         return c.latency_us > 0 ? 1 / c.latency_us : 0;
                       }),
                       broken);
  if (baseline != nullptr) {
    // Each cell against its saved self too: the ratio (bandwidth now over
    // then, latency then over now) is the figure, judged against the other
    // cells' ratios and against 1.
    std::map<std::pair<int, int>, const Cell*> saved;
    for (const Cell& cell : *baseline) saved[{cell.src, cell.dst}] = &cell;
    auto ratio = [&](const Cell& cell) {
      auto it = saved.find({cell.src, cell.dst});
      return it == saved.end() ? 0.0 : BaselineRatio(cell, *it->second);
    };
    const Metric against{"baseline", thresholds.baseline_tolerance, Identity,
                         "x"};
    const std::vector<Sample> samples = samples_of(ratio);
    judgement.JudgeSpeed(against, samples, broken);
    std::vector<double> ratios;
    for (const Sample& s : samples) ratios.push_back(s.good);
    const double overall = Median(ratios);
    if (ratios.size() < 3) {
      // Too few cells to compare with each other (two ranks): each against
      // its saved self alone.
      for (const Sample& s : samples) {
        if (s.good >= 1 - thresholds.baseline_tolerance) continue;
        Finding finding;
        finding.blame = Blame::kLink;
        finding.ranks = {ranks[s.src].rank, ranks[s.dst].rank};
        finding.metric = "baseline";
        finding.value = s.good;
        finding.reference = 1;
        finding.score = s.good;
        finding.evidence =
            absl::StrFormat("%d -> %d runs at %.2fx its baseline",
                            ranks[s.src].rank, ranks[s.dst].rank, s.good);
        finding.next_step = "compare with a fresh baseline of healthy ranks";
        judgement.findings().push_back(std::move(finding));
      }
    } else if (overall < 1 - thresholds.baseline_tolerance) {
      Finding finding;
      finding.blame = Blame::kCluster;
      finding.metric = "baseline";
      finding.value = overall;
      finding.reference = 1;
      finding.score = overall;
      finding.evidence = absl::StrFormat(
          "the median link runs at %.2fx its baseline: the whole group is "
          "slower, no one rank or link",
          overall);
      finding.next_step =
          "something common changed since the baseline: software, settings "
          "(NCCL_* variables), the network as a whole, or the load";
      judgement.findings().push_back(std::move(finding));
    }
  }
  verdict.skew = MeasureSkew(ranks, collective_runs);
  judgement.JudgeArrival(verdict.skew);

  verdict.findings = Consolidate(std::move(judgement.findings()));

  // References a person can compare a cell with.
  std::vector<double> bw[2], lat[2];
  for (const Cell& cell : cells) {
    const int s = judgement.IndexOf(cell.src), d = judgement.IndexOf(cell.dst);
    if (s < 0 || d < 0 || cell.broken()) continue;
    const int within = judgement.SameHost(s, d) ? 1 : 0;
    if (cell.bandwidth_gbps > 0) bw[within].push_back(cell.bandwidth_gbps);
    if (cell.latency_us > 0) lat[within].push_back(cell.latency_us);
  }
  if (!bw[1].empty()) verdict.intra_host_bandwidth_gbps = Median(bw[1]);
  if (!bw[0].empty()) verdict.inter_host_bandwidth_gbps = Median(bw[0]);
  if (!lat[1].empty()) verdict.intra_host_latency_us = Median(lat[1]);
  if (!lat[0].empty()) verdict.inter_host_latency_us = Median(lat[0]);
  return verdict;
}

std::vector<std::pair<int, int>> SuspectPairs(const Verdict& verdict,
                                              const std::vector<Rank>& ranks) {
  std::set<std::pair<int, int>> pairs;
  auto add = [&](int a, int b) {
    if (a != b) pairs.insert({std::min(a, b), std::max(a, b)});
  };
  std::map<int, std::string> host_of;
  for (const Rank& r : ranks) host_of[r.rank] = r.host;
  for (const Finding& f : verdict.findings) {
    if (f.metric == "errors" || f.metric == "arrival") continue;
    switch (f.blame) {
      case Blame::kRank:
        for (const Rank& peer : ranks) add(f.ranks[0], peer.rank);
        break;
      case Blame::kLink:
        add(f.ranks[0], f.ranks[1]);
        break;
      case Blame::kHost:
        for (int member : f.ranks) {
          for (const Rank& peer : ranks) {
            if (peer.host != f.host) add(member, peer.rank);
          }
        }
        break;
      case Blame::kCluster:
        break;
    }
  }
  return {pairs.begin(), pairs.end()};
}

Rounds InRounds(const std::vector<std::pair<int, int>>& pairs) {
  Rounds rounds;
  std::vector<std::set<int>> busy;
  for (const auto& pair : pairs) {
    size_t round = 0;
    while (round < rounds.size() &&
           (busy[round].count(pair.first) || busy[round].count(pair.second))) {
      ++round;
    }
    if (round == rounds.size()) {
      rounds.emplace_back();
      busy.emplace_back();
    }
    rounds[round].push_back(pair);
    busy[round].insert(pair.first);
    busy[round].insert(pair.second);
  }
  return rounds;
}

namespace {

std::pair<int, int> Ordered(int a, int b) {
  return {std::min(a, b), std::max(a, b)};
}

bool IsSpeed(const std::string& metric) {
  return metric == "bandwidth" || metric == "latency" || metric == "baseline";
}

// A finding named first by a speed (its worst evidence); one named for an
// arrival or errors is not re-measured, whatever speeds it also cites.
bool NamedBySpeed(const Finding& f) { return IsSpeed(f.metric); }

bool IsSpeedLink(const Finding& f) {
  return f.blame == Blame::kLink && f.ranks.size() == 2 && NamedBySpeed(f);
}

bool IsSpeedRank(const Finding& f) {
  return f.blame == Blame::kRank && f.ranks.size() == 1 && NamedBySpeed(f);
}

// A cell's goodness by `metric`, higher better: a bandwidth, the inverse of
// a latency, the ratio to its saved self in `saved`; 0 when it has none.
double Goodness(const Cell& cell, const std::string& metric,
                const std::map<std::pair<int, int>, const Cell*>& saved) {
  if (metric == "bandwidth") return cell.bandwidth_gbps;
  if (metric == "latency") {
    return cell.latency_us > 0 ? 1 / cell.latency_us : 0.0;
  }
  auto it = saved.find({cell.src, cell.dst});
  return it == saved.end() ? 0.0 : BaselineRatio(cell, *it->second);
}

// The share of its reference a goodness may reach and still be slow: a
// latency (1 + t) times its reference is a goodness 1 / (1 + t) of it.
double SlowShare(const std::string& metric, const Thresholds& thresholds) {
  return metric == "bandwidth" ? 1 - thresholds.bandwidth_tolerance
         : metric == "latency" ? 1 / (1 + thresholds.latency_tolerance)
                               : 1 - thresholds.baseline_tolerance;
}

std::map<std::pair<int, int>, const Cell*> Saved(
    const std::vector<Cell>* baseline) {
  std::map<std::pair<int, int>, const Cell*> saved;
  if (baseline != nullptr) {
    for (const Cell& cell : *baseline) saved[{cell.src, cell.dst}] = &cell;
  }
  return saved;
}

}  // namespace

std::vector<std::pair<int, int>> LinkControls(const Verdict& verdict,
                                              std::pair<int, int> link,
                                              const std::vector<Rank>& ranks) {
  std::set<int> suspected;
  for (const Finding& f : verdict.findings) {
    suspected.insert(f.ranks.begin(), f.ranks.end());
  }
  std::map<int, std::string> host_of;
  for (const Rank& r : ranks) host_of[r.rank] = r.host;
  const bool within = host_of[link.first] == host_of[link.second];
  std::vector<std::pair<int, int>> controls;
  std::set<int> taken;
  for (int end : {link.first, link.second}) {
    // A partner the other end's control did not take where there is one:
    // two ranks' figures are not one rank's twice.
    int partner = -1;
    for (const Rank& peer : ranks) {
      if (peer.rank == link.first || peer.rank == link.second ||
          suspected.count(peer.rank) || (host_of[end] == peer.host) != within) {
        continue;
      }
      if (partner < 0 || (taken.count(partner) && !taken.count(peer.rank))) {
        partner = peer.rank;
      }
    }
    if (partner >= 0) {
      controls.push_back(Ordered(end, partner));
      taken.insert(partner);
    }
  }
  return controls;
}

Rounds ConfirmationRounds(const Verdict& verdict,
                          const std::vector<std::pair<int, int>>& pairs,
                          const std::vector<Rank>& ranks, bool with_controls) {
  std::vector<std::pair<int, int>> links;
  for (const Finding& f : verdict.findings) {
    if (!IsSpeedLink(f)) continue;
    const auto link = Ordered(f.ranks[0], f.ranks[1]);
    if (std::find(links.begin(), links.end(), link) == links.end()) {
      links.push_back(link);
    }
  }
  Rounds rounds;
  std::set<std::pair<int, int>> alone;
  for (const auto& pair : pairs) {
    if (std::find(links.begin(), links.end(), pair) == links.end()) continue;
    rounds.push_back({pair});
    alone.insert(pair);
    if (!with_controls) continue;
    for (const auto& control : LinkControls(verdict, pair, ranks)) {
      if (alone.insert(control).second) rounds.push_back({control});
    }
  }
  std::vector<std::pair<int, int>> others;
  for (const auto& pair : pairs) {
    if (!alone.count(pair)) others.push_back(pair);
  }
  if (with_controls && std::any_of(verdict.findings.begin(),
                                   verdict.findings.end(), IsSpeedRank)) {
    for (const auto& control : RankControls(verdict, ranks)) {
      if (!alone.count(control) &&
          std::find(others.begin(), others.end(), control) == others.end()) {
        others.push_back(control);
      }
    }
  }
  for (auto& round : InRounds(others)) rounds.push_back(std::move(round));
  return rounds;
}

bool StandsOutOfItsControls(const Finding& link,
                            const std::vector<std::pair<int, int>>& controls,
                            const std::vector<Cell>& again,
                            const Thresholds& thresholds,
                            const std::vector<Cell>* baseline) {
  if (!IsSpeedLink(link)) return true;
  const auto saved = Saved(baseline);
  // The worse of a pair's two directions as `again` measured them; 0 when
  // neither was.
  auto worse = [&](std::pair<int, int> pair, const std::string& metric) {
    double figure = 0;
    for (const Cell& cell : again) {
      if (Ordered(cell.src, cell.dst) != pair || cell.broken()) continue;
      const double value = Goodness(cell, metric, saved);
      if (value > 0) figure = figure == 0 ? value : std::min(figure, value);
    }
    return figure;
  };
  std::vector<std::string> metrics = link.also_by;
  metrics.push_back(link.metric);
  bool compared = false;
  for (const std::string& metric : metrics) {
    if (!IsSpeed(metric)) continue;
    const double suspect = worse(Ordered(link.ranks[0], link.ranks[1]), metric);
    std::vector<double> beside;
    for (const auto& control : controls) {
      if (const double figure = worse(control, metric); figure > 0) {
        beside.push_back(figure);
      }
    }
    if (suspect <= 0 || beside.empty()) continue;
    compared = true;
    if (suspect <= Median(beside) * SlowShare(metric, thresholds)) return true;
  }
  return !compared;
}

std::vector<std::pair<int, int>> RankControls(const Verdict& verdict,
                                              const std::vector<Rank>& ranks) {
  std::set<int> suspected;
  for (const Finding& f : verdict.findings) {
    suspected.insert(f.ranks.begin(), f.ranks.end());
  }
  std::vector<const Rank*> free;
  for (const Rank& r : ranks) {
    if (!suspected.count(r.rank)) free.push_back(&r);
  }
  std::vector<std::pair<int, int>> controls;
  for (const bool within : {true, false}) {
    bool found = false;
    for (size_t i = 0; i < free.size() && !found; ++i) {
      for (size_t j = i + 1; j < free.size() && !found; ++j) {
        if ((free[i]->host == free[j]->host) != within) continue;
        controls.push_back(Ordered(free[i]->rank, free[j]->rank));
        found = true;
      }
    }
  }
  return controls;
}

bool RankStandsOutOfItsControls(
    const Finding& rank, const std::vector<std::pair<int, int>>& controls,
    const std::vector<Cell>& again, const std::vector<Rank>& ranks,
    const Thresholds& thresholds, const std::vector<Cell>* baseline) {
  if (!IsSpeedRank(rank)) return true;
  const int suspect = rank.ranks[0];
  const auto saved = Saved(baseline);
  std::map<int, std::string> host_of;
  for (const Rank& r : ranks) host_of[r.rank] = r.host;
  auto within = [&](const Cell& cell) {
    return host_of[cell.src] == host_of[cell.dst];
  };
  const bool sends = rank.direction != "recv";
  const bool receives = rank.direction != "send";
  std::vector<std::string> metrics = rank.also_by;
  metrics.push_back(rank.metric);
  bool compared = false;
  for (const std::string& metric : metrics) {
    if (!IsSpeed(metric)) continue;
    // The controls' median per class (within a host, between hosts).
    std::vector<double> beside[2];
    for (const Cell& cell : again) {
      if (cell.broken() ||
          std::find(controls.begin(), controls.end(),
                    Ordered(cell.src, cell.dst)) == controls.end()) {
        continue;
      }
      if (const double value = Goodness(cell, metric, saved); value > 0) {
        beside[within(cell) ? 1 : 0].push_back(value);
      }
    }
    // Each of the rank's cells in the finding's direction against its
    // class's controls.
    std::vector<double> shares;
    for (const Cell& cell : again) {
      if (cell.broken() || !((sends && cell.src == suspect) ||
                             (receives && cell.dst == suspect))) {
        continue;
      }
      const auto& reference = beside[within(cell) ? 1 : 0];
      const double value = Goodness(cell, metric, saved);
      if (value > 0 && !reference.empty()) {
        shares.push_back(value / Median(reference));
      }
    }
    if (shares.empty()) continue;
    compared = true;
    if (Median(shares) <= SlowShare(metric, thresholds)) return true;
  }
  return !compared;
}

Verdict Confirmed(const Verdict& first, Verdict second,
                  const std::vector<Rank>& ranks) {
  using PairSet = std::set<std::pair<int, int>>;
  auto pairs_of = [&](const std::vector<Finding>& findings) {
    Verdict verdict;
    verdict.findings = findings;
    const auto pairs = SuspectPairs(verdict, ranks);
    return PairSet(pairs.begin(), pairs.end());
  };
  auto within = [](const PairSet& pairs, const PairSet& suspected) {
    return !pairs.empty() &&
           std::all_of(pairs.begin(), pairs.end(),
                       [&](const auto& p) { return suspected.count(p) > 0; });
  };
  const PairSet before = pairs_of(first.findings);
  const PairSet after = pairs_of(second.findings);
  std::vector<Finding> kept;
  std::vector<PairSet> kept_pairs;
  for (Finding& finding : second.findings) {
    PairSet pairs = pairs_of({finding});
    // A finding on no pair (a broken cell, the group against its baseline)
    // needs no second look.
    if (pairs.empty() || within(pairs, before)) {
      kept.push_back(std::move(finding));
      kept_pairs.push_back(std::move(pairs));
    }
  }
  for (const Finding& finding : first.findings) {
    const PairSet pairs = pairs_of({finding});
    const bool known =
        std::any_of(kept_pairs.begin(), kept_pairs.end(),
                    [&](const PairSet& other) { return within(pairs, other); });
    if (!known && within(pairs, after)) {
      kept.push_back(finding);
      kept_pairs.push_back(pairs);
    }
  }
  second.findings = std::move(kept);
  return second;
}

Verdict ConfirmedArrivals(Verdict verdict, const std::vector<Rank>& ranks,
                          const std::vector<CollectiveTimes>& again,
                          const Thresholds& thresholds) {
  if (again.empty()) return verdict;
  std::set<int> late_again;
  for (const Finding& f : Judge(ranks, {}, again, thresholds).findings) {
    if (f.metric == "arrival")
      late_again.insert(f.ranks.begin(), f.ranks.end());
  }
  std::erase_if(verdict.findings, [&](const Finding& f) {
    return f.metric == "arrival" && f.blame == Blame::kRank &&
           !late_again.count(f.ranks[0]);
  });
  return verdict;
}

void KeepBest(std::vector<Cell>& cells, const std::vector<Cell>& again) {
  std::map<std::pair<int, int>, const Cell*> measured;
  for (const Cell& cell : again) measured[{cell.src, cell.dst}] = &cell;
  for (Cell& cell : cells) {
    auto it = measured.find({cell.src, cell.dst});
    if (it == measured.end() || cell.broken()) continue;
    const Cell& other = *it->second;
    if (other.broken()) {
      // Broken the second time: that is the finding now.
      cell.error = other.error;
      cell.wrong = other.wrong;
      continue;
    }
    cell.bandwidth_gbps = std::max(cell.bandwidth_gbps, other.bandwidth_gbps);
    if (other.latency_us > 0) {
      cell.latency_us = cell.latency_us > 0
                            ? std::min(cell.latency_us, other.latency_us)
                            : other.latency_us;
    }
  }
}

std::vector<std::pair<int, int>> NarrowingPairs(
    const Verdict& verdict, const std::vector<Rank>& ranks,
    const std::set<std::pair<int, int>>& met, int partners) {
  std::set<std::pair<int, int>> pairs;
  std::set<int> suspects;
  for (const Finding& f : verdict.findings) {
    if (f.metric == "errors" || f.metric == "arrival") continue;
    if (f.blame == Blame::kCluster) continue;
    suspects.insert(f.ranks.begin(), f.ranks.end());
    if (f.blame == Blame::kLink) {
      pairs.insert(
          {std::min(f.ranks[0], f.ranks[1]), std::max(f.ranks[0], f.ranks[1])});
    }
  }
  const int n = static_cast<int>(ranks.size());
  for (int i = 0; i < n; ++i) {
    const int suspect = ranks[i].rank;
    if (!suspects.count(suspect)) continue;
    // Partners from the far side of the member order first, as the
    // spread rounds were, then by host: other hosts before this one.
    std::vector<int> order;
    for (int k = 0; k < n - 1; ++k) order.push_back((i + n / 2 + k) % n);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return (ranks[a].host == ranks[i].host) <
             (ranks[b].host == ranks[i].host);
    });
    int taken = 0;
    for (int j : order) {
      if (taken >= partners) break;
      const int peer = ranks[j].rank;
      const std::pair<int, int> pair{std::min(suspect, peer),
                                     std::max(suspect, peer)};
      if (j == i || suspects.count(peer) || met.count(pair)) continue;
      pairs.insert(pair);
      ++taken;
    }
  }
  return {pairs.begin(), pairs.end()};
}

absl::Status Examine(const std::vector<Rank>& ranks,
                     const std::vector<CollectiveTimes>& collectives,
                     const SearchOptions& options, const MeasureFn& measure,
                     Search& search) {
  search = Search{};
  const int n = static_cast<int>(ranks.size());
  const bool sampled =
      options.sample_rounds > 0 && options.sample_rounds < RoundCount(n);
  search.sampled = sampled;
  Rounds first;
  for (const auto& round :
       sampled ? SampledRounds(n, options.sample_rounds) : RoundRobin(n)) {
    first.emplace_back();
    for (const auto& [a, b] : round) {
      first.back().emplace_back(ranks[a].rank, ranks[b].rank);
    }
  }
  search.rounds = static_cast<int>(first.size());
  if (absl::Status s = measure(first, "", search.cells); !s.ok()) return s;
  auto judge = [&] {
    return Judge(ranks, search.cells, collectives, options.thresholds,
                 options.baseline);
  };
  Verdict current = judge();
  search.verdict = current;
  for (int step = 0; step < (sampled ? options.most_steps : 1); ++step) {
    std::set<std::pair<int, int>> met;
    for (const Cell& c : search.cells) {
      met.insert({std::min(c.src, c.dst), std::max(c.src, c.dst)});
    }
    const auto pairs =
        sampled ? NarrowingPairs(current, ranks, met, options.partners)
                : SuspectPairs(current, ranks);
    if (pairs.empty()) break;
    // A search's narrowing step measures each suspect with partners it has
    // not met; controls are the matrix's confirmation's.
    const Rounds rounds =
        ConfirmationRounds(current, pairs, ranks, /*with_controls=*/!sampled);
    std::vector<Cell> again;
    absl::Status s =
        measure(rounds, sampled ? "narrowing " : "confirming ", again);
    search.rounds += static_cast<int>(rounds.size());
    search.remeasured_pairs += static_cast<int>(pairs.size());
    KeepBest(search.cells, again);
    std::set<std::pair<int, int>> had;
    for (const Cell& c : search.cells) had.insert({c.src, c.dst});
    for (const Cell& c : again) {
      if (!had.count({c.src, c.dst})) search.cells.push_back(c);
    }
    if (!s.ok()) return s;
    Verdict next = judge();
    // A link slow again, but no slower than its controls measured right
    // after it, was slow for the moment: it is not seen twice.
    // So was a rank whose pairs were no slower than the pairs of
    // unsuspected ranks measured beside them.
    const auto rank_controls = RankControls(current, ranks);
    std::erase_if(next.findings, [&](const Finding& f) {
      if (sampled) return false;
      if (IsSpeedLink(f)) {
        return !StandsOutOfItsControls(
            f, LinkControls(current, Ordered(f.ranks[0], f.ranks[1]), ranks),
            again, options.thresholds, options.baseline);
      }
      return IsSpeedRank(f) &&
             !RankStandsOutOfItsControls(f, rank_controls, again, ranks,
                                         options.thresholds, options.baseline);
    });
    search.verdict = Confirmed(current, next, ranks);
    // Every finding seen twice: done. Otherwise the new suspects are the
    // next step's (a search only: the matrix has measured them all).
    if (search.verdict.findings.size() == next.findings.size()) break;
    current = std::move(next);
  }
  return absl::OkStatus();
}

}  // namespace ccl::ctl::doctor
