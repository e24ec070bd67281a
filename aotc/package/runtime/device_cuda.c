/* device_cuda.c - the cuda device through the CUDA driver API.
 *
 * libcuda.so.1 (or $AOTC_LIBCUDA) is opened with dlopen on first use (no
 * link-time dependency); the few driver entry points used are declared here,
 * each once in the AOTC_CU_* tables. Per engine (on first
 * cuda context): retain the device's primary context, load the cubin that
 * matches the device's compute capability (exact, else the newest sm_<major>x
 * not newer than the device), else JIT the PTX if its arch is not newer than
 * the device, and upload the weights once. Per context: a stream and an
 * arena in device memory. A run pushes the primary context and launches in
 * order on a stream (each launch's grid, predicate and dim arguments from
 * the context's shape registers). The second run of a key (the bindings'
 * epoch and the dim values) captures the launch sequence into a CUDA graph
 * (on the context's own stream, thread-local capture mode) and later runs of
 * that key replay it with one cuGraphLaunch; the last AOTC_GRAPH_CACHE keys
 * keep their graphs (LRU), so alternating shapes replay. Host
 * staging copies stay outside the graph (pageable memory cannot be
 * captured). Graph entry points are optional: a driver without them, or a
 * failed capture, means plain launches. Nothing on the run path allocates.
 *
 * Driver version: an engine's PTX `.version` names the CUDA release that
 * made it (ISA 8.4 = CUDA 12.4); JIT needs a driver at least that new, and
 * cubins need a driver of at least the same major release.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_internal.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6
#define CU_STREAM_NON_BLOCKING 1
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1

/* Every driver entry point the runtime uses, once: X(field, parameters,
 * symbol, older symbol or NULL). REQUIRED ones must exist; a driver lacking
 * any GRAPH one runs without CUDA graphs; OPTIONAL ones may be missing. */
#define AOTC_CU_REQUIRED(X)                                                                    \
  X(Init, (unsigned), "cuInit", NULL)                                                          \
  X(DeviceGetCount, (int *), "cuDeviceGetCount", NULL)                                         \
  X(DeviceGet, (CUdevice *, int), "cuDeviceGet", NULL)                                         \
  X(DeviceGetAttribute, (int *, int, CUdevice), "cuDeviceGetAttribute", NULL)                  \
  X(PrimaryCtxRetain, (CUcontext *, CUdevice), "cuDevicePrimaryCtxRetain", NULL)               \
  X(PrimaryCtxRelease, (CUdevice), "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease") \
  X(CtxPush, (CUcontext), "cuCtxPushCurrent_v2", "cuCtxPushCurrent")                           \
  X(CtxPop, (CUcontext *), "cuCtxPopCurrent_v2", "cuCtxPopCurrent")                            \
  X(ModuleLoadDataEx, (CUmodule *, const void *, unsigned, int *, void **), "cuModuleLoadDataEx", NULL) \
  X(ModuleUnload, (CUmodule), "cuModuleUnload", NULL)                                          \
  X(ModuleGetFunction, (CUfunction *, CUmodule, const char *), "cuModuleGetFunction", NULL)    \
  X(FuncSetAttribute, (CUfunction, int, int), "cuFuncSetAttribute", NULL)                      \
  X(MemAlloc, (CUdeviceptr *, size_t), "cuMemAlloc_v2", "cuMemAlloc")                          \
  X(MemFree, (CUdeviceptr), "cuMemFree_v2", "cuMemFree")                                       \
  X(MemsetD8, (CUdeviceptr, unsigned char, size_t), "cuMemsetD8_v2", "cuMemsetD8")             \
  X(MemcpyHtoD, (CUdeviceptr, const void *, size_t), "cuMemcpyHtoD_v2", "cuMemcpyHtoD")        \
  X(MemcpyHtoDAsync, (CUdeviceptr, const void *, size_t, CUstream), "cuMemcpyHtoDAsync_v2",    \
    "cuMemcpyHtoDAsync")                                                                       \
  X(MemcpyDtoHAsync, (void *, CUdeviceptr, size_t, CUstream), "cuMemcpyDtoHAsync_v2",          \
    "cuMemcpyDtoHAsync")                                                                       \
  X(LaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                   unsigned, CUstream, void **, void **), "cuLaunchKernel", NULL)              \
  X(StreamCreate, (CUstream *, unsigned), "cuStreamCreate", NULL)                              \
  X(StreamDestroy, (CUstream), "cuStreamDestroy_v2", "cuStreamDestroy")                        \
  X(StreamSynchronize, (CUstream), "cuStreamSynchronize", NULL)                                \
  X(GetErrorString, (CUresult, const char **), "cuGetErrorString", NULL)                       \
  X(DriverGetVersion, (int *), "cuDriverGetVersion", NULL)
