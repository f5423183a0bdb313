/* Example kreplay tool (kreplay_tool.h): times each matching dispatch until its duration
 * settles. It asks for passes until three consecutive passes agree within 5 %, then prints
 * one line per dispatch on stderr: kernel, launch index, passes, the settled duration, and
 * whether every pass wrote the same bytes.
 *
 *   cc -shared -fPIC -O2 -I<kreplay>/engine/include -o libexample_tool.so example_tool.c
 *   KREPLAY_EXAMPLE_TOOL_KERNEL=gemm kreplay profile --tool ./libexample_tool.so -k ... -- ./app
 *
 * KREPLAY_EXAMPLE_TOOL_KERNEL (optional): only kernels whose mangled name contains it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kreplay_tool.h"

#define WINDOW 3

typedef struct state {
  const char *filter;
  uint64_t last[WINDOW];
  uint32_t seen;
} state;

static state the_state;

static uint32_t config(void *user, const kreplay_dispatch *d) {
  state *s = (state *)user;
  if (s->filter && !strstr(d->kernel, s->filter)) return 0; /* not ours: runs once */
  s->seen = 0;
  return KREPLAY_PASSES_UNTIL_STOP;
}

static kreplay_tool_flow end(void *user, const kreplay_dispatch *d, const kreplay_pass *p) {
  (void)d;
  state *s = (state *)user;
  s->last[s->seen % WINDOW] = p->duration_ns;
  s->seen++;
  if (s->seen < WINDOW) return KREPLAY_TOOL_CONTINUE;
  uint64_t lo = s->last[0], hi = s->last[0];
  for (int i = 1; i < WINDOW; i++) {
    if (s->last[i] < lo) lo = s->last[i];
    if (s->last[i] > hi) hi = s->last[i];
  }
  /* Settled: the spread of the last three is within 5 % of the smallest. */
  return (hi - lo) * 20 <= lo ? KREPLAY_TOOL_STOP : KREPLAY_TOOL_CONTINUE;
}

static void finish(void *user, const kreplay_dispatch *d, uint32_t passes, int32_t deterministic) {
  state *s = (state *)user;
  uint64_t lo = s->last[0];
  for (int i = 1; i < WINDOW && i < (int)s->seen; i++)
    if (s->last[i] < lo) lo = s->last[i];
  fprintf(stderr, "example_tool: %s launch %llu: %u passes, settled at %.1f us, %s\n", d->demangled,
          (unsigned long long)d->launch_index, passes, lo / 1e3,
          deterministic == 1 ? "deterministic" : deterministic == 0 ? "NOT deterministic" : "output not checked");
}

int kreplay_tool_init(uint32_t api_version, kreplay_tool *tool) {
  if (api_version != KREPLAY_TOOL_API_VERSION) return 1;
  the_state.filter = getenv("KREPLAY_EXAMPLE_TOOL_KERNEL");
  tool->user = &the_state;
  tool->config = config;
  tool->end = end;
  tool->finish = finish;
  return 0;
}
