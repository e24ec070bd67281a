/* fakecuda_core.c - a stand-in for the CUDA driver (libcuda), on the CPU:
 * initialisation, the device, contexts, memory and error strings.
 *
 * The stand-in lets aotc's cuda device path run on a machine without a GPU:
 * aotc's runtime loads it through AOTC_LIBCUDA instead of libcuda.so.1, the
 * same driver calls happen, and kernels run through the engine's host build
 * (fakecuda_exec.c). It refuses what a real driver refuses, with the same
 * error codes: calls without a current context, handles of another or a
 * destroyed context, freed or foreign device memory, launches beyond the
 * arch's limits or the kernel's parameter layout.
 *
 * Device memory is host memory: each allocation is its own mapping, filled
 * with 0xff bytes (a NaN pattern: a GPU hands out uninitialised memory, and
 * a read before any write must not look like zeros). A freed allocation
 * keeps its address range, inaccessible, so a later use is recognised as a
 * use after free rather than hitting a newer allocation.
 *
 * Environment: AOTC_FAKECUDA_ORDER=deferred (work runs as late as CUDA
 * allows, fakecuda_queue.c), AOTC_FAKECUDA_ARCH (compute capability, default 90),
 * AOTC_FAKECUDA_DEVICES (default 1), AOTC_FAKECUDA_DRIVER_VERSION (default
 * 13000), AOTC_FAKECUDA_POISON=0 (fresh memory zeroed instead).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fakecuda_state.h"

#define EXPORT __attribute__((visibility("default")))

pthread_mutex_t fk_mu = PTHREAD_MUTEX_INITIALIZER;
int fk_arch = 90;
static int initialized, device_count = 1, driver_version = 13000, poison = 1;
unsigned long long fk_count_launches, fk_count_graph_launches;

double fk_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- handle registry: an open-addressing set of every handle made ---- */
static void **handles;
static size_t handle_cap, handle_count;

static size_t slot_of(const void *p, size_t cap) {
  return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

static int handle_insert(void *p) {
  if (2 * (handle_count + 1) > handle_cap) {
    size_t cap = handle_cap ? 2 * handle_cap : 1024;
    void **t = (void **)calloc(cap, sizeof *t);
    if (!t) return 0;
    for (size_t i = 0; i < handle_cap; ++i)
      if (handles[i]) {
        size_t j = slot_of(handles[i], cap);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = handles[i];
      }
    free(handles);
    handles = t;
    handle_cap = cap;
  }
  size_t j = slot_of(p, handle_cap);
  while (handles[j]) j = (j + 1) & (handle_cap - 1);
  handles[j] = p;
  ++handle_count;
  return 1;
}

void *fk_new(int kind, size_t size, fk_ctx *ctx) {
  fk_obj *o = (fk_obj *)calloc(1, size);
  if (!o) return NULL;
  if (!handle_insert(o)) {
    free(o);
    return NULL;
  }
  o->kind = kind;
  o->alive = 1;
  o->ctx = ctx;
  return o;
}

void *fk_get(const void *h, int kind) {
  if (!h || !handle_cap) return NULL;
  for (size_t j = slot_of(h, handle_cap); handles[j]; j = (j + 1) & (handle_cap - 1)) {
    if (handles[j] != h) continue;
    fk_obj *o = (fk_obj *)handles[j];
    if (o->kind != kind || !o->alive || (o->ctx && !o->ctx->h.alive)) return NULL;
    return o;
  }
  return NULL;
}

CUresult fk_get_current(const void *h, int kind, fk_ctx **c, void **out) {
  CUresult r = fk_current(c);
  *out = NULL;
  if (r) return r;
  fk_obj *o = (fk_obj *)fk_get(h, kind);
  if (!o || o->ctx != *c) return CUDA_ERROR_INVALID_HANDLE;
  *out = o;
  return CUDA_SUCCESS;
}

/* ---- initialisation and the device ---- */
static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

EXPORT CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_mu);
  if (!initialized) {
    fk_arch = env_int("AOTC_FAKECUDA_ARCH", 90);
    device_count = env_int("AOTC_FAKECUDA_DEVICES", 1);
    driver_version = env_int("AOTC_FAKECUDA_DRIVER_VERSION", 13000);
    poison = env_int("AOTC_FAKECUDA_POISON", 1);
    const char *order = getenv("AOTC_FAKECUDA_ORDER");
    fk_deferred = order && strcmp(order, "deferred") == 0;
    initialized = 1;
  }
  pthread_mutex_unlock(&fk_mu);
  return device_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = initialized ? driver_version : env_int("AOTC_FAKECUDA_DRIVER_VERSION", 13000);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = device_count;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(int *dev, int ordinal) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= device_count) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

