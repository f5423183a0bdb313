// kreplay #35 probe: record which 4 KiB pages of which allocation ONE chosen kernel launch reads
// and writes, with the Compute Sanitizer API's patching, from a library injected the way
// kreplay's recorder is (CUDA_INJECTION64_PATH -> InitializeInjection), next to CUPTI's
// driver-API callbacks. Every line this library prints starts with "probe: " and goes to stderr.
//
// Environment (all optional):
//   PROBE_MODE     both      CUPTI subscribed first, then the Sanitizer API           [default]
//                  sanfirst  the Sanitizer API first, then CUPTI
//                  sanitizer the Sanitizer API alone (its DRIVER_API domain sees the launch calls)
//                  cupti     CUPTI alone (nothing is instrumented: the cost of CUPTI itself)
//                  handover  CUPTI alone until the matching launch before the chosen one; at that
//                            call's exit cuptiUnsubscribe (+ cuptiFinalize), then the Sanitizer API
//                            is subscribed; after the chosen launch the Sanitizer API unsubscribes
//                            and CUPTI subscribes again
//   PROBE_KERNEL   '|'-separated substrings of the (mangled) kernel name        [gather_pages]
//   PROBE_NTH      which matching launch to instrument, 1-based; 0 = none        [1]
//   PROBE_PATCH    lazy: patch the chosen launch's module at its LAUNCH_BEGIN      [lazy]
//                  load: patch every module at MODULE_LOADED (as MemoryTracker does)
//   PROBE_UNPATCH  1: sanitizerUnpatchModule after the chosen launch               [1]
//   PROBE_OFF      null | state: the userdata other launches of a patched module get [null]
//   PROBE_KINDS    all | global: which instruction kinds to patch                  [all]
//   PROBE_TMA      1: also patch instruction id 43 (TMA_LOAD, Sanitizer API 13.3+)  [0]
//   PROBE_COUNT    1: count global accesses (one atomic per warp)                  [0]
//   PROBE_CUPTI_V2 1: subscribe with cuptiSubscribe_v2 (found with dlsym; 13.0 has it without,
//                  13.2+ with allowMultipleSubscribers, set to 1); it names the subscriber in the
//                  way when it refuses                                                 [0]
//   PROBE_FINALIZE 1: handover calls cuptiFinalize after cuptiUnsubscribe           [1]
//   PROBE_FATBIN   patch module path                [<folder of this .so>/probe_patch.fatbin]
//   PROBE_VERBOSE  1: log every launch and allocation                              [0]
//
// Not <sanitizer.h>: it and <cupti.h> both typedef the legacy dummy structs (CUDA_MEMCPY2D_v1 and
// others), so the Sanitizer API headers are included one by one.
#include <cupti.h>   // includes cuda.h and generated_cuda_meta.h (the *_params structs)
#include <sanitizer_result.h>
#include <sanitizer_stream.h>
#include <sanitizer_memory.h>
#include <sanitizer_patching.h>
#include <sanitizer_callbacks.h>
#include <sanitizer_driver_cbid.h>

#include "probe_shared.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

// ------------------------------------------------------------------------------------------
// Logging
// ------------------------------------------------------------------------------------------
void plog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void plog(const char* fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "probe: %s\n", buf);
    fflush(stderr);
}

const char* san_text(SanitizerResult r)
{
    const char* s = nullptr;
    if (sanitizerGetResultString(r, &s) != SANITIZER_SUCCESS || s == nullptr) return "?";
    return s;
}

const char* cupti_text(CUptiResult r)
{
    const char* s = nullptr;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) return "?";
    return s;
}

const char* cu_text(CUresult r)
{
    const char* s = nullptr;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == nullptr) return "?";
    return s;
}

// Each logs the call and its result: always when `loud`, otherwise only when it failed.
SanitizerResult san_check(SanitizerResult r, const char* what, bool loud)
{
    if (loud || r != SANITIZER_SUCCESS)
        plog("%s -> %d (%s)", what, (int)r, r == SANITIZER_SUCCESS ? "SANITIZER_SUCCESS" : san_text(r));
    return r;
}
CUptiResult cupti_check(CUptiResult r, const char* what, bool loud)
{
    if (loud || r != CUPTI_SUCCESS)
        plog("%s -> %d (%s)", what, (int)r, r == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : cupti_text(r));
    return r;
}
#define SAN_CK(call, loud) san_check((call), #call, (loud))
#define CUPTI_CK(call, loud) cupti_check((call), #call, (loud))

double ms_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string clip(const char* s, size_t n = 140)
{
    if (s == nullptr) return "(null)";
    std::string v(s);
    if (v.size() > n) v = v.substr(0, n) + "...";
    return v;
}

// ------------------------------------------------------------------------------------------
// Configuration
// ------------------------------------------------------------------------------------------
enum class Mode { Both, SanFirst, Sanitizer, Cupti, Handover };

struct Config {
    Mode mode = Mode::Both;
    std::string modeName = "both";
    std::vector<std::string> kernels;
    long nth = 1;
    bool patchAtLoad = false;
    bool unpatch = true;
    bool offNull = true;
    bool kindsAll = true;
    bool tma = false;
    bool count = false;
    bool cuptiV2 = false;
    bool finalize = true;
    bool verbose = false;
    std::string fatbin;
};
Config cfg;

std::string env_s(const char* k, const char* def)
{
    const char* v = getenv(k);
    return (v != nullptr && *v != '\0') ? std::string(v) : std::string(def);
}
long env_l(const char* k, long def)
{
    const char* v = getenv(k);
    return (v != nullptr && *v != '\0') ? strtol(v, nullptr, 10) : def;
}

bool name_matches(const char* name)
{
    if (name == nullptr) return false;
    for (const std::string& k : cfg.kernels)
        if (!k.empty() && strstr(name, k.c_str()) != nullptr) return true;
    return false;
}

// ------------------------------------------------------------------------------------------
// State (g_mu guards everything but the atomics and the thread_locals)
// ------------------------------------------------------------------------------------------
std::recursive_mutex g_mu;
thread_local int t_self = 0;   // > 0 while the probe itself calls into CUDA or the Sanitizer API

struct SelfScope {
    SelfScope() { ++t_self; }
    ~SelfScope() { --t_self; }
};

std::atomic<unsigned long long> g_cuptiLaunches{0}, g_cuptiLaunchesAfterHandback{0};
std::atomic<unsigned long long> g_sanApiLaunches{0};   // Sanitizer DRIVER_API domain, launch calls
std::atomic<unsigned long long> g_sanLaunches{0};      // Sanitizer LAUNCH domain, LAUNCH_BEGIN
std::atomic<unsigned long long> g_sanLaunchEnds{0};
std::atomic<unsigned long long> g_apiCalls{0}, g_apiMatching{0}, g_sanMatching{0};
std::atomic<unsigned long long> g_modulesLoaded{0}, g_lazyLoaded{0}, g_lazyPatched{0};
std::atomic<unsigned long long> g_sanAllocCbs{0}, g_cuptiAllocCbs{0};

