# Operations surface of the real daemons: grpc.health.v1 transitions and the
# Prometheus endpoint (checked by promtool), and the offline validation of
# deploy/ and docker/. A missing tool (promtool, docker-compose, kubectl,
# shellcheck) fails these tests; .ci/run installs them.
ccl_gtest(ops_integration_test SOURCES ops_integration_test.cc
  LIBS ccl_testing ccl_proto LABELS integration TIMEOUT 300)

# deploy_validate and its self-test read the tree and run none of this
# build's binaries: label static as well, which the sanitized run leaves out.
# Not REQUIRED: the images configure this tree without Python to build the
# binaries; a test run without it fails these tests instead of dropping them.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_FOUND)
  set(Python3_EXECUTABLE python3)
endif()
add_test(NAME deploy_validate
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/deploy/validate.py
    --root ${PROJECT_SOURCE_DIR})
set_tests_properties(deploy_validate PROPERTIES LABELS "unit;static"
  TIMEOUT 120)
# validate.py catches what it claims to: broken copies of the manifests.
add_test(NAME deploy_validate_selftest
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/deploy/validate_test.py)
set_tests_properties(deploy_validate_selftest PROPERTIES
  LABELS "unit;static" TIMEOUT 300)

# The compose file's cpu profile, run as it is written (addresses and ports
# aside) against the binaries of this build.
add_test(NAME compose_cpu_profile_test
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/compose_test.py
    --compose ${PROJECT_SOURCE_DIR}/deploy/compose/compose.yaml
    --binary cccoord=$<TARGET_FILE:cccoord>
    --binary ccworker=$<TARGET_FILE:ccworker>
    --binary ccctl=$<TARGET_FILE:ccctl>)
set_tests_properties(compose_cpu_profile_test PROPERTIES LABELS integration
  TIMEOUT 180)
