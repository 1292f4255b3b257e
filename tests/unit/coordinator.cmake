ccl_gtest(coordinator_core_test
  SOURCES coordinator_core_test.cc coordinator_kv_test.cc
    registration_batcher_test.cc
  LIBS ccl_coordinator_core ccl_host_agent_core LABELS unit TIMEOUT 60)

# The coordinator's scaling pieces (roster, heartbeat policy, KV values and
# generation collection); behaviour only, speed is bench/rendezvous_bench's.
ccl_gtest(coordinator_scale_test SOURCES coordinator_scale_test.cc
  LIBS ccl_coordinator_core LABELS unit TIMEOUT 120)

# What a coordinator request may carry (the validator in front of the core).
ccl_gtest(coordinator_request_limits_test
  SOURCES coordinator_request_limits_test.cc
  LIBS ccl_coordinator_service LABELS unit TIMEOUT 60)
