# riscv32-unknown-elf.cmake - a toolchain file: 32-bit RISC-V with the single-
# precision FPU (rv32imafc, ilp32f), bare metal, with Debian's
# gcc-riscv64-unknown-elf (which builds rv32 too) and picolibc
# (picolibc-riscv64-unknown-elf); a program brings its start-up code and
# linker script (examples/riscv32-virt).
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR riscv32)
set(CMAKE_C_COMPILER riscv64-unknown-elf-gcc)
set(CMAKE_ASM_COMPILER riscv64-unknown-elf-gcc)
# (the C flags are the link's too)
set(CMAKE_C_FLAGS_INIT "-march=rv32imafc -mabi=ilp32f --specs=picolibc.specs")
set(CMAKE_ASM_FLAGS_INIT "-march=rv32imafc -mabi=ilp32f")
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