unsigned fk_max_smem_optin(void) {
  switch (fk_arch) {
    case 80: case 87: return 163 * 1024;
    case 90: case 100: return 227 * 1024;
    case 86: case 89: case 120: return 99 * 1024;
    default: return 48 * 1024;
  }
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count) return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {
    case 1: *v = 1024; break;                       /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: *v = 1024; break;               /* MAX_BLOCK_DIM_X, Y */
    case 4: *v = 64; break;                         /* MAX_BLOCK_DIM_Z */
    case 5: *v = 0x7fffffff; break;                 /* MAX_GRID_DIM_X */
    case 6: case 7: *v = 65535; break;              /* MAX_GRID_DIM_Y, Z */
    case 8: *v = 48 * 1024; break;                  /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 9: *v = 64 * 1024; break;                  /* TOTAL_CONSTANT_MEMORY */
    case 10: *v = 32; break;                        /* WARP_SIZE */
    case 12: case 82: *v = 65536; break;            /* MAX_REGISTERS_PER_BLOCK / _MULTIPROCESSOR */
    case 13: *v = 1980000; break;                   /* CLOCK_RATE (kHz) */
    case 16: *v = fk_arch >= 90 ? 132 : 108; break; /* MULTIPROCESSOR_COUNT */
    case 38: *v = 50 * 1024 * 1024; break;          /* L2_CACHE_SIZE */
    case 39: *v = 2048; break;                      /* MAX_THREADS_PER_MULTIPROCESSOR */
    case 41: *v = 1; break;                         /* UNIFIED_ADDRESSING */
    case 75: *v = fk_arch / 10; break;              /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = fk_arch % 10; break;              /* COMPUTE_CAPABILITY_MINOR */
    case 81: *v = (int)fk_max_smem_optin() + 1024; break; /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    case 97: *v = (int)fk_max_smem_optin(); break;  /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int dev) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "aotc fakecuda stand-in (sm_%d)", fk_arch);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = (size_t)141 << 30;
  return CUDA_SUCCESS;
}

/* ---- contexts: a per-thread stack; one primary context per device ---- */
#define STACK_MAX 32
static __thread fk_ctx *ctx_stack[STACK_MAX];
static __thread int ctx_depth;
static fk_ctx *primary[64];
static void mem_release_ctx(fk_ctx *c);

CUresult fk_current(fk_ctx **out) {
  *out = NULL;
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  fk_ctx *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
  if (!c || !c->h.alive) return CUDA_ERROR_INVALID_CONTEXT;
  *out = c;
  return c->sticky;
}

static fk_ctx *ctx_new(int dev, int is_primary) {
  fk_ctx *c = (fk_ctx *)fk_new(FK_CTX, sizeof *c, NULL);
  if (!c) return NULL;
  c->device = dev;
  c->primary = is_primary;
  c->legacy = (fk_stream *)calloc(1, sizeof *c->legacy);
  if (!c->legacy) {
    c->h.alive = 0;
    return NULL;
  }
  fk_stream_init(c->legacy, 0);
  c->legacy->h = (fk_obj){FK_STREAM, 1, c};
  return c;
}

