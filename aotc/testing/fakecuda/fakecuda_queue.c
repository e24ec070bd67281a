/* fakecuda_queue.c - when the stand-in driver runs the work it is given.
 *
 * Two orders, both legal for a GPU. "eager" (the default) runs each op when
 * it is submitted, on the submitting thread. "deferred"
 * (AOTC_FAKECUDA_ORDER=deferred) runs work as late as CUDA allows: each
 * stream queues its ops, and they run only when something waits for them
 * (a stream, event or context synchronisation, a synchronous copy to the
 * host, a free), honouring only the ordering CUDA promises: in order within
 * a stream; legacy-stream work after earlier work of the context's blocking
 * streams and before their later work; a stream that waits on an event after
 * the work recorded before it. A non-blocking stream does not wait for the
 * legacy stream, and synchronous-looking calls that CUDA runs asynchronously
 * (cuMemcpyHtoD from pageable memory returns once the bytes are staged,
 * cuMemsetD8) are queued on the legacy stream. So a program that relies on
 * an order CUDA does not promise computes with memory not yet written (fresh
 * allocations hold a NaN pattern) and its results show it, as on a GPU
 * where the race is lost. In deferred mode the work runs under the global
 * lock, one op at a time.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fakecuda_state.h"

int fk_deferred;
static uint64_t next_seq = 1;

static CUresult run_kernel(fk_op *op) {
  const fk_kernel_info *k = op->f->k;
  void *params[FK_MAX_PARAMS];
  for (int i = 0; i < k->nparams; ++i) params[i] = op->params + k->offset[i];
  int rc = op->f->fn(op->grid, op->block, op->smem, params);
  return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

/* A pointer-sized parameter that points into freed memory: the kernel would fault. */
static int uses_freed_memory(const fk_op *op) {
  const fk_kernel_info *k = op->f->k;
  for (int i = 0; i < k->nparams; ++i) {
    if (k->size[i] != 8) continue;
    CUdeviceptr p;
    memcpy(&p, op->params + k->offset[i], 8);
    int freed = 0;
    if (!fk_mem_live(p, 1, &freed) && freed) return 1;
  }
  return 0;
}

CUresult fk_check_copy(const fk_op *op) {
  if (op->dev_dst && !fk_mem_live(op->dst, op->n * (op->kind == OP_MEMSET ? op->width : 1), NULL))
    return CUDA_ERROR_INVALID_VALUE;
  if (op->kind == OP_COPY && op->dev_src && !fk_mem_live(op->src, op->n, NULL)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

void fk_op_free(fk_op *op) {
  free(op->params);
  free(op->staged);
  op->params = NULL;
  op->staged = NULL;
}

/* Runs one op (fk_mu held; released while the work runs unless deferred). */
CUresult fk_run_op(fk_stream *s, fk_ctx *c, fk_op *op) {
  CUresult r = CUDA_SUCCESS;
  if (op->kind == OP_KERNEL && uses_freed_memory(op)) r = CUDA_ERROR_ILLEGAL_ADDRESS;
  else if (op->kind == OP_COPY || op->kind == OP_MEMSET) r = fk_check_copy(op);
  if (r) {
    if (r == CUDA_ERROR_ILLEGAL_ADDRESS) c->sticky = r;
    return r;
  }
  if (op->kind == OP_KERNEL) ++fk_count_launches;
  if (op->kind == OP_EVENT) {
    op->ev->recorded = 1;
    op->ev->t = fk_now();
    return CUDA_SUCCESS;
  }
  if (op->kind == OP_WAIT) return CUDA_SUCCESS; /* its dependency ran before it (fk_flush) */
  if (!fk_deferred) {
    pthread_mutex_unlock(&fk_mu);
    pthread_mutex_lock(&s->exec);
  }
  const void *src = op->staged ? (const void *)op->staged : (const void *)(uintptr_t)op->src;
  if (op->kind == OP_KERNEL) r = run_kernel(op);
  else if (op->kind == OP_COPY) memmove((void *)(uintptr_t)op->dst, src, op->n);
  else if (op->width == 1) memset((void *)(uintptr_t)op->dst, (int)op->value, op->n);
  else
    for (size_t i = 0; i < op->n; ++i) ((uint32_t *)(uintptr_t)op->dst)[i] = op->value;
  if (!fk_deferred) {
    pthread_mutex_unlock(&s->exec);
    pthread_mutex_lock(&fk_mu);
  }
  if (r) c->sticky = r; /* a failed kernel poisons its context, as on a GPU */
  return r;
}

static CUresult graph_append(fk_graph *g, fk_op *op) {
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    fk_op *t = (fk_op *)realloc(g->ops, (size_t)cap * sizeof *t);
    if (!t) return CUDA_ERROR_OUT_OF_MEMORY;
    g->ops = t;
    g->cap = cap;
  }
  g->ops[g->n++] = *op;
  return CUDA_SUCCESS;
}

static CUresult enqueue(fk_stream *s, fk_op *op) {
  if (s->qn == s->qcap) {
    int cap = s->qcap ? 2 * s->qcap : 64;
    fk_op *t = (fk_op *)malloc((size_t)cap * sizeof *t);
    if (!t) return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < s->qn; ++i) t[i] = s->q[(s->qhead + i) % s->qcap];
    free(s->q);
    s->q = t;
    s->qhead = 0;
    s->qcap = cap;
  }
  op->seq = next_seq++;
  s->q[(s->qhead + s->qn++) % s->qcap] = *op;
  return CUDA_SUCCESS;
}