#define AOTC_CU_GRAPH(X)                                                                       \
  X(StreamBeginCapture, (CUstream, int), "cuStreamBeginCapture_v2", NULL)                      \
  X(StreamEndCapture, (CUstream, CUgraph *), "cuStreamEndCapture", NULL)                       \
  X(GraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long),                   \
    "cuGraphInstantiateWithFlags", NULL)                                                       \
  X(GraphLaunch, (CUgraphExec, CUstream), "cuGraphLaunch", NULL)                               \
  X(GraphExecDestroy, (CUgraphExec), "cuGraphExecDestroy", NULL)                               \
  X(GraphDestroy, (CUgraph), "cuGraphDestroy", NULL)
/* FuncGetParamInfo: CUDA >= 12.4. AttachHostBuild: only the stand-in driver
 * (aotc/testing/fakecuda) has it; it takes the engine's host build, whose
 * kernels it runs in place of the GPU's. */
#define AOTC_CU_OPTIONAL(X)                                                                    \
  X(FuncGetParamInfo, (CUfunction, size_t, size_t *, size_t *), "cuFuncGetParamInfo", NULL)   \
  X(AttachHostBuild, (const void *, void *), "aotcFakeCudaAttachHostBuild", NULL)

#define AOTC_CU_FIELD(field, params, sym, fallback) CUresult(*field) params;
static struct {
  aotc_status_code_t code; /* why the driver is unusable, or OK */
  char message[320];
  AOTC_CU_REQUIRED(AOTC_CU_FIELD)
  AOTC_CU_GRAPH(AOTC_CU_FIELD)
  AOTC_CU_OPTIONAL(AOTC_CU_FIELD)
  int driver_version; /* e.g. 12040 */
} cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

typedef struct { void **slot; const char *name, *fallback; } cu_symbol_t;
#define AOTC_CU_SYMBOL(field, params, sym, fallback) {(void **)&cu.field, sym, fallback},

/* Resolves each symbol of the table; returns the first missing one, or NULL. */
static const char *cu_resolve(void *h, const cu_symbol_t *syms, size_t n) {
  const char *missing = NULL;
  for (size_t i = 0; i < n; ++i) {
    void *p = dlsym(h, syms[i].name);
    if (!p && syms[i].fallback) p = dlsym(h, syms[i].fallback);
    *syms[i].slot = p;
    if (!p && !missing) missing = syms[i].name;
  }
  return missing;
}

/* The driver library: $AOTC_LIBCUDA when set (e.g. the stand-in driver that
 * `python -m aotc.testing.fakecuda` names), else the system's libcuda.so.1. */
static void cu_load(void) {
  const char *path = getenv("AOTC_LIBCUDA");
  int custom = path && *path;
  if (!custom) path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    cu.code = AOTC_STATUS_UNAVAILABLE;
    if (custom) snprintf(cu.message, sizeof cu.message, "AOTC_LIBCUDA=%s cannot be loaded: %s", path,
                         why ? why : "dlopen failed");
    else snprintf(cu.message, sizeof cu.message, "libcuda.so.1 not found: no NVIDIA driver on this machine");
    return;
  }
  static const cu_symbol_t required[] = {AOTC_CU_REQUIRED(AOTC_CU_SYMBOL)};
  static const cu_symbol_t graph[] = {AOTC_CU_GRAPH(AOTC_CU_SYMBOL)};
  static const cu_symbol_t optional[] = {AOTC_CU_OPTIONAL(AOTC_CU_SYMBOL)};
  if (cu_resolve(h, graph, sizeof graph / sizeof graph[0])) cu.GraphLaunch = NULL; /* no graphs */
  cu_resolve(h, optional, sizeof optional / sizeof optional[0]);
  const char *missing = cu_resolve(h, required, sizeof required / sizeof required[0]);
  if (missing) {
    cu.code = AOTC_STATUS_UNAVAILABLE;
    snprintf(cu.message, sizeof cu.message, "%s lacks %s: NVIDIA driver too old", path, missing);
    return; /* keep the handle: libcuda is never unloaded */
  }
  CUresult r = cu.Init(0);
  if (r != 0) {
    const char *s = NULL;
    cu.GetErrorString(r, &s);
    cu.code = AOTC_STATUS_UNAVAILABLE;
    snprintf(cu.message, sizeof cu.message, "cuInit failed: %s (error %d)", s ? s : "unknown", r);
    return;
  }
  if (cu.DriverGetVersion(&cu.driver_version) != 0) cu.driver_version = 0;
  cu.code = AOTC_STATUS_OK;
}

