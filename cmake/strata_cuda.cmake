# The CUDA backend module (issue 16, docs/GPU.md): src/backend/cuda/ built as
# build/libstrata_cuda.so, a MODULE that src/backend/cuda_load.c dlopen()s when
# a gpu:N device is asked for. The main library and the CLI never link a CUDA
# library. -DSTRATA_CUDA=AUTO (default: when nvcc and the toolkit are found),
# ON (fail the configure without them) or OFF. Never in sanitizer or fuzz
# builds (CI stays fast; the GPU tests skip there). The loader learns here
# whether a module was built (STRATA_CUDA_MODULE_PATH) and why not
# (STRATA_CUDA_NOT_BUILT), for its "no CUDA backend" message.
set(STRATA_CUDA AUTO CACHE STRING "Build the CUDA backend module: AUTO, ON or OFF")
set_property(CACHE STRATA_CUDA PROPERTY STRINGS AUTO ON OFF)
set(STRATA_CUDA_BUILT FALSE)
set(STRATA_CUDA_WHY "")
if(STRATA_SANITIZE OR STRATA_TSAN OR STRATA_FUZZ)
  set(STRATA_CUDA_WHY "sanitizer and fuzz builds leave the CUDA module out")
elseif(STRATA_CUDA STREQUAL "OFF")
  set(STRATA_CUDA_WHY "it was configured with -DSTRATA_CUDA=OFF")
else()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
    set(STRATA_CUDA_BUILT TRUE)
  else()
    set(STRATA_CUDA_WHY "the CUDA toolkit (nvcc, cudart, cuBLASLt) was not found when it was configured")
    if(STRATA_CUDA STREQUAL "ON")
      message(FATAL_ERROR "STRATA_CUDA=ON: ${STRATA_CUDA_WHY} (set CMAKE_CUDA_COMPILER)")
    endif()
  endif()
endif()
if(STRATA_CUDA_BUILT)
  add_subdirectory(src/backend/cuda)
  set_source_files_properties(src/backend/cuda_load.c PROPERTIES COMPILE_DEFINITIONS
    "STRATA_CUDA_MODULE_PATH=\"${CMAKE_BINARY_DIR}/libstrata_cuda.so\"")
  message(STATUS "Strata: CUDA backend module enabled (CUDA ${CUDAToolkit_VERSION}, sm_90 + compute_90 PTX)")
else()
  set_source_files_properties(src/backend/cuda_load.c PROPERTIES COMPILE_DEFINITIONS
    "STRATA_CUDA_NOT_BUILT=\"${STRATA_CUDA_WHY}\"")
  message(STATUS "Strata: no CUDA backend module: ${STRATA_CUDA_WHY}")
endif()