static void ctx_kill(fk_ctx *c) {
  if (fk_deferred) fk_flush_ctx(c); /* queued work completes first */
  c->h.alive = 0; /* its streams, modules, events and graphs die with it */
  mem_release_ctx(c);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(fk_ctx **out, int dev) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count || dev >= 64) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fk_mu);
  if (!primary[dev] || !primary[dev]->h.alive) primary[dev] = ctx_new(dev, 1);
  CUresult r = primary[dev] ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  if (!r) {
    ++primary[dev]->refs;
    *out = primary[dev];
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= device_count || dev >= 64) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fk_mu);
  CUresult r = CUDA_SUCCESS;
  if (!primary[dev] || !primary[dev]->h.alive || primary[dev]->refs <= 0) r = CUDA_ERROR_INVALID_CONTEXT;
  else if (--primary[dev]->refs == 0) ctx_kill(primary[dev]); /* its memory goes with it */
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count || dev >= 64) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fk_mu);
  *flags = 0;
  *active = primary[dev] && primary[dev]->h.alive && primary[dev]->refs > 0;
  pthread_mutex_unlock(&fk_mu);
  return CUDA_SUCCESS;
}

static CUresult push(fk_ctx *c) {
  if (ctx_depth == STACK_MAX) return CUDA_ERROR_INVALID_VALUE;
  ctx_stack[ctx_depth++] = c;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxCreate_v2(fk_ctx **out, unsigned flags, int dev) {
  (void)flags;
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&fk_mu);
  fk_ctx *c = ctx_new(dev, 0);
  pthread_mutex_unlock(&fk_mu);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->refs = 1;
  *out = c;
  return push(c);
}

EXPORT CUresult cuCtxCreate_v4(fk_ctx **out, void *params, unsigned flags, int dev) {
  if (params) return CUDA_ERROR_NOT_SUPPORTED; /* execution affinity / CIG: not modelled */
  return cuCtxCreate_v2(out, flags, dev);
}

EXPORT CUresult cuCtxDestroy_v2(fk_ctx *c) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&fk_mu);
  fk_ctx *live = (fk_ctx *)fk_get(c, FK_CTX);
  CUresult r = !live ? CUDA_ERROR_INVALID_CONTEXT : live->primary ? CUDA_ERROR_INVALID_CONTEXT : 0;
  if (!r) ctx_kill(live);
  pthread_mutex_unlock(&fk_mu);
  if (!r && ctx_depth && ctx_stack[ctx_depth - 1] == c) --ctx_depth;
  return r;
}

EXPORT CUresult cuCtxPushCurrent_v2(fk_ctx *c) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&fk_mu);
  int ok = fk_get(c, FK_CTX) != NULL;
  pthread_mutex_unlock(&fk_mu);
  return ok ? push(c) : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuCtxPopCurrent_v2(fk_ctx **out) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
  fk_ctx *c = ctx_stack[--ctx_depth];
  if (out) *out = c;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(fk_ctx *c) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!c) {
    if (ctx_depth) --ctx_depth;
    return CUDA_SUCCESS;
  }
  pthread_mutex_lock(&fk_mu);
  int ok = fk_get(c, FK_CTX) != NULL;
  pthread_mutex_unlock(&fk_mu);
  if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx_depth) ctx_stack[ctx_depth - 1] = c;
  else ctx_stack[ctx_depth++] = c;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(fk_ctx **out) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(int *dev) {
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  pthread_mutex_unlock(&fk_mu);
  if (c && dev) *dev = c->device;
  return c ? (dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE) : r;
}

EXPORT CUresult cuCtxSynchronize(void) {
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  if (!r) r = fk_capture_forbids();
  if (!r && fk_deferred) r = fk_flush_ctx(c);
  pthread_mutex_unlock(&fk_mu);
  return r;
}

/* ---- memory ---- */
typedef struct { CUdeviceptr base; size_t size, mapped; fk_ctx *ctx; int live; } alloc_t;
static alloc_t *allocs;
static size_t alloc_count, alloc_cap, live_count;
#define FREED_KEPT 4096 /* freed ranges kept reserved before their address space is returned */

int fk_mem_live(CUdeviceptr p, size_t n, int *freed) {
  int dead = 0;
  for (size_t i = 0; i < alloc_count; ++i) {
    const alloc_t *a = &allocs[i];
    if (p < a->base || p >= a->base + a->size) continue;
    if (a->live) {
      if (freed) *freed = 0;
      return n <= a->base + a->size - p;
    }
    dead = 1;
  }
  if (freed) *freed = dead;
  return 0;
}