static aotc_status_t cu_driver(void) {
  pthread_once(&cu_once, cu_load);
  return cu.code == AOTC_STATUS_OK ? NULL : aotc_make_status(cu.code, "%s", cu.message);
}

static aotc_status_t cu_error(CUresult r, const char *what) {
  const char *s = NULL;
  if (cu.GetErrorString) cu.GetErrorString(r, &s);
  aotc_status_code_t code = r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? AOTC_STATUS_RESOURCE_EXHAUSTED
                                                                  : AOTC_STATUS_INTERNAL;
  return aotc_make_status(code, "%s failed: %s (CUDA error %d)", what, s ? s : "unknown", r);
}
#define CU_CHECK(call, what)                \
  do {                                      \
    CUresult cu_r_ = (call);                \
    if (cu_r_ != 0) return cu_error(cu_r_, what); \
  } while (0)

struct aotc_cuda_engine_s {
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction *fns;
  CUdeviceptr weights;
};

/* "sm_90a" -> 90 and suffix 'a'; -1 on a malformed tag. */
static int arch_number(const char *tag, const char *prefix, char *suffix) {
  size_t n = strlen(prefix);
  if (strncmp(tag, prefix, n) != 0) return -1;
  int v = 0;
  const char *p = tag + n;
  for (; *p >= '0' && *p <= '9' && v < 100000; ++p) v = v * 10 + (*p - '0');
  *suffix = *p;
  return p == tag + n ? -1 : v;
}

static aotc_status_t device_arch(int ordinal, CUdevice *out_dev, int *out_arch) {
  AOTC_RETURN_IF_ERROR(cu_driver());
  int count = 0, major = 0, minor = 0;
  CU_CHECK(cu.DeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    return aotc_make_status(AOTC_STATUS_UNAVAILABLE, "no CUDA device %d (this machine has %d)",
                            ordinal, count);
  CU_CHECK(cu.DeviceGet(out_dev, ordinal), "cuDeviceGet");
  CU_CHECK(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *out_dev),
           "cuDeviceGetAttribute");
  CU_CHECK(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *out_dev),
           "cuDeviceGetAttribute");
  *out_arch = major * 10 + minor;
  return NULL;
}

/* Picks the image to load for a device of compute capability `arch`. */
static aotc_status_t select_image(const aotc_engine_t *e, int arch, const aotc_section_t **out,
                                  char *desc, size_t desc_len) {
  const aotc_section_t *best = NULL;
  int best_arch = -1;
  char have[160] = "";
  size_t used = 0;
  for (uint32_t i = 0; i < e->section_count; ++i) {
    const aotc_section_t *s = &e->sections[i];
    if (s->kind != AOTC_SEC_CUBIN) continue;
    char suffix = 0;
    int a = arch_number(s->tag, "sm_", &suffix);
    if (used < sizeof have) used += (size_t)snprintf(have + used, sizeof have - used, "%s%s",
                                                     used ? ", " : "", s->tag);
    /* SASS runs on the same major version with an equal or newer minor;
     * arch-specific ("sm_90a") cubins only on their exact arch. */
    int ok = suffix ? a == arch : (a / 10 == arch / 10 && a <= arch);
    if (ok && a > best_arch) {
      best = s;
      best_arch = a;
    }
  }
  if (best) {
    *out = best;
    snprintf(desc, desc_len, "runnable on cuda: cubin %s on a sm_%d device", best->tag, arch);
    return NULL;
  }
  if (e->ptx && e->ptx->size) {
    char suffix = 0;
    int a = e->ptx->tag[0] ? arch_number(e->ptx->tag, "compute_", &suffix) : 0;
    if (a >= 0 && a <= arch && (!suffix || a == arch)) {
      *out = e->ptx;
      snprintf(desc, desc_len, "runnable on cuda: PTX %s JIT-compiled for a sm_%d device",
               e->ptx->tag[0] ? e->ptx->tag : "(untagged)", arch);
      return NULL;
    }
  }
  *out = NULL;
  return aotc_make_status(AOTC_STATUS_UNAVAILABLE,
                          "engine has no kernels for this GPU (sm_%d): cubins [%s], PTX %s", arch,
                          have, e->ptx ? (e->ptx->tag[0] ? e->ptx->tag : "untagged") : "none");
}

