/* backend_state.h - the aotc Triton backend's model and instance state, shared by
 * triton_aotc.c (initialization) and triton_execute.c (running requests). */
#ifndef AOTC_BACKEND_STATE_H_
#define AOTC_BACKEND_STATE_H_

#include <pthread.h>
#include <stdint.h>

#include "aotc_runtime.h"
#include "engine_config.h"
#include "triton_api.h"

#define AOTC_BACKEND_MAX_GPUS 64

typedef struct {
  char *name;
  aotc_engine_t *engines[AOTC_BACKEND_MAX_GPUS]; /* [0] serves cpu instances and GPU 0 */
  char *engine_path;
  aotc_engine_desc_t desc;
  int max_batch_size;
  pthread_mutex_t lock;
} model_state_t;

typedef struct {
  model_state_t *model;
  aotc_context_t *ctx;
  void **in_buf, **out_buf;  /* host buffers of each tensor's largest size */
  int64_t *out_dims;          /* output_count x AOTC_MAX_RANK: output shapes of the last run */
  size_t *out_rank;
  TRITONBACKEND_ModelInstance *instance;
} instance_state_t;

uint64_t aotc_backend_now_ns(void);
TRITONSERVER_Error *aotc_backend_errorf(TRITONSERVER_Error_Code code, const char *fmt, ...);
/* A Triton error "what: message" from an aotc status, which it frees; NULL for NULL. */
TRITONSERVER_Error *aotc_backend_from_status(aotc_status_t s, const char *what);
void aotc_backend_log(TRITONSERVER_LogLevel level, int line, const char *fmt, ...);

#define RETURN_IF_TRITON_ERROR(expr) \
  do { TRITONSERVER_Error *e_ = (expr); if (e_) return e_; } while (0)

#endif /* AOTC_BACKEND_STATE_H_ */
