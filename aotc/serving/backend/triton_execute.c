/* triton_execute.c - TRITONBACKEND_ModelInstanceExecute of the aotc backend.
 *
 * Every request is validated on its own first (inputs present, dtypes, ranks,
 * dims within the engine's ranges, byte sizes, requested outputs), so a bad
 * request gets its own error response. The good ones run in groups: with
 * max_batch_size > 0, consecutive requests whose dims after the batch agree
 * are concatenated along the batch dim up to max_batch_size, run once, and
 * each response gets its rows of every output; without batching each request
 * runs alone. If a group's run fails, its requests run one by one, so only
 * the one that breaks the engine fails. Responses go out in request order.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_state.h"

typedef struct {
  TRITONBACKEND_Request *request;
  TRITONSERVER_Error *error; /* set when the request fails */
  int64_t *shapes;           /* input_count x AOTC_MAX_RANK dims as the request sent them */
  uint64_t rows;             /* batch rows (1 when not batching) */
} request_t;

static uint64_t product(const int64_t *dims, size_t first, size_t rank) {
  uint64_t n = 1;
  size_t k;
  for (k = first; k < rank; ++k) n *= (uint64_t)dims[k];
  return n;
}

/* Checks one request against the engine; records its shapes and rows. */
static TRITONSERVER_Error *check_request(const model_state_t *m, request_t *r) {
  const aotc_engine_desc_t *d = &m->desc;
  int64_t seen[64];
  uint32_t count = 0, i;
  size_t t, k;
  int batching = m->max_batch_size > 0;
  for (k = 0; k < 64; ++k) seen[k] = -1;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_RequestInputCount(r->request, &count));
  for (t = 0; t < d->input_count; ++t) {
    const aotc_tensor_info_t *info = &d->inputs[t];
    TRITONBACKEND_Input *input = NULL;
    TRITONSERVER_DataType dtype;
    const int64_t *shape;
    uint32_t rank;
    uint64_t bytes;
    TRITONSERVER_Error *e = TRITONBACKEND_RequestInput(r->request, info->name, &input);
    if (e) {
      TRITONSERVER_ErrorDelete(e);
      return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "request is missing input '%s'", info->name);
    }
    RETURN_IF_TRITON_ERROR(TRITONBACKEND_InputProperties(input, NULL, &dtype, &shape, &rank, &bytes, NULL));
    if ((int)dtype != aotc_triton_data_type(info->dtype))
      return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' has the wrong data type: the model "
                                 "takes %s", info->name, aotc_triton_type_name(info->dtype) + 5);
    if (rank != info->rank)
      return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' has %u dims, the model takes %u%s",
                                 info->name, rank, info->rank, batching ? " (the batch dim included)" : "");
    for (k = 0; k < rank; ++k) {
      int idx = info->dim_index[k];
      const aotc_dim_info_t *dim = idx >= 0 ? &d->dims[idx] : NULL;
      if (batching && k == 0) {
        if (shape[0] < 1 || shape[0] > m->max_batch_size)
          return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' batch %lld is outside 1..%d",
                                     info->name, (long long)shape[0], m->max_batch_size);
        if (t == 0) r->rows = (uint64_t)shape[0];
        else if ((uint64_t)shape[0] != r->rows)
          return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' batch %lld differs from input "
                                     "'%s' batch %llu", info->name, (long long)shape[0], d->inputs[0].name,
                                     (unsigned long long)r->rows);
      } else if (!dim) {
        if (shape[k] != (int64_t)info->dims[k])
          return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' dim %zu is %lld, the model "
                                     "takes %llu", info->name, k, (long long)shape[k],
                                     (unsigned long long)info->dims[k]);
      } else {
        if (shape[k] < dim->min || shape[k] > dim->max || shape[k] % dim->divisor)
          return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' dim %zu (%s) is %lld, outside "
                                     "%u..%u%s", info->name, k, dim->name, (long long)shape[k], dim->min,
                                     dim->max, dim->divisor > 1 ? " in its steps" : "");
        if (idx < 64 && seen[idx] >= 0 && seen[idx] != shape[k])
          return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' dim %zu (%s) is %lld, but "
                                     "another input has %s = %lld", info->name, k, dim->name,
                                     (long long)shape[k], dim->name, (long long)seen[idx]);
        if (idx < 64) seen[idx] = shape[k];
      }
      r->shapes[t * AOTC_MAX_RANK + k] = shape[k];
    }
    if (bytes != product(shape, 0, rank) * aotc_dtype_size(info->dtype))
      return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' carries %llu bytes, its shape needs "
                                 "%llu", info->name, (unsigned long long)bytes,
                                 (unsigned long long)(product(shape, 0, rank) * aotc_dtype_size(info->dtype)));
  }
  if (count != d->input_count)
    return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "request has %u inputs, the model takes %zu",
                               count, d->input_count);
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_RequestOutputCount(r->request, &count));
  for (i = 0; i < count; ++i) {
    const char *name;
    size_t index;
    RETURN_IF_TRITON_ERROR(TRITONBACKEND_RequestOutputName(r->request, i, &name));
    for (index = 0; index < d->output_count && strcmp(d->outputs[index].name, name); ++index) {}
    if (index == d->output_count)
      return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "request asks for output '%s', which the "
                                 "model does not have", name);
  }
  if (!batching) r->rows = 1;
  return NULL;
}