bool g_cuptiOn = false, g_sanOn = false, g_sanApiOn = false;
CUpti_SubscriberHandle g_cuptiSub = nullptr;
Sanitizer_SubscriberHandle g_sanSub = nullptr;
int g_handoverState = 0;   // 0 not yet, 1 CUPTI -> Sanitizer done, 2 Sanitizer -> CUPTI done
std::string g_handoverNote = "none";

enum : unsigned { FROM_SAN_ALLOC = 1, FROM_CUPTI_ALLOC = 2, FROM_PARAM = 4 };
struct Alloc {
    uint64_t size;
    unsigned from;
};
std::map<uint64_t, Alloc> g_allocs;   // base -> allocation, as the callbacks reported them

std::set<CUcontext> g_patchesLoaded;
std::set<CUmodule> g_patched;
unsigned long long g_patchedModules = 0, g_patchFailures = 0;
std::map<CUcontext, ProbeDevState*> g_offState;
std::map<std::string, unsigned long long> g_namesApi, g_namesSan;   // kernel -> launches

// The API-level view of one launch call on this thread: set at the first API ENTER that sees it
// (CUPTI or the Sanitizer DRIVER_API domain), cleared at that source's EXIT.
struct Pending {
    bool chosen = false;
    bool consumed = false;
    std::string name;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;   // allocations the parameter words point into
    std::string paramNote;
};
thread_local int t_callOwner = 0;   // 0 none, 1 CUPTI, 2 Sanitizer DRIVER_API
thread_local unsigned long long t_callMatchIdx = 0;
thread_local Pending t_pending;

struct Instr {
    bool active = false, done = false;
    bool viaFunctionData = false;
    CUcontext ctx = nullptr;
    CUmodule mod = nullptr;
    CUfunction fn = nullptr;
    uint64_t gridId = 0;
    Sanitizer_LaunchHandle hLaunch = nullptr;
    Sanitizer_StreamHandle hStream = nullptr;
    std::string name;
    ProbeDevState* dState = nullptr;
    ProbeRegion* dRegions = nullptr;
    uint32_t* dRead = nullptr;
    uint32_t* dWrite = nullptr;
    std::vector<ProbeRegion> regions;
    std::vector<unsigned> regionFrom;
    uint64_t pages = 0, words = 0;
    double patchMs = 0, setupMs = 0;
};
Instr g_instr;

void init_sanitizer();
void init_cupti(bool again);

// ------------------------------------------------------------------------------------------
// Kernel parameters of a launch call (CUPTI and Sanitizer driver-API callback ids are the same
// numbers; the Sanitizer ids are mapped onto the CUPTI names first)
// ------------------------------------------------------------------------------------------
uint32_t san_to_cupti_cbid(uint32_t cbid)
{
    switch (cbid) {
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernel: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernel_ptsz: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz;
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx;
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx_ptsz: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
    case SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel:
        return CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel;
    case SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel_ptsz:
        return CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
    default: return 0;
    }
}

bool is_launch_cbid(uint32_t c)
{
    return c == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || c == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
           c == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || c == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
           c == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel ||
           c == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
}

