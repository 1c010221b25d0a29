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

# Every binary made for users: dgt, dgt-run, dgt-rendezvous, and dgt-agent and dgt-nccl-check
# where this build makes them (examples and benchmarks are not installed).
set(DGT_INSTALLED_BINARIES dgt dgt-run dgt-rendezvous)
foreach(_bin dgt-agent dgt-nccl-check)
  if(TARGET ${_bin})
    list(APPEND DGT_INSTALLED_BINARIES ${_bin})
  endif()
endforeach()
install(TARGETS ${DGT_INSTALLED_BINARIES} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# systemd units deploy/*.service.in, with @DGT_BINDIR@ replaced at install time by the binary
# directory of the prefix installed to (so `cmake --install --prefix /opt/dgt` and the .deb's /usr
# both get units that start the installed binaries), into <prefix>/lib/systemd/system; the
# `dgt` system user (sysusers.d) and /var/lib/dgt, /var/log/dgt (tmpfiles.d) into <prefix>/lib.
# systemd reads all three under /usr and /usr/local (systemd.unit(5), sysusers.d(5)).
file(GLOB DGT_UNIT_TEMPLATES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/deploy/*.service.in)
foreach(_unit_in ${DGT_UNIT_TEMPLATES})
  get_filename_component(_unit ${_unit_in} NAME_WLE)
  # A unit only with its binary (dgt-agent.service needs a build that makes dgt-agent).
  get_filename_component(_unit_bin ${_unit} NAME_WLE)
  if(NOT TARGET ${_unit_bin})
    continue()
  endif()
  # One staging file per destination, so concurrent installs to different prefixes do not race.
  install(CODE "
    string(MD5 _dgt_dest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
    set(DGT_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    configure_file(\"${_unit_in}\" \"${PROJECT_BINARY_DIR}/units/\${_dgt_dest}/${_unit}\" @ONLY)
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\" TYPE FILE
         FILES \"${PROJECT_BINARY_DIR}/units/\${_dgt_dest}/${_unit}\")
    file(REMOVE_RECURSE \"${PROJECT_BINARY_DIR}/units/\${_dgt_dest}\")")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/deploy/sysusers.d/dgt.conf DESTINATION lib/sysusers.d)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/tmpfiles.d/dgt.conf DESTINATION lib/tmpfiles.d)
# Example configuration files (copied to /etc by the operator: docs/OPERATIONS.md).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/dgt-rendezvous.default
              ${PROJECT_SOURCE_DIR}/deploy/agent.yaml DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
# The example job (deploy/job.yaml) and the script it runs from that directory (its code_dir),
# under share/dgt rather than share/doc: a job needs them at run time on every node, and minimal
# Debian images drop /usr/share/doc (dpkg path-exclude).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/job.yaml ${PROJECT_SOURCE_DIR}/examples/train_digits.py
        DESTINATION ${CMAKE_INSTALL_DATADIR}/dgt/examples)

# Man pages from each binary's --help and --version (help2man, when installed; the binaries run
# from the build tree through PATH so the pages name them without a directory), gzipped as
# Debian's policy wants them. Not in sanitizer builds (nobody packages those).
find_program(DGT_HELP2MAN help2man)
find_program(DGT_GZIP gzip)
if(DGT_HELP2MAN AND DGT_GZIP AND NOT CMAKE_CROSSCOMPILING AND DGT_SANITIZE STREQUAL "")
  set(DGT_MAN_PAGES ON)
else()
  set(DGT_MAN_PAGES OFF)
  message(STATUS "help2man or gzip not found: no man pages")
endif()
set(_dgt_man_name_dgt "tools of the dgt launcher: store, status, doctor, recovery")
set(_dgt_man_name_dgt-run "launch a distributed training job (torchrun-compatible)")
set(_dgt_man_name_dgt-rendezvous "elastic rendezvous service for dgt agents")
set(_dgt_man_name_dgt-agent "dgt node daemon")
set(_dgt_man_name_dgt-nccl-check "run dgt's NCCL path on this machine's GPUs")
if(DGT_MAN_PAGES)
  set(_dgt_man_pages)
  foreach(_bin ${DGT_INSTALLED_BINARIES})
    set(_page ${PROJECT_BINARY_DIR}/man/${_bin}.1)
    add_custom_command(OUTPUT ${_page}.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      COMMAND ${CMAKE_COMMAND} -E env "PATH=$<TARGET_FILE_DIR:${_bin}>:/usr/bin:/bin"
              ${DGT_HELP2MAN} --no-info --no-discard-stderr --section=1
              "--name=${_dgt_man_name_${_bin}}" --output=${_page} ${_bin}
      COMMAND ${DGT_GZIP} -9nf ${_page}
      DEPENDS ${_bin}
      COMMENT "help2man ${_bin}"
      VERBATIM)
    list(APPEND _dgt_man_pages ${_page}.gz)
  endforeach()
  add_custom_target(dgt_man_pages ALL DEPENDS ${_dgt_man_pages})
  install(FILES ${_dgt_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()

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
        FILES_MATCHING PATTERN "*.py" PATTERN __pycache__ EXCLUDE)

include(DgtPackage)
