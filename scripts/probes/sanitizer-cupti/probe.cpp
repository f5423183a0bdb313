// probe35: can ONE injected library drive CUPTI callbacks and Compute Sanitizer API patching
// in the same process? (kreplay issue #35, "Feasibility first")
//
// Loaded like kreplay's recorder: CUDA_INJECTION64_PATH=<this .so>; the driver dlopens it
// during cuInit and calls InitializeInjection (return 1). PROBE_INIT_CTOR=1 additionally
// initializes from a constructor (for LD_PRELOAD runs, as AccelProf/MemoryTracker do).
//
// Environment (all optional):
//   PROBE_KERNEL   substrings of the (mangled) kernel name, '|'-separated   [gather_kernel]
//   PROBE_LAUNCH   instrument the N-th matching launch (1-based); 0 = never [10]
//   PROBE_CUPTI    1/0 subscribe to CUPTI driver-API launch callbacks     [1]
//   PROBE_SANITIZER 1/0 subscribe to the Sanitizer API                     [1]
//   PROBE_ORDER    cupti-first | sanitizer-first                          [cupti-first]
//   PROBE_PATCH    lazy (patch the module at the target's LAUNCH_BEGIN) |
//                  load (patch every module at MODULE_LOADED) | none       [lazy]
//   PROBE_UNPATCH  1: sanitizerUnpatchModule after the instrumented launch [0]
//   PROBE_KINDS    all | global (which instruction kinds to patch)        [all]
//   PROBE_COUNT    1: count callback invocations (extra atomics)          [0]
//   PROBE_USERDATA launch (sanitizerSetLaunchCallbackData) | func (sanitizerSetCallbackData) [launch]
//   PROBE_FATBIN   path of the patch module                  [<dir of this .so>/patch.fatbin]
//   PROBE_VERBOSE  1: log every launch
// Every line starts with "probe: ".
#include <cupti.h>
// Not <sanitizer.h>: it and <cupti.h> both typedef the same legacy dummy structs
// (CUDA_MEMCPY2D_v1 ...), so one translation unit cannot include both umbrella headers.
#include <sanitizer_result.h>
#include <sanitizer_callbacks.h>
#include <sanitizer_patching.h>
#include <sanitizer_memory.h>
#include <sanitizer_stream.h>
#include <sanitizer_driver_cbid.h>

#include "probe_shared.h"

#include <dlfcn.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

// ---------------------------------------------------------------------------------------
// logging and config
// ---------------------------------------------------------------------------------------
static void plog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void plog(const char* fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "probe: %s\n", buf);
    fflush(stderr);
}

static const char* san_str(SanitizerResult r)
{
    const char* s = nullptr;
    if (sanitizerGetResultString(r, &s) != SANITIZER_SUCCESS || !s) return "?";
    return s;
}

static const char* cupti_str(CUptiResult r)
{
    const char* s = nullptr;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) return "?";
    return s;
}