bool launch_args(uint32_t c, const void* fp, CUfunction* f, void*** kp, void*** extra)
{
    *f = nullptr;
    *kp = nullptr;
    *extra = nullptr;
    if (fp == nullptr) return false;
    switch (c) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel: {
        auto* p = (const cuLaunchKernel_params*)fp;
        *f = p->f, *kp = p->kernelParams, *extra = p->extra;
        return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
        auto* p = (const cuLaunchKernel_ptsz_params*)fp;
        *f = p->f, *kp = p->kernelParams, *extra = p->extra;
        return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx: {
        auto* p = (const cuLaunchKernelEx_params*)fp;
        *f = p->f, *kp = p->kernelParams, *extra = p->extra;
        return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
        auto* p = (const cuLaunchKernelEx_ptsz_params*)fp;
        *f = p->f, *kp = p->kernelParams, *extra = p->extra;
        return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel: {
        auto* p = (const cuLaunchCooperativeKernel_params*)fp;
        *f = p->f, *kp = p->kernelParams;
        return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
        auto* p = (const cuLaunchCooperativeKernel_ptsz_params*)fp;
        *f = p->f, *kp = p->kernelParams;
        return true;
    }
    default: return false;
    }
}

// Offsets and sizes of the parameters. A runtime <<<>>> launch may pass a CUkernel where a
// CUfunction is expected: cuFuncGetParamInfo refuses it, cuKernelGetParamInfo takes it.
std::vector<std::pair<size_t, size_t>> param_layout(CUfunction f, std::string* how)
{
    std::vector<std::pair<size_t, size_t>> out;
    size_t off = 0, sz = 0;
    CUresult r = cuFuncGetParamInfo(f, 0, &off, &sz);
    bool asKernel = false;
    if (r != CUDA_SUCCESS) {
        CUresult rk = cuKernelGetParamInfo((CUkernel)f, 0, &off, &sz);
        char b[160];
        snprintf(b, sizeof b, "cuFuncGetParamInfo(0)=%d(%s) cuKernelGetParamInfo(0)=%d(%s)", (int)r, cu_text(r),
                 (int)rk, cu_text(rk));
        *how = b;
        if (rk != CUDA_SUCCESS) return out;   // no parameters, or neither handle kind works
        asKernel = true;
    } else {
        *how = "cuFuncGetParamInfo";
    }
    out.push_back({off, sz});
    for (size_t i = 1; i < 4096; ++i) {
        r = asKernel ? cuKernelGetParamInfo((CUkernel)f, i, &off, &sz) : cuFuncGetParamInfo(f, i, &off, &sz);
        if (r != CUDA_SUCCESS) break;
        out.push_back({off, sz});
    }
    return out;
}

// The argument bytes, laid out at the parameter offsets (kernelParams or the extra buffer).
bool argument_bytes(void** kp, void** extra, const std::vector<std::pair<size_t, size_t>>& layout,
                    std::vector<unsigned char>* out, std::string* how)
{
    size_t total = 0;
    for (auto& p : layout) total = std::max(total, p.first + p.second);
    out->assign(total, 0);
    if (kp != nullptr) {
        for (size_t i = 0; i < layout.size(); ++i) {
            if (kp[i] == nullptr) {
                *how = "kernelParams[i] is NULL";
                return false;
            }
            memcpy(out->data() + layout[i].first, kp[i], layout[i].second);
        }
        *how = "kernelParams";
        return true;
    }
    if (extra == nullptr) {
        *how = total == 0 ? "no parameters" : "neither kernelParams nor extra";
        return total == 0;
    }
    const unsigned char* buf = nullptr;
    size_t size = 0;
    for (int i = 0; i < 16; ++i) {
        uintptr_t key = (uintptr_t)extra[2 * i];
        if (key == (uintptr_t)CU_LAUNCH_PARAM_END) break;
        void* val = extra[2 * i + 1];
        if (key == (uintptr_t)CU_LAUNCH_PARAM_BUFFER_POINTER) buf = (const unsigned char*)val;
        if (key == (uintptr_t)CU_LAUNCH_PARAM_BUFFER_SIZE && val != nullptr) size = *(const size_t*)val;
    }
    if (buf == nullptr) {
        *how = "extra without CU_LAUNCH_PARAM_BUFFER_POINTER";
        return false;
    }
    out->assign(buf, buf + std::min(size, (size_t)32768));
    *how = "extra buffer";
    return true;
}

// For the chosen launch only: which allocations do the 8-byte-aligned parameter words point into?
void capture_params(uint32_t c, const void* fp, Pending* pend, const char* via)
{
    SelfScope self;
    CUfunction f;
    void** kp;
    void** extra;
    if (!launch_args(c, fp, &f, &kp, &extra)) {
        pend->paramNote = "no launch arguments in the callback data";
        return;
    }
    std::string layoutHow, bytesHow;
    auto layout = param_layout(f, &layoutHow);
    std::vector<unsigned char> bytes;
    bool ok = argument_bytes(kp, extra, layout, &bytes, &bytesHow);
    unsigned words = 0, pointers = 0;
    if (ok) {
        for (size_t o = 0; o + 8 <= bytes.size(); o += 8) {
            uint64_t v;
            memcpy(&v, bytes.data() + o, 8);
            ++words;
            if (v < 0x10000) continue;
            CUdeviceptr base = 0;
            size_t size = 0;
            if (cuMemGetAddressRange(&base, &size, (CUdeviceptr)v) == CUDA_SUCCESS && size != 0) {
                ++pointers;
                auto r = std::make_pair((uint64_t)base, (uint64_t)size);
                if (std::find(pend->ranges.begin(), pend->ranges.end(), r) == pend->ranges.end())
                    pend->ranges.push_back(r);
                if (cfg.verbose)
                    plog("  param word @%zu = 0x%llx in allocation 0x%llx size %zu", o, (unsigned long long)v,
                         (unsigned long long)base, size);
            }
        }
    }
    char b[512];
    snprintf(b, sizeof b,
             "via=%s params=%zu layout=%s bytes=%zu (%s%s) words=%u device_pointer_words=%u allocations=%zu", via,
             layout.size(), layoutHow.c_str(), bytes.size(), bytesHow.c_str(), ok ? "" : ", FAILED", words,
             pointers, pend->ranges.size());
    pend->paramNote = b;
}

// ------------------------------------------------------------------------------------------
// Launch calls, from either API source
// ------------------------------------------------------------------------------------------
void api_enter(int source, uint32_t c, const void* fp, const char* symbolName)
{
    if (t_self || t_callOwner != 0) return;   // the probe's own calls; or already seen by the other source
    t_callOwner = source;
    t_callMatchIdx = 0;
    ++g_apiCalls;
    if (source == 1) ++g_cuptiLaunches;
    if (source == 1 && g_handoverState == 2) ++g_cuptiLaunchesAfterHandback;
    const bool m = name_matches(symbolName);
    {
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        std::string n = symbolName ? symbolName : "(null)";
        if (g_namesApi.size() < 500 || g_namesApi.count(n)) g_namesApi[n]++;
    }
    if (cfg.verbose)
        plog("%s: launch call %llu kernel=%s%s", source == 1 ? "cupti" : "sanitizer-driver-api",
             (unsigned long long)g_apiCalls.load(), clip(symbolName).c_str(), m ? " [match]" : "");
    if (!m) return;
    t_callMatchIdx = ++g_apiMatching;
    if ((long)t_callMatchIdx != cfg.nth) return;
    t_pending = Pending();
    t_pending.chosen = true;
    t_pending.name = symbolName ? symbolName : "";
    capture_params(c, fp, &t_pending, source == 1 ? "cupti" : "sanitizer-driver-api");
    plog("chosen launch call (matching launch %ld) kernel=%s: %s", cfg.nth, clip(symbolName).c_str(),
         t_pending.paramNote.c_str());
}

void handover_to_sanitizer()
{
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    plog("handover: CUPTI -> Sanitizer API at the exit of matching launch %ld", cfg.nth - 1);
    CUptiResult r1 = CUPTI_CK(cuptiUnsubscribe(g_cuptiSub), true);
    CUptiResult r2 = CUPTI_SUCCESS;
    if (cfg.finalize) r2 = CUPTI_CK(cuptiFinalize(), true);
    g_cuptiOn = false;
    g_cuptiSub = nullptr;
    init_sanitizer();
    char b[200];
    snprintf(b, sizeof b, "to_sanitizer(unsubscribe=%d finalize=%d sanitizer_subscribed=%d)", (int)r1,
             cfg.finalize ? (int)r2 : -1, (int)g_sanOn);
    g_handoverNote = b;
    g_handoverState = 1;
}

void api_exit(int source)
{
    if (t_self || t_callOwner != source) return;
    t_callOwner = 0;
    if (t_pending.chosen) {
        if (!t_pending.consumed)
            plog("FAIL: the chosen launch call returned without a Sanitizer LAUNCH_BEGIN for it "
                 "(sanitizer launches so far: %llu): it ran uninstrumented",
                 (unsigned long long)g_sanLaunches.load());
        t_pending = Pending();
    }
    if (cfg.mode == Mode::Handover && source == 1 && g_handoverState == 0 && t_callMatchIdx != 0 &&
        (long)t_callMatchIdx == cfg.nth - 1)
        handover_to_sanitizer();
}

// ------------------------------------------------------------------------------------------
// Allocations
// ------------------------------------------------------------------------------------------
void alloc_add(uint64_t base, uint64_t size, unsigned from)
{
    if (base == 0 || size == 0) return;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    auto it = g_allocs.find(base);
    if (it != g_allocs.end()) {
        it->second.size = std::max(it->second.size, size);
        it->second.from |= from;
    } else {
        g_allocs[base] = Alloc{size, from};
    }
    if (cfg.verbose) plog("alloc 0x%llx size %llu from %u", (unsigned long long)base, (unsigned long long)size, from);
}

void alloc_remove(uint64_t base)
{
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    g_allocs.erase(base);
}

// ------------------------------------------------------------------------------------------
// Patching
// ------------------------------------------------------------------------------------------
struct Kind {
    uint32_t id;
    const char* name;
    const char* callback;
    bool inGlobalSet;
    bool tmaOnly;
};
const Kind kKinds[] = {
    {SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "GLOBAL_MEMORY_ACCESS", "ProbeGlobalAccess", true, false},
    {SANITIZER_INSTRUCTION_MEMCPY_ASYNC, "MEMCPY_ASYNC", "ProbeMemcpyAsync", false, false},
    {SANITIZER_INSTRUCTION_BULK_COPY_GLOBAL_TO_SHARED, "BULK_COPY_GLOBAL_TO_SHARED", "ProbeBulkG2S", false, false},
    {SANITIZER_INSTRUCTION_BULK_COPY_SHARED_TO_GLOBAL, "BULK_COPY_SHARED_TO_GLOBAL", "ProbeBulkS2G", false, false},
    {SANITIZER_INSTRUCTION_BULK_REDUCTION_SHARED_TO_GLOBAL, "BULK_REDUCTION_SHARED_TO_GLOBAL", "ProbeBulkRedS2G",
     false, false},
    {43u, "TMA_LOAD(43, 13.3+ headers)", "ProbeTmaLoad", false, true},
};

bool load_patches(CUcontext ctx)
{
    if (g_patchesLoaded.count(ctx)) return true;
    SelfScope self;
    char what[600];
    snprintf(what, sizeof what, "sanitizerAddPatchesFromFile(\"%s\", ctx %p)", cfg.fatbin.c_str(), (void*)ctx);
    SanitizerResult r = san_check(sanitizerAddPatchesFromFile(cfg.fatbin.c_str(), ctx), what, true);
    if (r != SANITIZER_SUCCESS) return false;
    g_patchesLoaded.insert(ctx);
    return true;
}

bool patch_module(CUcontext ctx, CUmodule mod, double* msOut)
{
    if (g_patched.count(mod)) return true;
    auto t0 = std::chrono::steady_clock::now();
    if (!load_patches(ctx)) {
        ++g_patchFailures;
        return false;
    }
    SelfScope self;
    const bool loud = g_patchedModules + g_patchFailures < 2;   // the first modules: every result
    int ok = 0;
    for (const Kind& k : kKinds) {
        if (!cfg.kindsAll && !k.inGlobalSet) continue;
        if (k.tmaOnly && !cfg.tma) continue;
        SanitizerResult r = sanitizerPatchInstructions((Sanitizer_InstructionId)k.id, mod, k.callback);
        if (loud || r != SANITIZER_SUCCESS)
            plog("sanitizerPatchInstructions(SANITIZER_INSTRUCTION_%s, module %p, \"%s\") -> %d (%s)", k.name,
                 (void*)mod, k.callback, (int)r, r == SANITIZER_SUCCESS ? "SANITIZER_SUCCESS" : san_text(r));
        if (r == SANITIZER_SUCCESS) ++ok;
    }
    auto t1 = std::chrono::steady_clock::now();
    SanitizerResult r = sanitizerPatchModule(mod);
    const double patchOnly = ms_since(t1), total = ms_since(t0);
    if (loud || r != SANITIZER_SUCCESS)
        plog("sanitizerPatchModule(module %p) -> %d (%s) in %.3f ms (%.3f ms with instruction selection), "
             "kinds accepted %d",
             (void*)mod, (int)r, r == SANITIZER_SUCCESS ? "SANITIZER_SUCCESS" : san_text(r), patchOnly, total, ok);
    if (msOut) *msOut = total;
    if (r != SANITIZER_SUCCESS || ok == 0) {
        ++g_patchFailures;
        return false;
    }
    g_patched.insert(mod);
    ++g_patchedModules;
    return true;
}

ProbeDevState* off_state(CUcontext ctx, Sanitizer_StreamHandle hs)
{
    auto it = g_offState.find(ctx);
    if (it != g_offState.end()) return it->second;
    SelfScope self;
    ProbeDevState* d = nullptr;
    SanitizerResult r = SAN_CK(sanitizerAlloc(ctx, (void**)&d, sizeof(ProbeDevState)), true);
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerMemset(d, 0, sizeof(ProbeDevState), hs), true);   // on = 0
    if (r != SANITIZER_SUCCESS) d = nullptr;
    g_offState[ctx] = d;
    return d;
}