/* Do two requests agree on every input dim after the batch? */
static int same_inner_shapes(const model_state_t *m, const request_t *a, const request_t *b) {
  size_t t, k;
  for (t = 0; t < m->desc.input_count; ++t)
    for (k = 1; k < m->desc.inputs[t].rank; ++k)
      if (a->shapes[t * AOTC_MAX_RANK + k] != b->shapes[t * AOTC_MAX_RANK + k]) return 0;
  return 1;
}

/* Copies every buffer of input `name` of a request to dst; checks memory type and size. */
static TRITONSERVER_Error *gather_input(TRITONBACKEND_Request *req, const char *name, char *dst, uint64_t want) {
  TRITONBACKEND_Input *input;
  uint32_t buffers, b;
  uint64_t done = 0;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_RequestInput(req, name, &input));
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_InputProperties(input, NULL, NULL, NULL, NULL, NULL, &buffers));
  for (b = 0; b < buffers; ++b) {
    const void *p;
    uint64_t n;
    TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
    int64_t type_id = 0;
    RETURN_IF_TRITON_ERROR(TRITONBACKEND_InputBuffer(input, b, &p, &n, &type, &type_id));
    if (type == TRITONSERVER_MEMORY_GPU)
      return aotc_backend_errorf(TRITONSERVER_ERROR_UNSUPPORTED, "input '%s' is in GPU memory; the aotc "
                                 "backend takes inputs in host memory", name);
    if (done + n > want)
      return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' carries more than %llu bytes",
                                 name, (unsigned long long)want);
    memcpy(dst + done, p, n);
    done += n;
  }
  if (done != want)
    return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s' carries %llu bytes, its shape needs "
                               "%llu", name, (unsigned long long)done, (unsigned long long)want);
  return NULL;
}

/* Is output `name` requested (all are when the request names none)? */
static int wants_output(TRITONBACKEND_Request *req, const char *name) {
  uint32_t count = 0, i;
  if (TRITONBACKEND_RequestOutputCount(req, &count) || count == 0) return 1;
  for (i = 0; i < count; ++i) {
    const char *n;
    if (!TRITONBACKEND_RequestOutputName(req, i, &n) && !strcmp(n, name)) return 1;
  }
  return 0;
}

