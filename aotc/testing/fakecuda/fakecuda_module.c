/* fakecuda_module.c - the stand-in driver's modules, kernels and launches.
 *
 * A module image (cubin or PTX) says which kernels exist and what they take
 * (fakecuda_image.c); their code comes from the engine's host build, the
 * same CUDA C compiled for the CPU, whose `aotc_host_launch_<kernel>` entry
 * points take cuLaunchKernel's arguments. The aotc runtime hands the host
 * build over before loading an image, through this library's own entry point
 *
 *     CUresult aotcFakeCudaAttachHostBuild(const void *image, void *dl_handle);
 *
 * (a real libcuda has no such symbol, so the runtime calls it only when the
 * library it loaded exports it); the next cuModuleLoadData of that image
 * takes it. A launch is checked as a GPU checks it: the grid and block
 * against the arch (block <= 1024 threads, x, y <= 1024, z <= 64; grid y, z
 * <= 65535) and the kernel's launch bounds, registers per block, dynamic
 * shared memory against 48 KiB minus the static size unless
 * cuFuncSetAttribute raised it (up to the arch's opt-in maximum), and the
 * parameter buffer against the image's parameter layout.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_state.h"

#define EXPORT __attribute__((visibility("default")))
enum { ATTR_MAX_THREADS = 0, ATTR_SHARED = 1, ATTR_CONST = 2, ATTR_LOCAL = 3, ATTR_REGS = 4,
       ATTR_PTX_VERSION = 5, ATTR_BINARY_VERSION = 6, ATTR_MAX_DYN_SHARED = 8, ATTR_CARVEOUT = 9 };
enum { JIT_INFO_LOG = 3, JIT_INFO_LOG_SIZE = 4, JIT_ERROR_LOG = 5, JIT_ERROR_LOG_SIZE = 6 };
#define DEFAULT_SMEM (48u * 1024u)

/* ---- host builds attached by the runtime, keyed by image address ---- */
#define MAX_ATTACHED 64
static struct { const void *image; void *host; } attached[MAX_ATTACHED];

EXPORT CUresult aotcFakeCudaAttachHostBuild(const void *image, void *dl_handle) {
  if (!image || !dl_handle) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_mu);
  int free_slot = -1;
  for (int i = 0; i < MAX_ATTACHED; ++i) {
    if (attached[i].image == image) free_slot = i;
    else if (!attached[i].image && free_slot < 0) free_slot = i;
  }
  if (free_slot >= 0) attached[free_slot].image = image, attached[free_slot].host = dl_handle;
  pthread_mutex_unlock(&fk_mu);
  return free_slot >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void *take_host_build(const void *image) {
  for (int i = 0; i < MAX_ATTACHED; ++i)
    if (attached[i].image == image) {
      attached[i].image = NULL;
      return attached[i].host;
    }
  return NULL;
}

/* ---- modules ---- */
static void jit_log(unsigned n, const int *opts, void **vals, const char *msg) {
  char *buf = NULL;
  size_t size = 0;
  for (unsigned i = 0; opts && vals && i < n; ++i) {
    if (opts[i] == JIT_ERROR_LOG) buf = (char *)vals[i];
    if (opts[i] == JIT_ERROR_LOG_SIZE) size = (size_t)(uintptr_t)vals[i];
  }
  if (buf && size) snprintf(buf, size, "%s", msg);
}

static int image_runs_here(const fk_image_info *info) {
  if (info->is_ptx) return info->arch <= fk_arch;     /* PTX JITs for this or a newer arch */
  return info->arch / 10 == fk_arch / 10 && info->arch <= fk_arch; /* SASS: same major */
}

