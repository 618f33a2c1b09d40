# aarch64-linux-gnu.cmake - a toolchain file: 64-bit Arm Linux with Debian's
# cross compiler (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross); programs run
# here under qemu-user (qemu-aarch64, package qemu-user), which ctest and
# add_custom_command use through CMAKE_CROSSCOMPILING_EMULATOR.
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=.../aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
# libraries and headers of the target only; programs (fixformer) and packages
# (its generator package) from this machine as well
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