/* The CUDA release (1000 * major + 10 * minor) that introduced the PTX ISA
 * named by the engine's PTX `.version` line, or 0 if there is none. */
static int ptx_cuda_release(const aotc_engine_t *e) {
  if (!e->ptx) return 0;
  const char *p = (const char *)e->ptx->data;
  size_t n = e->ptx->size < 8192 ? (size_t)e->ptx->size : 8192;
  for (size_t i = 0; i + 10 < n; ++i) {
    if ((i && p[i - 1] != '\n') || memcmp(p + i, ".version ", 9) != 0) continue;
    size_t j = i + 9;
    int major = 0, minor = 0;
    for (; j < n && p[j] >= '0' && p[j] <= '9' && major < 100; ++j) major = major * 10 + (p[j] - '0');
    if (j >= n || p[j] != '.') return 0;
    for (++j; j < n && p[j] >= '0' && p[j] <= '9' && minor < 100; ++j) minor = minor * 10 + (p[j] - '0');
    if (major == 7) return 11000 + 10 * minor;
    if (major == 8) return minor <= 5 ? 12000 + 10 * minor : 12010 + 10 * minor; /* 8.6 = 12.7 */
    if (major >= 9) return (major + 4) * 1000 + 10 * minor;                      /* 9.0 = 13.0 */
    return 0;
  }
  return 0;
}

/* UNAVAILABLE if the driver is older than the image needs. */
static aotc_status_t check_driver(const aotc_engine_t *e, const aotc_section_t *img) {
  int release = ptx_cuda_release(e);
  int need = img->kind == AOTC_SEC_PTX ? release : release / 1000 * 1000;
  if (!need || !cu.driver_version || cu.driver_version >= need) return NULL;
  return aotc_make_status(AOTC_STATUS_UNAVAILABLE,
                          "NVIDIA driver too old: the engine's %s %s needs CUDA %d.%d, the driver "
                          "supports %d.%d", img->kind == AOTC_SEC_PTX ? "PTX" : "cubin", img->tag,
                          need / 1000, need % 1000 / 10, cu.driver_version / 1000,
                          cu.driver_version % 1000 / 10);
}

aotc_status_t aotc_cuda_check(const aotc_engine_t *e, char *desc, size_t desc_len) {
  CUdevice dev;
  int arch = 0;
  const aotc_section_t *img;
  AOTC_RETURN_IF_ERROR(device_arch(e->options.cuda_device_ordinal, &dev, &arch));
  AOTC_RETURN_IF_ERROR(select_image(e, arch, &img, desc, desc_len));
  return check_driver(e, img);
}

/* The launch plan passes every kernel parameter as one 8-byte value: a
 * pointer, or a dim by value, which the kernel may declare int (4 bytes,
 * read from the slot's low half: little endian) or long long. The image's
 * parameter layout must say the same (count and sizes). */
static aotc_status_t check_params(const aotc_engine_t *e, CUfunction fn, uint32_t launch,
                                  const aotc_section_t *img) {
  const aotc_launch_t *l = &e->launches[launch];
  size_t off = 0, size = 0;
  uint32_t n = 0;
  for (; n < 4096 && cu.FuncGetParamInfo(fn, n, &off, &size) == 0; ++n)
    if (size != 8 && !(size == 4 && n < l->arg_count && e->args[l->arg_start + n].kind == AOTC_REF_DIM))
      return aotc_make_status(AOTC_STATUS_DATA_LOSS,
                              "kernel '%s' (launch %u): parameter %u is %zu bytes in the %s %s, the "
                              "launch plan passes 8-byte pointers (or a 4- or 8-byte dim)", e->kernel_names[l->kernel], launch,
                              n, size, img->kind == AOTC_SEC_PTX ? "PTX" : "cubin", img->tag);
  if (n == l->arg_count) return NULL;
  return aotc_make_status(AOTC_STATUS_DATA_LOSS,
                          "kernel '%s' (launch %u) takes %u parameters in the %s %s, the launch plan "
                          "passes %u", e->kernel_names[l->kernel], launch, n,
                          img->kind == AOTC_SEC_PTX ? "PTX" : "cubin", img->tag, l->arg_count);
}

