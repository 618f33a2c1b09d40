# cortex-m7.cmake - a toolchain file: Cortex-M7 (double-precision FPU), e.g. qemu's mps2-an500,
# bare metal with arm-none-eabi-gcc and newlib (arm-none-eabi.cmake).
#   cmake -S examples/mps2-an386 -B build-m7 -DCMAKE_TOOLCHAIN_FILE=.../cortex-m7.cmake ...
set(CMAKE_SYSTEM_PROCESSOR cortex-m7)
set(FIXFORMER_CPU_FLAGS "-mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16")
include(${CMAKE_CURRENT_LIST_DIR}/arm-none-eabi.cmake)
