# arm-none-eabi.cmake - what the Cortex-M toolchain files share (cortex-m4.cmake
# and its siblings set FIXFORMER_CPU_FLAGS and the processor, then include
# this): bare metal (no OS) with Debian's gcc-arm-none-eabi and newlib
# (libnewlib-arm-none-eabi, its nano variant); a program brings its start-up
# code and linker script (examples/mps2-an386).
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_ASM_COMPILER arm-none-eabi-gcc)
set(CMAKE_C_FLAGS_INIT "${FIXFORMER_CPU_FLAGS}")
set(CMAKE_ASM_FLAGS_INIT "${FIXFORMER_CPU_FLAGS}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "--specs=nano.specs --specs=nosys.specs")
# no start-up code to link a test program with: CMake's checks build libraries
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
