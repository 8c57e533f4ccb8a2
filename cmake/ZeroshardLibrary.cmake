# SPDX-License-Identifier: Apache-2.0
# zs_add_library(NAME SOURCES src... [PUBLIC deps...] [PRIVATE deps...])
#   One folder = one layer = one library: public headers under <folder>/include/zeroshard/<folder>/,
#   private headers and sources under <folder>/src/. Installed and exported as zeroshard::NAME.
#   Sources see ZS_VERSION (and, like every target, a repository-relative __FILE__: CMakeLists.txt).
function(zs_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  add_library(${name} ${ARG_SOURCES})
  add_library(zeroshard::${name} ALIAS ${name})
  target_include_directories(${name}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC} PRIVATE ${ARG_PRIVATE})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_compile_definitions(${name} PRIVATE ZS_VERSION="${PROJECT_VERSION}")
  install(TARGETS ${name} EXPORT zeroshardTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# zs_add_protos(TARGET OUT_DIR PROTO...)
#   Runs protoc on each .proto of this folder's proto/ (called directly: protobuf_generate's output
#   layout differs between CMake versions) and adds the generated sources to TARGET.
function(zs_add_protos target out_dir)
  file(MAKE_DIRECTORY ${out_dir})
  foreach(proto ${ARGN})
    add_custom_command(
      OUTPUT ${out_dir}/${proto}.pb.cc ${out_dir}/${proto}.pb.h
      COMMAND protobuf::protoc --cpp_out=${out_dir} -I ${CMAKE_CURRENT_SOURCE_DIR}/proto
              ${CMAKE_CURRENT_SOURCE_DIR}/proto/${proto}.proto
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/proto/${proto}.proto protobuf::protoc
      COMMENT "protoc: ${proto}.proto"
      VERBATIM)
    target_sources(${target} PRIVATE ${out_dir}/${proto}.pb.cc)
  endforeach()
endfunction()
