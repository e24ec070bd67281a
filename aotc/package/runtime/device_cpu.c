/* device_cpu.c - the cpu device: runs the engine's host build (HOST_LIB).
 *
 * The host library is loaded from memory: written to a memfd and dlopen'ed
 * through /proc/self/fd/N; where memfd_create is unavailable, a mkstemp file
 * in $TMPDIR (or /tmp) is used and unlinked right after dlopen. It must
 * export `const char *aotc_host_abi(void)` returning "aotc-host-1" and, per
 * kernel K, `int aotc_host_launch_K(const unsigned *grid3, const unsigned
 * *block3, unsigned dyn_smem, void **params)` (params as cuLaunchKernel's).
 * Host kernels must be reentrant: contexts on several threads call them
 * concurrently.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aotc_internal.h"

#define HOST_ABI "aotc-host-1"

static int write_all(int fd, const uint8_t *p, uint64_t n) {
  while (n) {
    ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n);
    if (w <= 0) return -1;
    p += w;
    n -= (uint64_t)w;
  }
  return 0;
}

/* glibc's dlopen matches a new name against loaded libraries before it
 * opens any file, and /proc/self/fd/N (and even mkstemp) names recur over a
 * process's life: a stale library must never be returned for new bytes. */
static int name_taken(const char *path) {
  void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != NULL;
}

static aotc_status_t dlopen_fresh(const char *path, void **out_handle) {
  *out_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*out_handle) return NULL;
  const char *err = dlerror();
  return aotc_make_status(AOTC_STATUS_UNAVAILABLE, "cannot load the engine's host build: %s",
                          err ? err : "dlopen failed");
}

static aotc_status_t open_host_lib(const aotc_section_t *lib, void **out_handle) {
  *out_handle = NULL;
  char path[4096];
#ifdef SYS_memfd_create
  /* AOTC_RUNTIME_NO_MEMFD=1 forces the temp-file path (a test hook). */
  const char *no_memfd = getenv("AOTC_RUNTIME_NO_MEMFD");
  int fd = no_memfd && *no_memfd == '1'
               ? -1
               : (int)syscall(SYS_memfd_create, "aotc-host-lib", 1u /* MFD_CLOEXEC */);
  if (fd >= 0) {
    aotc_status_t st = NULL;
    int taken = 1;
    if (write_all(fd, lib->data, lib->size) == 0) {
      snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
      taken = name_taken(path);
      if (!taken) st = dlopen_fresh(path, out_handle);
    }
    close(fd);
    if (!taken) return st;
  }
#endif
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  for (int attempt = 0; attempt < 16; ++attempt) {
    snprintf(path, sizeof path, "%s/aotc-host-XXXXXX", tmp);
    int tfd = mkstemp(path);
    if (tfd < 0) break;
    aotc_status_t st = NULL;
    int taken = name_taken(path);
    if (!taken) {
      if (write_all(tfd, lib->data, lib->size) == 0) st = dlopen_fresh(path, out_handle);
      else st = aotc_make_status(AOTC_STATUS_UNAVAILABLE, "cannot write the host build to '%s'", path);
    }
    close(tfd);
    unlink(path);
    if (!taken) return st;
  }
  return aotc_make_status(AOTC_STATUS_UNAVAILABLE,
                          "cannot load the host build: no memfd and no temp file in '%s'", tmp);
}

static int is_host_elf(const aotc_section_t *lib) {
  /* ELF, 64-bit, little-endian, e_machine matching this runtime. */
  if (lib->size < 64 || memcmp(lib->data, "\177ELF", 4) != 0 || lib->data[4] != 2 ||
      lib->data[5] != 1)
    return 0;
#if defined(__x86_64__)
  return lib->data[18] == 62 && lib->data[19] == 0;
#elif defined(__aarch64__)
  return lib->data[18] == 183 && lib->data[19] == 0;
#else
  return 1;
#endif
}

aotc_status_t aotc_cpu_check(const aotc_engine_t *e, char *desc, size_t desc_len) {
  if (!e->host_lib || e->host_lib->size == 0)
    return aotc_make_status(AOTC_STATUS_UNAVAILABLE,
                            "engine has no host build (HOST_LIB section): cannot run on cpu; compile "
                            "it with --host, or run it through aotc's Python binding, which builds one");
  if (!is_host_elf(e->host_lib))
    return aotc_make_status(AOTC_STATUS_UNAVAILABLE,
                            "engine's host build is not a 64-bit ELF for this machine's CPU");
  snprintf(desc, desc_len, "runnable on cpu: host build (%llu bytes), %u launches",
           (unsigned long long)e->host_lib->size, e->launch_count);
  return NULL;
}