EXPORT CUresult cuModuleLoadDataEx(fk_module **out, const void *image, unsigned n, int *opts, void **vals) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = NULL;
  fk_ctx *c;
  char err[256] = "";
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  void *host = r ? NULL : take_host_build(image);
  fk_image_info info;
  memset(&info, 0, sizeof info);
  if (!r) r = fk_parse_image(image, &info, err, sizeof err);
  if (!r && !image_runs_here(&info)) {
    snprintf(err, sizeof err, "%s for sm_%d cannot run on this sm_%d device",
             info.is_ptx ? "PTX" : "cubin", info.arch, fk_arch);
    r = info.is_ptx ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  if (!r && !host) {
    snprintf(err, sizeof err, "fakecuda: no host build attached for this image (the aotc runtime "
                              "attaches the engine's through aotcFakeCudaAttachHostBuild)");
    r = CUDA_ERROR_NOT_SUPPORTED;
  }
  fk_module *m = r ? NULL : (fk_module *)fk_new(FK_MODULE, sizeof *m, c);
  if (m) {
    m->info = info;
    m->host = host;
    m->funcs = (fk_func **)calloc((size_t)info.nkernels + 1, sizeof *m->funcs);
    if (!m->funcs) m->h.alive = 0;
  }
  if (!r && (!m || !m->funcs)) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r) {
    fk_image_free(&info);
    jit_log(n, opts, vals, err);
  } else *out = m;
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuModuleLoadData(fk_module **out, const void *image) {
  return cuModuleLoadDataEx(out, image, 0, NULL, NULL);
}

static CUresult module_api(fk_module *handle, fk_ctx **c, fk_module **m) {
  return fk_get_current(handle, FK_MODULE, c, (void **)m);
}

