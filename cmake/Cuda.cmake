# CUDA is optional. AUTO builds it when nvcc is found; ON fails clearly when it is not.
set(PAGEDATTN_CUDA_BUILT false)
if(NOT PAGEDATTN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 89 90)
    endif()
    # CMake releases older than the CUDA toolkit may not know its C++20 flag: pass it directly.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -std=c++20 --expt-relaxed-constexpr")
    enable_language(CUDA)
    set(CMAKE_CUDA17_STANDARD_COMPILE_OPTION "")  # the -std=c++20 above is the only one
    find_package(CUDAToolkit REQUIRED)
    set(PAGEDATTN_CUDA_BUILT true)
    message(STATUS "pagedattn: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(PAGEDATTN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PAGEDATTN_CUDA=ON but no CUDA compiler (nvcc) was found. "
                        "Install the CUDA toolkit, put nvcc on PATH (or set CMAKE_CUDA_COMPILER), "
                        "or configure with -DPAGEDATTN_CUDA=OFF.")
  else()
    message(STATUS "pagedattn: CUDA backend OFF (no nvcc found)")
  endif()
else()
  message(STATUS "pagedattn: CUDA backend OFF (PAGEDATTN_CUDA=OFF)")
endif()
