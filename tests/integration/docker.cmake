# The images built and the compose deployment run in a real Docker engine
# (tests/integration/docker_test.py says what it checks). Label docker:
# scripts/test.sh leaves it out (it installs and starts an engine as root
# and builds images, ~15 min on 2 cores); .ci/run runs it. Skips (77) with
# the reason printed where no engine can run.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_FOUND)
  set(Python3_EXECUTABLE python3)
endif()
add_test(NAME docker_deploy_test
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/docker_test.py
    --root ${PROJECT_SOURCE_DIR})
set_tests_properties(docker_deploy_test PROPERTIES LABELS docker
  TIMEOUT 3000 RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