/* First-use work (the weight upload, zeroing the split-K counters) runs on the
 * legacy stream, and the contexts' streams are CU_STREAM_NON_BLOCKING: nothing
 * orders the two. A cuMemcpyHtoD from pageable memory may return before its DMA
 * lands and cuMemsetD8 on device memory is asynchronous, so both are waited
 * for here, once, before any kernel can read what they wrote. (Split-K kernels
 * leave their counters zero again, launch by launch and in graph replays alike.)
 */
static CUresult finish_legacy_stream(void) { return cu.StreamSynchronize(NULL); }

static aotc_status_t prepare_locked(aotc_engine_t *e, struct aotc_cuda_engine_s *c) {
  int arch = 0;
  const aotc_section_t *img = NULL;
  char desc[160];
  AOTC_RETURN_IF_ERROR(device_arch(e->options.cuda_device_ordinal, &c->dev, &arch));
  AOTC_RETURN_IF_ERROR(select_image(e, arch, &img, desc, sizeof desc));
  AOTC_RETURN_IF_ERROR(check_driver(e, img));
  CU_CHECK(cu.PrimaryCtxRetain(&c->ctx, c->dev), "cuDevicePrimaryCtxRetain");
  CU_CHECK(cu.CtxPush(c->ctx), "cuCtxPushCurrent");
  aotc_status_t st = NULL;
  /* PTX must be NUL-terminated; the file does not promise that. */
  char *ptx = NULL;
  const void *image = img->data;
  if (img->kind == AOTC_SEC_PTX) {
    ptx = (char *)malloc((size_t)img->size + 1);
    if (!ptx) st = aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    else {
      memcpy(ptx, img->data, (size_t)img->size);
      ptx[img->size] = 0;
      image = ptx;
    }
  }
  if (!st && cu.AttachHostBuild) { /* the stand-in driver runs the host build's kernels */
    CUresult r = cu.AttachHostBuild(image, e->host_handle);
    if (r != 0) st = cu_error(r, "aotcFakeCudaAttachHostBuild");
  }
  if (!st) {
    char log[1024] = "";
    int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
    CUresult r = cu.ModuleLoadDataEx(&c->mod, image, 2, opts, vals);
    if (r != 0) {
      log[sizeof log - 1] = 0;
      aotc_status_t inner = cu_error(r, "cuModuleLoadData");
      st = aotc_make_status(aotc_status_code(inner), "loading %s %s: %s%s%s",
                            img->kind == AOTC_SEC_PTX ? "PTX" : "cubin", img->tag,
                            aotc_status_message(inner), log[0] ? "; JIT log: " : "", log);
      aotc_status_free(inner);
      c->mod = NULL;
    }
  }
  free(ptx);
  c->fns = st ? NULL : (CUfunction *)calloc((size_t)e->kernel_count + 1, sizeof(CUfunction));
  if (!st && !c->fns) st = aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t k = 0; !st && k < e->kernel_count; ++k) {
    CUresult r = cu.ModuleGetFunction(&c->fns[k], c->mod, e->kernel_names[k]);
    if (r != 0)
      st = aotc_make_status(AOTC_STATUS_NOT_FOUND, "kernel '%s' not found in %s %s (CUDA error %d)",
                            e->kernel_names[k], img->kind == AOTC_SEC_PTX ? "PTX" : "cubin",
                            img->tag, r);
  }
  for (uint32_t i = 0; !st && cu.FuncGetParamInfo && i < e->launch_count; ++i)
    st = check_params(e, c->fns[e->launches[i].kernel], i, img);
  for (uint32_t i = 0; !st && i < e->launch_count; ++i) {
    const aotc_launch_t *l = &e->launches[i];
    if (l->smem > 48 * 1024) {
      CUresult r = cu.FuncSetAttribute(c->fns[l->kernel], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       (int)l->smem);
      if (r != 0) st = cu_error(r, "cuFuncSetAttribute(max dynamic shared memory)");
    }
  }
  if (!st) {
    CUresult r = cu.MemAlloc(&c->weights, e->weights_size ? (size_t)e->weights_size : AOTC_ALIGN);
    if (r != 0) {
      c->weights = 0;
      st = cu_error(r, "cuMemAlloc(weights)");
    } else if (e->weights_size) {
      r = cu.MemcpyHtoD(c->weights, e->weights->data, (size_t)e->weights_size);
      if (r != 0) st = cu_error(r, "cuMemcpyHtoD(weights)");
      else if ((r = finish_legacy_stream()) != 0) st = cu_error(r, "cuStreamSynchronize(weights upload)");
    }
  }
  CUcontext popped;
  cu.CtxPop(&popped);
  return st;
}

