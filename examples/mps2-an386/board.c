/* board.c - the MPS2-AN386 side of board.h: output and exit through Arm
 * semihosting (bkpt 0xAB; qemu needs -semihosting-config enable=on), ticks
 * from timer 1 of the CMSDK APB dual timer (25 MHz, the board's SYSCLK), and
 * the fault report. */
#include "board.h"

#include <string.h>

#define SYS_WRITEC 0x03
#define SYS_WRITE0 0x04
#define SYS_EXIT 0x18
#define ADP_STOPPED_APPLICATION_EXIT 0x20026 /* qemu exits 0 */
#define ADP_STOPPED_RUNTIME_ERROR 0x20023    /* any other reason: qemu exits 1 */

#define DUALTIMER1_LOAD (*(volatile uint32_t *)0x40002000u)
#define DUALTIMER1_VALUE (*(volatile uint32_t *)0x40002004u)
#define DUALTIMER1_CONTROL (*(volatile uint32_t *)0x40002008u)
#define SYSCLK_HZ 25000000u

static int semihost(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void board_puts(const char *s) { semihost(SYS_WRITE0, s); }

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

/* Timer 1 free-running from 0xffffffff down, 32 bits, no prescale, no interrupt. */
void board_timer_start(void) {
  DUALTIMER1_CONTROL = 0;
  DUALTIMER1_LOAD = 0xffffffffu;
  DUALTIMER1_CONTROL = 0x82; /* enable | 32-bit */
}

uint32_t board_ticks(void) { return 0xffffffffu - DUALTIMER1_VALUE; }

uint32_t board_tick_hz(void) { return SYSCLK_HZ; }

/* startup.S painted RAM from _ebss up to the initial sp: the first word
 * changed from below is as deep as the stack has been. */
unsigned long board_stack_used(void) {
  extern uint32_t _ebss[], _estack[];
  const uint32_t *p = _ebss;
  while (p < _estack && *p == 0x5AC5AC5Au) p++;
  return (unsigned long)((const char *)_estack - (const char *)p);
}

void board_exit(int status) {
  semihost(SYS_EXIT, (const void *)(status == 0 ? ADP_STOPPED_APPLICATION_EXIT : ADP_STOPPED_RUNTIME_ERROR));
  for (;;) {
  }
}

/* From startup.S for every exception but reset: the exception number and the
 * stacked frame (r0-r3, r12, lr, pc, xpsr). */
void board_fault(uint32_t ipsr, const uint32_t *frame) {
  board_puts("fault: exception ");
  board_put_int((long)(ipsr & 0x1ff));
  board_puts(" pc ");
  board_put_u32_hex(frame[6]);
  board_puts(" lr ");
  board_put_u32_hex(frame[5]);
  board_puts(" cfsr ");
  board_put_u32_hex(*(volatile uint32_t *)0xE000ED28u);
  board_puts("\n");
  board_exit(1);
}