/* Builds and sends the response of one request from rows [row0, row0 + r->rows) of the outputs. */
static void respond(instance_state_t *st, request_t *r, uint64_t row0) {
  const aotc_engine_desc_t *d = &st->model->desc;
  TRITONBACKEND_Response *response;
  TRITONSERVER_Error *e = NULL;
  size_t o;
  const int64_t *dims;
  if ((e = TRITONBACKEND_ResponseNew(&response, r->request))) { TRITONSERVER_ErrorDelete(e); return; }
  for (o = 0; o < d->output_count && !e; ++o) {
    const aotc_tensor_info_t *info = &d->outputs[o];
    int64_t shape[AOTC_MAX_RANK];
    uint64_t row_bytes, bytes;
    TRITONBACKEND_Output *output;
    void *buffer;
    TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
    int64_t type_id = 0;
    if (!wants_output(r->request, info->name)) continue;
    dims = st->out_dims + o * AOTC_MAX_RANK;
    memcpy(shape, dims, sizeof shape);
    if (st->model->max_batch_size > 0) shape[0] = (int64_t)r->rows;
    row_bytes = product(dims, 1, st->out_rank[o]) * aotc_dtype_size(info->dtype);
    bytes = product(shape, 0, st->out_rank[o]) * aotc_dtype_size(info->dtype);
    e = TRITONBACKEND_ResponseOutput(response, &output, info->name,
                                     (TRITONSERVER_DataType)aotc_triton_data_type(info->dtype), shape,
                                     (uint32_t)st->out_rank[o]);
    if (!e) e = TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &type, &type_id);
    if (!e && type == TRITONSERVER_MEMORY_GPU)
      e = aotc_backend_errorf(TRITONSERVER_ERROR_UNSUPPORTED, "Triton gave GPU memory for output '%s'", info->name);
    if (!e && bytes) memcpy(buffer, (char *)st->out_buf[o] + (st->model->max_batch_size > 0 ? row0 * row_bytes : 0), bytes);
  }
  TRITONSERVER_ErrorDelete(TRITONBACKEND_ResponseSend(response, AOTC_TRITON_RESPONSE_COMPLETE_FINAL, e));
  TRITONSERVER_ErrorDelete(e);
}

/* Runs requests group[0..n) as one batch and responds to each; a run failure is returned
 * (nothing sent), a response failure is the request's own. */
static TRITONSERVER_Error *run_group(instance_state_t *st, request_t **group, size_t n, uint64_t exec_start) {
  const model_state_t *m = st->model;
  const aotc_engine_desc_t *d = &m->desc;
  int batching = m->max_batch_size > 0;
  uint64_t total = 0, compute_start, compute_end, row;
  size_t t, j;
  for (j = 0; j < n; ++j) total += group[j]->rows;
  for (t = 0; t < d->input_count; ++t) {
    const aotc_tensor_info_t *info = &d->inputs[t];
    int64_t dims[AOTC_MAX_RANK];
    uint64_t row_bytes, offset = 0;
    memcpy(dims, group[0]->shapes + t * AOTC_MAX_RANK, sizeof dims);
    if (batching) dims[0] = (int64_t)total;
    row_bytes = product(dims, batching ? 1 : 0, info->rank) * aotc_dtype_size(info->dtype);
    for (j = 0; j < n; ++j) {
      uint64_t bytes = batching ? group[j]->rows * row_bytes : row_bytes;
      RETURN_IF_TRITON_ERROR(gather_input(group[j]->request, info->name, (char *)st->in_buf[t] + offset, bytes));
      offset += bytes;
    }
    RETURN_IF_TRITON_ERROR(aotc_backend_from_status(
        aotc_context_set_input_shape(st->ctx, info->name, info->rank, dims), "setting the input shape"));
  }
  compute_start = aotc_backend_now_ns(); /* Triton's compute_input: gathering the inputs above */
  RETURN_IF_TRITON_ERROR(aotc_backend_from_status(aotc_context_run(st->ctx), "running the engine"));
  compute_end = aotc_backend_now_ns();
  for (t = 0; t < d->output_count; ++t) {
    RETURN_IF_TRITON_ERROR(aotc_backend_from_status(
        aotc_context_get_output_shape(st->ctx, d->outputs[t].name, &st->out_rank[t],
                                      st->out_dims + t * AOTC_MAX_RANK), "output shape"));
    if (batching && (st->out_rank[t] == 0 || st->out_dims[t * AOTC_MAX_RANK] != (int64_t)total))
      return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "output '%s' has %lld rows for a batch of %llu",
                                 d->outputs[t].name, st->out_rank[t] ? (long long)st->out_dims[t * AOTC_MAX_RANK] : 0LL,
                                 (unsigned long long)total);
  }
  for (j = 0, row = 0; j < n; ++j) {
    respond(st, group[j], row);
    row += group[j]->rows;
  }
  {
    uint64_t exec_end = aotc_backend_now_ns();
    TRITONBACKEND_ModelInstance *instance = st->instance;
    for (j = 0; j < n; ++j)
      TRITONSERVER_ErrorDelete(TRITONBACKEND_ModelInstanceReportStatistics(
          instance, group[j]->request, true, exec_start, compute_start, compute_end, exec_end));
    TRITONSERVER_ErrorDelete(TRITONBACKEND_ModelInstanceReportBatchStatistics(
        instance, total, exec_start, compute_start, compute_end, exec_end));
  }
  return NULL;
}

