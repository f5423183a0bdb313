/* kreplay_tool.h: the kernel replay pass API (version 1).
 *
 * A tool is a shared library that kreplay loads (`--tool LIB.so`). For every matching kernel
 * dispatch, kreplay asks the tool how many passes it wants (CONFIG), then runs the dispatch
 * that many times where it happens, restoring the memory the kernel writes before each extra
 * pass; each pass is wrapped in BEGIN and END callbacks with its index. The application then
 * continues with one run's effect. kreplay's own timing and hardware counters are tools of
 * this kind.
 *
 * In-process replay (`kreplay profile`): pass 0 is the application's own launch (BEGIN before
 * it is queued, END after it completed); the further passes follow right after it.
 *
 * Callbacks run on the thread that launched the kernel, with the launch's CUDA context
 * current; BEGIN runs right before the launch and END right after it completed, so a tool
 * may start and stop its own measurement (CUPTI range profiling, events) there. A tool must
 * not launch work on the application's stream, nor free or write the application's memory.
 *
 * The library exports one function:
 *
 *   int kreplay_tool_init(uint32_t api_version, kreplay_tool *tool);
 *
 * kreplay passes KREPLAY_TOOL_API_VERSION; the tool fills `tool` (callbacks it does not need
 * may stay NULL) and returns 0, or non-zero to decline (kreplay then runs without it and
 * says so).
 */
#ifndef KREPLAY_TOOL_H
#define KREPLAY_TOOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KREPLAY_TOOL_API_VERSION 1u

/* CONFIG's answer: a pass count (0 skips the dispatch: it runs once, untouched by the tool),
 * or this value: run passes until END answers KREPLAY_TOOL_STOP (kreplay still stops after
 * `max_passes`, see kreplay_dispatch). */
#define KREPLAY_PASSES_UNTIL_STOP 0xffffffffu

typedef enum kreplay_tool_flow {
  KREPLAY_TOOL_CONTINUE = 0,
  /* From END: no more passes for this dispatch. From BEGIN: this pass still runs; none after. */
  KREPLAY_TOOL_STOP = 1
} kreplay_tool_flow;

/* What is known of a dispatch before it runs. Pointers stay valid until FINISH returns. */
typedef struct kreplay_dispatch {
  uint32_t struct_size;       /* sizeof(kreplay_dispatch) of the kreplay that filled it */
  const char *kernel;         /* mangled name, NUL-terminated */
  const char *demangled;      /* demangled name (the mangled one when it does not demangle) */
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t cluster[3];        /* 0,0,0 when none was requested */
  uint32_t dynamic_shared_bytes;
  const uint8_t *arg_bytes;   /* the kernel arguments, laid out at their parameter offsets */
  uint64_t arg_len;
  uint64_t stream;            /* the CUstream of the launch */
  uint64_t launch_index;      /* 1-based, among all kernel launches of the process */
  uint64_t match_index;       /* 1-based, among the launches matching kreplay's filter */
  uint64_t write_set_bytes;   /* bytes restored before each extra pass (in-process replay: the
                                 reachable bytes, an upper bound, until pass 0 has run) */
  uint32_t max_passes;        /* the most passes kreplay will run */
} kreplay_dispatch;

/* One pass. `duration_ns` and `output_matches_first` are set for END only. */
typedef struct kreplay_pass {
  uint32_t struct_size;
  uint32_t index;             /* 0-based */
  uint64_t duration_ns;       /* the kernel's duration in this pass, launch overhead excluded */
  int32_t output_matches_first; /* 1 same bytes as pass 0 wrote, 0 differ, -1 not checked */
} kreplay_pass;

typedef struct kreplay_tool {
  uint32_t struct_size;       /* sizeof(kreplay_tool) of the tool's header */
  void *user;                 /* handed back to every callback */
  /* How many passes for this dispatch (or KREPLAY_PASSES_UNTIL_STOP). NULL: one pass. */
  uint32_t (*config)(void *user, const kreplay_dispatch *d);
  kreplay_tool_flow (*begin)(void *user, const kreplay_dispatch *d, const kreplay_pass *p);
  kreplay_tool_flow (*end)(void *user, const kreplay_dispatch *d, const kreplay_pass *p);
  /* After the last pass: how many ran, and whether they all wrote the same bytes. */
  void (*finish)(void *user, const kreplay_dispatch *d, uint32_t passes, int32_t deterministic);
} kreplay_tool;

typedef int (*kreplay_tool_init_fn)(uint32_t api_version, kreplay_tool *tool);

#ifdef __cplusplus
}
#endif

#endif /* KREPLAY_TOOL_H */
