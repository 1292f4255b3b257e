// ccctl doctor's reasoning, without a cluster: which pairs meet in which
// round, and, from the measured point-to-point matrix and the collective
// skew, which rank, link or host is to blame. Plain logic over numbers, so
// the finder is tested on planted faults in unit tests as well as on a live
// cluster.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ccl::ctl::doctor {

// Rounds of disjoint pairs, each pair lower first.
using Rounds = std::vector<std::vector<std::pair<int, int>>>;

// A disjoint pairing of the members per round, every unordered pair exactly
// once over n-1 rounds (n even) or n rounds (n odd: one member sits each
// round out): the circle method. Pairs hold member indices, lower first.
Rounds RoundRobin(int n);
// `count` rounds of RoundRobin(n) spread evenly over it (all of them when
// it has no more): every member meets `count` partners.
Rounds SampledRounds(int n, int count);

// One rank of the checked group: its world rank and the host it is on (the
// worker's host id, else its host name). Links within a host are judged
// against links within hosts, links between hosts against those.
struct Rank {
  int rank = 0;
  std::string host;
};

// One direction of one pair: `src` sent to `dst` (world ranks). A cell that
// could not be measured carries the error; `wrong` counts elements the
// on-device check found wrong.
struct Cell {
  int src = 0;
  int dst = 0;
  double bandwidth_gbps = 0;  // at the large size; 0 when not measured
  double latency_us = 0;      // at the small size; 0 when not measured
  int64_t wrong = 0;
  std::string error;
  bool broken() const { return !error.empty() || wrong > 0; }
};

// What a finding blames.
enum class Blame { kRank, kLink, kHost, kCluster };
const char* BlameName(Blame blame);

struct Finding {
  Blame blame = Blame::kRank;
  // kRank: the rank; kLink: the two ranks (the slower direction first);
  // kHost: its ranks; kCluster: empty.
  std::vector<int> ranks;
  std::string host;  // kHost, and the host of a rank or of a link's ends
  // "bandwidth", "latency", "errors", "arrival" or "baseline".
  std::string metric;
  // The other metrics that named the same thing (their evidence follows
  // `evidence`'s "also by").
  std::vector<std::string> also_by;
  // kRank: "send", "recv" or "both"; empty otherwise.
  std::string direction;
  // The blamed thing's typical figure and the comparable reference, in the
  // metric's unit (GB/s, us; for "baseline", the ratio to the baseline).
  double value = 0;
  double reference = 0;
  // How far from normal, 1 = normal, below 1 worse (bandwidth over
  // reference, reference latency over latency); findings sort on it.
  double score = 1;
  std::string evidence;
  std::string next_step;
};

struct Thresholds {
  // A bandwidth at most (1 - this) of its reference is slow...
  double bandwidth_tolerance = 0.3;
  // ...a latency at least (1 + this) of its reference is slow...
  double latency_tolerance = 1.0;
  // ...and in both cases also further from the reference than this many
  // robust standard deviations (1.4826 MAD, on a log scale) of the
  // comparable figures, so a noisy cluster does not accuse its ordinary
  // spread.
  double sigmas = 3.0;
  // Against a baseline: a cell this much below its saved self.
  double baseline_tolerance = 0.2;
  // A rank whose median lateness in the all_reduces exceeds this share of
  // the collective's median time arrives late.
  double arrival_share = 0.25;
};

// Per-rank times of one collective run on every rank, as the workers time
// them (device_us: from the rank's start of the op to its end). Everyone
// ends together, so a rank that started late spent the least time in it;
// ranks' lateness is told from these durations, not from clocks that may
// disagree across hosts.
struct CollectiveTimes {
  std::vector<double> device_us;  // indexed as the ranks
};

struct Skew {
  int rank = 0;
  double median_lateness_us = 0;  // after the earliest rank, per op
  double median_time_us = 0;      // its own time in the op
};
std::vector<Skew> MeasureSkew(const std::vector<Rank>& ranks,
                              const std::vector<CollectiveTimes>& ops);

