/* host.c - board.h on a hosted C library: the same main.c built natively
 * (counting the host's instructions with valgrind, comparing outputs). */
#include "board.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void board_puts(const char *s) { fputs(s, stdout); }
void board_put_u32_hex(uint32_t v) { printf("%08lx", (unsigned long)v); }
void board_put_int(long v) { printf("%ld", v); }
void board_put_float_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  board_put_u32_hex(bits);
}
void board_timer_start(void) {}
uint32_t board_ticks(void) { return 0; }
uint32_t board_tick_hz(void) { return 1; }
unsigned long board_stack_used(void) { return 0; }
void board_exit(int status) { exit(status); }
