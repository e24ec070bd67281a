/* shape.c - dynamic shapes: input shapes, the shape program, output shapes.
 *
 * An engine with dynamic dims carries a shape program (plan_section.py):
 * registers 0..dim_count-1 hold the dims' values, taken from the input
 * shapes; op k computes register dim_count + k with Python's integer
 * semantics (floor division and modulo round toward negative infinity);
 * checks are registers that must be nonzero. Launch grids, launch predicates
 * (size-bucket variants), kernel size arguments and output dims read the
 * registers. The program runs when a run (or get_output_shape) finds the
 * input shapes changed, into registers the context preallocated: nothing
 * here allocates, except a status to report an error.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "aotc_internal.h"

#define INVALID(...) aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

static aotc_status_t find_input(const aotc_engine_t *e, const char *name, uint32_t *out) {
  for (uint32_t i = 0; i < e->input_count; ++i)
    if (strcmp(e->tensors[i].name, name) == 0) {
      *out = i;
      return NULL;
    }
  return aotc_make_status(AOTC_STATUS_NOT_FOUND, "engine has no input named '%s'", name);
}

aotc_status_t aotc_context_set_input_shape(aotc_context_t *x, const char *name, size_t rank,
                                           const int64_t *dims) {
  if (!x || !name || (!dims && rank))
    return INVALID("context, name or dims is NULL");
  const aotc_engine_t *e = x->engine;
  uint32_t i = 0;
  AOTC_RETURN_IF_ERROR(find_input(e, name, &i));
  const aotc_tensor_t *t = &e->tensors[i];
  if (rank != t->rank)
    return INVALID("input '%s' has rank %u, got a shape of rank %zu", name, t->rank, rank);
  for (uint32_t k = 0; k < t->rank; ++k) {
    int64_t v = dims[k];
    if (t->reg[k] < 0) {
      if (v < 0 || (uint64_t)v != t->dims[k])
        return INVALID("input '%s' dim %u is %lld, the engine's is %llu (static)", name, k, (long long)v,
                       (unsigned long long)t->dims[k]);
      continue;
    }
    const aotc_dim_t *d = &e->dims[t->reg[k]];
    if (v < (int64_t)d->min || v > (int64_t)d->max)
      return INVALID("input '%s' dim %u (%s) is %lld, outside %u..%u", name, k, d->name, (long long)v,
                     d->min, d->max);
    if (v % d->divisor)
      return INVALID("input '%s' dim %u (%s) is %lld, not a multiple of %u (range %u..%u)", name, k, d->name,
                     (long long)v, d->divisor, d->min, d->max);
  }
  int64_t *slot = x->in_shapes + (size_t)i * AOTC_MAX_RANK;
  if (x->in_set[i] && (rank == 0 || memcmp(slot, dims, rank * sizeof *dims) == 0)) return NULL;
  if (rank) memcpy(slot, dims, rank * sizeof *dims);
  x->in_set[i] = 1;
  if (t->dynamic) x->shape_dirty = 1;
  return NULL;
}

/* "batch=4, seq=7": the dim values, for messages about the whole shape. */
static const char *dims_text(const aotc_context_t *x, char *buf, size_t len) {
  const aotc_engine_t *e = x->engine;
  size_t n = 0;
  buf[0] = 0;
  for (uint32_t d = 0; d < e->dim_count && n < len; ++d) {
    int w = snprintf(buf + n, len - n, "%s%s=%lld", d ? ", " : "", e->dims[d].name, (long long)x->regs[d]);
    if (w < 0) break;
    n += (size_t)w;
  }
  return buf;
}

