/* triton_aotc.c - libtriton_aotc.so, a Triton Inference Server backend that runs aotc engines.
 *
 * A model's version folder holds model.engine. Model initialization loads it
 * once, writes or checks the model configuration against it (engine_config.h),
 * and each instance gets its own execution context: KIND_GPU instances on the
 * cuda device of their GPU, the others on the cpu device. Execute validates
 * every request on its own (a bad one gets its own error response), then runs
 * the good ones: with max_batch_size > 0 consecutive requests of equal shapes
 * are concatenated along the batch dim, run once and split back; otherwise
 * each runs alone. Responses are sent in request order, and Triton's
 * statistics get each request's and each run's times.
 *
 * Written on aotc_runtime.h alone; the Triton API it uses is declared in
 * triton_api.h. C99, libc and pthreads.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aotc_runtime.h"
#include "engine_config.h"
#include "json_tree.h"
#include "triton_api.h"
#include "backend_state.h"

uint64_t aotc_backend_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

TRITONSERVER_Error *aotc_backend_errorf(TRITONSERVER_Error_Code code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return TRITONSERVER_ErrorNew(code, msg);
}

/* A Triton error from an aotc status (which it frees). */
TRITONSERVER_Error *aotc_backend_from_status(aotc_status_t s, const char *what) {
  TRITONSERVER_Error *e;
  if (!s) return NULL;
  e = aotc_backend_errorf(aotc_status_code(s) == AOTC_STATUS_INVALID_ARGUMENT ? TRITONSERVER_ERROR_INVALID_ARG
                                                                  : TRITONSERVER_ERROR_INTERNAL,
             "%s: %s", what, aotc_status_message(s));
  aotc_status_free(s);
  return e;
}

void aotc_backend_log(TRITONSERVER_LogLevel level, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  TRITONSERVER_ErrorDelete(TRITONSERVER_LogMessage(level, "triton_aotc.c", line, msg));
}

TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend) {
  uint32_t major = 0, minor = 0;
  (void)backend;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != AOTC_TRITONBACKEND_API_MAJOR || minor < AOTC_TRITONBACKEND_API_MINOR_MIN)
    return aotc_backend_errorf(TRITONSERVER_ERROR_UNSUPPORTED, "aotc backend needs TRITONBACKEND API %d.%d or a later 1.x, "
                  "this server has %u.%u", AOTC_TRITONBACKEND_API_MAJOR, AOTC_TRITONBACKEND_API_MINOR_MIN,
                  major, minor);
  aotc_backend_log(TRITONSERVER_LOG_INFO, __LINE__, "aotc backend: %s, TRITONBACKEND API %u.%u",
          aotc_runtime_version(), major, minor);
  return NULL;
}

static void model_state_free(model_state_t *m) {
  size_t i;
  if (!m) return;
  for (i = 0; i < AOTC_BACKEND_MAX_GPUS; ++i) aotc_engine_release(m->engines[i]);
  aotc_engine_desc_free(&m->desc);
  pthread_mutex_destroy(&m->lock);
  free(m->engine_path);
  free(m->name);
  free(m);
}

/* Reads Triton's model configuration, checks (and completes) it against the engine. */
static TRITONSERVER_Error *configure(TRITONBACKEND_Model *model, model_state_t *m) {
  TRITONSERVER_Message *msg = NULL;
  const char *json;
  size_t json_size;
  char err[768];
  int changed = 0, mbs = 0;
  bool auto_complete = false;
  jt_value_t *config;
  TRITONSERVER_Error *e;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelConfig(model, AOTC_TRITON_CONFIG_VERSION, &msg));
  if ((e = TRITONSERVER_MessageSerializeToJson(msg, &json, &json_size))) {
    TRITONSERVER_ErrorDelete(TRITONSERVER_MessageDelete(msg));
    return e;
  }
  config = jt_parse(json, json_size, err, sizeof err);
  TRITONSERVER_ErrorDelete(TRITONSERVER_MessageDelete(msg));
  if (!config)
    return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "model '%s': cannot read its configuration: %s",
                               m->name, err);
  if ((e = TRITONBACKEND_ModelAutoCompleteConfig(model, &auto_complete))) { jt_free(config); return e; }
  if (aotc_engine_config_check(&m->desc, config, auto_complete, &changed, &mbs, err, sizeof err)) {
    jt_free(config);
    return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': config.pbtxt contradicts %s: %s", m->name,
                  m->engine_path, err);
  }
  m->max_batch_size = mbs;
  if (changed) {
    size_t n;
    char *text = jt_serialize(config, &n);
    if (!text) { jt_free(config); return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory"); }
    e = TRITONSERVER_MessageNewFromSerializedJson(&msg, text, n);
    free(text);
    if (!e) {
      e = TRITONBACKEND_ModelSetConfig(model, AOTC_TRITON_CONFIG_VERSION, msg);
      TRITONSERVER_ErrorDelete(TRITONSERVER_MessageDelete(msg));
    }
  }
  jt_free(config);
  return e;
}