void aotc_cuda_engine_destroy(aotc_engine_t *e) {
  struct aotc_cuda_engine_s *c = e->cuda;
  if (!c) return;
  if (c->ctx && cu.CtxPush(c->ctx) == 0) {
    CUcontext popped;
    if (c->weights) cu.MemFree(c->weights);
    if (c->mod) cu.ModuleUnload(c->mod);
    cu.CtxPop(&popped);
  }
  if (c->ctx) cu.PrimaryCtxRelease(c->dev);
  free(c->fns);
  free(c);
  e->cuda = NULL;
}

aotc_status_t aotc_cuda_engine_prepare(aotc_engine_t *e) {
  AOTC_RETURN_IF_ERROR(cu_driver());
  if (cu.AttachHostBuild) {
    aotc_status_t host = aotc_cpu_engine_prepare(e);
    if (host) {
      aotc_status_t st = aotc_make_status(aotc_status_code(host),
                                          "the stand-in CUDA driver runs the engine's host build: %s",
                                          aotc_status_message(host));
      aotc_status_free(host);
      return st;
    }
  }
  aotc_status_t st = NULL;
  pthread_mutex_lock(&e->mu);
  if (!e->cuda) {
    e->cuda = (struct aotc_cuda_engine_s *)calloc(1, sizeof *e->cuda);
    if (!e->cuda) st = aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    else if ((st = prepare_locked(e, e->cuda)) != NULL) aotc_cuda_engine_destroy(e);
  }
  pthread_mutex_unlock(&e->mu);
  return st;
}

aotc_status_t aotc_cuda_context_init(aotc_context_t *x) {
  AOTC_RETURN_IF_ERROR(aotc_cuda_engine_prepare(x->engine));
  struct aotc_cuda_engine_s *c = x->engine->cuda;
  CU_CHECK(cu.CtxPush(c->ctx), "cuCtxPushCurrent");
  aotc_status_t st = NULL;
  CUstream stream = NULL;
  CUdeviceptr arena = 0;
  CUresult r = cu.StreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (r != 0) st = cu_error(r, "cuStreamCreate");
  else {
    uint64_t sz = x->engine->arena_size ? x->engine->arena_size : AOTC_ALIGN;
    r = cu.MemAlloc(&arena, (size_t)sz); /* cuMemAlloc is 256-byte aligned */
    if (r != 0) st = cu_error(r, "cuMemAlloc(arena)");
    else if (x->engine->arena_zeroed) { /* split-K tile counters: zero once, kernels keep them zero */
      r = cu.MemsetD8(arena + (x->engine->arena_size - x->engine->arena_zeroed), 0,
                      (size_t)x->engine->arena_zeroed);
      if (r != 0) st = cu_error(r, "cuMemsetD8(arena counters)");
      else if ((r = finish_legacy_stream()) != 0) st = cu_error(r, "cuStreamSynchronize(arena counters)");
    }
  }
  x->stream = stream;
  x->arena = (void *)(uintptr_t)arena;
  CUcontext popped;
  cu.CtxPop(&popped);
  return st;
}

static void graph_drop(aotc_graph_entry_t *g) {
  if (g->exec) cu.GraphExecDestroy((CUgraphExec)g->exec);
  if (g->graph) cu.GraphDestroy((CUgraph)g->graph);
  g->exec = g->graph = NULL;
  g->epoch = 0;
}

