# How a layer of src/ joins the build (src/<layer>/CMakeLists.txt).
#
# A layer's folder holds x.h, x.cc and x_test.cc side by side; adding a file
# is adding it there: ucfs_layer() takes every x.cc into the layer's library
# and every x_test.cc into the unit tests (tests/CMakeLists.txt builds them
# into ucfs_tests). CMake looks again at each build (CONFIGURE_DEPENDS).

# ucfs_layer(TARGET [EXCLUDE file.cc...]): the calling folder's sources into
# TARGET, but the EXCLUDEd ones (a program's main), its tests into the unit
# tests.
function(ucfs_layer target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "EXCLUDE")
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  set(tests ${sources})
  list(FILTER tests INCLUDE REGEX "_test\\.cc$")
  list(FILTER sources EXCLUDE REGEX "_test\\.cc$")
  foreach(excluded IN LISTS arg_EXCLUDE)
    list(REMOVE_ITEM sources ${CMAKE_CURRENT_SOURCE_DIR}/${excluded})
  endforeach()
  target_sources(${target} PRIVATE ${sources})
  set_property(GLOBAL APPEND PROPERTY UCFS_UNIT_TEST_SOURCES ${tests})
endfunction()