/* Reads default_model_filename (else model.engine) from the config JSON. */
static TRITONSERVER_Error *engine_file_name(TRITONBACKEND_Model *model, char *out, size_t n) {
  TRITONSERVER_Message *msg = NULL;
  const char *json;
  size_t size;
  jt_value_t *config;
  TRITONSERVER_Error *e;
  snprintf(out, n, "model.engine");
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelConfig(model, AOTC_TRITON_CONFIG_VERSION, &msg));
  e = TRITONSERVER_MessageSerializeToJson(msg, &json, &size);
  if (!e && (config = jt_parse(json, size, NULL, 0))) {
    const char *f = jt_get_str(config, "default_model_filename");
    if (f[0]) snprintf(out, n, "%s", f);
    jt_free(config);
  }
  TRITONSERVER_ErrorDelete(TRITONSERVER_MessageDelete(msg));
  return e;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *model) {
  const char *name, *location;
  uint64_t version;
  TRITONBACKEND_ArtifactType artifact;
  char file[256];
  size_t n;
  TRITONSERVER_Error *e;
  aotc_status_t s;
  model_state_t *m;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelName(model, &name));
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelVersion(model, &version));
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelRepository(model, &artifact, &location));
  if (artifact != TRITONBACKEND_ARTIFACT_FILESYSTEM)
    return aotc_backend_errorf(TRITONSERVER_ERROR_UNSUPPORTED, "model '%s': the aotc backend reads engines from a file system "
                  "repository only", name);
  RETURN_IF_TRITON_ERROR(engine_file_name(model, file, sizeof file));
  if (!(m = (model_state_t *)calloc(1, sizeof *m))) return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  pthread_mutex_init(&m->lock, NULL);
  n = strlen(location) + strlen(file) + 32;
  m->name = (char *)malloc(strlen(name) + 1);
  m->engine_path = (char *)malloc(n);
  if (!m->name || !m->engine_path) { model_state_free(m); return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory"); }
  strcpy(m->name, name);
  snprintf(m->engine_path, n, "%s/%llu/%s", location, (unsigned long long)version, file);
  if ((s = aotc_engine_load_from_file(m->engine_path, NULL, &m->engines[0]))) {
    e = aotc_backend_from_status(s, m->engine_path);
    model_state_free(m);
    return e;
  }
  if ((s = aotc_engine_desc_init(m->engines[0], &m->desc)) || !m->desc.inputs) {
    e = s ? aotc_backend_from_status(s, m->engine_path) : aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory");
    model_state_free(m);
    return e;
  }
  if ((e = configure(model, m))) { model_state_free(m); return e; }
  aotc_backend_log(TRITONSERVER_LOG_INFO, __LINE__, "aotc: model '%s' version %llu: %s, %zu inputs, %zu outputs, "
          "max_batch_size %d", name, (unsigned long long)version, m->engine_path, m->desc.input_count,
          m->desc.output_count, m->max_batch_size);
  if ((e = TRITONBACKEND_ModelSetState(model, m))) model_state_free(m);
  return e;
}

TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model) {
  void *state = NULL;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelState(model, &state));
  model_state_free((model_state_t *)state);
  return NULL;
}

static void instance_state_free(instance_state_t *st) {
  size_t i;
  if (!st) return;
  aotc_context_release(st->ctx);
  for (i = 0; st->in_buf && i < st->model->desc.input_count; ++i) free(st->in_buf[i]);
  for (i = 0; st->out_buf && i < st->model->desc.output_count; ++i) free(st->out_buf[i]);
  free(st->in_buf);
  free(st->out_buf);
  free(st->out_dims);
  free(st->out_rank);
  free(st);
}

