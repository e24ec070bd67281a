/* engine_config.c - model configuration from and against an engine (see engine_config.h). */
#include "engine_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { aotc_dtype_t dtype; const char *name; int triton; size_t size; } kTypes[] = {
    {AOTC_DTYPE_F32, "TYPE_FP32", 11, 4}, {AOTC_DTYPE_F16, "TYPE_FP16", 10, 2},
    {AOTC_DTYPE_BF16, "TYPE_BF16", 14, 2}, {AOTC_DTYPE_I64, "TYPE_INT64", 9, 8},
    {AOTC_DTYPE_I32, "TYPE_INT32", 8, 4}, {AOTC_DTYPE_I8, "TYPE_INT8", 6, 1},
    {AOTC_DTYPE_U8, "TYPE_UINT8", 2, 1}, {AOTC_DTYPE_BOOL, "TYPE_BOOL", 1, 1},
    {AOTC_DTYPE_F64, "TYPE_FP64", 12, 8}, {AOTC_DTYPE_I16, "TYPE_INT16", 7, 2},
    {AOTC_DTYPE_U16, "TYPE_UINT16", 3, 2}, {AOTC_DTYPE_U32, "TYPE_UINT32", 4, 4},
    {AOTC_DTYPE_U64, "TYPE_UINT64", 5, 8},
    /* Triton has no float8 or int4 type: such engine I/O is refused (a Cast at the edge fixes it) */
};

const char *aotc_triton_type_name(aotc_dtype_t dtype) {
  size_t i;
  for (i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i)
    if (kTypes[i].dtype == dtype) return kTypes[i].name;
  return NULL;
}

int aotc_triton_data_type(aotc_dtype_t dtype) {
  size_t i;
  for (i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i)
    if (kTypes[i].dtype == dtype) return kTypes[i].triton;
  return 0;
}

size_t aotc_dtype_size(aotc_dtype_t dtype) {
  size_t i;
  for (i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i)
    if (kTypes[i].dtype == dtype) return kTypes[i].size;
  return 0;
}

void aotc_engine_desc_free(aotc_engine_desc_t *d) {
  free(d->inputs);
  free(d->outputs);
  free(d->dims);
  memset(d, 0, sizeof *d);
}

/* The batch dim of the engine per the rule in engine_config.h, or -1. */
static int find_batch_dim(const aotc_engine_desc_t *d) {
  size_t i, k;
  int b;
  if (d->input_count == 0 || d->inputs[0].rank == 0) return -1;
  b = d->inputs[0].dim_index[0];
  if (b < 0 || (size_t)b >= d->dim_count || d->dims[b].min != 1 || d->dims[b].divisor != 1) return -1;
  for (i = 0; i < d->input_count; ++i) {
    if (d->inputs[i].rank == 0 || d->inputs[i].dim_index[0] != b) return -1;
    for (k = 1; k < d->inputs[i].rank; ++k)
      if (d->inputs[i].dim_index[k] == b) return -1;
  }
  for (i = 0; i < d->output_count; ++i)
    if (d->outputs[i].rank == 0 || d->outputs[i].dim_index[0] != AOTC_DIM_COMPUTED) return -1;
  return b;
}

/* Sets every input's shape with the batch dim at b and the other dynamic dims at their minimum. */
static aotc_status_t set_probe_shapes(aotc_context_t *ctx, const aotc_engine_desc_t *d, int64_t b) {
  size_t i, k;
  for (i = 0; i < d->input_count; ++i) {
    const aotc_tensor_info_t *t = &d->inputs[i];
    int64_t dims[AOTC_MAX_RANK];
    for (k = 0; k < t->rank; ++k) {
      int idx = t->dim_index[k];
      dims[k] = idx == d->batch_dim ? b : idx >= 0 ? (int64_t)d->dims[idx].min : (int64_t)t->dims[k];
    }
    AOTC_RETURN_IF_ERROR(aotc_context_set_input_shape(ctx, t->name, t->rank, dims));
  }
  return NULL;
}

/* Does every output's dim 0 follow the batch (1 and the max), its other dims not? The shape
 * program answers without running anything; a cpu context asks it. 1 yes, 0 no, -1 cannot tell. */
static int outputs_follow_batch(aotc_engine_t *engine, const aotc_engine_desc_t *d) {
  aotc_context_t *ctx = NULL;
  int64_t first[AOTC_MAX_RANK], dims[AOTC_MAX_RANK];
  int64_t batches[2];
  size_t o, k, rank, first_rank = 0;
  int pass, ok = 1;
  aotc_status_t s = aotc_context_create(engine, AOTC_DEVICE_CPU, &ctx);
  if (s) { aotc_status_free(s); return -1; }
  batches[0] = 1;
  batches[1] = d->batch_max;
  for (o = 0; ok && o < d->output_count; ++o) {
    for (pass = 0; ok && pass < 2; ++pass) {
      s = set_probe_shapes(ctx, d, batches[pass]);
      if (!s) s = aotc_context_get_output_shape(ctx, d->outputs[o].name, &rank, dims);
      if (s) { aotc_status_free(s); ok = 0; break; }
      if (rank == 0 || dims[0] != batches[pass]) ok = 0;
      if (pass == 0) { memcpy(first, dims, sizeof first); first_rank = rank; }
      else if (rank != first_rank) ok = 0;
      else for (k = 1; k < rank; ++k) if (dims[k] != first[k]) ok = 0;
    }
  }
  aotc_context_release(ctx);
  return ok;
}