void aotc_cuda_context_deinit(aotc_context_t *x) {
  struct aotc_cuda_engine_s *c = x->engine->cuda;
  if (!c || cu.CtxPush(c->ctx) != 0) return;
  for (int g = 0; g < AOTC_GRAPH_CACHE; ++g) graph_drop(&x->graphs[g]);
  size_t n = (size_t)x->engine->input_count + x->engine->output_count;
  for (size_t i = 0; x->bindings && i < n; ++i)
    if (x->bindings[i].staging) cu.MemFree((CUdeviceptr)x->bindings[i].staging);
  if (x->arena) cu.MemFree((CUdeviceptr)(uintptr_t)x->arena);
  if (x->stream) cu.StreamDestroy((CUstream)x->stream);
  CUcontext popped;
  cu.CtxPop(&popped);
}

aotc_status_t aotc_cuda_staging_alloc(aotc_context_t *x, aotc_binding_t *b) {
  struct aotc_cuda_engine_s *c = x->engine->cuda;
  if (b->staging) return NULL; /* the tensor's max bytes: any later binding fits */
  const aotc_tensor_t *t = &x->engine->tensors[b - x->bindings];
  CU_CHECK(cu.CtxPush(c->ctx), "cuCtxPushCurrent");
  CUdeviceptr p = 0;
  CUresult r = cu.MemAlloc(&p, t->byte_size ? (size_t)t->byte_size : AOTC_ALIGN);
  CUcontext popped;
  cu.CtxPop(&popped);
  if (r != 0) return cu_error(r, "cuMemAlloc(io staging)");
  b->staging = p;
  return NULL;
}

/* Every launch of the engine, in order, on stream s. */
static aotc_status_t launch_all(aotc_context_t *x, CUstream s) {
  aotc_engine_t *e = x->engine;
  struct aotc_cuda_engine_s *c = e->cuda;
  for (uint32_t i = 0; i < e->launch_count; ++i) {
    const aotc_launch_t *l = &e->launches[i];
    unsigned grid[3];
    if (!aotc_launch_grid(x, l, grid)) continue; /* another size bucket's variant, or empty */
    for (uint32_t j = 0; j < l->arg_count; ++j) {
      const aotc_arg_t *a = &e->args[l->arg_start + j];
      uint64_t base;
      x->params[j] = &x->values[j];
      if (a->kind == AOTC_REF_DIM) { /* by value */
        x->values[j] = (uint64_t)x->regs[a->index];
        continue;
      }
      switch (a->kind) {
        case AOTC_REF_INPUT: base = (uint64_t)(uintptr_t)x->bindings[a->index].ptr; break;
        case AOTC_REF_OUTPUT: base = (uint64_t)(uintptr_t)x->bindings[e->input_count + a->index].ptr; break;
        case AOTC_REF_ARENA: base = (uint64_t)(uintptr_t)x->arena; break;
        default: base = c->weights; break;
      }
      x->values[j] = base + a->offset;
      x->params[j] = &x->values[j];
    }
    /* cuLaunchKernel copies the parameter values: params/values are reused. */
    CUresult r = cu.LaunchKernel(c->fns[l->kernel], grid[0], grid[1], grid[2], l->block[0],
                                 l->block[1], l->block[2], l->smem, s, x->params, NULL);
    if (r != 0) {
      aotc_status_t inner = cu_error(r, "cuLaunchKernel");
      aotc_status_t st = aotc_make_status(aotc_status_code(inner), "kernel '%s' (launch %u): %s",
                                          e->kernel_names[l->kernel], i, aotc_status_message(inner));
      aotc_status_free(inner);
      return st;
    }
  }
  return NULL;
}