#define SAN_LOG(call)                                                                   \
    ([&]() {                                                                            \
        SanitizerResult r_ = (call);                                                    \
        plog("%s -> %d (%s)", #call, (int)r_, r_ == SANITIZER_SUCCESS ? "ok" : san_str(r_)); \
        return r_;                                                                      \
    }())

#define CUPTI_LOG(call)                                                                 \
    ([&]() {                                                                            \
        CUptiResult r_ = (call);                                                        \
        plog("%s -> %d (%s)", #call, (int)r_, r_ == CUPTI_SUCCESS ? "ok" : cupti_str(r_)); \
        return r_;                                                                      \
    }())

static std::string env_str(const char* k, const char* def)
{
    const char* v = getenv(k);
    return (v && *v) ? std::string(v) : std::string(def);
}
static long env_long(const char* k, long def)
{
    const char* v = getenv(k);
    return (v && *v) ? strtol(v, nullptr, 10) : def;
}

enum class PatchMode { Lazy, Load, None };

struct Config {
    std::vector<std::string> kernels;
    long launch = 10;
    bool cupti = true, san = true, sanFirst = false, unpatch = false, count = false;
    bool userdataFunc = false, verbose = false, kindsAll = true;
    PatchMode patch = PatchMode::Lazy;
    std::string fatbin;
};
static Config cfg;

static double ms_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

static bool name_matches(const char* name)
{
    if (!name) return false;
    for (auto& k : cfg.kernels)
        if (!k.empty() && strstr(name, k.c_str())) return true;
    return false;
}

static std::string short_name(const char* n)
{
    if (!n) return "(null)";
    std::string s(n);
    if (s.size() > 160) s = s.substr(0, 160) + "...";
    return s;
}

// ---------------------------------------------------------------------------------------
// state
// ---------------------------------------------------------------------------------------
static std::recursive_mutex g_mu;
static thread_local int t_inside = 0;   // >0 while the probe itself calls the Sanitizer API

static std::atomic<uint64_t> g_cuptiLaunches{0}, g_cuptiMatching{0};
static std::atomic<uint64_t> g_sanLaunches{0}, g_sanMatching{0};
static std::atomic<uint64_t> g_sanApiLaunches{0}, g_sanApiMatching{0};   // Sanitizer DRIVER_API domain
static Sanitizer_SubscriberHandle g_sanHandle = nullptr;
static bool g_sanApiOn = false;
static uint64_t g_modulesLoaded = 0, g_modulesPatched = 0, g_patchFailures = 0;
static double g_patchMsTotal = 0;
static bool g_cuptiOn = false, g_sanOn = false;

static std::map<uint64_t, uint64_t> g_allocs;   // base -> size (device, async, pinned host)
static std::set<CUcontext> g_patchesLoaded;
static std::set<CUmodule> g_patched;
static std::map<CUcontext, ProbeState*> g_offState;
static std::map<std::string, uint64_t> g_names;  // kernel name -> launches (bounded)
static long g_matchIndex = 0;
static bool g_userdataWarned = false;

struct Instr {
    bool active = false, done = false;
    CUcontext ctx = nullptr;
    CUmodule mod = nullptr;
    CUfunction fn = nullptr;
    uint64_t gridId = 0;
    Sanitizer_LaunchHandle hLaunch = nullptr;
    Sanitizer_StreamHandle hStream = nullptr;
    std::string name;
    long n = 0;
    ProbeState* dState = nullptr;
    ProbeRange* dRanges = nullptr;
    uint32_t* dRead = nullptr;
    uint32_t* dWrite = nullptr;
    std::vector<ProbeRange> ranges;
    uint64_t totalPages = 0, words = 0;
    double patchMs = 0, setupMs = 0;
    std::chrono::steady_clock::time_point tLaunch;
};
static Instr g_instr;

// ---------------------------------------------------------------------------------------
// patching
// ---------------------------------------------------------------------------------------
struct Kind {
    Sanitizer_InstructionId id;
    const char* idName;
    const char* cb;
    bool globalOnly;   // part of PROBE_KINDS=global
};
static const Kind kKinds[] = {
    {SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "GLOBAL_MEMORY_ACCESS", "ProbeGlobalAccess", true},
    {SANITIZER_INSTRUCTION_MEMCPY_ASYNC, "MEMCPY_ASYNC", "ProbeMemcpyAsync", false},
    {SANITIZER_INSTRUCTION_BULK_COPY_GLOBAL_TO_SHARED, "BULK_COPY_GLOBAL_TO_SHARED", "ProbeBulkG2S", false},
    {SANITIZER_INSTRUCTION_BULK_COPY_SHARED_TO_GLOBAL, "BULK_COPY_SHARED_TO_GLOBAL", "ProbeBulkS2G", false},
    {SANITIZER_INSTRUCTION_BULK_REDUCTION_SHARED_TO_GLOBAL, "BULK_REDUCTION_SHARED_TO_GLOBAL", "ProbeBulkRedS2G", false},
#if defined(PROBE_HAVE_TMA)
    {SANITIZER_INSTRUCTION_TMA_LOAD, "TMA_LOAD", "ProbeTmaLoad", false},
#endif
};

static ProbeState* off_state(CUcontext ctx, Sanitizer_StreamHandle hs)
{
    auto it = g_offState.find(ctx);
    if (it != g_offState.end()) return it->second;
    ProbeState* d = nullptr;
    ProbeState h;
    memset(&h, 0, sizeof h);   // enabled = 0
    t_inside++;
    SanitizerResult r = sanitizerAlloc(ctx, (void**)&d, sizeof(ProbeState));
    if (r == SANITIZER_SUCCESS) r = sanitizerMemcpyHostToDeviceAsync(d, &h, sizeof h, hs);
    t_inside--;
    plog("off-state for ctx %p: %s (%d)", (void*)ctx, r == SANITIZER_SUCCESS ? "ok" : san_str(r), (int)r);
    if (r != SANITIZER_SUCCESS) d = nullptr;
    g_offState[ctx] = d;
    return d;
}

// returns true when the module is (now) patched
static bool patch_module(CUcontext ctx, CUmodule mod, double* msOut)
{
    if (g_patched.count(mod)) return true;
    const bool loud = g_modulesPatched + g_patchFailures < 3;   // full log for the first modules
    auto t0 = std::chrono::steady_clock::now();
    t_inside++;
    if (!g_patchesLoaded.count(ctx)) {
        SanitizerResult r = SAN_LOG(sanitizerAddPatchesFromFile(cfg.fatbin.c_str(), ctx));
        if (r != SANITIZER_SUCCESS) {
            plog("FAIL: patch module %s could not be loaded; nothing can be patched", cfg.fatbin.c_str());
            t_inside--;
            g_patchFailures++;
            return false;
        }
        g_patchesLoaded.insert(ctx);
    }
    int okKinds = 0;
    for (const Kind& k : kKinds) {
        if (!cfg.kindsAll && !k.globalOnly) continue;
        SanitizerResult r = sanitizerPatchInstructions(k.id, mod, k.cb);
        if (loud || r != SANITIZER_SUCCESS)
            plog("sanitizerPatchInstructions(SANITIZER_INSTRUCTION_%s, module %p, \"%s\") -> %d (%s)",
                 k.idName, (void*)mod, k.cb, (int)r, r == SANITIZER_SUCCESS ? "ok" : san_str(r));
        if (r == SANITIZER_SUCCESS) okKinds++;
    }
    auto t1 = std::chrono::steady_clock::now();
    SanitizerResult r = sanitizerPatchModule(mod);
    double pm = ms_since(t1);
    t_inside--;
    double ms = ms_since(t0);
    if (loud || r != SANITIZER_SUCCESS)
        plog("sanitizerPatchModule(module %p) -> %d (%s) patch_ms=%.3f total_ms=%.3f kinds_ok=%d",
             (void*)mod, (int)r, r == SANITIZER_SUCCESS ? "ok" : san_str(r), pm, ms, okKinds);
    g_patchMsTotal += ms;
    if (msOut) *msOut = ms;
    if (r != SANITIZER_SUCCESS || okKinds == 0) {
        g_patchFailures++;
        return false;
    }
    g_patched.insert(mod);
    g_modulesPatched++;
    return true;
}

static bool set_userdata(const Sanitizer_LaunchData* ld, const void* ud, bool loud)
{
    SanitizerResult r;
    if (!cfg.userdataFunc) {
        r = sanitizerSetLaunchCallbackData(ld->hLaunch, ld->function, ld->hStream, ud);
        if (loud || (r != SANITIZER_SUCCESS && !g_userdataWarned))
            plog("sanitizerSetLaunchCallbackData(hLaunch %p, userdata %p) -> %d (%s)", (void*)ld->hLaunch, ud,
                 (int)r, r == SANITIZER_SUCCESS ? "ok" : san_str(r));
        if (r == SANITIZER_SUCCESS) return true;
        g_userdataWarned = true;
    }
    r = sanitizerSetCallbackData(ld->function, ud);
    if (loud || r != SANITIZER_SUCCESS)
        plog("sanitizerSetCallbackData(function %p, userdata %p) -> %d (%s)", (void*)ld->function, ud, (int)r,
             r == SANITIZER_SUCCESS ? "ok" : san_str(r));
    return r == SANITIZER_SUCCESS;
}

// ---------------------------------------------------------------------------------------
// the instrumented launch
// ---------------------------------------------------------------------------------------
static void instrument_begin(const Sanitizer_LaunchData* ld, long n)
{
    auto t0 = std::chrono::steady_clock::now();
    Instr& I = g_instr;
    I.ctx = ld->context;
    I.mod = ld->module;
    I.fn = ld->function;
    I.gridId = ld->gridId;
    I.hLaunch = ld->hLaunch;
    I.hStream = ld->hStream;
    I.name = short_name(ld->functionName);
    I.n = n;
    plog("instrumenting launch %ld of kernel %s (grid %u,%u,%u block %u,%u,%u, module %p, gridId %llu)", n,
         I.name.c_str(), ld->gridDim_x, ld->gridDim_y, ld->gridDim_z, ld->blockDim_x, ld->blockDim_y,
         ld->blockDim_z, (void*)ld->module, (unsigned long long)ld->gridId);

    if (cfg.patch == PatchMode::None) {
        plog("FAIL: PROBE_PATCH=none: the target launch runs unpatched (subscription-only run)");
        I.done = true;
        return;
    }
    if (!g_patched.count(ld->module)) {
        if (!patch_module(ld->context, ld->module, &I.patchMs)) {
            plog("FAIL: module of the target kernel could not be patched; launch runs uninstrumented");
            I.done = true;
            return;
        }
    }

    // range table: every allocation the resource callbacks reported, sorted, capped
    I.ranges.clear();
    uint64_t pages = 0;
    const uint64_t kMaxPages = 1ull << 26;   // 256 GiB of 4 KiB pages -> 8 MiB per bitmap
    for (auto& a : g_allocs) {
        if (I.ranges.size() >= PROBE_MAX_RANGES) break;
        uint64_t np = (a.second + (1u << PROBE_PAGE_SHIFT) - 1) >> PROBE_PAGE_SHIFT;
        if (pages + np > kMaxPages) continue;
        I.ranges.push_back(ProbeRange{a.first, a.second, pages});
        pages += np;
    }
    I.totalPages = pages;
    I.words = (pages + 31) / 32 + 1;
    plog("range table: %zu ranges of %zu allocations seen, %llu pages (%.1f MiB tracked)", I.ranges.size(),
         g_allocs.size(), (unsigned long long)pages, pages * 4096.0 / (1 << 20));

    ProbeState h;
    memset(&h, 0, sizeof h);
    h.enabled = 1;
    h.count = cfg.count ? 1 : 0;
    h.nranges = (uint32_t)I.ranges.size();

    t_inside++;
    SanitizerResult r = SAN_LOG(sanitizerAlloc(I.ctx, (void**)&I.dState, sizeof(ProbeState)));
    if (r == SANITIZER_SUCCESS && !I.ranges.empty())
        r = SAN_LOG(sanitizerAlloc(I.ctx, (void**)&I.dRanges, sizeof(ProbeRange) * I.ranges.size()));
    if (r == SANITIZER_SUCCESS) r = SAN_LOG(sanitizerAlloc(I.ctx, (void**)&I.dRead, I.words * 4));
    if (r == SANITIZER_SUCCESS) r = SAN_LOG(sanitizerAlloc(I.ctx, (void**)&I.dWrite, I.words * 4));
    if (r == SANITIZER_SUCCESS) r = SAN_LOG(sanitizerMemset(I.dRead, 0, I.words * 4, ld->hStream));
    if (r == SANITIZER_SUCCESS) r = SAN_LOG(sanitizerMemset(I.dWrite, 0, I.words * 4, ld->hStream));
    if (r == SANITIZER_SUCCESS && !I.ranges.empty())
        r = SAN_LOG(sanitizerMemcpyHostToDeviceAsync(I.dRanges, I.ranges.data(),
                                                     sizeof(ProbeRange) * I.ranges.size(), ld->hStream));
    h.ranges = I.dRanges;
    h.readBits = I.dRead;
    h.writeBits = I.dWrite;
    if (r == SANITIZER_SUCCESS)
        r = SAN_LOG(sanitizerMemcpyHostToDeviceAsync(I.dState, &h, sizeof h, ld->hStream));
    t_inside--;
    if (r != SANITIZER_SUCCESS) {
        plog("FAIL: could not set up device buffers; launch runs with the off-state");
        I.done = true;
        return;
    }
    if (!set_userdata(ld, I.dState, true)) {
        plog("FAIL: could not attach userdata to the launch");
        I.done = true;
        return;
    }
    I.setupMs = ms_since(t0);
    I.active = true;
    I.tLaunch = std::chrono::steady_clock::now();
}

static uint64_t popcount_range(const std::vector<uint32_t>& bits, uint64_t first, uint64_t n)
{
    uint64_t c = 0;
    for (uint64_t p = first; p < first + n; ++p)
        if (bits[p >> 5] & (1u << (p & 31))) c++;
    return c;
}

static void instrument_end(Sanitizer_StreamHandle hStream)
{
    Instr& I = g_instr;
    I.active = false;
    I.done = true;
    double submitMs = ms_since(I.tLaunch);
    auto t0 = std::chrono::steady_clock::now();
    t_inside++;
    SanitizerResult r = SAN_LOG(sanitizerStreamSynchronize(hStream));
    double syncMs = ms_since(t0);
    double kernelWallMs = ms_since(I.tLaunch);

    auto t1 = std::chrono::steady_clock::now();
    ProbeState h;
    memset(&h, 0, sizeof h);
    std::vector<uint32_t> rd(I.words, 0), wr(I.words, 0);
    if (r == SANITIZER_SUCCESS) r = SAN_LOG(sanitizerMemcpyDeviceToHost(&h, I.dState, sizeof h, hStream));
    if (r == SANITIZER_SUCCESS) r = SAN_LOG(sanitizerMemcpyDeviceToHost(rd.data(), I.dRead, I.words * 4, hStream));
    if (r == SANITIZER_SUCCESS) r = SAN_LOG(sanitizerMemcpyDeviceToHost(wr.data(), I.dWrite, I.words * 4, hStream));
    double readbackMs = ms_since(t1);

    uint64_t readPages = 0, writtenPages = 0, touched = 0;
    struct RR { uint64_t base, size, r, w, t; };
    std::vector<RR> per;
    for (auto& R : I.ranges) {
        uint64_t np = (R.size + 4095) >> PROBE_PAGE_SHIFT;
        uint64_t rc = popcount_range(rd, R.firstPage, np), wc = popcount_range(wr, R.firstPage, np), tc = 0;
        for (uint64_t p = R.firstPage; p < R.firstPage + np; ++p)
            if ((rd[p >> 5] | wr[p >> 5]) & (1u << (p & 31))) tc++;
        readPages += rc;
        writtenPages += wc;
        touched += tc;
        if (tc) per.push_back(RR{R.base, R.size, rc, wc, tc});
    }
    double countMs = ms_since(t1) - readbackMs;

    plog("RESULT kernel=%s launch=%ld touched_pages=%llu read_pages=%llu written_pages=%llu "
         "touched_bytes=%llu tracked_pages=%llu ranges=%zu",
         I.name.c_str(), I.n, (unsigned long long)touched, (unsigned long long)readPages,
         (unsigned long long)writtenPages, (unsigned long long)(touched * 4096), (unsigned long long)I.totalPages,
         I.ranges.size());
    plog("callbacks: accesses=%llu%s outside_ranges=%llu prefetch=%llu memcpy_async=%llu%s bulk_g2s=%llu "
         "bulk_s2g=%llu bulk_red=%llu tma_load=%llu%s",
         h.accesses, cfg.count ? "" : "(PROBE_COUNT=0)", h.outside, h.prefetch, h.memcpyAsync,
         cfg.count ? "" : "(PROBE_COUNT=0)", h.bulkG2S, h.bulkS2G, h.bulkRed, h.tmaLoad,
#if defined(PROBE_HAVE_TMA)
         ""
#else
         "(TMA_LOAD not in this Sanitizer API version)"
#endif
    );
    std::sort(per.begin(), per.end(), [](const RR& a, const RR& b) { return a.t > b.t; });
    for (size_t i = 0; i < per.size() && i < 8; ++i)
        plog("  range 0x%llx size=%llu (%llu pages): touched=%llu read=%llu written=%llu",
             (unsigned long long)per[i].base, (unsigned long long)per[i].size,
             (unsigned long long)((per[i].size + 4095) >> 12), (unsigned long long)per[i].t,
             (unsigned long long)per[i].r, (unsigned long long)per[i].w);
    plog("TIMING patch_ms=%.3f setup_ms=%.3f submit_ms=%.3f sync_ms=%.3f launch_to_done_ms=%.3f "
         "readback_ms=%.3f count_ms=%.3f",
         I.patchMs, I.setupMs, submitMs, syncMs, kernelWallMs, readbackMs, countMs);

    sanitizerFree(I.ctx, I.dState);
    if (I.dRanges) sanitizerFree(I.ctx, I.dRanges);
    sanitizerFree(I.ctx, I.dRead);
    sanitizerFree(I.ctx, I.dWrite);
    if (cfg.unpatch) {
        SAN_LOG(sanitizerUnpatchModule(I.mod));
        g_patched.erase(I.mod);
    }
    t_inside--;
}

// ---------------------------------------------------------------------------------------
// callbacks
// ---------------------------------------------------------------------------------------
static void CUPTIAPI cupti_cb(void*, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void* data)
{
    if (dom != CUPTI_CB_DOMAIN_DRIVER_API) return;
    auto* cb = (const CUpti_CallbackData*)data;
    if (cb->callbackSite != CUPTI_API_ENTER) return;
    uint64_t n = ++g_cuptiLaunches;
    bool m = name_matches(cb->symbolName);
    if (m) ++g_cuptiMatching;
    if (cfg.verbose || n <= 3)
        plog("cupti: launch #%llu via %s kernel=%s%s", (unsigned long long)n, cb->functionName,
             short_name(cb->symbolName).c_str(), m ? " [match]" : "");
}

static void san_cb(void*, Sanitizer_CallbackDomain dom, Sanitizer_CallbackId cbid, const void* data)
{
    if (t_inside) return;   // the probe's own sanitizerAlloc etc.
    if (dom == SANITIZER_CB_DOMAIN_DRIVER_API) {   // fallback launch tracking without CUPTI
        auto* cb = (const Sanitizer_CallbackData*)data;
        if (cb->callbackSite != SANITIZER_API_ENTER) return;
        uint64_t n = ++g_sanApiLaunches;
        bool m = name_matches(cb->symbolName);
        if (m) ++g_sanApiMatching;
        if (cfg.verbose || n <= 3)
            plog("sanitizer-driver-api: launch #%llu via %s kernel=%s%s", (unsigned long long)n, cb->functionName,
                 short_name(cb->symbolName).c_str(), m ? " [match]" : "");
        return;
    }
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (dom == SANITIZER_CB_DOMAIN_RESOURCE) {
        switch (cbid) {
        case SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED: {
            auto* c = (const Sanitizer_ResourceContextData*)data;
            plog("sanitizer: context created %p on device %d", (void*)c->context, (int)c->device);
            break;
        }
        case SANITIZER_CBID_RESOURCE_MODULE_LOADED: {
            auto* md = (const Sanitizer_ResourceModuleData*)data;
            g_modulesLoaded++;
            if (g_modulesLoaded <= 3 || cfg.verbose)
                plog("sanitizer: module loaded %p (cubin %zu bytes, ctx %p)", (void*)md->module, md->cubinSize,
                     (void*)md->context);
            if (cfg.patch == PatchMode::Load) patch_module(md->context, md->module, nullptr);
            break;
        }
        case SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
            auto* md = (const Sanitizer_ResourceModuleData*)data;
            g_patched.erase(md->module);
            break;
        }
        case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_ALLOC:
        case SANITIZER_CBID_RESOURCE_MEMORY_ALLOC_ASYNC:
        case SANITIZER_CBID_RESOURCE_HOST_MEMORY_ALLOC: {
            auto* m = (const Sanitizer_ResourceMemoryData*)data;
            if (m->size) g_allocs[m->address] = m->size;
            if (cfg.verbose)
                plog("sanitizer: alloc 0x%llx size %llu flags 0x%x cbid %u", (unsigned long long)m->address,
                     (unsigned long long)m->size, m->flags, (unsigned)cbid);
            break;
        }
        case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_FREE:
        case SANITIZER_CBID_RESOURCE_MEMORY_FREE_ASYNC:
        case SANITIZER_CBID_RESOURCE_HOST_MEMORY_FREE: {
            auto* m = (const Sanitizer_ResourceMemoryData*)data;
            g_allocs.erase(m->address);
            break;
        }
        default:
            break;
        }
        return;
    }
    if (dom != SANITIZER_CB_DOMAIN_LAUNCH) return;
    auto* ld = (const Sanitizer_LaunchData*)data;
    if (cbid == SANITIZER_CBID_LAUNCH_BEGIN) {
        uint64_t n = ++g_sanLaunches;
        const char* nm = ld->functionName ? ld->functionName : "(null)";
        if (g_names.size() < 200 || g_names.count(nm)) g_names[nm]++;
        bool m = name_matches(ld->functionName);
        long idx = 0;
        if (m) {
            ++g_sanMatching;
            idx = ++g_matchIndex;
        }
        if (cfg.verbose || n <= 3)
            plog("sanitizer: launch #%llu kernel=%s%s", (unsigned long long)n, short_name(nm).c_str(),
                 m ? " [match]" : "");
        if (g_instr.active) {
            // LAUNCH_END of the instrumented launch was not matched: finish it here
            plog("WARN: LAUNCH_END of the instrumented launch not seen before the next launch; reading back now");
            instrument_end(g_instr.hStream);
        }
        if (m && idx == cfg.launch && !g_instr.done && !g_instr.active) {
            instrument_begin(ld, idx);
            if (g_instr.active) return;
        }
        // every other launch of a patched module: explicit off-state (cheap early return)
        if (g_patched.count(ld->module)) {
            ProbeState* off = off_state(ld->context, ld->hStream);
            t_inside++;
            set_userdata(ld, off, false);
            t_inside--;
        }
        return;
    }
    if (cbid == SANITIZER_CBID_LAUNCH_END) {
        if (g_instr.active && ld->function == g_instr.fn &&
            (ld->hLaunch == g_instr.hLaunch || ld->gridId == g_instr.gridId))
            instrument_end(ld->hStream);
        return;
    }
}

// ---------------------------------------------------------------------------------------
// init
// ---------------------------------------------------------------------------------------
static void init_cupti()
{
    uint32_t v = 0;
    CUPTI_LOG(cuptiGetVersion(&v));
    plog("cupti api version %u", v);
    CUpti_SubscriberHandle sub;
    if (CUPTI_LOG(cuptiSubscribe(&sub, (CUpti_CallbackFunc)cupti_cb, nullptr)) != CUPTI_SUCCESS) {
        plog("FAIL: cuptiSubscribe refused (39 = MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: another CUPTI/tools subscriber holds the slot)");
        return;
    }
    const CUpti_CallbackId ids[] = {
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,   CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    };
    int ok = 0;
    for (auto id : ids) {
        CUptiResult r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
        plog("cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, %u) -> %d (%s)", (unsigned)id, (int)r,
             r == CUPTI_SUCCESS ? "ok" : cupti_str(r));
        if (r == CUPTI_SUCCESS) ok++;
    }
    g_cuptiOn = ok > 0;
}

static void init_sanitizer()
{
    Sanitizer_SubscriberHandle h = nullptr;
    if (SAN_LOG(sanitizerSubscribe(&h, san_cb, nullptr)) != SANITIZER_SUCCESS) {
        plog("FAIL: sanitizerSubscribe refused (10 = MAX_LIMIT_REACHED: another sanitizer subscriber, "
             "13 = NOT_INITIALIZED: driver/sanitizer versions not compatible)");
        return;
    }
    SanitizerResult a = SAN_LOG(sanitizerEnableDomain(1, h, SANITIZER_CB_DOMAIN_RESOURCE));
    SanitizerResult b = SAN_LOG(sanitizerEnableDomain(1, h, SANITIZER_CB_DOMAIN_LAUNCH));
    g_sanOn = a == SANITIZER_SUCCESS && b == SANITIZER_SUCCESS;
    g_sanHandle = h;
}

// Without CUPTI, the Sanitizer API's own DRIVER_API domain can see the launch calls (same
// parameter structs as CUPTI, generated_cuda_meta.h): kreplay's fallback if both cannot coexist.
static void enable_sanitizer_driver_api()
{
    const Sanitizer_CallbackId ids[] = {
        SANITIZER_CBID_DRIVER_API_cuLaunchKernel,   SANITIZER_CBID_DRIVER_API_cuLaunchKernel_ptsz,
        SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx, SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx_ptsz,
        SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel,
    };
    int ok = 0;
    for (auto id : ids) {
        SanitizerResult r = sanitizerEnableCallback(1, g_sanHandle, SANITIZER_CB_DOMAIN_DRIVER_API, id);
        plog("sanitizerEnableCallback(1, h, SANITIZER_CB_DOMAIN_DRIVER_API, %u) -> %d (%s)", (unsigned)id, (int)r,
             r == SANITIZER_SUCCESS ? "ok" : san_str(r));
        if (r == SANITIZER_SUCCESS) ok++;
    }
    g_sanApiOn = ok > 0;
}

static void summary()
{
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    plog("SUMMARY cupti_subscribed=%d cupti_launches=%llu cupti_matching=%llu sanitizer_subscribed=%d "
         "sanitizer_launches=%llu sanitizer_matching=%llu modules_loaded=%llu modules_patched=%llu "
         "patch_failures=%llu patch_ms_total=%.1f allocs_tracked=%zu sanitizer_driverapi=%d "
         "sanitizer_driverapi_launches=%llu sanitizer_driverapi_matching=%llu instrumented=%s",
         g_cuptiOn, (unsigned long long)g_cuptiLaunches.load(), (unsigned long long)g_cuptiMatching.load(),
         g_sanOn, (unsigned long long)g_sanLaunches.load(), (unsigned long long)g_sanMatching.load(),
         (unsigned long long)g_modulesLoaded, (unsigned long long)g_modulesPatched,
         (unsigned long long)g_patchFailures, g_patchMsTotal, g_allocs.size(), g_sanApiOn,
         (unsigned long long)g_sanApiLaunches.load(), (unsigned long long)g_sanApiMatching.load(),
         g_instr.done ? "yes" : (cfg.launch == 0 ? "off(PROBE_LAUNCH=0)" : "no(target launch never seen)"));
    std::vector<std::pair<uint64_t, std::string>> v;
    for (auto& kv : g_names) v.push_back({kv.second, kv.first});
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < v.size() && i < 25; ++i)
        plog("  kernel %6llu x %s", (unsigned long long)v[i].first, short_name(v[i].second.c_str()).c_str());
}

