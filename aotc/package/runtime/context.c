/* context.c - execution contexts: arena, bindings, run.
 *
 * A context owns its activation arena and its bindings; the engine's
 * weights and kernels are shared. Every pointer change of a binding bumps
 * binding_epoch, which tells the cuda device when a captured graph is stale.
 * The buffers of dynamic shapes (shape.c) are allocated here, once. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "aotc_internal.h"

static void context_destroy(aotc_context_t *x) {
  if (x->device == AOTC_DEVICE_CUDA) aotc_cuda_context_deinit(x);
  else free(x->arena);
  free(x->bindings);
  free(x->params);
  free(x->values);
  free(x->regs);
  free(x->in_shapes);
  free(x->in_set);
  free(x->cur_bytes);
  free(x->graph_keys);
  aotc_engine_release(x->engine);
  free(x);
}

void aotc_context_options_initialize(aotc_context_options_t *out_options) {
  if (!out_options) return;
  memset(out_options, 0, sizeof *out_options);
  out_options->use_cuda_graph = 1;
}

aotc_status_t aotc_context_create(aotc_engine_t *engine, aotc_device_t device,
                                  aotc_context_t **out_context) {
  return aotc_context_create_with_options(engine, device, NULL, out_context);
}

aotc_status_t aotc_context_create_with_options(aotc_engine_t *engine, aotc_device_t device,
                                               const aotc_context_options_t *options,
                                               aotc_context_t **out_context) {
  if (!out_context) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_context is NULL");
  *out_context = NULL;
  if (!engine) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "engine is NULL");
  if (device != AOTC_DEVICE_CPU && device != AOTC_DEVICE_CUDA)
    return aotc_make_status(AOTC_STATUS_UNIMPLEMENTED, "unknown device %d (use cpu or cuda)",
                            (int)device);
  /* Load the device's kernels first: a missing driver fails before any allocation. */
  AOTC_RETURN_IF_ERROR(device == AOTC_DEVICE_CPU ? aotc_cpu_engine_prepare(engine)
                                                 : aotc_cuda_engine_prepare(engine));
  aotc_context_t *x = (aotc_context_t *)calloc(1, sizeof *x);
  if (!x) return aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  x->ref = 1;
  x->device = device;
  if (options) x->options = *options;
  else aotc_context_options_initialize(&x->options);
  x->binding_epoch = 1;
  x->engine = engine;
  aotc_engine_retain(engine);
  size_t n = (size_t)engine->input_count + engine->output_count;
  x->bindings = (aotc_binding_t *)calloc(n + 1, sizeof *x->bindings);
  x->params = (void **)calloc((size_t)engine->max_launch_args + 1, sizeof(void *));
  x->values = (uint64_t *)calloc((size_t)engine->max_launch_args + 1, sizeof(uint64_t));
  x->regs = (int64_t *)calloc((size_t)engine->reg_count + 1, sizeof(int64_t));
  x->in_shapes = (int64_t *)calloc(((size_t)engine->input_count + 1) * AOTC_MAX_RANK, sizeof(int64_t));
  x->in_set = (uint8_t *)calloc((size_t)engine->input_count + 1, 1);
  x->cur_bytes = (uint64_t *)calloc(n + 1, sizeof(uint64_t));
  x->graph_keys = (int64_t *)calloc(((size_t)engine->dim_count + 1) * AOTC_GRAPH_CACHE, sizeof(int64_t));
  for (size_t i = 0; x->cur_bytes && i < n; ++i) {
    x->cur_bytes[i] = engine->tensors[i].byte_size;
    x->shape_dirty |= engine->tensors[i].dynamic;
  }
  for (size_t g = 0; x->graph_keys && g < AOTC_GRAPH_CACHE; ++g)
    x->graphs[g].key = x->graph_keys + g * ((size_t)engine->dim_count + 1);
  aotc_status_t st = NULL;
  if (!x->bindings || !x->params || !x->values || !x->regs || !x->in_shapes || !x->in_set ||
      !x->cur_bytes || !x->graph_keys)
    st = aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  else if (device == AOTC_DEVICE_CUDA)
    st = aotc_cuda_context_init(x);
  else {
    uint64_t sz = (engine->arena_size + AOTC_ALIGN - 1) / AOTC_ALIGN * AOTC_ALIGN;
    if (sz < engine->arena_size || sz > (uint64_t)SIZE_MAX ||
        posix_memalign(&x->arena, AOTC_ALIGN, sz ? (size_t)sz : AOTC_ALIGN) != 0) {
      x->arena = NULL;
      st = aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED,
                            "cannot allocate a %llu-byte activation arena",
                            (unsigned long long)engine->arena_size);
    } else if (engine->arena_zeroed) {
      memset((uint8_t *)x->arena + (engine->arena_size - engine->arena_zeroed), 0, engine->arena_zeroed);
    }
  }
  if (st) {
    context_destroy(x);
    return st;
  }
  *out_context = x;
  return NULL;
}

