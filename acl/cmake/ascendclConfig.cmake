# find_package(ascendcl) for programs written against AscendCL: the imported target
# ascendcl::ascendcl (libascendcl.so and the acl/ headers of this SimNPU install).
#
#   source <prefix>/ascend-toolkit/set_env.sh       # sets ASCEND_TOOLKIT_HOME
#   cmake -DCMAKE_PREFIX_PATH=$ASCEND_TOOLKIT_HOME/lib64/cmake ...
#   (or -Dascendcl_DIR=$ASCEND_TOOLKIT_HOME/lib64/cmake/ascendcl; Debian's CMake does not
#   look in lib64/ under a plain prefix)
#   find_package(ascendcl REQUIRED)
#   target_link_libraries(app PRIVATE ascendcl::ascendcl)
#
# Installed as <package>/lib/cmake/ascendcl/; the library is two folders up, the headers in
# <package>/include.
get_filename_component(_ascendcl_lib_dir "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
get_filename_component(_ascendcl_include_dir "${_ascendcl_lib_dir}/../include" ABSOLUTE)
if(NOT EXISTS "${_ascendcl_lib_dir}/libascendcl.so" OR
   NOT EXISTS "${_ascendcl_include_dir}/acl/acl.h")
  set(ascendcl_FOUND FALSE)
  set(ascendcl_NOT_FOUND_MESSAGE "libascendcl.so or acl/acl.h is missing beside "
      "${CMAKE_CURRENT_LIST_FILE}; reinstall SimNPU (make setup)")
  return()
endif()
if(NOT TARGET ascendcl::ascendcl)
  add_library(ascendcl::ascendcl SHARED IMPORTED)
  set_target_properties(ascendcl::ascendcl PROPERTIES
    IMPORTED_LOCATION "${_ascendcl_lib_dir}/libascendcl.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_ascendcl_include_dir}"
    # libascendcl.so needs libnpu_runtime.so beside it (found at run time through its RUNPATH)
    INTERFACE_LINK_OPTIONS "-Wl,-rpath-link,${_ascendcl_lib_dir}")
endif()
set(ascendcl_FOUND TRUE)
unset(_ascendcl_lib_dir)
unset(_ascendcl_include_dir)
