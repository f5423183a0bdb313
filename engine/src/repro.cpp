// Standalone reproducer of one kernel dispatch, written by `kreplay extract --repro`.
// Needs a CUDA driver and nvcc (for cuda.h and libcuda), not kreplay:
//
//   make && ./repro [--passes N] [--warmup N] [--device D] [--relocate] [--ptx]
//
// It maps every captured buffer at its original device address (or moves them all and
// rewrites the pointers the capture knows of), uploads the captured memory, launches the
// kernel with the captured geometry, attributes and argument bytes, times N passes (restoring
// the written buffers before each), and compares what the kernel wrote with the output
// recorded in the application. Exit status: 0 matched (or no reference to compare with),
// 1 mismatch, 2 could not replay.
#include <cuda.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

struct Param { unsigned offset, size; };
struct Attribute { unsigned id; bool needs_event; unsigned char value[64]; };
enum Kind { DEVICE = 0, HOST_MAPPED = 1, MODULE_GLOBAL = 2, CUDA_ARRAY = 3 };
struct Region {
  unsigned id;
  unsigned long long address, size;
  Kind kind;
  const char *global_name;  // MODULE_GLOBAL: the variable's name in the module
  const char *pre_file;     // the bytes before the dispatch
  const char *post_file;    // written regions: the bytes after it (nullptr otherwise)
};
struct Slot { unsigned region; unsigned long long offset; };
// Bytes a capture by touched pages (`record --memory touched`) does not hold: their files hold
// zeros there, the reproducer writes ABSENT_FILL over them, as `kreplay play` does.
struct Absent { unsigned region; unsigned long long offset, size; };
struct Range { unsigned long long base, size; };
// A CUDA array behind a texture or surface object; its texels are a region (CUDA_ARRAY),
// packed level after level (LEVELS says where each level lies in it).
struct ArrayDesc {
  unsigned region;
  unsigned long long width, height, depth;
  unsigned format, channels, flags, levels;  // levels 0: a plain array
};
struct LevelCopy {
  unsigned array, level;
  unsigned long long width_bytes, height, depth, offset;
};
// A texture or surface object: what it views, how it samples, where its handle goes.
struct TexObject {
  bool surface;
  int kind;  // 0 array, 1 mipmapped array, 2 linear, 3 pitch 2D
  int array;
  unsigned long long address;
  unsigned format, channels;
  unsigned long long size, width, height, pitch;
  unsigned address_mode[3], filter_mode, flags, max_anisotropy, mipmap_filter_mode;
  unsigned mipmap_level_bias, min_mipmap_level_clamp, max_mipmap_level_clamp;  // float bits
  unsigned border_color[4];                                                     // float bits
  bool has_view;
  unsigned view_format;
  unsigned long long view_width, view_height, view_depth;
  unsigned first_mipmap_level, last_mipmap_level, first_layer, last_layer;
  std::vector<unsigned> arg_words;  // argument offsets holding the handle
  std::vector<Slot> memory_words;   // words in captured memory holding it
};

// ---- the captured dispatch (generated) ----
@CAPTURE@
// ---- end of generated part ----

static void die(const char *what) {
  fprintf(stderr, "repro: %s\n", what);
  exit(2);
}

static void check(CUresult r, const char *call) {
  if (r == CUDA_SUCCESS) return;
  const char *name = "?", *text = "?";
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  fprintf(stderr, "repro: %s failed: %s (%s)\n", call, name, text);
  exit(2);
}

static std::vector<unsigned char> read_file(const std::string &path, bool nul = false) {
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) {
    fprintf(stderr, "repro: cannot open %s\n", path.c_str());
    exit(2);
  }
  std::vector<unsigned char> v;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
  fclose(f);
  if (nul) v.push_back(0);
  return v;
}

// Where each moved range went: (old base, size, new base).
struct Move { unsigned long long old_base, size, new_base; };
static std::vector<Move> moves;

