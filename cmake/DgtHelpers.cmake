# dgt_cc_library(NAME name SRCS ... [HDRS ...] [DEPS ...] [PRIVATE_DEPS ...] [PUBLIC_INCLUDE dir])
#   Builds a static library dgt_<name> with the alias dgt::<name>. Our own code builds with
#   -Wall -Wextra (and -Werror with DGT_WERROR=ON); generated code (dgt::proto) does not use
#   this helper.
# dgt_cc_binary(NAME name SRCS ... DEPS ...)
# dgt_cc_test(NAME name SRCS ... DEPS ...)   GoogleTest binary registered with CTest.
# Paths are the project's (PROJECT_SOURCE_DIR / PROJECT_BINARY_DIR), never CMAKE_SOURCE_DIR, so
# that dgt also builds inside another project (add_subdirectory, FetchContent).

# Our code: all warnings on. -Wno-unused-parameter: interface implementations and gRPC
# overrides keep their parameter names for documentation. Under clang, the thread-safety
# analysis checks every ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotation.
# Warnings are errors only with DGT_WERROR (CI: scripts/build.sh and CMakePresets.json turn it
# on): a packager's compiler or build type (gcc's -O3 false positives) must not break the build.
option(DGT_WERROR "Treat compiler warnings in dgt's own code as errors (CI)" OFF)
set(DGT_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(DGT_WERROR)
  list(APPEND DGT_WARNINGS -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND DGT_WARNINGS -Wthread-safety)
endif()

function(dgt_cc_library)
  cmake_parse_arguments(A "" "NAME;PUBLIC_INCLUDE" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(dgt_${A_NAME} STATIC ${A_SRCS})
  add_library(dgt::${A_NAME} ALIAS dgt_${A_NAME})
  target_compile_options(dgt_${A_NAME} PRIVATE ${DGT_WARNINGS})
  target_include_directories(dgt_${A_NAME} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  if(A_PUBLIC_INCLUDE)
    target_include_directories(dgt_${A_NAME} PUBLIC $<BUILD_INTERFACE:${A_PUBLIC_INCLUDE}>)
  endif()
  target_link_libraries(dgt_${A_NAME} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
endfunction()

function(dgt_cc_binary)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE ${DGT_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
endfunction()

function(dgt_cc_test)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  target_compile_options(${A_NAME} PRIVATE ${DGT_WARNINGS})
  # A test's own sources at -O1 in an optimised build: a third less compile time than -O2, and
  # gcc's warnings that need the optimiser (maybe-uninitialized) still on. What it links (the
  # product libraries) stays as built.
  if(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo)$")
    target_compile_options(${A_NAME} PRIVATE -O1)
  endif()
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  # Tests find source files through DGT_SOURCE_DIR, whatever directory ctest runs them from.
  target_compile_definitions(${A_NAME} PRIVATE DGT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${A_NAME} COMMAND ${A_NAME} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(${A_NAME} PROPERTIES LABELS unit TIMEOUT 120)
endfunction()