EXPORT CUresult cuModuleUnload(fk_module *handle) {
  fk_ctx *c;
  fk_module *m;
  pthread_mutex_lock(&fk_mu);
  CUresult r = module_api(handle, &c, &m);
  if (!r && fk_deferred) r = fk_flush_ctx(c); /* queued launches of its kernels run first */
  if (!r) {
    m->h.alive = 0;
    for (int i = 0; i < m->info.nkernels; ++i)
      if (m->funcs[i]) m->funcs[i]->h.alive = 0;
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuModuleGetFunction(fk_func **out, fk_module *handle, const char *name) {
  fk_ctx *c;
  fk_module *m;
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  *out = NULL;
  pthread_mutex_lock(&fk_mu);
  CUresult r = module_api(handle, &c, &m);
  int i = 0;
  while (!r && i < m->info.nkernels && strcmp(m->info.kernels[i].name, name) != 0) ++i;
  if (!r && i == m->info.nkernels) r = CUDA_ERROR_NOT_FOUND;
  if (!r && !m->funcs[i]) {
    char sym[FK_NAME_MAX + 32];
    snprintf(sym, sizeof sym, "aotc_host_launch_%s", name);
    void *fn = dlsym(m->host, sym);
    fk_func *f = fn ? (fk_func *)fk_new(FK_FUNC, sizeof *f, c) : NULL;
    if (!fn) r = CUDA_ERROR_NOT_SUPPORTED; /* the host build lacks this kernel */
    else if (!f) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      f->mod = m;
      f->k = &m->info.kernels[i];
      *(void **)&f->fn = fn;
      f->max_dyn_smem = (int)(DEFAULT_SMEM - (f->k->static_smem < DEFAULT_SMEM ? f->k->static_smem : DEFAULT_SMEM));
      m->funcs[i] = f;
    }
  }
  if (!r) *out = m->funcs[i];
  pthread_mutex_unlock(&fk_mu);
  return r;
}

/* ---- kernels ---- */
static int max_threads(const fk_func *f) {
  int t = 1024;
  if (f->k->max_threads && f->k->max_threads < t) t = f->k->max_threads;
  if (f->k->regs) {
    int by_regs = 65536 / (((f->k->regs + 7) / 8) * 8) / 32 * 32;
    if (by_regs < t) t = by_regs;
  }
  return t;
}

static CUresult func_api(fk_func *handle, fk_func **f) {
  *f = (fk_func *)fk_get(handle, FK_FUNC);
  return *f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuFuncGetAttribute(int *v, int attr, fk_func *handle) {
  fk_func *f;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_mu);
  CUresult r = func_api(handle, &f);
  if (!r) switch (attr) {
      case ATTR_MAX_THREADS: *v = max_threads(f); break;
      case ATTR_SHARED: *v = (int)f->k->static_smem; break;
      case ATTR_CONST: case ATTR_LOCAL: *v = 0; break;
      case ATTR_REGS: *v = f->k->regs; break;
      case ATTR_PTX_VERSION: case ATTR_BINARY_VERSION: *v = f->mod->info.arch; break;
      case ATTR_MAX_DYN_SHARED: *v = f->max_dyn_smem; break;
      case ATTR_CARVEOUT: *v = -1; break;
      default: r = CUDA_ERROR_INVALID_VALUE;
    }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuFuncSetAttribute(fk_func *handle, int attr, int value) {
  fk_func *f;
  pthread_mutex_lock(&fk_mu);
  CUresult r = func_api(handle, &f);
  if (!r && attr == ATTR_MAX_DYN_SHARED) {
    if (value < 0 || (unsigned)value + f->k->static_smem > fk_max_smem_optin()) r = CUDA_ERROR_INVALID_VALUE;
    else f->max_dyn_smem = value;
  } else if (!r && attr == ATTR_CARVEOUT) {
    if (value < -1 || value > 100) r = CUDA_ERROR_INVALID_VALUE;
  } else if (!r) r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuFuncGetParamInfo(fk_func *handle, size_t index, size_t *offset, size_t *size) {
  fk_func *f;
  pthread_mutex_lock(&fk_mu);
  CUresult r = func_api(handle, &f);
  if (!r && index >= (size_t)f->k->nparams) r = CUDA_ERROR_INVALID_VALUE;
  if (!r && offset) *offset = f->k->offset[index];
  if (!r && size) *size = f->k->size[index];
  pthread_mutex_unlock(&fk_mu);
  return r;
}

static CUresult check_shape(const fk_func *f, const unsigned g[3], const unsigned b[3], unsigned smem) {
  if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2]) return CUDA_ERROR_INVALID_VALUE;
  if (g[0] > 0x7fffffffu || g[1] > 65535 || g[2] > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (b[0] > 1024 || b[1] > 1024 || b[2] > 64) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
  if (threads > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (f->k->max_threads && threads > (unsigned long long)f->k->max_threads) return CUDA_ERROR_INVALID_VALUE;
  if (threads > (unsigned long long)max_threads(f)) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  if (smem > (unsigned)f->max_dyn_smem) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* The parameter buffer, from kernelParams (one pointer per parameter) or
 * `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END). */
static CUresult param_buffer(const fk_kernel_info *k, void **params, void **extra, uint8_t **out) {
  uint8_t *buf = (uint8_t *)calloc(k->param_bytes + 1, 1);
  if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = CUDA_SUCCESS;
  if (params && extra) r = CUDA_ERROR_INVALID_VALUE;
  else if (params) {
    for (int i = 0; i < k->nparams; ++i) {
      if (!params[i]) { r = CUDA_ERROR_INVALID_VALUE; break; }
      memcpy(buf + k->offset[i], params[i], k->size[i]);
    }
  } else if (extra) {
    const void *ptr = NULL;
    size_t size = (size_t)-1;
    for (int i = 0; extra[i] && i < 16; i += 2) {
      if (extra[i] == (void *)1) ptr = extra[i + 1];
      else if (extra[i] == (void *)2 && extra[i + 1]) size = *(const size_t *)extra[i + 1];
      else r = CUDA_ERROR_INVALID_VALUE;
    }
    if (!r && (!ptr || size != k->param_bytes)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) memcpy(buf, ptr, size);
  } else if (k->nparams) r = CUDA_ERROR_INVALID_VALUE;
  if (r) free(buf);
  else *out = buf;
  return r;
}

EXPORT CUresult cuLaunchKernel(fk_func *handle, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned smem, void *stream, void **params,
                               void **extra) {
  fk_ctx *c;
  fk_func *f;
  fk_stream *s;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  if (!r) r = func_api(handle, &f);
  if (!r && f->h.ctx != c) r = CUDA_ERROR_INVALID_HANDLE;
  if (!r) r = fk_stream_of(stream, c, &s);
  fk_op op = {.kind = OP_KERNEL, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .smem = smem};
  if (!r) r = check_shape(f, op.grid, op.block, smem);
  if (!r) r = param_buffer(f->k, params, extra, &op.params);
  if (!r) {
    op.f = f;
    r = fk_submit(s, c, &op);
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}
