/* startup.S - reset code for a 32-bit RISC-V core with the F extension
 * (rv32imafc) in machine mode, no OS: qemu -bios none jumps here (_start, at
 * the start of RAM) with a0 = the hart's id.  Set gp and sp, send every trap
 * to trap_handler (board.c's board_trap), enable the FPU (mstatus.FS) before
 * any C code runs, copy .data from flash, zero .bss, paint the rest of RAM up
 * to sp (board_stack_used reads the stack's high-water mark from it), call
 * main, and leave through semihosting with main's return value.  Also the
 * semihosting call, board_semihost(op, arg). */
  .section .text.start, "ax"
  .global _start
_start:
  .option push
  .option norelax
  la gp, __global_pointer$
  .option pop
  la sp, _estack
  la t0, trap_handler
  csrw mtvec, t0
  li t0, 0x2000          /* mstatus.FS = Initial: F instructions allowed */
  csrs mstatus, t0
  fscsr zero
  la t0, _sidata         /* .data: flash -> RAM */
  la t1, _sdata
  la t2, _edata
1:bgeu t1, t2, 2f
  lw t3, 0(t0)
  sw t3, 0(t1)
  addi t0, t0, 4
  addi t1, t1, 4
  j 1b
2:la t1, _sbss           /* .bss = 0 */
  la t2, _ebss
3:bgeu t1, t2, 4f
  sw zero, 0(t1)
  addi t1, t1, 4
  j 3b
4:li t3, 0x5AC5AC5A      /* paint the free RAM up to sp: board_stack_used finds the deepest use */
5:bgeu t1, sp, 6f
  sw t3, 0(t1)
  addi t1, t1, 4
  j 5b
6:call main
  call board_exit        /* never returns */
7:j 7b

  .align 2               /* mtvec's direct mode: 4-byte aligned */
  .global trap_handler
trap_handler:
  csrr a0, mcause
  csrr a1, mepc
  csrr a2, mtval
  call board_trap
8:j 8b

/* board_semihost(op, arg): a0 = op, a1 = arg, the result in a0.  The ebreak
 * between slli and srai, all three uncompressed and on one page (their own
 * 16-byte aligned section), is a semihosting call. */
  .section .text.semihost, "ax"
  .balign 16
  .global board_semihost
board_semihost:
  .option push
  .option norvc
  slli zero, zero, 0x1f
  ebreak
  srai zero, zero, 7
  .option pop
  ret