/* Registers 0..dim_count-1 from the input shapes; every use of a dim must agree. */
static aotc_status_t gather_dims(aotc_context_t *x) {
  const aotc_engine_t *e = x->engine;
  for (uint32_t d = 0; d < e->dim_count; ++d) x->regs[d] = -1;
  for (uint32_t i = 0; i < e->input_count; ++i) {
    const aotc_tensor_t *t = &e->tensors[i];
    if (!t->dynamic) continue;
    uint32_t k0 = 0;
    while (t->reg[k0] < 0) ++k0;
    if (!x->in_set[i])
      return aotc_make_status(AOTC_STATUS_FAILED_PRECONDITION,
                              "input '%s' has a dynamic shape (dim %u is %s): set its shape with "
                              "aotc_context_set_input_shape before running", t->name, k0,
                              e->dims[t->reg[k0]].name);
    const int64_t *shape = x->in_shapes + (size_t)i * AOTC_MAX_RANK;
    for (uint32_t k = 0; k < t->rank; ++k) {
      int32_t d = t->reg[k];
      if (d < 0) continue;
      if (x->regs[d] < 0) {
        x->regs[d] = shape[k];
        continue;
      }
      if (x->regs[d] == shape[k]) continue;
      const char *first = t->name; /* the first input that named dim d (maybe this one, earlier) */
      for (uint32_t j = 0, found = 0; j < i && !found; ++j)
        for (uint32_t r = 0; r < e->tensors[j].rank && !found; ++r)
          if (e->tensors[j].reg[r] == d) {
            first = e->tensors[j].name;
            found = 1;
          }
      return INVALID("input '%s' dim %u (%s) is %lld but input '%s' gives %s = %lld", t->name, k,
                     e->dims[d].name, (long long)shape[k], first, e->dims[d].name, (long long)x->regs[d]);
    }
  }
  return NULL;
}

/* Python's floor division and modulo on int64; -1 on overflow. */
static int floordiv(int64_t a, int64_t b, int64_t *q) {
  if (a == INT64_MIN && b == -1) return -1;
  *q = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
  return 0;
}

static int apply(const aotc_shape_op_t *op, const int64_t *regs, int64_t *out) {
  int64_t a = regs[op->a], b = regs[op->b], q = 0;
  switch (op->op) {
    case AOTC_OP_CONST: *out = op->imm; return 0;
    case AOTC_OP_ADD: return __builtin_add_overflow(a, b, out) ? -1 : 0;
    case AOTC_OP_SUB: return __builtin_sub_overflow(a, b, out) ? -1 : 0;
    case AOTC_OP_MUL: return __builtin_mul_overflow(a, b, out) ? -1 : 0;
    case AOTC_OP_FLOORDIV:
      if (!b) return -2;
      return floordiv(a, b, out);
    case AOTC_OP_CEILDIV: /* -floordiv(-a, b) */
      if (!b) return -2;
      if (a == INT64_MIN || floordiv(-a, b, &q) || q == INT64_MIN) return -1;
      *out = -q;
      return 0;
    case AOTC_OP_MOD:
      if (!b) return -2;
      if (b == -1) { *out = 0; return 0; }
      q = a % b;
      *out = (q != 0 && ((q < 0) != (b < 0))) ? q + b : q;
      return 0;
    case AOTC_OP_MIN: *out = a < b ? a : b; return 0;
    case AOTC_OP_MAX: *out = a > b ? a : b; return 0;
    case AOTC_OP_LE: *out = a <= b; return 0;
    case AOTC_OP_LT: *out = a < b; return 0;
    case AOTC_OP_EQ: *out = a == b; return 0;
    case AOTC_OP_NE: *out = a != b; return 0;
    default: *out = a && b; return 0; /* AOTC_OP_AND; opcodes are validated at load */
  }
}

static aotc_status_t run_program(aotc_context_t *x) {
  const aotc_engine_t *e = x->engine;
  char text[256];
  for (uint32_t k = 0; k < e->op_count; ++k) {
    int rc = apply(&e->ops[k], x->regs, &x->regs[e->dim_count + k]);
    if (rc)
      return INVALID("the input shapes (%s) make the engine's shape program %s at register %u",
                     dims_text(x, text, sizeof text), rc == -2 ? "divide by zero" : "overflow",
                     e->dim_count + k);
  }
  for (uint32_t c = 0; c < e->check_count; ++c)
    if (!x->regs[e->checks[c].reg])
      return INVALID("%s (at %s)", e->checks[c].message, dims_text(x, text, sizeof text));
  return NULL;
}

/* Output dims within their max (the buffers and the arena are sized for it),
 * bytes at the current shape, and every launch's grid within CUDA's limits. */
