# Installation of the embeddable libraries: `find_package(dgt)` gives dgt::store and dgt::worker
# (and the static dgt::common they link); pkg-config gives dgt-store and dgt-worker. Included from the top-level
# CMakeLists.txt after the libraries are defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(dgt_common PROPERTIES EXPORT_NAME common)
set_target_properties(dgt_store PROPERTIES EXPORT_NAME store)
target_include_directories(dgt_store PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# dgt::worker links dgt::net_discovery and dgt::recovery_keys, whose headers are among
# dgt/worker/*.h: they are installed with it.
foreach(_lib worker net_discovery recovery_keys)
  set_target_properties(dgt_${_lib} PROPERTIES EXPORT_NAME ${_lib})
  target_include_directories(dgt_${_lib} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()

install(TARGETS dgt_store dgt_worker dgt_net_discovery dgt_recovery_keys dgt_common
        EXPORT dgtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Only the public headers: store/include/dgt/store/*.h (they include no private header).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/store/include/dgt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
# worker_runtime/include/dgt/worker/*.h (the NCCL headers of dgt::worker_nccl are not installed).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/worker_runtime/include/dgt
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS dgt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(_dgt_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/dgt)
install(EXPORT dgtTargets NAMESPACE dgt:: DESTINATION ${_dgt_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dgtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dgtConfig.cmake INSTALL_DESTINATION ${_dgt_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dgtConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dgtConfig.cmake ${PROJECT_BINARY_DIR}/dgtConfigVersion.cmake
        DESTINATION ${_dgt_cmake_dir})

# pkg-config: prefix is relative to the .pc file, so an installed tree can be moved.
configure_file(${PROJECT_SOURCE_DIR}/cmake/dgt-store.pc.in ${PROJECT_BINARY_DIR}/dgt-store.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dgt-store.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
configure_file(${PROJECT_SOURCE_DIR}/cmake/dgt-worker.pc.in ${PROJECT_BINARY_DIR}/dgt-worker.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dgt-worker.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The pure-Python package python/dgt (dgt.recovery for PyTorch trainers) into
# <prefix>/lib/python3/dist-packages, where Debian's python3 finds it under /usr; elsewhere add
# that directory to PYTHONPATH, or `pip install ./python` instead.
set(DGT_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
    "Where `cmake --install` puts the dgt Python package, relative to the prefix")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/dgt DESTINATION ${DGT_PYTHON_INSTALL_DIR}
        FILES_MATCHING PATTERN "*.py")