static void forget_old_freed(void) {
  size_t dead = alloc_count - live_count;
  if (dead <= FREED_KEPT) return;
  size_t w = 0;
  for (size_t i = 0; i < alloc_count; ++i) {
    if (!allocs[i].live && dead > FREED_KEPT / 2) {
      munmap((void *)(uintptr_t)allocs[i].base, allocs[i].mapped);
      --dead;
      continue;
    }
    allocs[w++] = allocs[i];
  }
  alloc_count = w;
}

static void release(alloc_t *a) {
  a->live = 0;
  --live_count;
  void *p = (void *)(uintptr_t)a->base;
  madvise(p, a->mapped, MADV_DONTNEED);
  mprotect(p, a->mapped, PROT_NONE);
}

static void mem_release_ctx(fk_ctx *c) {
  for (size_t i = 0; i < alloc_count; ++i)
    if (allocs[i].live && allocs[i].ctx == c) release(&allocs[i]);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = 0;
  if (!size) return CUDA_ERROR_INVALID_VALUE;
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  if (!r) r = fk_capture_forbids();
  if (!r && alloc_count == alloc_cap) {
    size_t cap = alloc_cap ? 2 * alloc_cap : 256;
    alloc_t *t = (alloc_t *)realloc(allocs, cap * sizeof *t);
    if (t) {
      allocs = t;
      alloc_cap = cap;
    } else r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!r) {
    size_t mapped = (size + 4095) & ~(size_t)4095;
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      if (poison) memset(p, 0xff, size);
      allocs[alloc_count++] = (alloc_t){(CUdeviceptr)(uintptr_t)p, size, mapped, c, 1};
      ++live_count;
      *out = (CUdeviceptr)(uintptr_t)p;
    }
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  if (!r) r = fk_capture_forbids();
  if (!r && fk_deferred) r = fk_flush_ctx(c); /* a free waits for the work before it */
  if (!r) {
    r = CUDA_ERROR_INVALID_VALUE; /* not the start of a live allocation */
    for (size_t i = 0; i < alloc_count; ++i)
      if (allocs[i].live && allocs[i].base == p) {
        release(&allocs[i]);
        r = CUDA_SUCCESS;
        break;
      }
    forget_old_freed();
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  size_t used = 0;
  for (size_t i = 0; i < alloc_count; ++i) used += allocs[i].live ? allocs[i].size : 0;
  pthread_mutex_unlock(&fk_mu);
  if (r) return r;
  if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
  *total = (size_t)141 << 30;
  *free_bytes = *total > used ? *total - used : 0;
  return CUDA_SUCCESS;
}

/* ---- errors ---- */
static const struct { CUresult code; const char *name, *text; } errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in this state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult r, const char **out, int name) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
    if (errors[i].code == r) {
      *out = name ? errors[i].name : errors[i].text;
      return CUDA_SUCCESS;
    }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **out) { return error_lookup(r, out, 0); }
EXPORT CUresult cuGetErrorName(CUresult r, const char **out) { return error_lookup(r, out, 1); }

/* ---- the stand-in's own entry points (a real libcuda has none of these) ---- */

/* How many launches and graph launches ran, and how many allocations live. */
EXPORT unsigned long long aotcFakeCudaCounter(const char *name) {
  pthread_mutex_lock(&fk_mu);
  unsigned long long v = !strcmp(name, "launches")          ? fk_count_launches
                         : !strcmp(name, "graph_launches")  ? fk_count_graph_launches
                         : !strcmp(name, "live_allocations") ? live_count
                                                             : ~0ull;
  pthread_mutex_unlock(&fk_mu);
  return v;
}

/* NVRTC opens libcuda.so.1 when it finds one and asks for the driver's
 * private tables; the stand-in has none, as a driver without them answers. */
EXPORT CUresult cuGetExportTable(const void **table, const void *uuid) {
  if (!table || !uuid) return CUDA_ERROR_INVALID_VALUE;
  *table = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}
