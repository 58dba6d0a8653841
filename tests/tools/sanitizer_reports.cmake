# The sanitizer reports of a test run (UCFS_SANITIZE builds), kept in one
# directory that every process of every test writes to (log_path in
# ASAN_OPTIONS / UBSAN_OPTIONS, set by tests/CMakeLists.txt).
#
#   cmake -DDIR=<dir> -DMODE=reset -P sanitizer_reports.cmake
#       empties DIR before the first test (the runtimes need it to exist);
#   cmake -DDIR=<dir> -DMODE=check -P sanitizer_reports.cmake
#       after the last: fails, printing each report, when there is any.
#
# A report file is named <test>.<executable>.<pid>: the test that ran the
# process, and which process it was (a `ucfs mount` daemon's report is
# `fuse_universal_mount.ucfs.<pid>`; its stderr went nowhere a test looks).
if(NOT DIR OR NOT MODE)
  message(FATAL_ERROR "usage: cmake -DDIR=<dir> -DMODE=reset|check -P sanitizer_reports.cmake")
endif()

if(MODE STREQUAL "reset")
  file(REMOVE_RECURSE "${DIR}")
  file(MAKE_DIRECTORY "${DIR}")
  message(STATUS "sanitizer reports go to ${DIR}")
elseif(MODE STREQUAL "check")
  if(NOT IS_DIRECTORY "${DIR}")
    message(FATAL_ERROR "${DIR} is missing: the sanitizer_reports_reset test did not run")
  endif()
  file(GLOB reports LIST_DIRECTORIES false "${DIR}/*")
  list(LENGTH reports count)
  if(count EQUAL 0)
    message(STATUS "no sanitizer report under ${DIR}")
    return()
  endif()
  foreach(report IN LISTS reports)
    file(READ "${report}" text LIMIT 30000)
    file(SIZE "${report}" size)
    get_filename_component(name "${report}" NAME)
    message("===== ${name} (${size} bytes) =====\n${text}")
  endforeach()
  message(FATAL_ERROR "${count} sanitizer report(s) under ${DIR}, printed above")
else()
  message(FATAL_ERROR "MODE must be reset or check, not '${MODE}'")
endif()
