/* aotc_internal.h - private declarations shared by the runtime's .c files.
 * Not installed for users; aotc_runtime.h is the public API. */
#ifndef AOTC_INTERNAL_H_
#define AOTC_INTERNAL_H_

#include <pthread.h>

#include "aotc_runtime.h"

#define AOTC_ALIGN 256u
#define AOTC_MAX_SECTIONS 64u

enum {
  AOTC_SEC_MANIFEST = 1, AOTC_SEC_PLAN = 2, AOTC_SEC_WEIGHTS = 3,
  AOTC_SEC_CUBIN = 4, AOTC_SEC_PTX = 5, AOTC_SEC_HOST_LIB = 6,
};
enum { AOTC_REF_INPUT = 0, AOTC_REF_OUTPUT = 1, AOTC_REF_ARENA = 2, AOTC_REF_WEIGHT = 3 };

/* Builds an error status with a printf-style message (never returns NULL:
 * on allocation failure a static RESOURCE_EXHAUSTED status is returned). */
aotc_status_t aotc_make_status(aotc_status_code_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
uint32_t aotc_crc32(const uint8_t *data, size_t size);

typedef struct aotc_section_s {
  uint32_t kind;
  char tag[16]; /* NUL-terminated */
  const uint8_t *data;
  uint64_t size;
} aotc_section_t;

typedef struct aotc_tensor_s {
  const char *name; /* points into the engine's string table */
  aotc_dtype_t dtype;
  uint32_t rank;
  uint64_t dims[AOTC_MAX_RANK];
  uint64_t byte_size;
} aotc_tensor_t;

typedef struct aotc_arg_s {
  uint32_t kind, index;
  uint64_t offset;
} aotc_arg_t;

typedef struct aotc_launch_s {
  uint32_t kernel;
  unsigned grid[3], block[3];
  unsigned smem;
  uint32_t arg_start, arg_count;
} aotc_launch_t;

typedef int (*aotc_host_launch_fn)(const unsigned *grid3, const unsigned *block3,
                                   unsigned dyn_smem, void **params);

struct aotc_cuda_engine_s; /* device_cuda.c */

struct aotc_engine_s {
  int32_t ref;
  aotc_engine_options_t options;
  uint8_t *buf; /* 256-aligned copy of the file; sections point into it */
  size_t size;
  aotc_section_t sections[AOTC_MAX_SECTIONS];
  uint32_t section_count;
  const aotc_section_t *manifest, *plan, *weights, *ptx, *host_lib;
  uint32_t input_count, output_count, kernel_count, launch_count, arg_count;
  uint32_t max_launch_args;
  char aotc_version[16]; /* validated "MAJOR.MINOR.PATCH[suffix]" */
  uint64_t arena_size, weights_size;
  uint32_t arena_zeroed; /* the arena's last arena_zeroed bytes start zero (split-K counters) */
  aotc_tensor_t *tensors; /* inputs, then outputs */
  const char **kernel_names;
  aotc_launch_t *launches;
  aotc_arg_t *args;

  pthread_mutex_t mu; /* guards the lazily loaded device state below */
  int host_loaded;
  void *host_handle;
  aotc_host_launch_fn *host_fns;
  struct aotc_cuda_engine_s *cuda;
};

typedef struct aotc_binding_s {
  void *ptr;       /* host pointer (cpu) or device pointer (cuda) */
  void *host;      /* host buffer for bind_host_* on cuda, else NULL */
  uint64_t staging; /* device buffer owned by the context for `host` */
  size_t size;
  int bound;
} aotc_binding_t;

struct aotc_context_s {
  int32_t ref;
  aotc_engine_t *engine;
  aotc_device_t device;
  aotc_context_options_t options;
  uint64_t binding_epoch;  /* bumped whenever a bound pointer changes */
  uint64_t last_run_epoch; /* binding_epoch of the previous run (0: none) */
  uint64_t graph_epoch;    /* binding_epoch the CUDA graph was captured with */
  int graph_failed;        /* capture failed once: plain launches from now on */
  void *graph, *graph_exec; /* cuda: CUgraph, CUgraphExec */
  void *last_stream;       /* cuda: stream of the last enqueue */
  void *arena;          /* cpu: host arena; cuda: CUdeviceptr cast */
  aotc_binding_t *bindings; /* inputs, then outputs */
  void **params;        /* per-launch kernel parameter pointers */
  uint64_t *values;     /* pointer values params point to */
  void *stream;         /* cuda: CUstream */
};

/* Parses and validates; used by load and check. */
aotc_status_t aotc_engine_parse(aotc_engine_t *engine);

/* device_cpu.c */
aotc_status_t aotc_cpu_engine_prepare(aotc_engine_t *engine);
void aotc_cpu_engine_destroy(aotc_engine_t *engine);
aotc_status_t aotc_cpu_check(const aotc_engine_t *engine, char *desc, size_t desc_len);
aotc_status_t aotc_cpu_context_run(aotc_context_t *context);

/* device_cuda.c */
aotc_status_t aotc_cuda_engine_prepare(aotc_engine_t *engine);
void aotc_cuda_engine_destroy(aotc_engine_t *engine);
aotc_status_t aotc_cuda_check(const aotc_engine_t *engine, char *desc, size_t desc_len);
aotc_status_t aotc_cuda_context_init(aotc_context_t *context);
void aotc_cuda_context_deinit(aotc_context_t *context);
aotc_status_t aotc_cuda_staging_alloc(aotc_context_t *context, aotc_binding_t *binding);
aotc_status_t aotc_cuda_context_enqueue(aotc_context_t *context, void *stream);
aotc_status_t aotc_cuda_context_synchronize(aotc_context_t *context);

#endif /* AOTC_INTERNAL_H_ */