static unsigned long long translate(unsigned long long old) {
  for (const Move &m : moves)
    if (old >= m.old_base && old < m.old_base + m.size) return m.new_base + (old - m.old_base);
  return old;
}

static void patch_word(unsigned char *p) {
  unsigned long long v;
  memcpy(&v, p, 8);
  v = translate(v);
  memcpy(p, &v, 8);
}

// 0xFF, kreplay's fill of absent bytes (kreplay_format::absent::ABSENT_FILL): NaN in every
// floating-point type, -1 in every signed integer, never a pointer into user space.
static const unsigned char ABSENT_FILL = 0xFF;

// Writes ABSENT_FILL over the absent bytes of region `id` inside `bytes` (the region's bytes,
// before or after the dispatch): what the replay starts from and expects where the kernel
// touched nothing when recorded.
static void fill_absent(unsigned id, std::vector<unsigned char> &bytes) {
  for (const Absent &a : ABSENT) {
    if (a.region != id) continue;
    if (a.offset > bytes.size() || a.size > bytes.size() - a.offset)
      die("an absent range lies outside its region");
    memset(bytes.data() + a.offset, ABSENT_FILL, a.size);
  }
}

// Rewrites the pointer slots of region `id` inside `bytes` (the region's bytes) after a move.
static void patch_region(unsigned id, std::vector<unsigned char> &bytes) {
  if (moves.empty()) return;
  for (const Slot &s : SLOTS)
    if (s.region == id && s.offset + 8 <= bytes.size()) patch_word(&bytes[s.offset]);
}

static const unsigned long long HINT_ALIGNMENTS[] = {32ull << 20, 64ull << 20, 128ull << 20,
                                                     256ull << 20, 512ull << 20, 1ull << 30,
                                                     2ull << 30};
static const unsigned long long MIN_RESERVATION = 2ull << 30;

struct Reservation { CUdeviceptr base; size_t size; };
static std::vector<Reservation> reservations;
static std::vector<std::pair<CUdeviceptr, size_t>> mapped;
static std::vector<CUmemGenericAllocationHandle> handles;
static std::vector<std::pair<void *, size_t>> host_maps;

static bool try_reserve(unsigned long long start, unsigned long long len) {
  for (const Reservation &r : reservations)
    if (start < r.base + r.size && r.base < start + len) return false;
  CUdeviceptr got = 0;
  if (cuMemAddressReserve(&got, len, 0, start, 0) != CUDA_SUCCESS) return false;
  if (got == start) {
    reservations.push_back({got, (size_t)len});
    return true;
  }
  cuMemAddressFree(got, len);
  return false;
}

static void release_all() {
  for (auto &m : mapped) cuMemUnmap(m.first, m.second);
  for (auto h : handles) cuMemRelease(h);
  for (auto &r : reservations) cuMemAddressFree(r.base, r.size);
  for (auto &h : host_maps) {
    cuMemHostUnregister(h.first);
    munmap(h.first, h.second);
  }
  mapped.clear();
  handles.clear();
  reservations.clear();
  host_maps.clear();
}

