/* fixformer_version.h - the version, written here and nowhere else: the
 * build reads it (CMakeLists.txt: project(VERSION), the CMake package,
 * fixformer.pc) and refuses to configure when FF_VERSION and the three
 * numbers disagree; ff_version() and emitted code's stamp print it. */
#ifndef FIXFORMER_VERSION_H
#define FIXFORMER_VERSION_H

#define FF_VERSION_MAJOR 0
#define FF_VERSION_MINOR 1
#define FF_VERSION_PATCH 0
#define FF_VERSION "0.1.0"

#endif
