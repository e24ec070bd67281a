/* engine_config.h - what a Triton model configuration must say about an aotc engine.
 *
 * The engine knows its inputs, outputs, dtypes and dim ranges, so the
 * backend can write the model configuration itself (Triton's auto-complete)
 * and refuse one that disagrees with the engine, saying what differs. An
 * engine serves batches when dim 0 of every input is one dynamic dim that
 * starts at 1 with divisor 1, appears nowhere else in the inputs, and dim 0
 * of every output is computed from it and equals it: then max_batch_size may be up to that
 * dim's maximum and Triton's dynamic batcher concatenates requests along it.
 */
#ifndef AOTC_ENGINE_CONFIG_H_
#define AOTC_ENGINE_CONFIG_H_

#include <stddef.h>

#include "aotc_runtime.h"
#include "json_tree.h"

typedef struct aotc_engine_desc_s {
  size_t input_count, output_count;
  aotc_tensor_info_t *inputs, *outputs; /* names owned by the engine */
  size_t dim_count;
  aotc_dim_info_t *dims;
  int batch_dim;      /* engine dim index of the batch, -1 when the engine cannot batch */
  uint32_t batch_max; /* its maximum (0 when batch_dim < 0) */
} aotc_engine_desc_t;

/* Fills desc from the engine (freed with aotc_engine_desc_free). A batch dim must also pass
 * a probe: on a temporary cpu context the engine's shape program must give every output dim
 * 0 equal to the batch, at 1 and at the maximum, and the same other dims (nothing runs). An
 * engine without a host build cannot be probed and keeps the structural rule above. */
aotc_status_t aotc_engine_desc_init(aotc_engine_t *engine, aotc_engine_desc_t *desc);
void aotc_engine_desc_free(aotc_engine_desc_t *desc);

/* Triton's name for an aotc dtype, e.g. "TYPE_FP32"; NULL if it has none. */
const char *aotc_triton_type_name(aotc_dtype_t dtype);
/* TRITONSERVER_DataType value of an aotc dtype (see triton_api.h). */
int aotc_triton_data_type(aotc_dtype_t dtype);
size_t aotc_dtype_size(aotc_dtype_t dtype);

/* Checks `config` (Triton's JSON model configuration) against the engine.
 * With auto_complete it first fills in what the config leaves out: inputs,
 * outputs, max_batch_size (the batch dim's maximum when the config names no
 * tensors) and dynamic_batching for a batching engine; *changed says whether
 * it did. Returns 0 and the max_batch_size to serve with, or -1 with a
 * one-line reason in err naming what differs. */
int aotc_engine_config_check(const aotc_engine_desc_t *desc, jt_value_t *config, int auto_complete,
                             int *changed, int *out_max_batch_size, char *err, size_t err_len);

#endif /* AOTC_ENGINE_CONFIG_H_ */
