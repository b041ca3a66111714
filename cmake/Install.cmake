# install() rules and a CMake package: find_package(pagedattn) gives pagedattn::pagedattn.
include(CMakePackageConfigHelpers)

install(TARGETS pagedattn EXPORT pagedattnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/pagedattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/generated/pagedattn/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pagedattn)
install(TARGETS pagedattn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT pagedattnTargets NAMESPACE pagedattn::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pagedattn)
configure_package_config_file(cmake/pagedattnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/pagedattnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pagedattn)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pagedattnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pagedattnConfig.cmake
              ${PROJECT_BINARY_DIR}/pagedattnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pagedattn)