// The userdata of a launch of a patched module that is not the chosen one.
void set_off_userdata(const Sanitizer_LaunchData* ld)
{
    static bool nullRefused = false;
    SelfScope self;
    static int logged = 0;
    const bool loud = logged < 2;
    if (cfg.offNull && !nullRefused) {
        SanitizerResult r = sanitizerSetLaunchCallbackData(ld->hLaunch, ld->function, ld->hStream, nullptr);
        if (loud || r != SANITIZER_SUCCESS) {
            ++logged;
            plog("sanitizerSetLaunchCallbackData(hLaunch %p, NULL) for a launch of a patched module -> %d (%s)",
                 (void*)ld->hLaunch, (int)r, r == SANITIZER_SUCCESS ? "SANITIZER_SUCCESS" : san_text(r));
        }
        if (r == SANITIZER_SUCCESS) return;
        nullRefused = true;
        plog("NULL userdata refused: other launches get a device state with on=0 from now on");
    }
    ProbeDevState* off = off_state(ld->context, ld->hStream);
    SanitizerResult r = sanitizerSetLaunchCallbackData(ld->hLaunch, ld->function, ld->hStream, off);
    if (loud || r != SANITIZER_SUCCESS) {
        ++logged;
        plog("sanitizerSetLaunchCallbackData(hLaunch %p, off-state %p) -> %d (%s)", (void*)ld->hLaunch,
             (void*)off, (int)r, r == SANITIZER_SUCCESS ? "SANITIZER_SUCCESS" : san_text(r));
    }
}

// ------------------------------------------------------------------------------------------
// The chosen launch
// ------------------------------------------------------------------------------------------
void instrument_begin(const Sanitizer_LaunchData* ld, const Pending* pend)
{
    auto t0 = std::chrono::steady_clock::now();
    Instr& I = g_instr;
    I = Instr();
    I.ctx = ld->context;
    I.mod = ld->module;
    I.fn = ld->function;
    I.gridId = ld->gridId;
    I.hLaunch = ld->hLaunch;
    I.hStream = ld->hStream;
    I.name = clip(ld->functionName, 200);
    plog("instrumenting kernel=%s grid=(%u,%u,%u) block=(%u,%u,%u) module=%p gridId=%llu", I.name.c_str(),
         ld->gridDim_x, ld->gridDim_y, ld->gridDim_z, ld->blockDim_x, ld->blockDim_y, ld->blockDim_z,
         (void*)ld->module, (unsigned long long)ld->gridId);
    if (!patch_module(ld->context, ld->module, &I.patchMs)) {
        plog("FAIL: the chosen launch's module could not be patched: it runs uninstrumented");
        I.done = true;
        return;
    }

    // Regions: every allocation the callbacks reported, plus those the parameter words point into.
    std::map<uint64_t, Alloc> all = g_allocs;
    if (pend != nullptr)
        for (auto& r : pend->ranges) {
            auto it = all.find(r.first);
            if (it == all.end()) all[r.first] = Alloc{r.second, FROM_PARAM};
            else it->second.from |= FROM_PARAM;
        }
    const uint64_t kMaxPages = 1ull << 26;   // 256 GiB tracked -> 8 MiB per bitmap
    unsigned dropped = 0;
    uint64_t lastEnd = 0;
    for (auto& a : all) {
        const uint64_t np = (a.second.size + (1u << PROBE_PAGE_SHIFT) - 1) >> PROBE_PAGE_SHIFT;
        if (a.first < lastEnd || I.pages + np > kMaxPages || I.regions.size() >= 65536) {
            ++dropped;
            continue;
        }
        I.regions.push_back(ProbeRegion{a.first, a.second.size, I.pages});
        I.regionFrom.push_back(a.second.from);
        I.pages += np;
        lastEnd = a.first + a.second.size;
    }
    I.words = (I.pages + 31) / 32 + 1;
    plog("regions: %zu tracked (%llu pages, %.1f MiB), %u dropped (overlap or cap); allocations known %zu%s%s",
         I.regions.size(), (unsigned long long)I.pages, I.pages * 4096.0 / 1048576.0, dropped, g_allocs.size(),
         pend ? "; parameter scan: " : "; no parameter scan (no API callback for this launch)",
         pend ? pend->paramNote.c_str() : "");

    SelfScope self;
    ProbeDevState h;
    memset(&h, 0, sizeof h);
    h.on = 1;
    h.count = cfg.count ? 1u : 0u;
    h.nregions = (uint32_t)I.regions.size();
    SanitizerResult r = SAN_CK(sanitizerAlloc(I.ctx, (void**)&I.dState, sizeof(ProbeDevState)), true);
    if (r == SANITIZER_SUCCESS && !I.regions.empty())
        r = SAN_CK(sanitizerAlloc(I.ctx, (void**)&I.dRegions, sizeof(ProbeRegion) * I.regions.size()), false);
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerAlloc(I.ctx, (void**)&I.dRead, I.words * 4), false);
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerAlloc(I.ctx, (void**)&I.dWrite, I.words * 4), false);
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerMemset(I.dRead, 0, I.words * 4, I.hStream), false);
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerMemset(I.dWrite, 0, I.words * 4, I.hStream), false);
    if (r == SANITIZER_SUCCESS && !I.regions.empty())
        r = SAN_CK(sanitizerMemcpyHostToDeviceAsync(I.dRegions, I.regions.data(), sizeof(ProbeRegion) * I.regions.size(),
                                                 I.hStream),
                false);
    h.regions = I.dRegions;
    h.readBits = I.dRead;
    h.writeBits = I.dWrite;
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerMemcpyHostToDeviceAsync(I.dState, &h, sizeof h, I.hStream), false);
    if (r != SANITIZER_SUCCESS) {
        plog("FAIL: device buffers for the chosen launch could not be set up: it runs uninstrumented");
        if (g_patched.count(I.mod)) set_off_userdata(ld);
        I.done = true;
        return;
    }
    r = SAN_CK(sanitizerSetLaunchCallbackData(ld->hLaunch, ld->function, ld->hStream, I.dState), true);
    if (r != SANITIZER_SUCCESS) {
        r = SAN_CK(sanitizerSetCallbackData(ld->function, I.dState), true);
        I.viaFunctionData = r == SANITIZER_SUCCESS;
    }
    if (r != SANITIZER_SUCCESS) {
        plog("FAIL: no userdata could be attached to the chosen launch: it runs uninstrumented");
        I.done = true;
        return;
    }
    I.setupMs = ms_since(t0) - I.patchMs;
    I.active = true;
}

