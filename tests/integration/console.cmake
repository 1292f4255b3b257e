# ccctl console in a real browser: Debian's chromium, headless, driven by
# puppeteer-core (tests/browser/). Its screenshots are docs/console.md's.
add_test(NAME console_browser_test
  COMMAND ${PROJECT_SOURCE_DIR}/tests/browser/run.sh $<TARGET_FILE:ccctl>
    ${CMAKE_BINARY_DIR}/console-browser)
set_tests_properties(console_browser_test PROPERTIES
  LABELS "integration;browser" TIMEOUT 300)
