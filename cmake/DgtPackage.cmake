# The Debian package: `cpack -G DEB` in the build directory (after the build) writes
# dgt_<version>_<arch>.deb with everything `cmake --install` installs, under /usr: the binaries,
# systemd units, sysusers.d and tmpfiles.d entries, example configs, man pages, the embeddable
# libraries' headers, static libraries, CMake package and pkg-config files, and the dgt Python
# package. Runtime dependencies come from dpkg-shlibdeps. Included from DgtInstall.cmake.
set(DGT_PACKAGE_MAINTAINER "dgt developers <dgt-maintainers@localhost>" CACHE STRING
    "Maintainer field of the .deb")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dgt)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${DGT_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed-training launcher (torchrun replacement)")
set(CPACK_PACKAGE_DESCRIPTION
    "dgt launches and supervises distributed training jobs: dgt-run (a\n"
    "torchrun-compatible launcher), dgt-rendezvous (the elastic rendezvous\n"
    "service, with a systemd unit), dgt-agent (the node daemon that runs\n"
    "submitted jobs, with a systemd unit), dgt (store, status, recovery and\n"
    "job tools),\n"
    "the embeddable store and worker libraries (headers, CMake package,\n"
    "pkg-config) and the dgt Python package for in-place recovery of\n"
    "PyTorch trainers.")
string(REPLACE ";" "" CPACK_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
# Install with DESTDIR into the staging tree and prefix /usr, so that the units' @DGT_BINDIR@
# (cmake/DgtInstall.cmake) reads /usr/bin, where the package puts the binaries.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# python3 for the dgt Python package and the scripts dgt-run launches; systemd for the units.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3, systemd")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

# Debian's changelog.gz of a native package (lintian: no-changelog).
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/changelog.in ${PROJECT_BINARY_DIR}/debian/changelog
               @ONLY)
find_program(DGT_GZIP gzip REQUIRED)
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/debian/changelog.gz
  COMMAND ${DGT_GZIP} -9nc ${PROJECT_BINARY_DIR}/debian/changelog > ${PROJECT_BINARY_DIR}/debian/changelog.gz
  DEPENDS ${PROJECT_BINARY_DIR}/debian/changelog)
add_custom_target(dgt_debian_changelog ALL DEPENDS ${PROJECT_BINARY_DIR}/debian/changelog.gz)
install(FILES ${PROJECT_BINARY_DIR}/debian/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
include(CPack)