uint64_t bits_in(const std::vector<uint32_t>& v, uint64_t first, uint64_t n)
{
    uint64_t c = 0;
    for (uint64_t p = first; p < first + n; ++p)
        if (v[p >> 5] & (1u << (p & 31))) ++c;
    return c;
}

void instrument_end()
{
    Instr& I = g_instr;
    SelfScope self;
    auto t0 = std::chrono::steady_clock::now();
    SAN_CK(sanitizerStreamSynchronize(I.hStream), false);
    const double syncMs = ms_since(t0);
    auto t1 = std::chrono::steady_clock::now();
    ProbeDevState h;
    memset(&h, 0, sizeof h);
    std::vector<uint32_t> rd(I.words, 0), wr(I.words, 0);
    SanitizerResult r = SAN_CK(sanitizerMemcpyDeviceToHost(&h, I.dState, sizeof h, I.hStream), false);
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerMemcpyDeviceToHost(rd.data(), I.dRead, I.words * 4, I.hStream), false);
    if (r == SANITIZER_SUCCESS) r = SAN_CK(sanitizerMemcpyDeviceToHost(wr.data(), I.dWrite, I.words * 4, I.hStream), false);
    const double readbackMs = ms_since(t1);
    if (r != SANITIZER_SUCCESS) plog("FAIL: reading the page bitmaps back failed; the lines below are incomplete");

    uint64_t totR = 0, totW = 0, touchedRegions = 0;
    std::vector<size_t> order(I.regions.size());
    std::vector<uint64_t> nr(I.regions.size()), nw(I.regions.size());
    for (size_t i = 0; i < I.regions.size(); ++i) {
        const ProbeRegion& R = I.regions[i];
        const uint64_t np = (R.size + 4095) >> PROBE_PAGE_SHIFT;
        nr[i] = bits_in(rd, R.firstPage, np);
        nw[i] = bits_in(wr, R.firstPage, np);
        totR += nr[i];
        totW += nw[i];
        if (nr[i] || nw[i]) ++touchedRegions;
        order[i] = i;
    }
    // touched regions first, then by base
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return (nr[a] || nw[a]) && !(nr[b] || nw[b]);
    });
    size_t printed = 0;
    for (size_t k = 0; k < order.size() && printed < 64; ++k, ++printed) {
        const size_t i = order[k];
        const ProbeRegion& R = I.regions[i];
        const unsigned f = I.regionFrom[i];
        plog("region base=0x%llx size=%llu pages_read=%llu pages_written=%llu of %llu from=%s%s%s",
             (unsigned long long)R.base, (unsigned long long)R.size, (unsigned long long)nr[i],
             (unsigned long long)nw[i], (unsigned long long)((R.size + 4095) >> PROBE_PAGE_SHIFT),
             (f & FROM_SAN_ALLOC) ? "sanitizer-alloc," : "", (f & FROM_CUPTI_ALLOC) ? "cupti-alloc," : "",
             (f & FROM_PARAM) ? "param," : "");
    }
    if (printed < order.size()) plog("... %zu more regions, all untouched", order.size() - printed);
    plog("result kernel=%s regions=%zu touched_regions=%llu pages_read=%llu pages_written=%llu tracked_pages=%llu",
         I.name.c_str(), I.regions.size(), (unsigned long long)touchedRegions, (unsigned long long)totR,
         (unsigned long long)totW, (unsigned long long)I.pages);
    plog("callbacks global_accesses=%llu%s outside_regions=%llu prefetch=%llu memcpy_async=%llu bulk_g2s=%llu "
         "bulk_s2g=%llu bulk_reduce_s2g=%llu tma_load=%llu%s",
         h.globalAccesses, cfg.count ? "" : "(not counted: PROBE_COUNT=0)", h.outside, h.prefetch, h.memcpyAsync,
         h.bulkG2S, h.bulkS2G, h.bulkRedS2G, h.tmaLoad, cfg.tma ? "" : "(TMA_LOAD not patched: PROBE_TMA=0)");
    for (unsigned i = 0; i < std::min(h.outsideN, PROBE_SAMPLES); ++i)
        plog("  outside sample %u: 0x%llx", i, h.outsideAddr[i]);
    for (unsigned i = 0; i < std::min(h.tmaN, PROBE_SAMPLES); ++i)
        plog("  tma_load sample %u: tensor_map=0x%llx coord0=%d coord1=%d dim=%u mode=%u", i, h.tmaMap[i],
             (int)(uint32_t)h.tmaCoord[i], (int)(uint32_t)(h.tmaCoord[i] >> 32), (unsigned)(uint32_t)h.tmaDimMode[i],
             (unsigned)(h.tmaDimMode[i] >> 32));

    SAN_CK(sanitizerFree(I.ctx, I.dState), false);
    if (I.dRegions) SAN_CK(sanitizerFree(I.ctx, I.dRegions), false);
    SAN_CK(sanitizerFree(I.ctx, I.dRead), false);
    SAN_CK(sanitizerFree(I.ctx, I.dWrite), false);
    if (I.viaFunctionData) SAN_CK(sanitizerSetCallbackData(I.fn, nullptr), true);
    double unpatchMs = 0;
    if (cfg.unpatch) {
        auto t2 = std::chrono::steady_clock::now();
        SanitizerResult ur = SAN_CK(sanitizerUnpatchModule(I.mod), true);
        unpatchMs = ms_since(t2);
        if (ur == SANITIZER_SUCCESS) g_patched.erase(I.mod);
    }
    plog("timing kernel=%s patch_ms=%.3f setup_ms=%.3f kernel_sync_ms=%.3f readback_ms=%.3f unpatch_ms=%.3f "
         "(kernel_sync_ms: sanitizerStreamSynchronize right after the launch, ~ the instrumented kernel's run)",
         I.name.c_str(), I.patchMs, I.setupMs, syncMs, readbackMs, unpatchMs);
    I.active = false;
    I.done = true;

    if (cfg.mode == Mode::Handover && g_handoverState == 1) {
        plog("handover: Sanitizer API -> CUPTI after the chosen launch");
        SanitizerResult a = SAN_CK(sanitizerEnableAllDomains(0, g_sanSub), true);
        SanitizerResult b = SAN_CK(sanitizerUnsubscribe(g_sanSub), true);
        g_sanOn = false;
        g_sanApiOn = false;
        // The Sanitizer API's EXIT callback for this call will not come any more: forget the call.
        t_callOwner = 0;
        t_pending = Pending();
        init_cupti(true);
        char buf[200];
        snprintf(buf, sizeof buf, "%s,back_to_cupti(disable=%d unsubscribe=%d cupti_subscribed=%d)",
                 g_handoverNote.c_str(), (int)a, (int)b, (int)g_cuptiOn);
        g_handoverNote = buf;
        g_handoverState = 2;
    }
}

