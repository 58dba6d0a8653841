# `cpack -G DEB` in a build tree makes ucfs_<version>_<arch>.deb: /usr/bin/ucfs,
# the mount helper links in /usr/sbin, the man pages, the example unit.
set(UCFS_DEB_MAINTAINER "ucfs maintainers <maintainers@users.noreply.a-seed-df540a08.example>"
    CACHE STRING "Maintainer field of the .deb")
set(UCFS_HOMEPAGE "" CACHE STRING "Homepage field of the .deb (left out when empty)")

set(CPACK_PACKAGE_NAME ucfs)
set(CPACK_PACKAGE_VENDOR ucfs)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "FUSE file system for DeepSpeed ZeRO-3 checkpoints at any world size")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "ucfs mounts a DeepSpeed ZeRO-3 checkpoint as the universal checkpoint that\n"
    "ds_to_universal.py would write, or as DeepSpeed would have saved it at another\n"
    "number of ranks, assembling each file on read from the rank shards instead of\n"
    "converting it. With an upper directory the mount is writable. Includes the\n"
    "mount.fuse.ucfs helper for mount(8), /etc/fstab and systemd mount units.")
# Debian's mount(8) finds helpers in /sbin, which is /usr/sbin on merged-/usr
# systems (Debian 12): the package installs into /usr, whatever the build's
# CMAKE_INSTALL_PREFIX.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${UCFS_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
if(UCFS_HOMEPAGE)
  set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${UCFS_HOMEPAGE}")
endif()
# The shared libraries' packages come from dpkg-shlibdeps (dpkg-dev);
# fusermount3, which unprivileged mounts and `ucfs umount` run, is in fuse3.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS fuse3)
# getfattr shows the tensor files' extended attributes (README, ucfs(1)).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS attr)
include(CPack)
