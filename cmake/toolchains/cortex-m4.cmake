# cortex-m4.cmake - a toolchain file: Cortex-M4F (single-precision FPU), e.g. qemu's mps2-an386,
# bare metal with arm-none-eabi-gcc and newlib (arm-none-eabi.cmake).
#   cmake -S examples/mps2-an386 -B build-m4 -DCMAKE_TOOLCHAIN_FILE=.../cortex-m4.cmake ...
set(CMAKE_SYSTEM_PROCESSOR cortex-m4)
set(FIXFORMER_CPU_FLAGS "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16")
include(${CMAKE_CURRENT_LIST_DIR}/arm-none-eabi.cmake)