struct Verdict {
  std::vector<Finding> findings;  // worst first
  // The references the cells were judged against, per link class.
  std::optional<double> intra_host_bandwidth_gbps, inter_host_bandwidth_gbps;
  std::optional<double> intra_host_latency_us, inter_host_latency_us;
  std::vector<Skew> skew;
};

// Judges the matrix (and the skew, if measured). With `baseline` (the
// cells of a saved run of the same ranks), each cell is judged by its ratio
// to its saved self instead of against its peers.
Verdict Judge(const std::vector<Rank>& ranks, const std::vector<Cell>& cells,
              const std::vector<CollectiveTimes>& collective_runs,
              const Thresholds& thresholds,
              const std::vector<Cell>* baseline = nullptr);

// Confirmation: a figure far from its peers once may be chance on a loaded
// machine; measured again it is chance no longer. The pairs (world ranks,
// lower first) whose cells the speed findings rest on: a rank's pairs with
// every peer, a link's pair, a host's pairs with other hosts. Errors,
// arrivals and a whole-group finding are not re-measured.
std::vector<std::pair<int, int>> SuspectPairs(const Verdict& verdict,
                                              const std::vector<Rank>& ranks);
// `pairs` in rounds of disjoint pairs (greedily, in order).
Rounds InRounds(const std::vector<std::pair<int, int>>& pairs);
// The rounds that measure `pairs` again after `verdict`: the pair of each
// link it names in a round of its own, the rest in disjoint rounds. A link
// is named for what it does alone; beside other pairs it shares what they
// share (a switch, a NIC, a loaded host's cores), and a suspect measured
// again beside the same pairs is slowed by the same neighbours again.
// With `with_controls`, each named link's own round is followed by its
// controls' (LinkControls), each alone too, and the named ranks' controls
// (RankControls) run among the other pairs.
Rounds ConfirmationRounds(const Verdict& verdict,
                          const std::vector<std::pair<int, int>>& pairs,
                          const std::vector<Rank>& ranks, bool with_controls);
// The controls of a link (lower rank first) that `verdict` names: a pair of
// each end with a rank no finding of `verdict` suspects, alike (both within
// one host, or both between hosts), lower first. Measured alone right after
// the link, they tell a slow link (slow beside them) from a slow moment: on
// a loaded machine a link measured alone twice can be slow both times while
// every pair measured then is (CI, ccctl_doctor_test: 1 <-> 3 at 10.8x its
// peers' latency twice, named ahead of the throttled rank). Empty when no
// rank is free of suspicion.
std::vector<std::pair<int, int>> LinkControls(const Verdict& verdict,
                                              std::pair<int, int> link,
                                              const std::vector<Rank>& ranks);
// The controls of the ranks `verdict` names: up to two pairs of ranks no
// finding suspects, one within a host and one between hosts where there
// are such, lower first. Measured in the same rounds as the suspected
// ranks' pairs, beside them, they tell a slow rank from a slow moment.
std::vector<std::pair<int, int>> RankControls(const Verdict& verdict,
                                              const std::vector<Rank>& ranks);
// Whether rank finding `rank` (bandwidth, latency, baseline) is still slow
// next to the `controls` as `again` measured them: the median of its cells
// in the finding's direction, each against the controls' median of its
// class (within a host, between hosts), at most the metric's tolerance.
// True when there is nothing to compare with.
bool RankStandsOutOfItsControls(
    const Finding& rank, const std::vector<std::pair<int, int>>& controls,
    const std::vector<Cell>& again, const std::vector<Rank>& ranks,
    const Thresholds& thresholds, const std::vector<Cell>* baseline = nullptr);