/* The engine for cuda device `gpu` (loaded once per device; engines[0] is already loaded). */
static TRITONSERVER_Error *engine_for_gpu(model_state_t *m, int32_t gpu, aotc_engine_t **out) {
  aotc_status_t s = NULL;
  if (gpu < 0 || gpu >= AOTC_BACKEND_MAX_GPUS) return aotc_backend_errorf(TRITONSERVER_ERROR_INVALID_ARG, "GPU %d is out of range", gpu);
  pthread_mutex_lock(&m->lock);
  if (!m->engines[gpu]) {
    aotc_engine_options_t options;
    aotc_engine_options_initialize(&options);
    options.cuda_device_ordinal = gpu;
    s = aotc_engine_load_from_file(m->engine_path, &options, &m->engines[gpu]);
  }
  *out = m->engines[gpu];
  pthread_mutex_unlock(&m->lock);
  return aotc_backend_from_status(s, m->engine_path);
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *instance) {
  TRITONBACKEND_Model *model;
  TRITONSERVER_InstanceGroupKind kind;
  int32_t gpu = 0;
  void *mstate;
  const char *iname;
  model_state_t *m;
  instance_state_t *st;
  aotc_engine_t *engine;
  aotc_device_t device;
  aotc_status_t s = NULL;
  TRITONSERVER_Error *e;
  size_t i;
  int oom = 0;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelInstanceName(instance, &iname));
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelInstanceKind(instance, &kind));
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelInstanceDeviceId(instance, &gpu));
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelState(model, &mstate));
  m = (model_state_t *)mstate;
  device = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU ? AOTC_DEVICE_CUDA : AOTC_DEVICE_CPU;
  engine = m->engines[0];
  if (device == AOTC_DEVICE_CUDA && gpu != 0) RETURN_IF_TRITON_ERROR(engine_for_gpu(m, gpu, &engine));
  if (!(st = (instance_state_t *)calloc(1, sizeof *st))) return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  st->model = m;
  st->in_buf = (void **)calloc(m->desc.input_count + 1, sizeof(void *));
  st->out_buf = (void **)calloc(m->desc.output_count + 1, sizeof(void *));
  st->out_dims = (int64_t *)calloc((m->desc.output_count + 1) * AOTC_MAX_RANK, sizeof(int64_t));
  st->out_rank = (size_t *)calloc(m->desc.output_count + 1, sizeof(size_t));
  st->instance = instance;
  if (!st->in_buf || !st->out_buf || !st->out_dims || !st->out_rank) {
    instance_state_free(st);
    return aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  }
  if ((s = aotc_context_create(engine, device, &st->ctx))) {
    e = aotc_backend_from_status(s, device == AOTC_DEVICE_CUDA ? "creating a cuda context" : "creating a cpu context");
    instance_state_free(st);
    return e;
  }
  /* Host buffers of each tensor's largest size, bound once: a batch up to the max always fits. */
  for (i = 0; !s && !oom && i < m->desc.input_count; ++i) {
    const aotc_tensor_info_t *t = &m->desc.inputs[i];
    if (!(st->in_buf[i] = malloc(t->byte_size ? t->byte_size : 1))) oom = 1;
    else s = aotc_context_bind_host_input(st->ctx, t->name, st->in_buf[i], t->byte_size);
  }
  for (i = 0; !s && !oom && i < m->desc.output_count; ++i) {
    const aotc_tensor_info_t *t = &m->desc.outputs[i];
    if (!(st->out_buf[i] = malloc(t->byte_size ? t->byte_size : 1))) oom = 1;
    else s = aotc_context_bind_host_output(st->ctx, t->name, st->out_buf[i], t->byte_size);
  }
  if (s || oom) {
    e = s ? aotc_backend_from_status(s, "binding buffers") : aotc_backend_errorf(TRITONSERVER_ERROR_INTERNAL, "out of memory");
    instance_state_free(st);
    return e;
  }
  aotc_backend_log(TRITONSERVER_LOG_INFO, __LINE__, "aotc: instance '%s' on %s", iname,
          device == AOTC_DEVICE_CUDA ? "cuda" : "cpu");
  if ((e = TRITONBACKEND_ModelInstanceSetState(instance, st))) instance_state_free(st);
  return e;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *instance) {
  void *state = NULL;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
  instance_state_free((instance_state_t *)state);
  return NULL;
}
