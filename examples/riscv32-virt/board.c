/* board.c - qemu's RISC-V virt board's side of board.h
 * (../mps2-an386/board.h): output and exit through RISC-V semihosting (the
 * ebreak between slli and srai; qemu needs -semihosting-config enable=on), ticks
 * from the CLINT's machine timer (mtime, 10 MHz), and the trap report. */
#include "board.h"

#define SYS_WRITE0 0x04
#define SYS_EXIT 0x18
#define ADP_STOPPED_APPLICATION_EXIT 0x20026 /* qemu exits 0 */
#define ADP_STOPPED_RUNTIME_ERROR 0x20023    /* any other reason: qemu exits 1 */

#define MTIME_LO (*(volatile uint32_t *)0x0200bff8u) /* the low half of the 64-bit mtime */
#define MTIME_HZ 10000000u

int board_semihost(int op, const void *arg); /* startup.S */
#define semihost board_semihost

void board_puts(const char *s) { semihost(SYS_WRITE0, s); }

static uint32_t timer_start;

void board_timer_start(void) { timer_start = MTIME_LO; }

uint32_t board_ticks(void) { return MTIME_LO - timer_start; }

uint32_t board_tick_hz(void) { return MTIME_HZ; }

void board_exit(int status) {
  semihost(SYS_EXIT, (const void *)(status == 0 ? ADP_STOPPED_APPLICATION_EXIT : ADP_STOPPED_RUNTIME_ERROR));
  for (;;) {
  }
}

/* From startup.S for every trap: its cause, pc and value. */
void board_trap(uint32_t mcause, uint32_t mepc, uint32_t mtval) {
  board_puts("fault: mcause ");
  board_put_u32_hex(mcause);
  board_puts(" mepc ");
  board_put_u32_hex(mepc);
  board_puts(" mtval ");
  board_put_u32_hex(mtval);
  board_puts("\n");
  board_exit(1);
}
