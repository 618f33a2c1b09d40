/* board_common.c - what every bare-metal board.c shares (the MPS2 / MPS3
 * boards', riscv32-virt's): board.h's number formatting over the board's
 * board_puts, and the stack's high-water mark from the RAM its start-up code
 * painted between _ebss and the initial sp (the symbols of its linker script). */
#include "board.h"

#include <string.h>

void board_put_u32_hex(uint32_t v) {
  char buf[9];
  for (int i = 7; i >= 0; i--, v >>= 4) buf[i] = "0123456789abcdef"[v & 15];
  buf[8] = 0;
  board_puts(buf);
}

void board_put_int(long v) {
  char buf[24], *p = buf + sizeof buf - 1;
  unsigned long u = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
  *p = 0;
  do *--p = (char)('0' + u % 10); while (u /= 10);
  if (v < 0) *--p = '-';
  board_puts(p);
}

void board_put_float_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  board_put_u32_hex(bits);
}

/* The start-up code painted RAM from _ebss up to the initial sp: the first word
 * changed from below is as deep as the stack has been. */
unsigned long board_stack_used(void) {
  extern uint32_t _ebss[], _estack[];
  const uint32_t *p = _ebss;
  while (p < _estack && *p == 0x5AC5AC5Au) p++;
  return (unsigned long)((const char *)_estack - (const char *)p);
}