aotc_status_t aotc_engine_desc_init(aotc_engine_t *engine, aotc_engine_desc_t *d) {
  size_t i;
  memset(d, 0, sizeof *d);
  d->input_count = aotc_engine_input_count(engine);
  d->output_count = aotc_engine_output_count(engine);
  d->dim_count = aotc_engine_dim_count(engine);
  d->inputs = (aotc_tensor_info_t *)calloc(d->input_count + 1, sizeof *d->inputs);
  d->outputs = (aotc_tensor_info_t *)calloc(d->output_count + 1, sizeof *d->outputs);
  d->dims = (aotc_dim_info_t *)calloc(d->dim_count + 1, sizeof *d->dims);
  if (!d->inputs || !d->outputs || !d->dims) {
    aotc_engine_desc_free(d);
    return NULL; /* reported by the caller as out of memory: inputs == NULL */
  }
  for (i = 0; i < d->input_count; ++i) {
    aotc_status_t s = aotc_engine_input_info(engine, i, &d->inputs[i]);
    if (s) { aotc_engine_desc_free(d); return s; }
  }
  for (i = 0; i < d->output_count; ++i) {
    aotc_status_t s = aotc_engine_output_info(engine, i, &d->outputs[i]);
    if (s) { aotc_engine_desc_free(d); return s; }
  }
  for (i = 0; i < d->dim_count; ++i) {
    aotc_status_t s = aotc_engine_dim_info(engine, i, &d->dims[i]);
    if (s) { aotc_engine_desc_free(d); return s; }
  }
  d->batch_dim = find_batch_dim(d);
  d->batch_max = d->batch_dim >= 0 ? d->dims[d->batch_dim].max : 0;
  if (d->batch_dim >= 0 && outputs_follow_batch(engine, d) == 0) {
    d->batch_dim = -1; /* e.g. an output that flattens or reduces the batch */
    d->batch_max = 0;
  }
  return NULL;
}

/* Config dim k of tensor t (batched: the dims after the batch): -1 where dynamic. */
static int64_t config_dim(const aotc_tensor_info_t *t, size_t k) {
  return t->dim_index[k] == AOTC_DIM_STATIC ? (int64_t)t->dims[k] : -1;
}

static void format_dims(char *out, size_t n, const aotc_tensor_info_t *t, size_t first) {
  size_t k, used = 0;
  used += (size_t)snprintf(out, n, "[");
  for (k = first; k < t->rank && used < n; ++k)
    used += (size_t)snprintf(out + used, n - used, "%s%lld", k > first ? "," : "", (long long)config_dim(t, k));
  if (used < n) snprintf(out + used, n - used, "]");
}

static jt_value_t *tensor_json(const aotc_tensor_info_t *t, size_t first) {
  jt_value_t *o = jt_new(JT_OBJECT, NULL), *dims = jt_new(JT_ARRAY, NULL);
  size_t k;
  int bad = !o || !dims;
  for (k = first; k < t->rank && !bad; ++k) bad = jt_append(dims, jt_new_int(config_dim(t, k)));
  if (bad || jt_set(o, "name", jt_new(JT_STRING, t->name)) ||
      jt_set(o, "data_type", jt_new(JT_STRING, aotc_triton_type_name(t->dtype))) ||
      jt_set(o, "dims", dims)) {
    if (bad) jt_free(dims);
    jt_free(o);
    return NULL;
  }
  return o;
}

/* Does config entry `c` describe tensor t? 0 if so, else -1 with the difference in err. */
static int check_tensor(const char *kind, const aotc_tensor_info_t *t, const jt_value_t *c, size_t first,
                        const aotc_engine_desc_t *d, char *err, size_t err_len) {
  const char *type = jt_get_str(c, "data_type");
  const jt_value_t *dims = jt_get(c, "dims");
  char want[160];
  size_t k, n = t->rank - first;
  int ok = dims && dims->kind == JT_ARRAY && dims->count == n;
  format_dims(want, sizeof want, t, first);
  if (strcmp(type, aotc_triton_type_name(t->dtype))) {
    snprintf(err, err_len, "%s '%s' data_type %s, the engine's is %s", kind, t->name, type[0] ? type : "(none)",
             aotc_triton_type_name(t->dtype));
    return -1;
  }
  for (k = 0; ok && k < n; ++k) {
    int64_t v, e = config_dim(t, first + k);
    int idx = t->dim_index[first + k];
    if (jt_int(dims->items[k], &v)) { ok = 0; break; }
    if (e >= 0) ok = v == e;
    else if (idx >= 0) ok = v == -1 || (v >= d->dims[idx].min && v <= d->dims[idx].max);
    else ok = v >= -1;
  }
  if (!ok) {
    char have[160];
    size_t used = (size_t)snprintf(have, sizeof have, "[");
    for (k = 0; dims && dims->kind == JT_ARRAY && k < dims->count && used < sizeof have; ++k)
      used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", k ? "," : "",
                               dims->items[k]->text ? dims->items[k]->text : "?");
    if (used < sizeof have) snprintf(have + used, sizeof have - used, "]");
    snprintf(err, err_len, "%s '%s' dims %s, the engine's are %s%s", kind, t->name, have, want,
             first ? " after the batch dim" : "");
    return -1;
  }
  return 0;
}

