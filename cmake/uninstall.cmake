# `make uninstall` / `cmake --build build --target uninstall`: removes exactly
# the files that the last install listed in install_manifest.txt, nothing else
# (directories are left). Usage: cmake -DMANIFEST=build/install_manifest.txt -P cmake/uninstall.cmake
if(NOT MANIFEST OR NOT EXISTS "${MANIFEST}")
  message(FATAL_ERROR "uninstall: no install manifest '${MANIFEST}': nothing was installed from this build")
endif()
file(STRINGS "${MANIFEST}" files)
set(n 0)
foreach(f IN LISTS files)
  if(EXISTS "${f}" OR IS_SYMLINK "${f}")
    file(REMOVE "${f}")
    math(EXPR n "${n} + 1")
  endif()
endforeach()
message(STATUS "uninstall: removed ${n} files listed in ${MANIFEST}")