/* Sends a request's error response and reports it failed. */
static void fail_request(TRITONBACKEND_ModelInstance *instance, request_t *r, uint64_t exec_start) {
  TRITONBACKEND_Response *response = NULL;
  uint64_t t = aotc_backend_now_ns();
  if (!TRITONBACKEND_ResponseNew(&response, r->request))
    TRITONSERVER_ErrorDelete(TRITONBACKEND_ResponseSend(response, AOTC_TRITON_RESPONSE_COMPLETE_FINAL, r->error));
  TRITONSERVER_ErrorDelete(
      TRITONBACKEND_ModelInstanceReportStatistics(instance, r->request, false, exec_start, exec_start, t, t));
}

/* Runs a group; if it fails and holds several requests, runs each alone. */
static void run_or_split(instance_state_t *st, request_t **group, size_t n, uint64_t exec_start) {
  TRITONSERVER_Error *e = run_group(st, group, n, exec_start);
  size_t j;
  if (!e) return;
  if (n == 1) {
    group[0]->error = e;
    fail_request(st->instance, group[0], exec_start);
    return;
  }
  TRITONSERVER_ErrorDelete(e);
  for (j = 0; j < n; ++j) run_or_split(st, group + j, 1, exec_start);
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *instance,
                                                       TRITONBACKEND_Request **requests, uint32_t count) {
  void *state = NULL;
  instance_state_t *st;
  request_t *reqs;
  request_t **group;
  int64_t *shapes;
  uint64_t exec_start = aotc_backend_now_ns(), rows = 0;
  size_t n = 0, per_request;
  uint32_t i;
  int mbs;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
  st = (instance_state_t *)state;
  st->instance = instance;
  mbs = st->model->max_batch_size;
  per_request = (st->model->desc.input_count + 1) * AOTC_MAX_RANK;
  reqs = (request_t *)calloc(count + 1, sizeof *reqs);
  group = (request_t **)calloc(count + 1, sizeof *group);
  shapes = (int64_t *)calloc((size_t)(count + 1) * per_request, sizeof *shapes);
  if (!reqs || !group || !shapes) {
    free(reqs); free(group); free(shapes);
    return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory"); /* Triton fails every request */
  }
  /* In request order: a good request joins the open group if it fits, else the group runs
   * first; a bad one runs the open group, then gets its error. */
  for (i = 0; i < count; ++i) {
    request_t *r = &reqs[i];
    r->request = requests[i];
    r->shapes = shapes + (size_t)i * per_request;
    r->error = check_request(st->model, r);
    if (n && (r->error || mbs <= 0 || rows + r->rows > (uint64_t)mbs || !same_inner_shapes(st->model, group[0], r))) {
      run_or_split(st, group, n, aotc_backend_now_ns()); /* waiting on earlier groups is queue time */
      n = 0;
      rows = 0;
    }
    if (r->error) fail_request(instance, r, exec_start);
    else { group[n++] = r; rows += r->rows; }
  }
  if (n) run_or_split(st, group, n, aotc_backend_now_ns());
  for (i = 0; i < count; ++i) {
    TRITONSERVER_ErrorDelete(reqs[i].error);
    TRITONSERVER_ErrorDelete(TRITONBACKEND_RequestRelease(requests[i], AOTC_TRITON_REQUEST_RELEASE_ALL));
  }
  free(reqs);
  free(group);
  free(shapes);
  return NULL;
}
