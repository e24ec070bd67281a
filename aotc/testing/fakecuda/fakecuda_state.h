/* fakecuda_state.h - the stand-in driver's objects, shared by its .c files.
 *
 * Every handle the stand-in gives out points at one of these structs, whose
 * header names its kind, whether it is alive and its context. Handles are
 * never freed (only marked dead), so a stale or foreign handle is recognised
 * instead of crashing the process; a registry of every handle ever made
 * tells a handle from an arbitrary pointer.
 */
#ifndef AOTC_FAKECUDA_STATE_H_
#define AOTC_FAKECUDA_STATE_H_

#include <pthread.h>

#include "fakecuda.h"

typedef unsigned long long CUdeviceptr;
typedef int (*fk_host_launch_fn)(const unsigned *grid3, const unsigned *block3, unsigned dyn_smem,
                                 void **params);

enum { FK_CTX = 1, FK_STREAM, FK_MODULE, FK_FUNC, FK_EVENT, FK_GRAPH, FK_GRAPH_EXEC };

typedef struct fk_ctx fk_ctx;
typedef struct fk_obj { int kind, alive; fk_ctx *ctx; } fk_obj;

struct fk_stream;
struct fk_ctx {
  fk_obj h;
  int device, primary, refs;
  CUresult sticky; /* an error that poisons the context, as a real fault does */
  struct fk_stream *legacy;
  struct fk_stream *streams; /* the context's created streams, newest first */
};

typedef struct fk_graph fk_graph;
typedef struct fk_op fk_op;
typedef struct fk_stream {
  fk_obj h;
  unsigned flags;
  pthread_mutex_t exec; /* ops on one stream run one at a time, in order */
  fk_graph *capture;    /* non-NULL while capturing */
  int capture_mode, capture_invalid;
  pthread_t capture_thread;
  fk_op *q; /* deferred order: queued ops, a ring */
  int qhead, qn, qcap;
  struct fk_stream *next; /* in the context's list */
} fk_stream;

typedef struct fk_module fk_module;
typedef struct fk_func {
  fk_obj h;
  fk_module *mod;
  const fk_kernel_info *k;
  fk_host_launch_fn fn;
  int max_dyn_smem; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
} fk_func;

struct fk_module {
  fk_obj h;
  fk_image_info info;
  void *host; /* dlopen handle of the engine's host build */
  fk_func **funcs;
};

typedef struct fk_event {
  fk_obj h;
  unsigned flags;
  int recorded;
  double t;
  fk_stream *stream; /* deferred order: where and when it was recorded */
  uint64_t seq;
} fk_event;

enum { OP_KERNEL = 1, OP_COPY, OP_MEMSET, OP_EVENT, OP_WAIT };
struct fk_op {
  int kind;
  fk_func *f;
  unsigned grid[3], block[3], smem;
  uint8_t *params; /* a copy of the parameter buffer, f->k->param_bytes */
  CUdeviceptr dst, src; /* OP_COPY: device or host addresses; dev_dst/dev_src say which */
  int dev_dst, dev_src;
  size_t n;              /* bytes, or elements for OP_MEMSET */
  unsigned value, width; /* OP_MEMSET: value and element width (1 or 4) */
  fk_event *ev;
  uint8_t *staged;         /* OP_COPY from the host: the bytes as they were when submitted */
  uint64_t seq;            /* deferred order: submission order, over all streams */
  fk_stream *wait_stream;  /* OP_WAIT: run after wait_stream's ops up to wait_seq */
  uint64_t wait_seq;
};

struct fk_graph {
  fk_obj h;
  fk_op *ops;
  int n, cap;
};

typedef struct fk_graph_exec {
  fk_obj h;
  fk_op *ops;
  int n;
} fk_graph_exec;

/* fakecuda_core.c: the global lock, handles, contexts, memory. */
extern pthread_mutex_t fk_mu; /* guards every table; never held while a kernel runs */
extern int fk_arch;           /* the device's compute capability, e.g. 90 */
void *fk_new(int kind, size_t size, fk_ctx *ctx);
/* The live object of `kind` behind handle h, else NULL (fk_mu held). */
void *fk_get(const void *h, int kind);
/* The live object of `kind` behind h that belongs to the calling thread's current context (fk_mu
 * held): INVALID_CONTEXT without a current context, INVALID_HANDLE for a dead or foreign handle. */
CUresult fk_get_current(const void *h, int kind, fk_ctx **c, void **out);
/* The calling thread's current context: INVALID_CONTEXT if none or dead;
 * the context's sticky error if it has one (fk_mu held). */
CUresult fk_current(fk_ctx **out);
/* The live allocation holding [p, p + n): 1, else 0; *freed says whether p
 * lies in a freed allocation (fk_mu held). */
int fk_mem_live(CUdeviceptr p, size_t n, int *freed);
/* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED if a capture forbids a synchronous
 * call from this thread now (and invalidates that capture), else 0. */
CUresult fk_capture_forbids(void);
double fk_now(void);
unsigned fk_max_smem_optin(void);
extern unsigned long long fk_count_launches, fk_count_graph_launches;

/* fakecuda_exec.c: streams. */
/* Resolves a stream handle (NULL, legacy, per-thread: the context's legacy stream). */
CUresult fk_stream_of(void *handle, fk_ctx *c, fk_stream **out);
void fk_stream_init(fk_stream *s, unsigned flags);
/* CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (invalidating it) if a blocking stream of c captures. */
CUresult fk_legacy_joins_capture(fk_ctx *c);

/* fakecuda_queue.c: when work runs (all with fk_mu held). */
extern int fk_deferred; /* AOTC_FAKECUDA_ORDER=deferred */
/* Runs op now, queues it (deferred order) or appends it to s's capture.
 * Takes ownership of op->params and op->staged. */
CUresult fk_submit(fk_stream *s, fk_ctx *c, fk_op *op);
CUresult fk_run_op(fk_stream *s, fk_ctx *c, fk_op *op);
CUresult fk_check_copy(const fk_op *op);
void fk_op_free(fk_op *op);
/* Runs the queued work of s up to seq `upto` (and all it depends on); of a whole context. */
CUresult fk_flush(fk_stream *s, uint64_t upto);
CUresult fk_flush_ctx(fk_ctx *c);

#endif /* AOTC_FAKECUDA_STATE_H_ */