// Whether link finding `link` is still slow next to its `controls` as
// `again` measured them, by one of the metrics that named it (bandwidth,
// latency, or the ratio to `baseline`'s cells) and that metric's tolerance:
// the worse direction of the link against the median of the controls'
// worse directions. True when there is nothing to compare with (no control
// measured, or no such metric).
bool StandsOutOfItsControls(const Finding& link,
                            const std::vector<std::pair<int, int>>& controls,
                            const std::vector<Cell>& again,
                            const Thresholds& thresholds,
                            const std::vector<Cell>* baseline = nullptr);
// Each cell of `cells` that `again` measured keeps the better figure of the
// two (bandwidth the higher, latency the lower): a fault is slow both
// times, chance is rarely slow twice.
void KeepBest(std::vector<Cell>& cells, const std::vector<Cell>& again);

// The verdict after the suspects were measured again: what both verdicts
// had. `second`'s findings on pairs `first` suspected (new suspects are one
// measurement old: chance, until measured again), and `first`'s findings
// whose pairs `second` suspected as part of a wider finding: a slow link
// seen again inside a rank's finding (its rank's latency was also off, by
// chance, the second time) is still the link, seen twice.
Verdict Confirmed(const Verdict& first, Verdict second,
                  const std::vector<Rank>& ranks);

// An arrival finding rests on one set of all_reduces: a rank late by
// chance (a loaded host's scheduler) is not late again. Keeps each finding
// named for an arrival whose rank is late again in `again` (judged as the
// first set was), and the other findings as they are; with `again` empty
// (not measured), `verdict` as it is.
Verdict ConfirmedArrivals(Verdict verdict, const std::vector<Rank>& ranks,
                          const std::vector<CollectiveTimes>& again,
                          const Thresholds& thresholds);

// The next step of a search that did not measure every pair (--bisect):
// each rank a finding of `verdict` suspects (a rank, a host's ranks, a
// link's two ends) with up to `partners` ranks it has not met (`met`, lower
// first) that no finding suspects, on other hosts first; and a slow link's
// own pair again. World ranks, lower first.
std::vector<std::pair<int, int>> NarrowingPairs(
    const Verdict& verdict, const std::vector<Rank>& ranks,
    const std::set<std::pair<int, int>>& met, int partners);

// How the doctor goes from measurements to a verdict.
struct SearchOptions {
  // 0: every pair (the round-robin matrix), then the suspects' pairs again.
  // Else a search (--bisect): this many rounds of the schedule, then up to
  // `most_steps` narrowing steps, each chosen from the last verdict. One:
  // each further step gave chance suspects of a loaded machine one more
  // chance to be seen twice (16 CPU workers on 2 cores: a healthy cluster
  // named 15 latency links with 3 steps).
  int sample_rounds = 0;
  int partners = 4;
  int most_steps = 1;
  Thresholds thresholds;
  const std::vector<Cell>* baseline = nullptr;
};
// Measures `rounds` (world ranks) both ways, adding each directed pair's
// cell to `cells`; `label` names the step in progress lines.
using MeasureFn = std::function<absl::Status(
    const Rounds& rounds, const std::string& label, std::vector<Cell>& cells)>;
struct Search {
  bool sampled = false;     // a search (else the whole matrix)
  std::vector<Cell> cells;  // each measured directed pair, its best figure
  Verdict verdict;
  int rounds = 0;            // rounds measured, confirmation included
  int remeasured_pairs = 0;  // pairs measured after the first verdict
};
// Measures, judges, and measures again what the verdict rests on, until
// every finding has been seen twice (a figure far from its peers once may
// be chance on a loaded machine). On an error of `measure`, returns it with
// `search` holding what was measured so far.
absl::Status Examine(const std::vector<Rank>& ranks,
                     const std::vector<CollectiveTimes>& collectives,
                     const SearchOptions& options, const MeasureFn& measure,
                     Search& search);

// The median, and 1.4826 * the median absolute deviation (a standard
// deviation robust to outliers); 0 for an empty list.
double Median(std::vector<double> values);
double RobustSigma(const std::vector<double>& values);

}  // namespace ccl::ctl::doctor
