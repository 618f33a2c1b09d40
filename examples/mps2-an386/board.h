/* board.h - what main.c needs from the board: text output, a tick counter
 * and the exit.  board.c implements it on the MPS2 / MPS3 boards
 * (semihosting, SysTick), ../riscv32-virt/board.c on qemu's RISC-V virt
 * board, both with board_common.c (the number formatting, the stack measure);
 * host.c on a hosted C library, so the same main.c also runs natively (to
 * count the host's instructions under valgrind). */
#ifndef BOARD_H
#define BOARD_H

#include <stdint.h>

void board_puts(const char *s);            /* no newline added */
void board_put_u32_hex(uint32_t v);        /* 8 hex digits */
void board_put_int(long v);                /* decimal */
void board_put_float_bits(float f);        /* the float's bit pattern, 8 hex digits: exact, no double */
void board_timer_start(void);
uint32_t board_ticks(void);                /* ticks since board_timer_start (0 on the host) */
uint32_t board_tick_hz(void);
unsigned long board_stack_used(void);     /* the deepest stack use so far, bytes (0 on the host) */
void board_exit(int status);               /* 0: success; never returns */

#endif