static void probe_init()
{
    auto t0 = std::chrono::steady_clock::now();
    std::string ks = env_str("PROBE_KERNEL", "gather_kernel");
    size_t p = 0;
    while (true) {
        size_t q = ks.find('|', p);
        cfg.kernels.push_back(ks.substr(p, q == std::string::npos ? std::string::npos : q - p));
        if (q == std::string::npos) break;
        p = q + 1;
    }
    cfg.launch = env_long("PROBE_LAUNCH", 10);
    cfg.cupti = env_long("PROBE_CUPTI", 1) != 0;
    cfg.san = env_long("PROBE_SANITIZER", 1) != 0;
    cfg.sanFirst = env_str("PROBE_ORDER", "cupti-first") == "sanitizer-first";
    std::string pm = env_str("PROBE_PATCH", "lazy");
    cfg.patch = pm == "load" ? PatchMode::Load : pm == "none" ? PatchMode::None : PatchMode::Lazy;
    cfg.unpatch = env_long("PROBE_UNPATCH", 0) != 0;
    cfg.kindsAll = env_str("PROBE_KINDS", "all") != "global";
    cfg.count = env_long("PROBE_COUNT", 0) != 0;
    cfg.userdataFunc = env_str("PROBE_USERDATA", "launch") == "func";
    cfg.verbose = env_long("PROBE_VERBOSE", 0) != 0;
    std::string fb = env_str("PROBE_FATBIN", "");
    if (fb.empty()) {
        Dl_info info;
        if (dladdr((void*)&probe_init, &info) && info.dli_fname) {
            std::string so(info.dli_fname);
            size_t slash = so.rfind('/');
            fb = (slash == std::string::npos ? std::string(".") : so.substr(0, slash)) + "/patch.fatbin";
        } else {
            fb = "patch.fatbin";
        }
    }
    cfg.fatbin = fb;
    plog("init: kernel=%s launch=%ld cupti=%d sanitizer=%d order=%s patch=%s unpatch=%d kinds=%s count=%d "
         "userdata=%s fatbin=%s tma_kind=%s",
         ks.c_str(), cfg.launch, cfg.cupti, cfg.san, cfg.sanFirst ? "sanitizer-first" : "cupti-first", pm.c_str(),
         cfg.unpatch, cfg.kindsAll ? "all" : "global", cfg.count, cfg.userdataFunc ? "func" : "launch",
         cfg.fatbin.c_str(),
#if defined(PROBE_HAVE_TMA)
         "compiled-in"
#else
         "absent"
#endif
    );
    if (cfg.sanFirst) {
        if (cfg.san) init_sanitizer();
        if (cfg.cupti) init_cupti();
    } else {
        if (cfg.cupti) init_cupti();
        if (cfg.san) init_sanitizer();
    }
    if (g_sanOn && !g_cuptiOn) enable_sanitizer_driver_api();
    plog("init done in %.1f ms: cupti_subscribed=%d sanitizer_subscribed=%d%s", ms_since(t0), g_cuptiOn, g_sanOn,
         (cfg.cupti && cfg.san && g_cuptiOn && g_sanOn) ? "  => BOTH SUBSCRIBED IN ONE PROCESS" : "");
    atexit(summary);
}

static std::once_flag g_once;

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void)
{
    plog("InitializeInjection called (pid %d)", (int)getpid());
    std::call_once(g_once, probe_init);
    return 1;
}

__attribute__((constructor)) static void probe_ctor()
{
    if (env_long("PROBE_INIT_CTOR", 0)) {
        plog("constructor init (PROBE_INIT_CTOR=1, pid %d)", (int)getpid());
        std::call_once(g_once, probe_init);
    }
}
