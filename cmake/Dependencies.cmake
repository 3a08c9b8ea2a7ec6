# Third-party dependencies, found once for the whole tree.
find_package(Threads REQUIRED)

# PyTorch's CUDA wheels (LibTorch 2.x; scripts/check-libtorch2.sh) include public/cuda.cmake from their Caffe2
# config. It needs a CUDA toolkit with nvcc on this machine (any version: it only compiles a version probe), and
# looks for the NVTX3 headers in ${PROJECT_SOURCE_DIR}/third_party/NVTX, a path of PyTorch's own source tree.
# Not found there, it falls back to the library CUDA::nvToolsExt, which CUDA 12.9+ toolkits no longer ship, and
# configuring fails ("The link interface of target torch::nvtoolsext contains CUDA::nvToolsExt but the target
# was not found"). The headers are enough (nothing we build includes them): point nvtx3_dir at the wheel's
# nvidia-nvtx package, else at the toolkit's include directory. Unused by LibTorch 1.13.
if(NOT nvtx3_dir)
  set(_nvtx_hints)
  foreach(_prefix ${CMAKE_PREFIX_PATH})  # the wheel's prefix is site-packages/torch/share/cmake
    list(APPEND _nvtx_hints "${_prefix}/../../../nvidia/nvtx/include")
  endforeach()
  find_path(nvtx3_dir NAMES nvtx3/nvToolsExt.h
    HINTS ${_nvtx_hints} ${CUDAToolkit_ROOT}/include ${CUDA_TOOLKIT_ROOT_DIR}/include ENV CUDA_HOME ENV CUDA_PATH
          /usr/local/cuda/include
    PATH_SUFFIXES include NO_CACHE)
  if(nvtx3_dir)
    set(nvtx3_dir "${nvtx3_dir}" CACHE PATH "NVTX3 headers for PyTorch's Caffe2 config (public/cuda.cmake)")
    mark_as_advanced(nvtx3_dir)
  endif()
endif()

find_package(Torch REQUIRED)

# A LibTorch outside the system prefix (PyTorch's wheel) beside a system one (Debian's libtorch-dev): TorchConfig
# looks up libtorch.so and libc10.so with find_library(... PATHS ${TORCH_INSTALL_PREFIX}/lib), which searches the
# system directories first, so TORCH_LIBRARIES would name Debian's libc10.so beside the wheel's imported targets.
# Use the libraries of the LibTorch that was found.
foreach(_lib torch c10)
  set(_var ${_lib}_LIBRARY)
  if(_lib STREQUAL "torch")
    set(_var TORCH_LIBRARY)
  endif()
  set(_own "${TORCH_INSTALL_PREFIX}/lib/lib${_lib}${CMAKE_SHARED_LIBRARY_SUFFIX}")
  if(EXISTS "${_own}" AND ${_var} AND NOT ${_var} STREQUAL _own)
    get_filename_component(_own_real "${_own}" REALPATH)
    get_filename_component(_found_real "${${_var}}" REALPATH)
    if(NOT _own_real STREQUAL _found_real)
      message(STATUS "LibTorch at ${TORCH_INSTALL_PREFIX}: ${_var} ${${_var}} -> ${_own}")
      set(_libs)
      foreach(_item IN LISTS TORCH_LIBRARIES)
        if(_item STREQUAL ${_var})
          set(_item "${_own}")
        endif()
        list(APPEND _libs "${_item}")
      endforeach()
      set(TORCH_LIBRARIES ${_libs})
      set(${_var} "${_own}" CACHE FILEPATH "LibTorch's lib${_lib}" FORCE)
    endif()
  endif()
endforeach()

# The wheel's Caffe2 config points torch::cudart (linked by c10_cuda and torch_cuda) and the NVRTC library in
# TORCH_LIBRARIES at the CUDA toolkit it found, whatever its version (CUDA 13 beside a wheel built for CUDA 12),
# while libtorch_cuda.so itself loads the CUDA 12 runtime of the wheel's nvidia-* packages through its RPATH.
# Linking the toolkit's would put two CUDA runtimes in one process and make every binary need that toolkit
# wherever it runs. When the wheel's runtime is there, link that one (models/device.cpp calls cudaMemGetInfo;
# with its headers), and leave NVRTC to libtorch_cuda, which loads its own (nothing of ours calls it).
if(TARGET torch::cudart)
  file(GLOB _wheel_cudart "${TORCH_INSTALL_PREFIX}/../nvidia/cuda_runtime/lib/libcudart.so.*")
  if(_wheel_cudart)
    list(GET _wheel_cudart 0 _wheel_cudart)
    get_filename_component(_wheel_cudart "${_wheel_cudart}" ABSOLUTE)
    get_filename_component(_wheel_cuda_include "${TORCH_INSTALL_PREFIX}/../nvidia/cuda_runtime/include" ABSOLUTE)
    set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES "${_wheel_cudart}")
    set_property(TARGET torch::cudart PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_wheel_cuda_include}")
    if(CUDA_NVRTC_LIB)
      list(REMOVE_ITEM TORCH_LIBRARIES "${CUDA_NVRTC_LIB}")
    endif()
    message(STATUS "LibTorch's CUDA runtime: ${_wheel_cudart} (not the toolkit's ${CUDAToolkit_VERSION})")
  endif()
