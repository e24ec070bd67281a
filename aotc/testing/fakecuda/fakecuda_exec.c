/* fakecuda_exec.c - the stand-in driver's streams, copies, events and CUDA
 * graphs.
 *
 * Work runs when it is submitted, on the submitting thread, one op at a time
 * per stream: that is one valid order of what a GPU may do, so results match
 * a real device whenever the program orders its work as CUDA requires. A
 * stream in capture records ops instead (kernel parameters by value, copies
 * by address), and a graph launch runs the recorded ops, so a replay uses
 * exactly the pointers captured, as on a GPU. What a capture forbids is
 * refused: synchronising a capturing stream, synchronous calls (allocation,
 * pageable copies, context synchronisation) from a thread whose capture
 * forbids them, and legacy-stream work while a blocking stream captures;
 * each invalidates the capture, which then ends with
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fakecuda_state.h"

#define EXPORT __attribute__((visibility("default")))
#define CU_STREAM_LEGACY ((void *)0x1)
#define CU_STREAM_PER_THREAD ((void *)0x2)
enum { CAPTURE_GLOBAL = 0, CAPTURE_THREAD_LOCAL = 1, CAPTURE_RELAXED = 2 };

/* ---- capture bookkeeping ---- */
#define MAX_CAPTURES 256
static fk_stream *capturing[MAX_CAPTURES];
static int capturing_count;