void aotc_context_retain(aotc_context_t *x) {
  if (x) __atomic_add_fetch(&x->ref, 1, __ATOMIC_RELAXED);
}

void aotc_context_release(aotc_context_t *x) {
  if (x && __atomic_sub_fetch(&x->ref, 1, __ATOMIC_ACQ_REL) == 0) context_destroy(x);
}

aotc_device_t aotc_context_device(const aotc_context_t *x) {
  return x ? x->device : AOTC_DEVICE_CPU;
}

static aotc_status_t bind(aotc_context_t *x, int output, const char *name, void *ptr,
                          size_t byte_size, int host) {
  if (!x || !name) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "context or name is NULL");
  size_t index = 0;
  aotc_engine_t *e = x->engine;
  AOTC_RETURN_IF_ERROR(output ? aotc_engine_find_output(e, name, &index)
                              : aotc_engine_find_input(e, name, &index));
  size_t slot = (output ? e->input_count : 0) + index;
  const aotc_tensor_t *t = &e->tensors[slot];
  if (!t->dynamic && byte_size != t->byte_size)
    return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT,
                            "%s '%s' needs %llu bytes, got a %zu-byte buffer",
                            output ? "output" : "input", name, (unsigned long long)t->byte_size,
                            byte_size);
  if (!ptr && byte_size)
    return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "%s '%s' bound to NULL",
                            output ? "output" : "input", name);
  aotc_binding_t *b = &x->bindings[slot];
  void *old = b->bound ? b->ptr : NULL;
  b->size = byte_size;
  if (host && x->device == AOTC_DEVICE_CUDA) {
    AOTC_RETURN_IF_ERROR(aotc_cuda_staging_alloc(x, b));
    b->host = ptr;
    b->ptr = (void *)(uintptr_t)b->staging;
  } else {
    b->host = NULL;
    b->ptr = ptr;
  }
  b->bound = 1;
  if (b->ptr != old) ++x->binding_epoch;
  return NULL;
}

aotc_status_t aotc_context_bind_input(aotc_context_t *x, const char *name, const void *ptr,
                                      size_t byte_size) {
  return bind(x, 0, name, (void *)ptr, byte_size, 0);
}
aotc_status_t aotc_context_bind_output(aotc_context_t *x, const char *name, void *ptr,
                                       size_t byte_size) {
  return bind(x, 1, name, ptr, byte_size, 0);
}
aotc_status_t aotc_context_bind_host_input(aotc_context_t *x, const char *name,
                                           const void *host_ptr, size_t byte_size) {
  return bind(x, 0, name, (void *)host_ptr, byte_size, 1);
}
aotc_status_t aotc_context_bind_host_output(aotc_context_t *x, const char *name, void *host_ptr,
                                            size_t byte_size) {
  return bind(x, 1, name, host_ptr, byte_size, 1);
}

/* Every tensor bound, a dynamic one to at least the bytes of its current shape. */
static aotc_status_t check_bound(const aotc_context_t *x) {
  const aotc_engine_t *e = x->engine;
  size_t n = (size_t)e->input_count + e->output_count;
  for (size_t i = 0; i < n; ++i) {
    const char *what = i < e->input_count ? "input" : "output";
    if (!x->bindings[i].bound)
      return aotc_make_status(AOTC_STATUS_FAILED_PRECONDITION, "%s '%s' is not bound", what,
                              e->tensors[i].name);
    if (x->bindings[i].size < x->cur_bytes[i])
      return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT,
                              "%s '%s' is bound to a %zu-byte buffer, its shape at this run needs %llu bytes",
                              what, e->tensors[i].name, x->bindings[i].size,
                              (unsigned long long)x->cur_bytes[i]);
  }
  return NULL;
}

aotc_status_t aotc_context_enqueue(aotc_context_t *x, void *stream) {
  if (!x) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "context is NULL");
  if (stream && x->device != AOTC_DEVICE_CUDA)
    return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT,
                            "a stream was given to a cpu context (cpu runs synchronously)");
  AOTC_RETURN_IF_ERROR(aotc_shape_resolve(x));
  AOTC_RETURN_IF_ERROR(check_bound(x));
  if (x->device == AOTC_DEVICE_CUDA) return aotc_cuda_context_enqueue(x, stream);
  return aotc_cpu_context_run(x);
}

aotc_status_t aotc_context_synchronize(aotc_context_t *x) {
  if (!x) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "context is NULL");
  return x->device == AOTC_DEVICE_CUDA ? aotc_cuda_context_synchronize(x) : NULL;
}

aotc_status_t aotc_context_run(aotc_context_t *x) {
  AOTC_RETURN_IF_ERROR(aotc_context_enqueue(x, NULL));
  return aotc_context_synchronize(x);
}

int aotc_context_uses_cuda_graph(const aotc_context_t *x) {
  return x && x->device == AOTC_DEVICE_CUDA && !x->shape_dirty && aotc_cuda_graph_ready(x);
}
