// What a first touch of a host page costs on this machine, fresh and again: the recorder's
// stall on a pointer table is partly first touches of fresh pages (#34).
//   cc -O2 -o faults faults.c && ./faults [MIB]
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <errno.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double touch(char* p, size_t n) {
  double t = now_ms();
  for (size_t i = 0; i < n; i += 4096) p[i] = 1;
  return now_ms() - t;
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? strtoull(argv[1], 0, 0) : 64, n = mib << 20, pages = n / 4096;
  for (int round = 0; round < 3; round++) {
    char* p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double a = touch(p, n), b = touch(p, n);
    printf("round %d: first touch %.1f ms (%.2f us/page), again %.2f ms\n", round, a, a * 1e3 / pages, b);
    munmap(p, n);
  }
  char* p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  double t = now_ms();
  int r = madvise(p, n, MADV_POPULATE_WRITE);
  double pop = now_ms() - t;
  printf("MADV_POPULATE_WRITE: %s, %.1f ms (%.2f us/page); touch after %.2f ms\n", r ? strerror(errno) : "ok",
         pop, pop * 1e3 / pages, touch(p, n));
  munmap(p, n);
  t = now_ms();
  p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  pop = now_ms() - t;
  printf("MAP_POPULATE: %.1f ms (%.2f us/page); touch after %.2f ms\n", pop, pop * 1e3 / pages, touch(p, n));
  // Freed to the allocator and taken again (glibc: a large block is mmapped and unmapped).
  for (int round = 0; round < 2; round++) {
    char* m = malloc(4 << 20);
    double x = touch(m, 4 << 20);
    printf("malloc 4 MiB round %d: touch %.2f ms\n", round, x);
    free(m);
  }
  return 0;
}