endif()

# The wheel links MKL statically; its config still gives caffe2::mkl the link directories ${MKL_ROOT}/lib/intel64
# and the like, with MKL_ROOT empty when no MKL is installed: /lib/intel64 etc. would land in every RPATH.
if(TARGET caffe2::mkl AND NOT MKL_ROOT)
  set_property(TARGET caffe2::mkl PROPERTY INTERFACE_LINK_DIRECTORIES "")
endif()

find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
if(NOT VARRATE_LIBRARIES_ONLY)
  find_package(CLI11 REQUIRED)
endif()
find_package(Eigen3 REQUIRED NO_MODULE)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)

# LibTorch as one imported target, so our targets do not repeat its flags.
add_library(varrate_torch INTERFACE)
target_link_libraries(varrate_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(varrate_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(varrate_torch INTERFACE ${_torch_flags})

# A LibTorch built with the pre-C++11 std::string ABI (PyPI's torch wheels before 2.7) makes every translation unit
# that includes it use that ABI. Our libraries pass std::string to each other (varrate_base has no LibTorch), so
# they all must: use the LibTorch's setting for the whole tree when it is not the compiler's default.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  add_compile_definitions(_GLIBCXX_USE_CXX11_ABI=0)
endif()

# A LibTorch built with the pre-C++11 std::string ABI (older PyTorch wheels) cannot link the system's compiled
# spdlog and fmt, whose functions take std::string: use their header-only forms with such a LibTorch.
option(VARRATE_HEADER_ONLY_LOGGING "Use spdlog and fmt header-only" OFF)
add_library(varrate_spdlog INTERFACE)
if((TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0" OR VARRATE_HEADER_ONLY_LOGGING)
   AND TARGET spdlog::spdlog_header_only)
  find_package(fmt REQUIRED)
  target_link_libraries(varrate_spdlog INTERFACE spdlog::spdlog_header_only fmt::fmt-header-only)
  message(STATUS "LibTorch uses the pre-C++11 string ABI: spdlog and fmt header-only")
else()
  target_link_libraries(varrate_spdlog INTERFACE spdlog::spdlog)
endif()

# CUDA: AUTO follows what the LibTorch we found was built with.
set(_torch_has_cuda OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  set(_torch_has_cuda ON)
endif()
string(TOUPPER "${VARRATE_CUDA}" _cuda_mode)
if(_cuda_mode STREQUAL "ON")
  if(NOT _torch_has_cuda)
    message(FATAL_ERROR "VARRATE_CUDA=ON but the LibTorch found at ${Torch_DIR} has no CUDA support")
  endif()
  set(VARRATE_CUDA_ENABLED ON)
elseif(_cuda_mode STREQUAL "AUTO")
  set(VARRATE_CUDA_ENABLED ${_torch_has_cuda})
elseif(_cuda_mode STREQUAL "OFF")
  set(VARRATE_CUDA_ENABLED OFF)
else()
  message(FATAL_ERROR "VARRATE_CUDA must be AUTO, ON or OFF (got '${VARRATE_CUDA}')")
endif()
if(VARRATE_CUDA_ENABLED)
  target_compile_definitions(varrate_torch INTERFACE VARRATE_WITH_CUDA=1)
endif()

# Qt: Core + Test are enough for the test suites; the GUI needs the rest.
set(_qt_components Core Test)
if(VARRATE_LIBRARIES_ONLY)
  # no Qt
elseif(VARRATE_GUI)
  list(APPEND _qt_components Gui Widgets Charts Svg SvgWidgets Concurrent)
  find_package(Qt6 REQUIRED COMPONENTS ${_qt_components})
else()
  find_package(Qt6 QUIET COMPONENTS ${_qt_components})
endif()

# Precompiled ATen headers make each LibTorch translation unit ~3x cheaper to compile.
function(varrate_torch_pch target)
  target_precompile_headers(${target} PRIVATE <ATen/ATen.h> <nlohmann/json.hpp> <string> <vector>)
endfunction()