// ------------------------------------------------------------------------------------------
// Callbacks
// ------------------------------------------------------------------------------------------
void on_launch_begin(const Sanitizer_LaunchData* ld)
{
    ++g_sanLaunches;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    const char* nm = ld->functionName;
    {
        std::string n = nm ? nm : "(null)";
        if (g_namesSan.size() < 500 || g_namesSan.count(n)) g_namesSan[n]++;
    }
    const bool m = name_matches(nm);
    unsigned long long sanIdx = m ? ++g_sanMatching : 0;
    if (cfg.verbose || g_sanLaunches.load() <= 2)
        plog("sanitizer: LAUNCH_BEGIN %llu kernel=%s%s", (unsigned long long)g_sanLaunches.load(), clip(nm).c_str(),
             m ? " [match]" : "");
    if (g_instr.active) {
        plog("WARN: no LAUNCH_END for the chosen launch before this launch; reading it back now");
        instrument_end();
    }
    bool chosen = false;
    const Pending* pend = nullptr;
    if (t_pending.chosen && !t_pending.consumed && m) {
        chosen = true;
        pend = &t_pending;
    } else if (m && t_callOwner == 0 && !g_instr.done) {
        // no API callback saw this call: count on the LAUNCH domain alone
        const unsigned long long want = cfg.mode == Mode::Handover ? 1 : (unsigned long long)cfg.nth;
        chosen = cfg.nth > 0 && sanIdx == want;
        if (chosen) plog("note: chosen by LAUNCH_BEGIN count alone (no driver-API callback for this call)");
    }
    if (chosen && !g_instr.done) {
        if (pend) t_pending.consumed = true;
        instrument_begin(ld, pend);
        if (g_instr.active) return;
    }
    if (g_patched.count(ld->module)) set_off_userdata(ld);
}

void on_launch_end(const Sanitizer_LaunchData* ld)
{
    ++g_sanLaunchEnds;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (g_instr.active && ld->function == g_instr.fn &&
        (ld->hLaunch == g_instr.hLaunch || ld->gridId == g_instr.gridId))
        instrument_end();
}

void SANITIZERAPI san_cb(void*, Sanitizer_CallbackDomain dom, Sanitizer_CallbackId cbid, const void* data)
{
    if (t_self) return;
    if (dom == SANITIZER_CB_DOMAIN_DRIVER_API) {
        const auto* cb = (const Sanitizer_CallbackData*)data;
        const uint32_t c = san_to_cupti_cbid(cbid);
        if (c == 0) return;
        if (cb->callbackSite == SANITIZER_API_ENTER) {
            ++g_sanApiLaunches;
            api_enter(2, c, cb->functionParams, cb->symbolName);
        } else {
            api_exit(2);
        }
        return;
    }
    if (dom == SANITIZER_CB_DOMAIN_LAUNCH) {
        const auto* ld = (const Sanitizer_LaunchData*)data;
        if (cbid == SANITIZER_CBID_LAUNCH_BEGIN) on_launch_begin(ld);
        else if (cbid == SANITIZER_CBID_LAUNCH_END) on_launch_end(ld);
        return;
    }
    if (dom != SANITIZER_CB_DOMAIN_RESOURCE) return;
    switch (cbid) {
    case SANITIZER_CBID_RESOURCE_MODULE_LOADED: {
        const auto* md = (const Sanitizer_ResourceModuleData*)data;
        const unsigned long long n = ++g_modulesLoaded;
        if (n <= 2 || cfg.verbose)
            plog("sanitizer: MODULE_LOADED module=%p cubin=%zu bytes ctx=%p", (void*)md->module, md->cubinSize,
                 (void*)md->context);
        if (cfg.patchAtLoad) {
            std::lock_guard<std::recursive_mutex> lk(g_mu);
            patch_module(md->context, md->module, nullptr);
        }
        break;
    }
    case SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
        const auto* md = (const Sanitizer_ResourceModuleData*)data;
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        g_patched.erase(md->module);
        break;
    }
    case SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_LOADED: ++g_lazyLoaded; break;
    case SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_PATCHED: ++g_lazyPatched; break;
    case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_ALLOC:
    case SANITIZER_CBID_RESOURCE_MEMORY_ALLOC_ASYNC: {
        const auto* m = (const Sanitizer_ResourceMemoryData*)data;
        ++g_sanAllocCbs;
        alloc_add(m->address, m->size, FROM_SAN_ALLOC);
        break;
    }
    case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_FREE:
    case SANITIZER_CBID_RESOURCE_MEMORY_FREE_ASYNC: {
        const auto* m = (const Sanitizer_ResourceMemoryData*)data;
        alloc_remove(m->address);
        break;
    }
    default: break;
    }
}

