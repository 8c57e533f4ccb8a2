# SPDX-License-Identifier: Apache-2.0
# Precompiled LibTorch headers: parsing them is most of a translation unit's compile time here
# (measured: 6.5 of 10 s for engine/src/engine.cpp). Two PCHs, each built once and reused by every
# target of its kind (REUSE_FROM), so tests and examples do not build their own:
#   aten  ATen/core/Tensor.h                          comm, core, io (133 MB, loads in 0.3 s)
#   nn    + torch/nn/module.h, containers, autograd   everything above them (450 MB, 1.9 s)
# GCC uses a PCH only when the compile flags match the ones it was built with, so every target
# compiles with -fPIC (executables too) instead of CMake's -fPIE; sources with their own ISA flags
# skip it. -Winvalid-pch (CMake adds it) warns when a PCH is refused.
option(ZS_PRECOMPILED_HEADERS "Precompile LibTorch's headers once and reuse them in every target" ON)

set(ZS_PCH_ATEN <ATen/core/Tensor.h>)
set(ZS_PCH_NN <ATen/core/Tensor.h> <torch/nn/module.h> <torch/nn/modules/container/any.h>
    <torch/nn/modules/container/modulelist.h> <torch/nn/modules/container/sequential.h>
    <torch/csrc/autograd/custom_function.h>)

if(ZS_PRECOMPILED_HEADERS)
  foreach(kind aten nn)
    add_library(zs_pch_${kind} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
    target_link_libraries(zs_pch_${kind} PRIVATE zs_torch)
    string(TOUPPER ${kind} KIND)
    target_precompile_headers(zs_pch_${kind} PRIVATE ${ZS_PCH_${KIND}})
  endforeach()
endif()

# zs_use_pch(KIND target...): the targets reuse the `aten` or `nn` PCH.
function(zs_use_pch kind)
  if(NOT ZS_PRECOMPILED_HEADERS)
    return()
  endif()
  foreach(t ${ARGN})
    target_precompile_headers(${t} REUSE_FROM zs_pch_${kind})
  endforeach()
endfunction()

# Every C++ target defined in `dirs` (recursively) except `exclude` reuses the `kind` PCH.
function(zs_use_pch_in_dirs kind)
  cmake_parse_arguments(ARG "" "" "DIRS;EXCLUDE" ${ARGN})
  get_property(added DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY SUBDIRECTORIES)
  foreach(dir ${ARG_DIRS})
    get_filename_component(abs ${dir} ABSOLUTE)
    if(NOT abs IN_LIST added)
      continue()  # not part of this build (-DZS_BUILD_TESTS=OFF, -DZS_BUILD_BENCH=OFF)
    endif()
    set(pending ${dir})
    while(pending)
      list(POP_FRONT pending d)
      get_property(subdirs DIRECTORY ${d} PROPERTY SUBDIRECTORIES)
      list(APPEND pending ${subdirs})
      get_property(targets DIRECTORY ${d} PROPERTY BUILDSYSTEM_TARGETS)
      foreach(t ${targets})
        get_target_property(type ${t} TYPE)
        if(t IN_LIST ARG_EXCLUDE OR type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
          continue()
        endif()
        zs_use_pch(${kind} ${t})
      endforeach()
    endwhile()
  endforeach()
endfunction()