/* Checks (and with auto_complete fills) the config's "input" or "output" list. */
static int check_list(const char *key, const char *kind, const aotc_tensor_info_t *ts, size_t count,
                      jt_value_t *config, int auto_complete, size_t first, const aotc_engine_desc_t *d,
                      int *changed, char *err, size_t err_len) {
  jt_value_t *list = jt_get(config, key);
  size_t i, j;
  if (!list || list->kind != JT_ARRAY) {
    if (jt_set(config, key, jt_new(JT_ARRAY, NULL))) { snprintf(err, err_len, "out of memory"); return -1; }
    list = jt_get(config, key);
  }
  for (j = 0; j < list->count; ++j) {
    const char *name = jt_get_str(list->items[j], "name");
    for (i = 0; i < count && strcmp(ts[i].name, name); ++i) {}
    if (i == count) {
      snprintf(err, err_len, "%s '%s' is not an %s of the engine", kind, name, kind);
      return -1;
    }
    if (check_tensor(kind, &ts[i], list->items[j], first, d, err, err_len)) return -1;
  }
  for (i = 0; i < count; ++i) {
    for (j = 0; j < list->count && strcmp(jt_get_str(list->items[j], "name"), ts[i].name); ++j) {}
    if (j < list->count) continue;
    if (!auto_complete) {
      snprintf(err, err_len, "the engine's %s '%s' is missing (auto-complete is off)", kind, ts[i].name);
      return -1;
    }
    if (jt_append(list, tensor_json(&ts[i], first))) { snprintf(err, err_len, "out of memory"); return -1; }
    *changed = 1;
  }
  return 0;
}

static int list_len(const jt_value_t *config, const char *key) {
  const jt_value_t *v = jt_get(config, key);
  return v && v->kind == JT_ARRAY ? (int)v->count : 0;
}

int aotc_engine_config_check(const aotc_engine_desc_t *d, jt_value_t *config, int auto_complete,
                             int *changed, int *out_mbs, char *err, size_t err_len) {
  int64_t mbs = 0;
  const jt_value_t *m = jt_get(config, "max_batch_size");
  size_t i, first;
  *changed = 0;
  *out_mbs = 0;
  for (i = 0; i < d->input_count + d->output_count; ++i) {
    const aotc_tensor_info_t *t = i < d->input_count ? &d->inputs[i] : &d->outputs[i - d->input_count];
    if (!aotc_triton_type_name(t->dtype)) {
      snprintf(err, err_len, "tensor '%s' has a dtype Triton cannot carry", t->name);
      return -1;
    }
  }
  if (m && jt_int(m, &mbs)) { snprintf(err, err_len, "max_batch_size is not an integer"); return -1; }
  if (mbs < 0) { snprintf(err, err_len, "max_batch_size %lld is negative", (long long)mbs); return -1; }
  if (mbs == 0 && auto_complete && d->batch_dim >= 0 && !list_len(config, "input") &&
      !list_len(config, "output")) {
    mbs = d->batch_max;
    if (jt_set(config, "max_batch_size", jt_new_int(mbs))) { snprintf(err, err_len, "out of memory"); return -1; }
    *changed = 1;
  }
  if (mbs > 0 && d->batch_dim < 0) {
    snprintf(err, err_len, "max_batch_size %lld, but the engine has no dynamic batch dim (dim 0 of every "
             "input, starting at 1); serve it with max_batch_size 0", (long long)mbs);
    return -1;
  }
  if (mbs > (int64_t)d->batch_max && d->batch_dim >= 0) {
    snprintf(err, err_len, "max_batch_size %lld, but the engine's batch dim '%s' ranges 1..%u", (long long)mbs,
             d->dims[d->batch_dim].name, d->batch_max);
    return -1;
  }
  first = mbs > 0 ? 1 : 0;
  if (check_list("input", "input", d->inputs, d->input_count, config, auto_complete, first, d, changed, err,
                 err_len) ||
      check_list("output", "output", d->outputs, d->output_count, config, auto_complete, first, d, changed,
                 err, err_len))
    return -1;
  if (mbs > 0 && auto_complete && !jt_get(config, "dynamic_batching") && !jt_get(config, "sequence_batching") &&
      !jt_get(config, "ensemble_scheduling")) {
    if (jt_set(config, "dynamic_batching", jt_new(JT_OBJECT, NULL))) { snprintf(err, err_len, "out of memory"); return -1; }
    *changed = 1;
  }
  *out_mbs = (int)mbs;
  return 0;
}