static aotc_status_t load_locked(aotc_engine_t *e) {
  char desc[8];
  AOTC_RETURN_IF_ERROR(aotc_cpu_check(e, desc, sizeof desc));
  void *h = NULL;
  AOTC_RETURN_IF_ERROR(open_host_lib(e->host_lib, &h));
  const char *(*abi)(void) = NULL;
  *(void **)&abi = dlsym(h, "aotc_host_abi");
  const char *got = abi ? abi() : NULL;
  if (!got || strcmp(got, HOST_ABI) != 0) {
    dlclose(h);
    return aotc_make_status(AOTC_STATUS_UNAVAILABLE,
                            "engine's host build has ABI '%s', this runtime needs '%s'",
                            got ? got : "(no aotc_host_abi symbol)", HOST_ABI);
  }
  aotc_host_launch_fn *fns =
      (aotc_host_launch_fn *)calloc((size_t)e->kernel_count + 1, sizeof *fns);
  if (!fns) {
    dlclose(h);
    return aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t k = 0; k < e->kernel_count; ++k) {
    char sym[512];
    int n = snprintf(sym, sizeof sym, "aotc_host_launch_%s", e->kernel_names[k]);
    void *fp = n > 0 && (size_t)n < sizeof sym ? dlsym(h, sym) : NULL;
    if (!fp) {
      free(fns);
      dlclose(h);
      return aotc_make_status(AOTC_STATUS_NOT_FOUND,
                              "engine's host build lacks kernel '%s' (symbol aotc_host_launch_%s)",
                              e->kernel_names[k], e->kernel_names[k]);
    }
    *(void **)&fns[k] = fp;
  }
  e->host_handle = h;
  e->host_fns = fns;
  e->host_loaded = 1;
  return NULL;
}

aotc_status_t aotc_cpu_engine_prepare(aotc_engine_t *e) {
  pthread_mutex_lock(&e->mu);
  aotc_status_t st = e->host_loaded ? NULL : load_locked(e);
  pthread_mutex_unlock(&e->mu);
  return st;
}

void aotc_cpu_engine_destroy(aotc_engine_t *e) {
  if (e->host_handle) dlclose(e->host_handle);
  free(e->host_fns);
  e->host_handle = NULL;
  e->host_fns = NULL;
  e->host_loaded = 0;
}

aotc_status_t aotc_cpu_context_run(aotc_context_t *c) {
  aotc_engine_t *e = c->engine;
  uint8_t *weights = (uint8_t *)e->weights->data;
  for (uint32_t i = 0; i < e->launch_count; ++i) {
    const aotc_launch_t *l = &e->launches[i];
    unsigned grid[3];
    if (!aotc_launch_grid(c, l, grid)) continue; /* another size bucket's variant, or empty */
    for (uint32_t j = 0; j < l->arg_count; ++j) {
      const aotc_arg_t *a = &e->args[l->arg_start + j];
      uint8_t *base;
      c->params[j] = &c->values[j];
      if (a->kind == AOTC_REF_DIM) { /* by value: the kernel reads int or long long (little endian) */
        c->values[j] = (uint64_t)c->regs[a->index];
        continue;
      }
      switch (a->kind) {
        case AOTC_REF_INPUT: base = (uint8_t *)c->bindings[a->index].ptr; break;
        case AOTC_REF_OUTPUT: base = (uint8_t *)c->bindings[e->input_count + a->index].ptr; break;
        case AOTC_REF_ARENA: base = (uint8_t *)c->arena; break;
        default: base = weights; break;
      }
      void *ptr = base + a->offset;
      memcpy(&c->values[j], &ptr, sizeof ptr);
    }
    int rc = e->host_fns[l->kernel](grid, l->block, l->smem, c->params);
    if (rc != 0)
      return aotc_make_status(AOTC_STATUS_INTERNAL, "kernel '%s' (launch %u) failed on cpu with code %d",
                              e->kernel_names[l->kernel], i, rc);
  }
  return NULL;
}