CUresult fk_capture_forbids(void) {
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < capturing_count; ++i) {
    fk_stream *s = capturing[i];
    if (s->capture_mode == CAPTURE_GLOBAL ||
        (s->capture_mode == CAPTURE_THREAD_LOCAL && pthread_equal(s->capture_thread, pthread_self()))) {
      s->capture_invalid = 1;
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return r;
}

/* Legacy-stream work would wait for every blocking stream of the context. */
CUresult fk_legacy_joins_capture(fk_ctx *c) {
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < capturing_count; ++i)
    if (capturing[i]->h.ctx == c && capturing[i]->flags == 0) {
      capturing[i]->capture_invalid = 1;
      r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
  return r;
}

static void capture_forget(fk_stream *s) {
  for (int i = 0; i < capturing_count; ++i)
    if (capturing[i] == s) capturing[i] = capturing[--capturing_count];
}

/* ---- streams ---- */
void fk_stream_init(fk_stream *s, unsigned flags) {
  s->flags = flags;
  pthread_mutex_init(&s->exec, NULL);
}

CUresult fk_stream_of(void *handle, fk_ctx *c, fk_stream **out) {
  if (!handle || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    *out = c->legacy;
    return CUDA_SUCCESS;
  }
  fk_stream *s = (fk_stream *)fk_get(handle, FK_STREAM);
  *out = s;
  return s && s->h.ctx == c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuStreamCreate(fk_stream **out, unsigned flags) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  fk_stream *s = r ? NULL : (fk_stream *)fk_new(FK_STREAM, sizeof *s, c);
  if (!r && !s) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (s) {
    fk_stream_init(s, flags);
    s->next = c->streams;
    c->streams = s;
  }
  pthread_mutex_unlock(&fk_mu);
  *out = s;
  return r;
}

EXPORT CUresult cuStreamDestroy_v2(fk_stream *handle) {
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  fk_stream *s = (fk_stream *)fk_get(handle, FK_STREAM);
  if (r != CUDA_ERROR_INVALID_CONTEXT && r != CUDA_ERROR_NOT_INITIALIZED) r = s ? 0 : CUDA_ERROR_INVALID_HANDLE;
  if (!r) {
    fk_flush(s, UINT64_MAX); /* work queued before the destroy still runs */
    s->h.alive = 0;
    capture_forget(s);
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

static CUresult stream_api(void *handle, fk_ctx **c, fk_stream **s) {
  CUresult r = fk_current(c);
  return r ? r : fk_stream_of(handle, *c, s);
}

EXPORT CUresult cuStreamSynchronize(void *handle) {
  fk_ctx *c;
  fk_stream *s;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(handle, &c, &s);
  if (!r && s->capture) {
    s->capture_invalid = 1;
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  } else if (!r) r = fk_capture_forbids();
  if (!r && fk_deferred) r = fk_flush(s, UINT64_MAX);
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuStreamQuery(void *handle) {
  fk_ctx *c;
  fk_stream *s;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(handle, &c, &s);
  if (!r && s->capture) {
    s->capture_invalid = 1;
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!r && fk_deferred) r = fk_flush(s, UINT64_MAX); /* a poll makes progress */
  pthread_mutex_unlock(&fk_mu);
  return r;
}

/* ---- copies and memsets ---- */
static CUresult copy(void *stream, int sync, CUdeviceptr dst, int dev_dst, CUdeviceptr src, int dev_src,
                     size_t n) {
  fk_ctx *c;
  fk_stream *s;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(stream, &c, &s);
  if (!r && sync) r = fk_capture_forbids();
  if (!r && (!dst || !src)) r = CUDA_ERROR_INVALID_VALUE;
  if (!r && n) {
    fk_op op = {.kind = OP_COPY, .dst = dst, .src = src, .dev_dst = dev_dst, .dev_src = dev_src, .n = n};
    r = fk_check_copy(&op);
    if (!r) r = fk_submit(s, c, &op);
    /* a copy to pageable host memory has landed when a synchronous call returns */
    if (!r && sync && !dev_dst && fk_deferred) r = fk_flush(s, UINT64_MAX);
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

#define H(p) ((CUdeviceptr)(uintptr_t)(p))
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { return copy(NULL, 1, d, 1, H(h), 0, n); }
EXPORT CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { return copy(NULL, 1, H(h), 0, d, 1, n); }
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy(NULL, 1, d, 1, s, 1, n); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *st) {
  return copy(st, 0, d, 1, H(h), 0, n);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *st) {
  return copy(st, 0, H(h), 0, d, 1, n);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) {
  return copy(st, 0, d, 1, s, 1, n);
}

static CUresult memset_op(void *stream, int sync, CUdeviceptr dst, unsigned value, unsigned width, size_t n) {
  fk_ctx *c;
  fk_stream *s;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(stream, &c, &s);
  if (!r && sync) r = fk_capture_forbids();
  if (!r && width == 4 && dst % 4) r = CUDA_ERROR_INVALID_VALUE;
  if (!r && n) {
    fk_op op = {.kind = OP_MEMSET, .dst = dst, .dev_dst = 1, .n = n, .value = value, .width = width};
    r = fk_check_copy(&op);
    if (!r) r = fk_submit(s, c, &op);
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_op(NULL, 1, d, v, 1, n); }
EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) { return memset_op(NULL, 1, d, v, 4, n); }
EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *s) {
  return memset_op(s, 0, d, v, 1, n);
}
EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *s) {
  return memset_op(s, 0, d, v, 4, n);
}

/* ---- events ---- */
EXPORT CUresult cuEventCreate(fk_event **out, unsigned flags) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  fk_ctx *c;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  fk_event *e = r ? NULL : (fk_event *)fk_new(FK_EVENT, sizeof *e, c);
  if (!r && !e) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (e) e->flags = flags;
  pthread_mutex_unlock(&fk_mu);
  *out = e;
  return r;
}

static CUresult event_api(fk_event *handle, fk_ctx **c, fk_event **e) {
  return fk_get_current(handle, FK_EVENT, c, (void **)e);
}

EXPORT CUresult cuEventDestroy_v2(fk_event *handle) {
  fk_ctx *c;
  fk_event *e;
  pthread_mutex_lock(&fk_mu);
  CUresult r = event_api(handle, &c, &e);
  if (!r) e->h.alive = 0;
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuEventRecord(fk_event *handle, void *stream) {
  fk_ctx *c;
  fk_event *e;
  fk_stream *s;
  pthread_mutex_lock(&fk_mu);
  CUresult r = event_api(handle, &c, &e);
  if (!r) r = fk_stream_of(stream, c, &s);
  if (!r) {
    fk_op op = {.kind = OP_EVENT, .ev = e};
    r = fk_submit(s, c, &op);
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

/* Deferred order: runs the work recorded before e. */
static CUresult event_flush(fk_event *e) {
  return fk_deferred && e->stream && e->stream->h.alive ? fk_flush(e->stream, e->seq) : CUDA_SUCCESS;
}

EXPORT CUresult cuEventSynchronize(fk_event *handle) {
  fk_ctx *c;
  fk_event *e;
  pthread_mutex_lock(&fk_mu);
  CUresult r = event_api(handle, &c, &e);
  if (!r) r = fk_capture_forbids();
  if (!r) r = event_flush(e);
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuEventQuery(fk_event *handle) {
  fk_ctx *c;
  fk_event *e;
  pthread_mutex_lock(&fk_mu);
  CUresult r = event_api(handle, &c, &e);
  if (!r) r = event_flush(e); /* a poll makes progress */
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuEventElapsedTime(float *ms, fk_event *start, fk_event *end) {
  fk_ctx *c;
  fk_event *a, *b;
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_mu);
  CUresult r = event_api(start, &c, &a);
  if (!r) r = event_api(end, &c, &b);
  if (!r) r = event_flush(a);
  if (!r) r = event_flush(b);
  if (!r && (!a->recorded || !b->recorded || (a->flags & 2) || (b->flags & 2)))
    r = CUDA_ERROR_INVALID_HANDLE; /* never recorded, or CU_EVENT_DISABLE_TIMING */
  if (!r) *ms = (float)(b->t - a->t);
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuStreamWaitEvent(void *stream, fk_event *handle, unsigned flags) {
  fk_ctx *c;
  fk_event *e;
  fk_stream *s;
  (void)flags;
  pthread_mutex_lock(&fk_mu);
  CUresult r = event_api(handle, &c, &e);
  if (!r) r = fk_stream_of(stream, c, &s);
  if (!r && fk_deferred && !s->capture && e->stream) { /* eager order: that work already ran */
    fk_op op = {.kind = OP_WAIT, .wait_stream = e->stream, .wait_seq = e->seq};
    r = fk_submit(s, c, &op);
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

/* ---- graphs ---- */
EXPORT CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
  fk_ctx *c;
  fk_stream *s;
  if (mode < CAPTURE_GLOBAL || mode > CAPTURE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(stream, &c, &s);
  if (!r && s == c->legacy) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!r && s->capture) r = CUDA_ERROR_ILLEGAL_STATE;
  if (!r && capturing_count == MAX_CAPTURES) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!r) {
    s->capture = (fk_graph *)fk_new(FK_GRAPH, sizeof *s->capture, c);
    if (!s->capture) r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!r) {
    s->capture_mode = mode;
    s->capture_invalid = 0;
    s->capture_thread = pthread_self();
    capturing[capturing_count++] = s;
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

static void graph_clear(fk_op *ops, int n) {
  for (int i = 0; i < n; ++i) fk_op_free(&ops[i]);
  free(ops);
}

EXPORT CUresult cuStreamEndCapture(void *stream, fk_graph **out) {
  fk_ctx *c;
  fk_stream *s;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = NULL;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(stream, &c, &s);
  if (!r && !s->capture) r = CUDA_ERROR_ILLEGAL_STATE;
  if (!r && s->capture_mode != CAPTURE_RELAXED && !pthread_equal(s->capture_thread, pthread_self()))
    r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  if (!r) {
    fk_graph *g = s->capture;
    s->capture = NULL;
    capture_forget(s);
    if (s->capture_invalid) {
      graph_clear(g->ops, g->n);
      g->ops = NULL;
      g->h.alive = 0;
      r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else *out = g;
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuStreamIsCapturing(void *stream, int *status) {
  fk_ctx *c;
  fk_stream *s;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(stream, &c, &s);
  if (!r) *status = !s->capture ? 0 : s->capture_invalid ? 2 : 1;
  pthread_mutex_unlock(&fk_mu);
  return r;
}

static fk_op *ops_copy(const fk_op *ops, int n) {
  fk_op *t = (fk_op *)calloc((size_t)n + 1, sizeof *t);
  for (int i = 0; t && i < n; ++i) {
    t[i] = ops[i];
    t[i].staged = NULL;
    if (ops[i].kind != OP_KERNEL) continue;
    size_t bytes = ops[i].f->k->param_bytes;
    t[i].params = (uint8_t *)malloc(bytes + 1);
    if (!t[i].params) {
      graph_clear(t, i);
      return NULL;
    }
    memcpy(t[i].params, ops[i].params, bytes);
  }
  return t;
}

EXPORT CUresult cuGraphInstantiateWithFlags(fk_graph_exec **out, fk_graph *handle, unsigned long long flags) {
  fk_ctx *c;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = NULL;
  if (flags & ~0xfull) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&fk_mu);
  CUresult r = fk_current(&c);
  fk_graph *g = r ? NULL : (fk_graph *)fk_get(handle, FK_GRAPH);
  if (!r && (!g || g->h.ctx != c)) r = CUDA_ERROR_INVALID_VALUE;
  fk_graph_exec *x = r ? NULL : (fk_graph_exec *)fk_new(FK_GRAPH_EXEC, sizeof *x, c);
  if (!r && x) {
    x->ops = ops_copy(g->ops, g->n);
    x->n = g->n;
    if (!x->ops) x->h.alive = 0;
  }
  if (!r && (!x || !x->ops)) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!r) *out = x;
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuGraphLaunch(fk_graph_exec *handle, void *stream) {
  fk_ctx *c;
  fk_stream *s;
  pthread_mutex_lock(&fk_mu);
  CUresult r = stream_api(stream, &c, &s);
  fk_graph_exec *x = r ? NULL : (fk_graph_exec *)fk_get(handle, FK_GRAPH_EXEC);
  if (!r && (!x || x->h.ctx != c)) r = CUDA_ERROR_INVALID_HANDLE;
  if (!r && s->capture) r = CUDA_ERROR_NOT_SUPPORTED; /* child graphs: not modelled */
  if (!r) ++fk_count_graph_launches;
  for (int i = 0; !r && i < x->n; ++i) {
    if (!fk_deferred) {
      r = fk_run_op(s, c, &x->ops[i]);
      continue;
    }
    fk_op *one = ops_copy(&x->ops[i], 1); /* the queue owns its ops */
    r = one ? fk_submit(s, c, one) : CUDA_ERROR_OUT_OF_MEMORY;
    free(one);
  }
  pthread_mutex_unlock(&fk_mu);
  return r;
}

EXPORT CUresult cuGraphExecDestroy(fk_graph_exec *handle) {
  pthread_mutex_lock(&fk_mu);
  fk_graph_exec *x = (fk_graph_exec *)fk_get(handle, FK_GRAPH_EXEC);
  if (x) {
    x->h.alive = 0;
    graph_clear(x->ops, x->n);
    x->ops = NULL;
  }
  pthread_mutex_unlock(&fk_mu);
  return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGraphDestroy(fk_graph *handle) {
  pthread_mutex_lock(&fk_mu);
  fk_graph *g = (fk_graph *)fk_get(handle, FK_GRAPH);
  if (g) {
    g->h.alive = 0;
    graph_clear(g->ops, g->n);
    g->ops = NULL;
  }
  pthread_mutex_unlock(&fk_mu);
  return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
