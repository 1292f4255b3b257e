#include "coordinator/coordinator_metrics.h"

#include <map>
#include <string>

#include "absl/strings/ascii.h"

namespace ccl::coordinator {

void RegisterCoordinatorMetrics(MetricsRegistry& registry,
                                CoordinatorCore& core) {
  using Type = MetricsRegistry::Type;
  // Declared once per registry; the names are constants, so a failure is a
  // programming error the unit test catches.
  (void)registry.Declare("ccl_coordinator_world_size", Type::kGauge,
                         "Ranks the world is configured for.");
  (void)registry.Declare("ccl_coordinator_generation", Type::kGauge,
                         "Current generation (epoch) of the world.");
  (void)registry.Declare("ccl_coordinator_world_state", Type::kGauge,
                         "1 for the world's current state.");
  (void)registry.Declare("ccl_coordinator_members", Type::kGauge,
                         "Members of the current generation by state.");
  (void)registry.Declare("ccl_coordinator_heartbeat_age_seconds", Type::kGauge,
                         "Seconds since each rank was last heard from.");
  (void)registry.Declare("ccl_coordinator_kv_generations", Type::kGauge,
                         "Generations whose KV data is held (at most 2).");
  (void)registry.Declare("ccl_coordinator_kv_keys", Type::kGauge,
                         "KV keys, sequence counters and unique ids held.");
  (void)registry.Declare("ccl_coordinator_kv_bytes", Type::kGauge,
                         "Bytes of the KV keys and values held.");
  (void)registry.Declare("ccl_coordinator_parked_calls", Type::kGauge,
                         "Register, KV wait and unique-id calls waiting.");
  registry.AddCollector([&core](MetricsRegistry& r) {
    const CoordinatorStats stats = core.Stats();
    r.Set("ccl_coordinator_kv_generations", {}, stats.kv.generations);
    r.Set("ccl_coordinator_kv_keys", {}, static_cast<double>(stats.kv.keys));
    r.Set("ccl_coordinator_kv_bytes", {}, static_cast<double>(stats.kv.bytes));
    r.Set("ccl_coordinator_parked_calls", {},
          static_cast<double>(stats.kv.parked + stats.parked_registrations));
  });
  registry.AddCollector([&core](MetricsRegistry& r) {
    const WorldInfo world = core.GetWorld();
    r.Set("ccl_coordinator_world_size", {}, world.world_size);
    r.Set("ccl_coordinator_generation", {},
          static_cast<double>(world.generation));
    r.ClearSeries("ccl_coordinator_world_state");
    r.Set("ccl_coordinator_world_state",
          {{"state",
            absl::AsciiStrToUpper(std::string(WorldStateName(world.state)))}},
          1);
    std::map<std::string, int> by_state;
    r.ClearSeries("ccl_coordinator_heartbeat_age_seconds");
    for (const MemberInfo& member : world.members) {
      ++by_state[absl::AsciiStrToUpper(
          std::string(MemberStateName(member.state)))];
      r.Set("ccl_coordinator_heartbeat_age_seconds",
            {{"rank", std::to_string(member.rank)}},
            static_cast<double>(member.last_seen_age_ms) / 1000.0);
    }
    r.ClearSeries("ccl_coordinator_members");
    for (const auto& [state, count] : by_state) {
      r.Set("ccl_coordinator_members", {{"state", state}}, count);
    }
  });
}

}  // namespace ccl::coordinator
