# What `cmake --install` (and so the .deb) puts beside bin/ucfs and its man
# page: mount(8)'s helper links, their man pages, an example mount unit.
# Test programs have no install rules: only the product is installed.

# mount(8) runs /sbin/mount.<type> for `mount -t <type>` and fstab entries
# (fuse.ucfs -> mount.fuse.ucfs, ucfs -> mount.ucfs). Both are links to the
# ucfs binary, which recognises the helper by its name. Relative links, so
# that they hold in a staging root (DESTDIR, the .deb) as installed.
file(RELATIVE_PATH _ucfs_from_sbin "${CMAKE_INSTALL_FULL_SBINDIR}"
     "${CMAKE_INSTALL_FULL_BINDIR}/ucfs")
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/sbin)
foreach(_helper mount.fuse.ucfs mount.ucfs)
  file(CREATE_LINK ${_ucfs_from_sbin} ${CMAKE_CURRENT_BINARY_DIR}/sbin/${_helper} SYMBOLIC)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/sbin/${_helper} DESTINATION ${CMAKE_INSTALL_SBINDIR})
endforeach()

install(FILES man/mount.fuse.ucfs.8 man/mount.ucfs.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES packaging/systemd/mnt-run7.mount DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
