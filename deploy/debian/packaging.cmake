# The Debian package: `cpack -G DEB` in the build folder writes deltatune_<version>_<arch>.deb
# (tests/deb_test.sh installs it into a clean Debian root and runs the demo job from it).
# /usr/bin: deltatuned and deltatune; /usr/lib/systemd/system: deltatuned.service and
# deltatune-agent@.service; /etc/deltatune/daemon.yaml (a conffile); the user deltatune and
# /var/lib/deltatune from postinst. Debian libraries become Depends (dpkg-shlibdeps); the CUDA
# libraries no Debian package provides (CUDA runtime, CUPTI, NCCL, cuDNN's loader) are bundled in
# /usr/lib/deltatune, so the package runs where only the NVIDIA driver is installed.
set(DT_DEB ${PROJECT_SOURCE_DIR}/deploy/debian)
set_target_properties(deltatuned deltatune PROPERTIES INSTALL_RPATH "$ORIGIN/../lib/deltatune")
install(TARGETS deltatuned deltatune RUNTIME_DEPENDENCY_SET deltatune_private_libraries
  RUNTIME DESTINATION bin)
set(DT_PRIVATE_LIBRARY_DIRS)
foreach(lib ${DT_NCCL_LIB} ${DT_CUDNN_LIBRARY})
  get_filename_component(dir ${lib} DIRECTORY)
  list(APPEND DT_PRIVATE_LIBRARY_DIRS ${dir})
endforeach()
if(CUDAToolkit_LIBRARY_DIR)
  list(APPEND DT_PRIVATE_LIBRARY_DIRS ${CUDAToolkit_LIBRARY_DIR})
endif()
if(DT_PRIVATE_LIBRARY_DIRS)
  list(PREPEND DT_PRIVATE_LIBRARY_DIRS DIRECTORIES)
endif()
# Only what resolves outside the system's library folders (/usr/local/cuda) is bundled.
install(RUNTIME_DEPENDENCY_SET deltatune_private_libraries DESTINATION lib/deltatune
  ${DT_PRIVATE_LIBRARY_DIRS}
  POST_INCLUDE_REGEXES "^/usr/local/"
  POST_EXCLUDE_REGEXES ".*")
install(FILES ${DT_DEB}/deltatuned.service ${DT_DEB}/deltatune-agent@.service
  DESTINATION lib/systemd/system)
install(FILES ${DT_DEB}/daemon.yaml DESTINATION /etc/deltatune)
install(FILES README.md ${DT_DEB}/agent.env.example DESTINATION share/doc/deltatune)
install(FILES configs/daemon.yaml DESTINATION share/doc/deltatune RENAME daemon.yaml.reference)

file(WRITE ${PROJECT_BINARY_DIR}/debian/conffiles "/etc/deltatune/daemon.yaml\n")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME deltatune)
set(CPACK_PACKAGE_VENDOR deltatune)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "Fine-tuning daemon for hybrid linear-attention LLMs (Qwen3.5: Gated DeltaNet + attention)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "deltatune developers <dev@deltatune.invalid>")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS /usr/lib/deltatune)
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)  # 3x faster to build than xz, for 20% more size
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${DT_DEB}/postinst ${DT_DEB}/postrm ${PROJECT_BINARY_DIR}/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