void CUPTIAPI cupti_cb(void*, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void* data)
{
    if (t_self || dom != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const auto* cb = (const CUpti_CallbackData*)data;
    if (is_launch_cbid(cbid)) {
        if (cb->callbackSite == CUPTI_API_ENTER) api_enter(1, cbid, cb->functionParams, cb->symbolName);
        else api_exit(1);
        return;
    }
    if (cb->callbackSite != CUPTI_API_EXIT) return;
    const bool ok = cb->functionReturnValue != nullptr && *(const CUresult*)cb->functionReturnValue == CUDA_SUCCESS;
    if (!ok) return;
    ++g_cuptiAllocCbs;
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
        auto* p = (const cuMemAlloc_v2_params*)cb->functionParams;
        if (p->dptr) alloc_add(*p->dptr, p->bytesize, FROM_CUPTI_ALLOC);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
        auto* p = (const cuMemAllocManaged_params*)cb->functionParams;
        if (p->dptr) alloc_add(*p->dptr, p->bytesize, FROM_CUPTI_ALLOC);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync: {
        auto* p = (const cuMemAllocAsync_params*)cb->functionParams;
        if (p->dptr) alloc_add(*p->dptr, p->bytesize, FROM_CUPTI_ALLOC);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
        auto* p = (const cuMemAllocAsync_ptsz_params*)cb->functionParams;
        if (p->dptr) alloc_add(*p->dptr, p->bytesize, FROM_CUPTI_ALLOC);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync: {
        auto* p = (const cuMemAllocFromPoolAsync_params*)cb->functionParams;
        if (p->dptr) alloc_add(*p->dptr, p->bytesize, FROM_CUPTI_ALLOC);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
        auto* p = (const cuMemAllocFromPoolAsync_ptsz_params*)cb->functionParams;
        if (p->dptr) alloc_add(*p->dptr, p->bytesize, FROM_CUPTI_ALLOC);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        alloc_remove(((const cuMemFree_v2_params*)cb->functionParams)->dptr);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
        alloc_remove(((const cuMemFreeAsync_params*)cb->functionParams)->dptr);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
        alloc_remove(((const cuMemFreeAsync_ptsz_params*)cb->functionParams)->dptr);
        break;
    default: break;
    }
}

// ------------------------------------------------------------------------------------------
// Subscriptions
// ------------------------------------------------------------------------------------------
const char* lib_of(const void* sym)
{
    Dl_info info;
    if (dladdr(sym, &info) && info.dli_fname) return info.dli_fname;
    return "?";
}

// CUpti_SubscriberParams of the CUPTI 13.2+ headers (this probe builds against 13.0's).
struct SubscriberParamsV2 {
    size_t structSize;
    const char* subscriberName;
    char* oldSubscriberName;
    size_t oldSubscriberSize;
    uint8_t allowMultipleSubscribers;
    uint8_t padding[7];
};
typedef CUptiResult (*SubscribeV2Fn)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*, SubscriberParamsV2*);

void init_cupti(bool again)
{
    static bool versionShown = false;
    if (!versionShown) {
        uint32_t v = 0;
        CUPTI_CK(cuptiGetVersion(&v), false);
        plog("cupti: library %s, cuptiGetVersion=%u", lib_of((const void*)&cuptiSubscribe), v);
        versionShown = true;
    }
    CUptiResult r;
    if (cfg.cuptiV2) {
        void* h = dlopen(lib_of((const void*)&cuptiSubscribe), RTLD_NOW | RTLD_NOLOAD);
        auto fn = h ? (SubscribeV2Fn)dlsym(h, "cuptiSubscribe_v2") : nullptr;
        if (fn == nullptr) {
            plog("cupti: cuptiSubscribe_v2 not in this CUPTI library: falling back to cuptiSubscribe");
            r = CUPTI_CK(cuptiSubscribe(&g_cuptiSub, (CUpti_CallbackFunc)cupti_cb, nullptr), true);
        } else {
            // 13.0 has cuptiSubscribe_v2 with a 32-byte struct (up to oldSubscriberSize); 13.2+
            // adds allowMultipleSubscribers (40 bytes). Try the larger, then the smaller.
            const size_t sizes[2] = {offsetof(SubscriberParamsV2, padding) + sizeof(((SubscriberParamsV2*)0)->padding),
                                     offsetof(SubscriberParamsV2, allowMultipleSubscribers)};
            r = CUPTI_ERROR_INVALID_PARAMETER;
            for (size_t k = 0; k < 2 && r == CUPTI_ERROR_INVALID_PARAMETER; ++k) {
                char old[128] = {0};
                SubscriberParamsV2 p;
                memset(&p, 0, sizeof p);
                p.structSize = sizes[k];
                p.subscriberName = "kreplay-probe35";
                p.oldSubscriberName = old;
                p.oldSubscriberSize = sizeof old;
                p.allowMultipleSubscribers = 1;
                r = fn(&g_cuptiSub, (CUpti_CallbackFunc)cupti_cb, nullptr, &p);
                plog("cuptiSubscribe_v2(structSize=%zu%s) -> %d (%s) oldSubscriberName=\"%s\"", sizes[k],
                     k == 0 ? ", allowMultipleSubscribers=1" : ", no allowMultipleSubscribers field", (int)r,
                     r == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : cupti_text(r), old);
            }
        }
    } else {
        r = CUPTI_CK(cuptiSubscribe(&g_cuptiSub, (CUpti_CallbackFunc)cupti_cb, nullptr), true);
    }
    if (r != CUPTI_SUCCESS) {
        plog("FAIL: CUPTI subscription refused%s: %d (%s)", again ? " after the handover back" : "", (int)r,
             cupti_text(r));
        g_cuptiSub = nullptr;
        return;
    }
    const CUpti_CallbackId ids[] = {
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
        CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
        CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
        CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    };
    int ok = 0;
    for (CUpti_CallbackId id : ids) {
        CUptiResult e = cuptiEnableCallback(1, g_cuptiSub, CUPTI_CB_DOMAIN_DRIVER_API, id);
        if (e != CUPTI_SUCCESS)
            plog("cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, %u) -> %d (%s)", (unsigned)id, (int)e,
                 cupti_text(e));
        else
            ++ok;
    }
    plog("cupti: %d of %zu driver-API callbacks enabled", ok, sizeof ids / sizeof ids[0]);
    g_cuptiOn = ok > 0;
}

void init_sanitizer()
{
    plog("sanitizer: library %s", lib_of((const void*)&sanitizerSubscribe));
    Sanitizer_SubscriberHandle h = nullptr;
    if (SAN_CK(sanitizerSubscribe(&h, san_cb, nullptr), true) != SANITIZER_SUCCESS) {
        plog("FAIL: sanitizerSubscribe refused (10 = MAX_LIMIT_REACHED: another subscriber; "
             "13 = NOT_INITIALIZED: driver and Sanitizer API versions do not fit)");
        return;
    }
    g_sanSub = h;
    SanitizerResult a = SAN_CK(sanitizerEnableDomain(1, h, SANITIZER_CB_DOMAIN_RESOURCE), true);
    SanitizerResult b = SAN_CK(sanitizerEnableDomain(1, h, SANITIZER_CB_DOMAIN_LAUNCH), true);
    g_sanOn = a == SANITIZER_SUCCESS && b == SANITIZER_SUCCESS;
    const Sanitizer_CallbackId ids[] = {
        SANITIZER_CBID_DRIVER_API_cuLaunchKernel,
        SANITIZER_CBID_DRIVER_API_cuLaunchKernel_ptsz,
        SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx,
        SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx_ptsz,
        SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel,
        SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel_ptsz,
    };
    int ok = 0;
    for (Sanitizer_CallbackId id : ids) {
        SanitizerResult e = sanitizerEnableCallback(1, h, SANITIZER_CB_DOMAIN_DRIVER_API, id);
        if (e != SANITIZER_SUCCESS)
            plog("sanitizerEnableCallback(1, h, SANITIZER_CB_DOMAIN_DRIVER_API, %u) -> %d (%s)", (unsigned)id,
                 (int)e, san_text(e));
        else
            ++ok;
    }
    plog("sanitizer: %d of %zu driver-API launch callbacks enabled", ok, sizeof ids / sizeof ids[0]);
    g_sanApiOn = ok > 0;
}

void print_names(const char* what, const std::map<std::string, unsigned long long>& m)
{
    std::vector<std::pair<unsigned long long, std::string>> v;
    for (auto& kv : m) v.push_back({kv.second, kv.first});
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < v.size() && i < 12; ++i)
        plog("  %s %6llu x %s", what, v[i].first, clip(v[i].second.c_str(), 150).c_str());
}

