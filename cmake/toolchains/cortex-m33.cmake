# cortex-m33.cmake - a toolchain file: Cortex-M33 (single-precision FPU), e.g. qemu's mps2-an505,
# bare metal with arm-none-eabi-gcc and newlib (arm-none-eabi.cmake).
#   cmake -S examples/mps2-an386 -B build-m33 -DCMAKE_TOOLCHAIN_FILE=.../cortex-m33.cmake ...
set(CMAKE_SYSTEM_PROCESSOR cortex-m33)
set(FIXFORMER_CPU_FLAGS "-mcpu=cortex-m33 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16")
include(${CMAKE_CURRENT_LIST_DIR}/arm-none-eabi.cmake)