// Maps every device range at its original address: one reservation over all of them when the
// driver honours the hint (it does for large ones), else one per range. False when an address
// is taken in this process.
static bool map_original(CUdevice dev) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)dev;
  size_t g = 0;
  check(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  std::vector<Range> merged;
  {
    std::vector<Range> v;
    for (const Range &r : DEVICE_RANGES) {
      if (!r.size) continue;
      unsigned long long s = r.base / g * g, e = (r.base + r.size + g - 1) / g * g;
      v.push_back({s, e - s});
    }
    std::sort(v.begin(), v.end(), [](const Range &a, const Range &b) { return a.base < b.base; });
    for (const Range &r : v) {
      if (!merged.empty() && r.base <= merged.back().base + merged.back().size) {
        unsigned long long e = std::max(merged.back().base + merged.back().size, r.base + r.size);
        merged.back().size = e - merged.back().base;
      } else {
        merged.push_back(r);
      }
    }
  }
  if (!merged.empty()) {
    unsigned long long lo = merged.front().base, hi = 0;
    for (const Range &r : merged) hi = std::max(hi, r.base + r.size);
    bool one = false;
    for (unsigned long long a : HINT_ALIGNMENTS) {
      unsigned long long start = lo / a * a;
      unsigned long long len = (std::max(hi, start + MIN_RESERVATION) - start + g - 1) / g * g;
      if ((one = try_reserve(start, len))) break;
    }
    if (!one) {
      for (const Range &r : merged) {
        bool covered = false;
        for (const Reservation &res : reservations)
          covered |= r.base >= res.base && r.base + r.size <= res.base + res.size;
        for (unsigned long long a : HINT_ALIGNMENTS) {
          if (covered) break;
          unsigned long long start = r.base / a * a;
          unsigned long long len =
              (std::max(r.base + r.size, start + MIN_RESERVATION) - start + g - 1) / g * g;
          covered = try_reserve(start, len);
        }
        if (!covered) {
          fprintf(stderr, "repro: device range %#llx..%#llx is taken in this process\n", r.base,
                  r.base + r.size);
          return false;
        }
      }
    }
    for (const Range &r : merged) {
      CUmemGenericAllocationHandle h;
      check(cuMemCreate(&h, r.size, &prop, 0), "cuMemCreate");
      handles.push_back(h);
      check(cuMemMap(r.base, r.size, 0, h, 0), "cuMemMap");
      mapped.push_back({r.base, r.size});
      CUmemAccessDesc access = {};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      check(cuMemSetAccess(r.base, r.size, &access, 1), "cuMemSetAccess");
    }
  }
  // Host memory the kernel reads through the bus: page-locked host memory at the address.
  long page = sysconf(_SC_PAGESIZE);
  for (const Range &r : HOST_GROUPS) {
    unsigned long long s = r.base / page * page, e = (r.base + r.size + page - 1) / page * page;
    void *p = mmap((void *)s, e - s, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || p != (void *)s) {
      if (p != MAP_FAILED) munmap(p, e - s);
      fprintf(stderr, "repro: host range %#llx..%#llx is taken in this process\n", s, e);
      return false;
    }
    if (cuMemHostRegister(p, e - s, CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS) {
      munmap(p, e - s);
      return false;
    }
    host_maps.push_back({p, e - s});
    CUdeviceptr d = 0;
    if (cuMemHostGetDevicePointer(&d, p, 0) != CUDA_SUCCESS || d != s) return false;
  }
  return true;
}

// Moves every range: one allocation per group of touching ranges.
static std::vector<CUdeviceptr> moved_device;
static std::vector<void *> moved_host;
static void map_moved() {
  if (RELOCATION_BLOCKER[0]) {
    fprintf(stderr, "repro: the capture cannot be relocated: %s\n", RELOCATION_BLOCKER);
    exit(2);
  }
  for (const Range &r : DEVICE_GROUPS) {
    CUdeviceptr p = 0;
    check(cuMemAlloc(&p, r.size ? r.size : 1), "cuMemAlloc");
    moved_device.push_back(p);
    moves.push_back({r.base, r.size, p});
  }
  for (const Range &r : HOST_GROUPS) {
    void *p = nullptr;
    check(cuMemHostAlloc(&p, r.size ? r.size : 1, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
    CUdeviceptr d = 0;
    check(cuMemHostGetDevicePointer(&d, p, 0), "cuMemHostGetDevicePointer");
    moved_host.push_back(p);
    moves.push_back({r.base, r.size, d});
  }
}

struct Placed { const Region *r; CUdeviceptr at; size_t usable; };

static float bits_to_float(unsigned b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

// The arrays made here: (plain array or mipmapped array, the array of each level).
struct MadeArray { CUmipmappedArray mipmapped; std::vector<CUarray> levels; };

static MadeArray make_array(const ArrayDesc &a) {
  CUDA_ARRAY3D_DESCRIPTOR d;
  memset(&d, 0, sizeof d);
  d.Width = a.width;
  d.Height = a.height;
  d.Depth = a.depth;
  d.Format = (CUarray_format)a.format;
  d.NumChannels = a.channels;
  d.Flags = a.flags;
  MadeArray m = {nullptr, {}};
  if (a.levels == 0) {
    CUarray arr;
    check(cuArray3DCreate(&arr, &d), "cuArray3DCreate");
    m.levels.push_back(arr);
  } else {
    check(cuMipmappedArrayCreate(&m.mipmapped, &d, a.levels), "cuMipmappedArrayCreate");
    for (unsigned l = 0; l < a.levels; l++) {
      CUarray arr;
      check(cuMipmappedArrayGetLevel(&arr, m.mipmapped, l), "cuMipmappedArrayGetLevel");
      m.levels.push_back(arr);
    }
  }
  return m;
}

// Copies the packed texels of array `index` between host bytes and the array, every level.
static void copy_texels(const MadeArray &m, unsigned index, unsigned char *host, bool to_array) {
  for (const LevelCopy &l : LEVELS) {
    if (l.array != index || l.level >= m.levels.size()) continue;
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    if (to_array) {
      c.srcMemoryType = CU_MEMORYTYPE_HOST;
      c.srcHost = host + l.offset;
      c.srcPitch = l.width_bytes;
      c.srcHeight = l.height;
      c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
      c.dstArray = m.levels[l.level];
    } else {
      c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
      c.srcArray = m.levels[l.level];
      c.dstMemoryType = CU_MEMORYTYPE_HOST;
      c.dstHost = host + l.offset;
      c.dstPitch = l.width_bytes;
      c.dstHeight = l.height;
    }
    c.WidthInBytes = l.width_bytes;
    c.Height = l.height;
    c.Depth = l.depth;
    check(cuMemcpy3D(&c), "cuMemcpy3D");
  }
}

static unsigned long long make_object(const TexObject &o, const std::vector<MadeArray> &arrays) {
  CUDA_RESOURCE_DESC rd;
  memset(&rd, 0, sizeof rd);
  if (o.kind == 0 || o.kind == 1) {
    if (o.array < 0 || (size_t)o.array >= arrays.size()) die("a texture views an array not made");
    const MadeArray &m = arrays[o.array];
    if (o.kind == 1) {
      rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
      rd.res.mipmap.hMipmappedArray = m.mipmapped;
    } else {
      rd.resType = CU_RESOURCE_TYPE_ARRAY;
      rd.res.array.hArray = m.levels[0];
    }
  } else if (o.kind == 2) {
    rd.resType = CU_RESOURCE_TYPE_LINEAR;
    rd.res.linear.devPtr = translate(o.address);
    rd.res.linear.format = (CUarray_format)o.format;
    rd.res.linear.numChannels = o.channels;
    rd.res.linear.sizeInBytes = o.size;
  } else {
    rd.resType = CU_RESOURCE_TYPE_PITCH2D;
    rd.res.pitch2D.devPtr = translate(o.address);
    rd.res.pitch2D.format = (CUarray_format)o.format;
    rd.res.pitch2D.numChannels = o.channels;
    rd.res.pitch2D.width = o.width;
    rd.res.pitch2D.height = o.height;
    rd.res.pitch2D.pitchInBytes = o.pitch;
  }
  unsigned long long handle = 0;
  if (o.surface) {
    CUsurfObject s;
    check(cuSurfObjectCreate(&s, &rd), "cuSurfObjectCreate");
    handle = s;
  } else {
    CUDA_TEXTURE_DESC td;
    memset(&td, 0, sizeof td);
    for (int i = 0; i < 3; i++) td.addressMode[i] = (CUaddress_mode)o.address_mode[i];
    td.filterMode = (CUfilter_mode)o.filter_mode;
    td.flags = o.flags;
    td.maxAnisotropy = o.max_anisotropy;
    td.mipmapFilterMode = (CUfilter_mode)o.mipmap_filter_mode;
    td.mipmapLevelBias = bits_to_float(o.mipmap_level_bias);
    td.minMipmapLevelClamp = bits_to_float(o.min_mipmap_level_clamp);
    td.maxMipmapLevelClamp = bits_to_float(o.max_mipmap_level_clamp);
    for (int i = 0; i < 4; i++) td.borderColor[i] = bits_to_float(o.border_color[i]);
    CUDA_RESOURCE_VIEW_DESC vd;
    memset(&vd, 0, sizeof vd);
    vd.format = (CUresourceViewFormat)o.view_format;
    vd.width = o.view_width;
    vd.height = o.view_height;
    vd.depth = o.view_depth;
    vd.firstMipmapLevel = o.first_mipmap_level;
    vd.lastMipmapLevel = o.last_mipmap_level;
    vd.firstLayer = o.first_layer;
    vd.lastLayer = o.last_layer;
    CUtexObject t;
    check(cuTexObjectCreate(&t, &rd, &td, o.has_view ? &vd : nullptr), "cuTexObjectCreate");
    handle = t;
  }
  return handle;
}

static int compare(const Region &r, const unsigned char *expected, const unsigned char *found,
                   size_t n, unsigned long long *differ, int *reported) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (expected[i] == found[i]) continue;
    (*differ)++;
    bad = 1;
    if ((*reported)++ < 8)
      fprintf(stderr, "repro:   region %u offset %#zx: expected %02x, found %02x\n", r.id, i,
              expected[i], found[i]);
  }
  return bad;
}

int main(int argc, char **argv) {
  int passes = 8, warmup = 1, ordinal = 0;
  bool relocate = false, force_ptx = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--passes" && i + 1 < argc) passes = atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (a == "--device" && i + 1 < argc) ordinal = atoi(argv[++i]);
    else if (a == "--relocate") relocate = true;
    else if (a == "--ptx") force_ptx = true;
    else {
      fprintf(stderr, "usage: %s [--passes N] [--warmup N] [--device D] [--relocate] [--ptx]\n",
              argv[0]);
      return 2;
    }
  }
  if (passes < 1) die("--passes must be at least 1");
  if (warmup < 0) die("--warmup must be at least 0");
  check(cuInit(0), "cuInit");
  CUdevice dev;
  check(cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  char name[256] = {0};
  check(cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  int major = 0, minor = 0;
  cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  printf("kernel    %s\n", KERNEL);
  printf("device    %s (sm_%d%d); recorded on %s\n", name, major, minor, RECORDED_DEVICE);

  // Memory first, before anything of ours can sit where the capture needs to be.
  bool original = !relocate && map_original(dev);
  if (!original) {
    release_all();
    map_moved();
  }
  printf("addresses %s\n", original ? "original" : "relocated");

  // Code: the captured cubin, or its PTX through the driver's JIT (another architecture).
  CUmodule module = nullptr;
  const char *code = "cubin";
  CUresult loaded = CUDA_ERROR_NO_BINARY_FOR_GPU;
  if (!force_ptx && CODE_FILE[0]) {
    std::vector<unsigned char> image = read_file(CODE_FILE, CODE_IS_TEXT);
    loaded = cuModuleLoadData(&module, image.data());
  }
  if (loaded != CUDA_SUCCESS && PTX_FILE[0]) {
    std::vector<unsigned char> ptx = read_file(PTX_FILE, true);
    loaded = cuModuleLoadData(&module, ptx.data());
    code = "ptx-jit";
  }
  check(loaded, force_ptx && !PTX_FILE[0] ? "loading the PTX (the capture holds none)"
                                          : "cuModuleLoadData");
  CUfunction fn;
  check(cuModuleGetFunction(&fn, module, KERNEL), "cuModuleGetFunction");
  printf("code      %s\n", code);

  // Memory contents.
  std::vector<Placed> placed;
  for (const Region &r : REGIONS) {
    CUdeviceptr at = 0;
    size_t usable = r.size;
    if (r.kind == CUDA_ARRAY) continue;  // texels: into the arrays, below
    if (r.kind == MODULE_GLOBAL) {
      size_t size = 0;
      if (cuModuleGetGlobal(&at, &size, module, r.global_name) != CUDA_SUCCESS) continue;
      usable = std::min<size_t>(size, r.size);
    } else {
      at = translate(r.address);
    }
    std::vector<unsigned char> bytes = read_file(r.pre_file);
    if (bytes.size() != r.size) die("a region file does not have its region's size");
    fill_absent(r.id, bytes);
    patch_region(r.id, bytes);
    check(cuMemcpyHtoD(at, bytes.data(), usable), "cuMemcpyHtoD");
    placed.push_back({&r, at, usable});
  }
  if (MAX_DYNAMIC_SHARED)
    check(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             MAX_DYNAMIC_SHARED),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  if (NON_PORTABLE_CLUSTER)
    check(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
          "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");

  // Arguments: the recorded bytes, pointers rewritten when memory moved.
  std::vector<unsigned char> args(ARGS.begin(), ARGS.end());
  for (unsigned w : POINTER_WORDS)
    if (w + 8 <= args.size()) patch_word(&args[w]);
  // Arrays filled with their captured texels, then the objects over them (or over placed
  // linear memory); their handles go where the recorded process had its own.
  std::vector<MadeArray> arrays;
  std::vector<const Region *> array_region;  // each array's texel region
  std::vector<std::vector<unsigned char>> texels;  // each array's bytes before the dispatch
  std::vector<std::vector<unsigned char>> texels_after;  // written arrays: the recorded output
  for (size_t i = 0; i < ARRAYS.size(); i++) {
    const Region *r = nullptr;
    for (const Region &x : REGIONS)
      if (x.id == ARRAYS[i].region) r = &x;
    if (!r) die("an array has no texel region");
    array_region.push_back(r);
    arrays.push_back(make_array(ARRAYS[i]));
    texels.push_back(read_file(r->pre_file));
    if (texels.back().size() != r->size) die("a texel file does not have its region's size");
    copy_texels(arrays.back(), (unsigned)i, texels.back().data(), true);
    texels_after.push_back(r->post_file && REFERENCE ? read_file(r->post_file)
                                                     : std::vector<unsigned char>());
  }
  std::vector<std::pair<Slot, unsigned long long>> handle_words;
  for (const TexObject &o : OBJECTS) {
    unsigned long long h = make_object(o, arrays);
    for (unsigned w : o.arg_words)
      if (w + 8 <= args.size()) memcpy(&args[w], &h, 8);
    for (const Slot &s : o.memory_words) {
      for (const Placed &p : placed)
        if (p.r->id == s.region && s.offset + 8 <= p.usable) {
          check(cuMemcpyHtoD(p.at + s.offset, &h, 8), "cuMemcpyHtoD (handle)");
          handle_words.push_back({s, h});
        }
    }
  }
  printf("textures  %zu object(s) over %zu array(s) made here\n", OBJECTS.size(), ARRAYS.size());

  std::vector<void *> params;
  for (const Param &p : PARAMS) {
    if (p.offset + p.size > args.size()) die("a parameter lies outside the argument bytes");
    params.push_back(&args[p.offset]);
  }

  CUstream stream;
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::vector<CUlaunchAttribute> attrs;
  for (const Attribute &a : ATTRIBUTES) {
    CUlaunchAttribute la;
    memset(&la, 0, sizeof la);
    la.id = (CUlaunchAttributeID)a.id;
    memcpy(&la.value, a.value, std::min(sizeof la.value, sizeof a.value));
    if (a.needs_event) {
      CUevent e;
      check(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      memcpy(&la.value, &e, sizeof e);
    }
    attrs.push_back(la);
  }
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = GRID[0]; cfg.gridDimY = GRID[1]; cfg.gridDimZ = GRID[2];
  cfg.blockDimX = BLOCK[0]; cfg.blockDimY = BLOCK[1]; cfg.blockDimZ = BLOCK[2];
  cfg.sharedMemBytes = DYNAMIC_SHARED;
  cfg.hStream = stream;
  cfg.attrs = attrs.empty() ? nullptr : attrs.data();
  cfg.numAttrs = (unsigned)attrs.size();

  // Pristine copies of the written regions, in device memory: each pass starts from them.
  std::vector<CUdeviceptr> pristine(placed.size(), 0);
  std::vector<std::vector<unsigned char>> expected(placed.size());
  for (size_t i = 0; i < placed.size(); i++) {
    const Placed &p = placed[i];
    if (!p.r->post_file) continue;
    check(cuMemAlloc(&pristine[i], p.usable ? p.usable : 1), "cuMemAlloc");
    check(cuMemcpyDtoD(pristine[i], p.at, p.usable), "cuMemcpyDtoD");
    if (REFERENCE) {
      expected[i] = read_file(p.r->post_file);
      if (expected[i].size() != p.r->size) die("a post file does not have its region's size");
      fill_absent(p.r->id, expected[i]);
      patch_region(p.r->id, expected[i]);
      for (auto &hw : handle_words)  // handle words hold this process's handles
        if (hw.first.region == p.r->id && hw.first.offset + 8 <= expected[i].size())
          memcpy(&expected[i][hw.first.offset], &hw.second, 8);
    }
  }

  CUevent start, stop;
  check(cuEventCreate(&start, 0), "cuEventCreate");
  check(cuEventCreate(&stop, 0), "cuEventCreate");
  // Timing without launch overhead: the stream waits on a word of mapped host memory while
  // the start event, the kernel and the stop event are queued, then the word is written and
  // the three run back to back (otherwise the GPU passes the start event long before the
  // kernel arrives). A watchdog opens the gate after 200 ms in case the launch call itself
  // waits for the stream.
  unsigned *gate_host = nullptr;
  CUdeviceptr gate_dev = 0;
  bool gated = cuMemHostAlloc((void **)&gate_host, 4,
                              CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS &&
               cuMemHostGetDevicePointer(&gate_dev, gate_host, 0) == CUDA_SUCCESS;
  if (gated) __atomic_store_n(gate_host, 0u, __ATOMIC_SEQ_CST);
  std::vector<float> times;
  std::vector<std::vector<unsigned char>> first(placed.size());
  unsigned long long differ = 0;
  int reported = 0;
  bool matched = true, deterministic = true;
  std::vector<int> divergent;
  auto written_array = [&](size_t i) { return array_region[i]->post_file != nullptr; };
  auto restore = [&]() {
    for (size_t i = 0; i < placed.size(); i++)
      if (pristine[i])
        check(cuMemcpyDtoD(placed[i].at, pristine[i], placed[i].usable), "cuMemcpyDtoD (restore)");
    for (size_t i = 0; i < arrays.size(); i++)
      if (written_array(i)) copy_texels(arrays[i], (unsigned)i, texels[i].data(), true);
  };
  std::vector<std::vector<unsigned char>> first_texels(arrays.size());
  // Warm-up launches (untimed): the first launch of a module pays for loading it.
  for (int i = 0; i < warmup; i++) {
    check(cuLaunchKernelEx(&cfg, fn, params.data(), nullptr), "cuLaunchKernelEx (warm-up)");
    check(cuCtxSynchronize(), "the kernel (warm-up)");
    restore();
  }
  for (int pass = 0; pass < passes; pass++) {
    if (pass > 0) restore();
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    unsigned ticket = (unsigned)pass + 1;
    bool held = gated && cuStreamWaitValue32(stream, gate_dev, ticket, CU_STREAM_WAIT_VALUE_GEQ) ==
                             CUDA_SUCCESS;
    gated = held;
    std::atomic<bool> opened(false);
    std::thread watchdog;
    if (held)
      watchdog = std::thread([&]() {
        for (int i = 0; i < 200 && !opened.load(); i++)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        __atomic_store_n(gate_host, ticket, __ATOMIC_SEQ_CST);
      });
    check(cuEventRecord(start, stream), "cuEventRecord");
    check(cuLaunchKernelEx(&cfg, fn, params.data(), nullptr), "cuLaunchKernelEx");
    check(cuEventRecord(stop, stream), "cuEventRecord");
    if (held) {
      __atomic_store_n(gate_host, ticket, __ATOMIC_SEQ_CST);
      opened.store(true);
      watchdog.join();
    }
    check(cuEventSynchronize(stop), "the kernel");
    float ms = 0;
    check(cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    times.push_back(ms);
    bool same = true;
    for (size_t i = 0; i < placed.size(); i++) {
      if (!pristine[i]) continue;
      std::vector<unsigned char> found(placed[i].usable);
      check(cuMemcpyDtoH(found.data(), placed[i].at, found.size()), "cuMemcpyDtoH");
      if (pass == 0) {
        if (REFERENCE)
          matched &= !compare(*placed[i].r, expected[i].data(), found.data(), found.size(),
                              &differ, &reported);
        first[i] = std::move(found);
      } else {
        same &= first[i] == found;
      }
    }
    for (size_t i = 0; i < arrays.size(); i++) {
      if (!written_array(i)) continue;
      std::vector<unsigned char> found(texels[i].size());
      copy_texels(arrays[i], (unsigned)i, found.data(), false);
      if (pass == 0) {
        if (REFERENCE && texels_after[i].size() == found.size())
          matched &= !compare(*array_region[i], texels_after[i].data(), found.data(),
                              found.size(), &differ, &reported);
        first_texels[i] = std::move(found);
      } else {
        same &= first_texels[i] == found;
      }
    }
    if (!same) {
      deterministic = false;
      divergent.push_back(pass + 1);
    }
  }
  std::vector<float> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double median_us = sorted[sorted.size() / 2] * 1e3;
  printf("passes    %d (%d warm-up%s), median %.1f us, min %.1f us, max %.1f us", passes, warmup,
         gated ? "" : ", launch overhead included",
         median_us,
         sorted.front() * 1e3, sorted.back() * 1e3);
  if (ORIGINAL_NS) printf(" (%.1f us in the application)", ORIGINAL_NS / 1e3);
  printf("\n");
  const char *verdict;
  if (!REFERENCE) verdict = deterministic ? "deterministic" : "nondeterministic";
  else if (!deterministic) verdict = "nondeterministic";
  else verdict = matched ? "matched" : "mismatch";
  if (!REFERENCE)
    printf("verify    no recorded output in this capture (%s): %d passes %s\n", REFERENCE_WHY,
           passes, deterministic ? "identical" : "differ");
  else if (matched)
    printf("verify    matched: every written byte equals the recorded output\n");
  else
    printf("verify    MISMATCH: %llu bytes differ from the recorded output\n", differ);
  if (!deterministic) {
    printf("          passes differ from pass 1:");
    for (int p : divergent) printf(" %d", p);
    printf(" (atomics or races: the kernel is not deterministic)\n");
  }
  printf("verdict   %s\n", verdict);
  return REFERENCE && !matched && deterministic ? 1 : 0;
}
