/* startup.S - vector table and reset handler for a Cortex-M with an FPU
 * (M4F, M7, M33, M55: the core is the compiler's -mcpu), no OS.
 * Reset: enable the FPU (CPACR CP10/CP11 full access; on the M55 also MVE)
 * before any C code runs, since gcc may use it anywhere with
 * -mfloat-abi=hard; copy .data from
 * flash, zero .bss, paint the rest of RAM up to sp (board_stack_used reads
 * the stack's high-water mark from it), call main, and leave through
 * semihosting with main's return value.  SysTick counts board.c's timer's
 * wraps; every other exception and interrupt goes to fault_handler
 * (board.c's board_fault), which reports and exits. */
  .syntax unified
  .thumb

  .section .vectors, "a"
  .align 2
  .global vectors
vectors:
  .word _estack          /* initial stack pointer */
  .word reset_handler    /* reset */
  .rept 13               /* NMI, HardFault, MemManage, BusFault, UsageFault, ... PendSV */
  .word fault_handler
  .endr
  .word systick_handler  /* SysTick: board.c's timer */
  .rept 32               /* the first 32 external interrupts (none enabled) */
  .word fault_handler
  .endr

  .text
  .thumb_func
  .global reset_handler
reset_handler:
  ldr r0, =0xE000ED88    /* CPACR */
  ldr r1, [r0]
  orr r1, r1, #(0xF << 20)
  str r1, [r0]
  dsb
  isb
  ldr r0, =_sidata       /* .data: flash -> RAM */
  ldr r1, =_sdata
  ldr r2, =_edata
1:cmp r1, r2
  bhs 2f
  ldr r3, [r0], #4
  str r3, [r1], #4
  b 1b
2:ldr r1, =_sbss         /* .bss = 0 */
  ldr r2, =_ebss
  movs r3, #0
3:cmp r1, r2
  bhs 4f
  str r3, [r1], #4
  b 3b
4:ldr r3, =0x5AC5AC5A    /* paint the free RAM up to sp: board_stack_used finds the deepest use */
  mov r2, sp
5:cmp r1, r2
  bhs 6f
  str r3, [r1], #4
  b 5b
6:bl main
  bl board_exit          /* never returns */
7:b 7b

  .thumb_func
  .global fault_handler
fault_handler:
  mrs r0, ipsr           /* the exception number */
  mov r1, sp             /* the stacked frame: r0-r3, r12, lr, pc, xpsr */
  bl board_fault
8:b 8b