/* Captures the launch sequence on the context's own stream into graph entry g. */
static aotc_status_t capture(aotc_context_t *x, aotc_graph_entry_t *g) {
  CUstream own = (CUstream)x->stream;
  CU_CHECK(cu.StreamBeginCapture(own, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  aotc_status_t st = launch_all(x, own);
  CUgraph graph = NULL;
  CUresult r = cu.StreamEndCapture(own, &graph); /* always ends the capture */
  if (!st && r != 0) st = cu_error(r, "cuStreamEndCapture");
  CUgraphExec exec = NULL;
  if (!st) {
    r = cu.GraphInstantiateWithFlags(&exec, graph, 0);
    if (r != 0) st = cu_error(r, "cuGraphInstantiateWithFlags");
  }
  if (st) {
    if (graph) cu.GraphDestroy(graph);
    return st;
  }
  g->graph = graph;
  g->exec = exec;
  return NULL;
}

/* The cache entry of the current key (bindings and dim values), or NULL. */
static aotc_graph_entry_t *graph_find(const aotc_context_t *x) {
  uint32_t nd = x->engine->dim_count;
  for (int i = 0; i < AOTC_GRAPH_CACHE; ++i) {
    const aotc_graph_entry_t *g = &x->graphs[i];
    if (g->epoch == x->binding_epoch && (!nd || memcmp(g->key, x->regs, nd * sizeof(int64_t)) == 0))
      return (aotc_graph_entry_t *)g;
  }
  return NULL;
}

int aotc_cuda_graph_ready(const aotc_context_t *x) {
  const aotc_graph_entry_t *g = graph_find(x);
  return g && g->exec;
}

/* A new entry for the current key: a free or stale one, else the least recently used. */
static aotc_graph_entry_t *graph_insert(aotc_context_t *x) {
  aotc_graph_entry_t *best = &x->graphs[0];
  for (int i = 0; i < AOTC_GRAPH_CACHE; ++i) {
    aotc_graph_entry_t *g = &x->graphs[i];
    if (g->epoch != x->binding_epoch) {
      best = g;
      break;
    }
    if (g->used < best->used) best = g;
  }
  graph_drop(best);
  best->epoch = x->binding_epoch;
  memcpy(best->key, x->regs, x->engine->dim_count * sizeof(int64_t));
  return best;
}

static aotc_status_t enqueue_locked(aotc_context_t *x, CUstream s) {
  aotc_engine_t *e = x->engine;
  size_t n = (size_t)e->input_count + e->output_count;
  for (size_t i = 0; i < e->input_count; ++i)
    if (x->bindings[i].host && x->cur_bytes[i])
      CU_CHECK(cu.MemcpyHtoDAsync(x->bindings[i].staging, x->bindings[i].host, (size_t)x->cur_bytes[i], s),
               "cuMemcpyHtoDAsync(input)");
  int graphs = x->options.use_cuda_graph && cu.GraphLaunch && !x->graph_failed && e->launch_count;
  aotc_graph_entry_t *g = graphs ? graph_find(x) : NULL;
  if (graphs && !g) {
    g = graph_insert(x); /* seen once: a second run of this key captures */
  } else if (g && !g->exec) {
    aotc_status_t st = capture(x, g);
    if (st) {
      aotc_status_free(st);
      graph_drop(g);
      g = NULL;
      x->graph_failed = 1; /* plain launches report any real launch error below */
    }
  }
  if (g) g->used = ++x->graph_clock;
  x->last_stream = s;
  if (g && g->exec) CU_CHECK(cu.GraphLaunch((CUgraphExec)g->exec, s), "cuGraphLaunch");
  else AOTC_RETURN_IF_ERROR(launch_all(x, s));
  for (size_t i = e->input_count; i < n; ++i)
    if (x->bindings[i].host && x->cur_bytes[i])
      CU_CHECK(cu.MemcpyDtoHAsync(x->bindings[i].host, x->bindings[i].staging, (size_t)x->cur_bytes[i], s),
               "cuMemcpyDtoHAsync(output)");
  return NULL;
}

aotc_status_t aotc_cuda_context_enqueue(aotc_context_t *x, void *stream) {
  CU_CHECK(cu.CtxPush(x->engine->cuda->ctx), "cuCtxPushCurrent");
  aotc_status_t st = enqueue_locked(x, stream ? (CUstream)stream : (CUstream)x->stream);
  CUcontext popped;
  cu.CtxPop(&popped);
  return st;
}

aotc_status_t aotc_cuda_context_synchronize(aotc_context_t *x) {
  CU_CHECK(cu.CtxPush(x->engine->cuda->ctx), "cuCtxPushCurrent");
  CUresult r = cu.StreamSynchronize(x->last_stream ? (CUstream)x->last_stream : (CUstream)x->stream);
  CUcontext popped;
  cu.CtxPop(&popped);
  if (r != 0) return cu_error(r, "cuStreamSynchronize (a kernel failed)");
  return NULL;
}
