# Worker logic: the tensor store, groups, the arrival diagnosis and plans'
# per-op outcomes (the in-process conformance suite over every backend is in
# tests/conformance/).
ccl_gtest(tensor_store_unit_tests SOURCES tensor_store_test.cc
  LIBS ccl_worker_core LABELS unit TIMEOUT 60)
ccl_gtest(groups_unit_tests SOURCES groups_unit_test.cc
  LIBS ccl_worker_core LABELS unit TIMEOUT 60)
ccl_gtest(arrival_check_unit_tests SOURCES arrival_check_test.cc
  LIBS ccl_worker_core LABELS unit TIMEOUT 60)
ccl_gtest(plan_work_unit_tests SOURCES plan_work_test.cc
  LIBS ccl_worker_core LABELS unit TIMEOUT 60)
# A bench stops before its call's deadline on a backend whose ops run after
# their launch returns (NCCL's), with a queued fake device.
ccl_gtest(bench_work_unit_tests SOURCES bench_work_test.cc
  LIBS ccl_worker_core LABELS unit TIMEOUT 60)
ccl_gtest(rank_view_unit_tests SOURCES rank_view_test.cc
  LIBS ccl_worker_core LABELS unit TIMEOUT 60)
# The CPU backend's reduce arithmetic: every narrow-float conversion and
# every fp8 pair against common/element.h's reference.
ccl_gtest(reduce_kernels_unit_tests SOURCES reduce_kernels_test.cc
  LIBS ccl_comm LABELS unit TIMEOUT 120)
# The one judgement of every agreement (ops, Gloo's own check, benches).
ccl_gtest(agreement_judge_unit_tests SOURCES agreement_judge_test.cc
  LIBS ccl_comm LABELS unit TIMEOUT 60)
# The membership machine (register, heartbeat loss, re-form, coordinator
# restart, drain) against a fake coordinator and worker.
ccl_gtest(membership_unit_tests SOURCES membership_test.cc
  LIBS ccl_worker_core LABELS unit TIMEOUT 60)
