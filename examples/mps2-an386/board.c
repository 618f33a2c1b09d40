/* board.c - the MPS2 / MPS3 side of board.h: output and exit through Arm
 * semihosting (bkpt 0xAB; qemu needs -semihosting-config enable=on), ticks
 * of the core's clock from SysTick (the same on every Cortex-M; BOARD_HZ, the
 * board's SYSCLK, from CMakeLists.txt), and the fault report. */
#include "board.h"

#define SYS_WRITEC 0x03
#define SYS_WRITE0 0x04
#define SYS_EXIT 0x18
#define ADP_STOPPED_APPLICATION_EXIT 0x20026 /* qemu exits 0 */
#define ADP_STOPPED_RUNTIME_ERROR 0x20023    /* any other reason: qemu exits 1 */

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u) /* SysTick: control and status */
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u) /* reload value */
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u) /* current value, counting down */
#define SCB_ICSR (*(volatile uint32_t *)0xE000ED04u)
#define ICSR_PENDSTSET (1u << 26)                    /* a SysTick wrap not yet counted */
#ifndef BOARD_HZ
#error "BOARD_HZ: the board's core clock (CMakeLists.txt's board table sets it)"
#endif

static int semihost(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void board_puts(const char *s) { semihost(SYS_WRITE0, s); }

/* SysTick's 24 bits count down at the core's clock, from 0 (as started) to
 * 0xffffff, 0xfffffe, ... 1, 0: reaching 0 ends a period of 2^24 ticks and
 * interrupts, counted here; the ticks are (periods, 2^24 - value). */
static volatile uint32_t wraps;

void systick_handler(void) { wraps++; }

void board_timer_start(void) {
  SYST_CSR = 0;
  SYST_RVR = 0xffffffu;
  SYST_CVR = 0;
  wraps = 0;
  SYST_CSR = 7; /* enable | interrupt on wrap | the core's clock */
}

uint32_t board_ticks(void) {
  uint32_t w, v;
  do { /* again if a wrap came between the two reads, or is pending */
    w = wraps;
    v = SYST_CVR;
  } while (w != wraps || (SCB_ICSR & ICSR_PENDSTSET));
  return (w << 24) + ((0x1000000u - v) & 0xffffffu);
}

uint32_t board_tick_hz(void) { return BOARD_HZ; }

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
