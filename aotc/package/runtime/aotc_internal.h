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
enum { AOTC_REF_INPUT = 0, AOTC_REF_OUTPUT = 1, AOTC_REF_ARENA = 2, AOTC_REF_WEIGHT = 3, AOTC_REF_DIM = 4 };
/* Shape-program opcodes (plan.SHAPE_OPS). */
enum {
  AOTC_OP_CONST, AOTC_OP_ADD, AOTC_OP_SUB, AOTC_OP_MUL, AOTC_OP_FLOORDIV, AOTC_OP_CEILDIV,
  AOTC_OP_MOD, AOTC_OP_MIN, AOTC_OP_MAX, AOTC_OP_LE, AOTC_OP_LT, AOTC_OP_EQ, AOTC_OP_NE,
  AOTC_OP_AND, AOTC_OP_COUNT
};
#define AOTC_REG_FLAG (1ull << 63) /* a pool entry naming a register */
#define AOTC_NO_REG 0xFFFFFFFFu    /* a launch without a predicate */
#define AOTC_GRAPH_CACHE 8         /* CUDA graphs kept per context, one per shape key */

/* Builds an error status with a printf-style message (never returns NULL:
 * on allocation failure a static RESOURCE_EXHAUSTED status is returned). */
aotc_status_t aotc_make_status(aotc_status_code_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
uint32_t aotc_crc32(const uint8_t *data, size_t size);

/* A corrupt engine (engine.c, plan.c): DATA_LOSS with a printf-style message. */
#define DATA_LOSS(...) aotc_make_status(AOTC_STATUS_DATA_LOSS, "corrupt engine: " __VA_ARGS__)

/* Little-endian reads of engine bytes. */
static inline uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

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
  uint64_t dims[AOTC_MAX_RANK]; /* the max shape */
  int32_t reg[AOTC_MAX_RANK];   /* -1: static dim; else the register holding it */
  int dynamic;                  /* some reg[] >= 0 */
  uint64_t byte_size;           /* at the max shape */
} aotc_tensor_t;

typedef struct aotc_dim_s {
  const char *name; /* points into the string table */
  uint32_t min, max, divisor;
} aotc_dim_t;

typedef struct aotc_shape_op_s {
  uint32_t op, a, b;
  int64_t imm;
} aotc_shape_op_t;

typedef struct aotc_check_s {
  uint32_t reg;
  const char *message;
} aotc_check_t;

typedef struct aotc_arg_s {
  uint32_t kind, index;
  uint64_t offset;
} aotc_arg_t;

typedef struct aotc_launch_s {
  uint32_t kernel;
  unsigned grid[3], block[3]; /* grid[k] is a register where grid_regs bit k is set */
  unsigned smem;
  uint32_t arg_start, arg_count;
  uint32_t when;      /* AOTC_NO_REG, or run only where this register is nonzero */
  uint32_t grid_regs;
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
  uint32_t dim_count, op_count, check_count, reg_count; /* reg_count = dim_count + op_count */
  aotc_dim_t *dims;
  aotc_shape_op_t *ops;
  aotc_check_t *checks;

  pthread_mutex_t mu; /* guards the lazily loaded device state below */
  int host_loaded;
  void *host_handle;
  aotc_host_launch_fn *host_fns;
  struct aotc_cuda_engine_s *cuda;
};

typedef struct aotc_binding_s {
  void *ptr;       /* host pointer (cpu) or device pointer (cuda) */
  void *host;      /* host buffer for bind_host_* on cuda, else NULL */
  uint64_t staging; /* device buffer owned by the context for `host`, the tensor's max bytes */
  size_t size;     /* the bound buffer's bytes */
  int bound;
} aotc_binding_t;

/* One captured CUDA graph, valid for one binding epoch and one set of dim values. */
typedef struct aotc_graph_entry_s {
  uint64_t epoch;    /* binding_epoch it was seen or captured with; 0: free */
  uint64_t used;     /* LRU clock */
  int64_t *key;      /* dim_count values (preallocated) */
  void *graph, *exec; /* NULL exec: seen once, not captured yet */
} aotc_graph_entry_t;

struct aotc_context_s {
  int32_t ref;
  aotc_engine_t *engine;
  aotc_device_t device;
  aotc_context_options_t options;
  uint64_t binding_epoch;  /* bumped whenever a bound pointer changes */
  int graph_failed;        /* capture failed once: plain launches from now on */
  aotc_graph_entry_t graphs[AOTC_GRAPH_CACHE]; /* cuda: graph cache keyed by (epoch, dims) */
  uint64_t graph_clock;
  void *last_stream;       /* cuda: stream of the last enqueue */
  void *arena;          /* cpu: host arena; cuda: CUdeviceptr cast */
  aotc_binding_t *bindings; /* inputs, then outputs */
  void **params;        /* per-launch kernel parameter pointers */
  uint64_t *values;     /* pointer values params point to */
  void *stream;         /* cuda: CUstream */
  /* Dynamic shapes (all preallocated at create: nothing allocates on a shape change). */
  int64_t *regs;        /* reg_count shape-program registers, valid when !shape_dirty */
  int64_t *in_shapes;   /* input_count x AOTC_MAX_RANK dims set by set_input_shape */
  uint8_t *in_set;      /* input_count flags: a shape was set */
  uint64_t *cur_bytes;  /* per tensor: bytes at the current shape */
  int64_t *graph_keys;  /* AOTC_GRAPH_CACHE x dim_count storage for graphs[].key */
  int shape_dirty;      /* inputs changed since the program was last evaluated */
};

/* Parses and validates; used by load and check. */
aotc_status_t aotc_engine_parse(aotc_engine_t *engine);
/* plan.c: the PLAN section (engine->plan and engine->weights set). */
aotc_status_t aotc_plan_parse(aotc_engine_t *engine);

/* shape.c */
/* Evaluates the shape program if an input shape changed (no allocation);
 * afterwards regs and cur_bytes describe the current shapes. */
aotc_status_t aotc_shape_resolve(aotc_context_t *context);
/* A launch's grid at the current shapes; 0 if it is skipped (predicate
 * false or a zero grid dim). */
int aotc_launch_grid(const aotc_context_t *context, const aotc_launch_t *launch, unsigned grid[3]);

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
int aotc_cuda_graph_ready(const aotc_context_t *context);

#endif /* AOTC_INTERNAL_H_ */
