# Clang ignores GCC's `#pragma GCC push_options / target("...") /
# pop_options`, with which our SIMD kernels compile each ISA level in one
# file (core/attention/decode_kernel.cc, core/quant/*_x86.cc). For the clang
# fuzz build only, each such source of `target` is replaced by a copy in the
# build directory where the three pragmas become clang's equivalent,
#   #pragma clang attribute push(__attribute__((target("..."))),
#                                apply_to = function) ... pop
# so each level is still compiled for its own ISA and dispatched at run time
# as in the GCC build. The originals stay the sources of truth: editing one
# re-runs CMake, which rewrites its copy.
function(kvserve_clang_target_pragmas target)
  get_target_property(sources ${target} SOURCES)
  set(rewritten)
  foreach(src ${sources})
    file(READ "${src}" text)
    if(NOT text MATCHES "(^|\n)[ \t]*#pragma GCC target")
      list(APPEND rewritten "${src}")
      continue()
    endif()
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${src}")
    # Join continued lines first (a target list may span lines).
    string(REGEX REPLACE "\\\\\n" "" text "${text}")
    string(REGEX REPLACE
           "\n[ \t]*#pragma GCC push_options[ \t]*\n[ \t]*#pragma GCC target\\([ \t]*(\"[^\"]*\")[ \t]*\\)"
           "\n#pragma clang attribute push(__attribute__((target(\\1))), apply_to = function)"
           text "${text}")
    string(REPLACE "#pragma GCC pop_options" "#pragma clang attribute pop"
           text "${text}")
    if(text MATCHES "(^|\n)[ \t]*#pragma GCC (push_options|target)")
      message(FATAL_ERROR "${src}: a #pragma GCC target that "
                          "clang_target_pragmas.cmake cannot rewrite")
    endif()
    file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${src}")
    set(out "${CMAKE_BINARY_DIR}/clang_target_pragmas/${rel}")
    set(old "")
    if(EXISTS "${out}")
      file(READ "${out}" old)
    endif()
    if(NOT old STREQUAL text)  # unchanged copies keep their timestamps
      file(WRITE "${out}" "${text}")
    endif()
    list(APPEND rewritten "${out}")
  endforeach()
  set_property(TARGET ${target} PROPERTY SOURCES ${rewritten})
endfunction()