void at_exit()
{
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (g_instr.active) plog("WARN: the chosen launch never reached LAUNCH_END (not read back)");
    plog("cupti launches=%llu sanitizer launches=%llu patched_modules=%llu",
         (unsigned long long)g_cuptiLaunches.load(), (unsigned long long)g_sanLaunches.load(), g_patchedModules);
    plog("summary mode=%s kernel=%s nth=%ld cupti_subscribed=%d sanitizer_subscribed=%d sanitizer_driverapi=%d "
         "sanitizer_driverapi_launches=%llu sanitizer_launch_ends=%llu api_launch_calls=%llu api_matching=%llu "
         "sanitizer_matching=%llu modules_loaded=%llu lazy_loaded_cbs=%llu lazy_patched_cbs=%llu patch_failures=%llu "
         "allocations_known=%zu sanitizer_alloc_cbs=%llu cupti_alloc_cbs=%llu handover=%s "
         "cupti_launches_after_handback=%llu instrumented=%s",
         cfg.modeName.c_str(), env_s("PROBE_KERNEL", "gather_pages").c_str(), cfg.nth, (int)g_cuptiOn, (int)g_sanOn,
         (int)g_sanApiOn, (unsigned long long)g_sanApiLaunches.load(), (unsigned long long)g_sanLaunchEnds.load(),
         (unsigned long long)g_apiCalls.load(), (unsigned long long)g_apiMatching.load(),
         (unsigned long long)g_sanMatching.load(), (unsigned long long)g_modulesLoaded.load(),
         (unsigned long long)g_lazyLoaded.load(), (unsigned long long)g_lazyPatched.load(), g_patchFailures,
         g_allocs.size(), (unsigned long long)g_sanAllocCbs.load(), (unsigned long long)g_cuptiAllocCbs.load(),
         g_handoverNote.c_str(), (unsigned long long)g_cuptiLaunchesAfterHandback.load(),
         g_instr.done ? "yes" : "no");
    print_names("api", g_namesApi);
    print_names("launch", g_namesSan);
}

void probe_init()
{
    auto t0 = std::chrono::steady_clock::now();
    cfg.modeName = env_s("PROBE_MODE", "both");
    if (cfg.modeName == "both") cfg.mode = Mode::Both;
    else if (cfg.modeName == "sanfirst") cfg.mode = Mode::SanFirst;
    else if (cfg.modeName == "sanitizer") cfg.mode = Mode::Sanitizer;
    else if (cfg.modeName == "cupti") cfg.mode = Mode::Cupti;
    else if (cfg.modeName == "handover") cfg.mode = Mode::Handover;
    else {
        plog("unknown PROBE_MODE=%s: using both", cfg.modeName.c_str());
        cfg.modeName = "both";
    }
    std::string ks = env_s("PROBE_KERNEL", "gather_pages");
    for (size_t p = 0;;) {
        size_t q = ks.find('|', p);
        cfg.kernels.push_back(ks.substr(p, q == std::string::npos ? std::string::npos : q - p));
        if (q == std::string::npos) break;
        p = q + 1;
    }
    cfg.nth = env_l("PROBE_NTH", 1);
    if (cfg.mode == Mode::Handover && cfg.nth == 1) {
        plog("handover needs an earlier matching launch to hand over at: PROBE_NTH=1 becomes 2");
        cfg.nth = 2;
    }
    cfg.patchAtLoad = env_s("PROBE_PATCH", "lazy") == "load";
    cfg.unpatch = env_l("PROBE_UNPATCH", 1) != 0;
    cfg.offNull = env_s("PROBE_OFF", "null") != "state";
    cfg.kindsAll = env_s("PROBE_KINDS", "all") != "global";
    cfg.tma = env_l("PROBE_TMA", 0) != 0;
    cfg.count = env_l("PROBE_COUNT", 0) != 0;
    cfg.cuptiV2 = env_l("PROBE_CUPTI_V2", 0) != 0;
    cfg.finalize = env_l("PROBE_FINALIZE", 1) != 0;
    cfg.verbose = env_l("PROBE_VERBOSE", 0) != 0;
    cfg.fatbin = env_s("PROBE_FATBIN", "");
    if (cfg.fatbin.empty()) {
        std::string so = lib_of((const void*)&probe_init);
        size_t slash = so.rfind('/');
        cfg.fatbin = (slash == std::string::npos ? std::string(".") : so.substr(0, slash)) + "/probe_patch.fatbin";
    }
    if (access(cfg.fatbin.c_str(), R_OK) != 0) plog("FAIL: patch module %s is not readable", cfg.fatbin.c_str());
    plog("init pid=%d mode=%s kernel=%s nth=%ld patch=%s unpatch=%d off=%s kinds=%s tma=%d count=%d cupti_v2=%d "
         "fatbin=%s",
         (int)getpid(), cfg.modeName.c_str(), ks.c_str(), cfg.nth, cfg.patchAtLoad ? "load" : "lazy",
         (int)cfg.unpatch, cfg.offNull ? "null" : "state", cfg.kindsAll ? "all" : "global", (int)cfg.tma,
         (int)cfg.count, (int)cfg.cuptiV2, cfg.fatbin.c_str());
    switch (cfg.mode) {
    case Mode::Both: init_cupti(false); init_sanitizer(); break;
    case Mode::SanFirst: init_sanitizer(); init_cupti(false); break;
    case Mode::Sanitizer: init_sanitizer(); break;
    case Mode::Cupti: init_cupti(false); break;
    case Mode::Handover: init_cupti(false); break;
    }
    plog("init done in %.1f ms: cupti_subscribed=%d sanitizer_subscribed=%d%s", ms_since(t0), (int)g_cuptiOn,
         (int)g_sanOn, (g_cuptiOn && g_sanOn) ? " (both subscribed: whether both get callbacks is the question)" : "");
    atexit(at_exit);
}

std::once_flag g_once;

}   // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void)
{
    std::call_once(g_once, probe_init);
    return 1;
}
