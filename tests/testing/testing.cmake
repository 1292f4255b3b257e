# ccl_testing: helpers for tests that run the project's binaries.
#
# Binaries a test may start by name through ccl::testing::BinaryPath(name).
# To make another one available, append its target name here; targets that
# do not exist (yet) are skipped. Building a test that links ccl_testing
# builds these binaries first.
set(CCL_TEST_BINARY_TARGETS cccoord cchostagent ccworker ccctl hold_seqs)

# A client that reserves seqs and never sends them (hold_seqs_main.cc).
add_executable(hold_seqs ${CMAKE_CURRENT_LIST_DIR}/hold_seqs_main.cc)
target_link_libraries(hold_seqs PRIVATE ccl_client ccl_coordinator_client
  ccl_common_grpc)
ccl_target_defaults(hold_seqs)

add_library(ccl_testing STATIC ${CMAKE_CURRENT_LIST_DIR}/subprocess.cc
  ${CMAKE_CURRENT_LIST_DIR}/certs.cc)
target_link_libraries(ccl_testing PUBLIC GTest::gtest absl::status
  absl::statusor absl::strings)
ccl_target_defaults(ccl_testing)

set(_ccl_test_binaries "")
foreach(_target IN LISTS CCL_TEST_BINARY_TARGETS)
  if(TARGET ${_target})
    list(APPEND _ccl_test_binaries "${_target}=$<TARGET_FILE:${_target}>")
    add_dependencies(ccl_testing ${_target})
  endif()
endforeach()
string(JOIN "|" _ccl_test_binaries_joined ${_ccl_test_binaries})
target_compile_definitions(ccl_testing PRIVATE
  "CCL_TEST_BINARIES=\"${_ccl_test_binaries_joined}\"")