/* Copies the host bytes of a host-to-device copy now, as a pageable copy does. */
static CUresult stage_host_source(fk_op *op) {
  if (op->kind != OP_COPY || op->dev_src || op->staged) return CUDA_SUCCESS;
  op->staged = (uint8_t *)malloc(op->n ? op->n : 1);
  if (!op->staged) return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(op->staged, (const void *)(uintptr_t)op->src, op->n);
  return CUDA_SUCCESS;
}

CUresult fk_submit(fk_stream *s, fk_ctx *c, fk_op *op) {
  if (s == c->legacy) {
    CUresult r = fk_legacy_joins_capture(c);
    if (r) {
      fk_op_free(op);
      return r;
    }
  }
  if (s->capture) {
    CUresult r = s->capture_invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : graph_append(s->capture, op);
    if (r) {
      s->capture_invalid = 1;
      fk_op_free(op);
    }
    return r;
  }
  if (fk_deferred) {
    CUresult r = stage_host_source(op);
    if (!r) r = enqueue(s, op);
    if (r) fk_op_free(op);
    if (!r && op->kind == OP_EVENT) {
      op->ev->recorded = 0;
      op->ev->stream = s;
      op->ev->seq = op->seq;
    }
    return r;
  }
  CUresult r = fk_run_op(s, c, op);
  fk_op_free(op);
  return r;
}

/* Runs s's queued ops with seq <= upto, each after what CUDA orders before it. */
CUresult fk_flush(fk_stream *s, uint64_t upto) {
  fk_ctx *c = s->h.ctx;
  CUresult first = CUDA_SUCCESS;
  while (s->qn && s->q[s->qhead].seq <= upto) {
    fk_op op = s->q[s->qhead];
    s->qhead = (s->qhead + 1) % s->qcap;
    --s->qn;
    if (s == c->legacy) {
      for (fk_stream *b = c->streams; b; b = b->next)
        if (b->flags == 0 && b->h.alive) fk_flush(b, op.seq - 1);
    } else if (s->flags == 0) {
      fk_flush(c->legacy, op.seq - 1);
    }
    if (op.kind == OP_WAIT && op.wait_stream) fk_flush(op.wait_stream, op.wait_seq);
    CUresult r = c->h.alive ? fk_run_op(s, c, &op) : CUDA_SUCCESS;
    if (r && !first) first = r;
    fk_op_free(&op);
  }
  return first ? first : c->sticky;
}

CUresult fk_flush_ctx(fk_ctx *c) {
  CUresult first = fk_flush(c->legacy, UINT64_MAX);
  for (fk_stream *b = c->streams; b; b = b->next) {
    CUresult r = fk_flush(b, UINT64_MAX);
    if (r && !first) first = r;
  }
  return first;
}
