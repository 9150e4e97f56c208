# Warnings as errors on our own targets (not on generated code).
function(nearprep_strict target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # Checks the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations.
    target_compile_options(${target} PRIVATE -Wthread-safety)
  endif()
endfunction()

# nearprep_add_test(NAME name SOURCES a.cc ... LIBS lib ... [LABELS l ...])
# One GoogleTest executable, registered with ctest; tests run from the source
# root so that ../shared resolves as in CI.
function(nearprep_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  nearprep_strict(${T_NAME})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  # Tests may include anything (tests/..., any layer's headers).
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${T_NAME} PRIVATE
    NEARPREP_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    NEARPREP_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT})
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# nearprep_headers(target folder): makes the headers of `folder` (a path
# below the source root, e.g. server/pipeline) includable as "folder/x.h" by
# the target and by whoever links it - and nothing else of the source tree.
# The include path it exports holds only a link to that folder, so one layer
# includes another only through its target (a target that does not link
# nearprep_fpga cannot include server/fpga/...). Folders with several
# targets share the one link.
function(nearprep_headers target folder)
  string(REPLACE "/" "_" root ${folder})
  set(root ${PROJECT_BINARY_DIR}/include/${root})
  if(NOT EXISTS ${root}/${folder})
    get_filename_component(parent ${root}/${folder} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${root}>)
  else()
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
  endif()
endfunction()
