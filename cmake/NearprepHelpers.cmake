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

# add_subdirectory only when the folder has a CMakeLists.txt (parts land
# issue by issue).
function(nearprep_optional_subdir dir)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/CMakeLists.txt)
    add_subdirectory(${dir})
  endif()
endfunction()
