# cortex-m55.cmake - a toolchain file: Cortex-M55 (FPU and MVE, which gcc takes from -mcpu), e.g. qemu's mps3-an547,
# bare metal with arm-none-eabi-gcc and newlib (arm-none-eabi.cmake).
#   cmake -S examples/mps2-an386 -B build-m55 -DCMAKE_TOOLCHAIN_FILE=.../cortex-m55.cmake ...
set(CMAKE_SYSTEM_PROCESSOR cortex-m55)
set(FIXFORMER_CPU_FLAGS "-mcpu=cortex-m55 -mthumb -mfloat-abi=hard")
include(${CMAKE_CURRENT_LIST_DIR}/arm-none-eabi.cmake)