static aotc_status_t derive(aotc_context_t *x) {
  const aotc_engine_t *e = x->engine;
  char text[256];
  for (uint32_t i = 0; i < e->input_count + e->output_count; ++i) {
    const aotc_tensor_t *t = &e->tensors[i];
    if (!t->dynamic) continue;
    uint64_t bytes = t->byte_size;
    const int64_t *in = x->in_shapes + (size_t)i * AOTC_MAX_RANK;
    for (uint32_t k = 0; k < t->rank; ++k) {
      int64_t v = i < e->input_count ? in[k] : t->reg[k] < 0 ? (int64_t)t->dims[k] : x->regs[t->reg[k]];
      if (v < 0 || (uint64_t)v > t->dims[k])
        return aotc_make_status(AOTC_STATUS_INTERNAL,
                                "the engine's shape program gives output '%s' dim %u = %lld at %s, outside "
                                "0..%llu (its max shape): the engine is inconsistent", t->name, k,
                                (long long)v, dims_text(x, text, sizeof text),
                                (unsigned long long)t->dims[k]);
      if (t->dims[k]) bytes = bytes / t->dims[k] * (uint64_t)v;
    }
    x->cur_bytes[i] = bytes;
  }
  for (uint32_t i = 0; i < e->launch_count; ++i) {
    const aotc_launch_t *l = &e->launches[i];
    if (l->when != AOTC_NO_REG && !x->regs[l->when]) continue;
    int64_t g[3];
    for (int k = 0; k < 3; ++k) g[k] = (l->grid_regs >> k & 1) ? x->regs[l->grid[k]] : (int64_t)l->grid[k];
    if (g[0] < 0 || g[1] < 0 || g[2] < 0 || g[0] > 0x7FFFFFFF || g[1] > 65535 || g[2] > 65535)
      return aotc_make_status(AOTC_STATUS_INTERNAL,
                              "launch %u (kernel '%s') has grid (%lld, %lld, %lld) at %s, outside the CUDA "
                              "limits (x < 2^31, y and z <= 65535)", i, e->kernel_names[l->kernel],
                              (long long)g[0], (long long)g[1], (long long)g[2],
                              dims_text(x, text, sizeof text));
  }
  return NULL;
}

aotc_status_t aotc_shape_resolve(aotc_context_t *x) {
  if (!x->shape_dirty) return NULL;
  AOTC_RETURN_IF_ERROR(gather_dims(x));
  AOTC_RETURN_IF_ERROR(run_program(x));
  AOTC_RETURN_IF_ERROR(derive(x));
  x->shape_dirty = 0;
  return NULL;
}

int aotc_launch_grid(const aotc_context_t *x, const aotc_launch_t *l, unsigned grid[3]) {
  if (l->when != AOTC_NO_REG && !x->regs[l->when]) return 0;
  for (int k = 0; k < 3; ++k) {
    int64_t g = (l->grid_regs >> k & 1) ? x->regs[l->grid[k]] : (int64_t)l->grid[k];
    if (g <= 0) return 0; /* an empty tensor: nothing to launch */
    grid[k] = (unsigned)g;
  }
  return 1;
}

aotc_status_t aotc_context_get_output_shape(aotc_context_t *x, const char *name, size_t *out_rank,
                                            int64_t out_dims[AOTC_MAX_RANK]) {
  if (out_rank) *out_rank = 0;
  if (!x || !name || !out_rank || !out_dims) return INVALID("context, name, out_rank or out_dims is NULL");
  const aotc_engine_t *e = x->engine;
  size_t index = 0;
  AOTC_RETURN_IF_ERROR(aotc_engine_find_output(e, name, &index));
  AOTC_RETURN_IF_ERROR(aotc_shape_resolve(x));
  const aotc_tensor_t *t = &e->tensors[e->input_count + index];
  for (uint32_t k = 0; k < t->rank; ++k) out_dims[k] = t->reg[k] < 0 ? (int64_t)t->dims[k] : x->regs[t->reg[k]];
  *out_rank = t->rank;
  return NULL;
}
