/* plan.c - parse and validate an engine's PLAN section (engine.c has found it).
 *
 * As everywhere in the loader, nothing is trusted: counts must add up to the
 * section size exactly, every index and register must point inside its table
 * (a shape-program operand only backwards), every string lies inside the
 * string table, and the text that reaches messages (dim names, check
 * messages) is UTF-8 without control characters. The Python reader
 * (plan_section.py) accepts and refuses exactly the same sections. Layout
 * (all little-endian):
 *
 *     header (64): u32 input_count, output_count, pool_count, kernel_count,
 *                  launch_count, arg_count, strtab_size, arena_zeroed, dim_count,
 *                  op_count, check_count, reserved(0); u64 arena_size, weights_size
 *     tensor (16) x (inputs + outputs): u32 name_off, name_len | u8 dtype |
 *                  u8 rank | u16 reserved(0) | u32 pool_start (shape, then max shape)
 *     u64 pool[pool_count]     (a value, or AOTC_REG_FLAG | register)
 *     dim (24) x dim_count: u32 name_off, name_len, min, max, divisor, reserved(0)
 *     op (24) x op_count: u32 opcode, a, b, reserved(0) | i64 imm
 *     check (16) x check_count: u32 register, msg_off, msg_len, reserved(0)
 *     kernel (8) x kernel_count: u32 name_off, name_len
 *     launch (48) x launch_count: u32 kernel, grid[3], block[3], smem,
 *                  arg_start, arg_count, when, grid_regs
 *     arg (16) x arg_count: u32 kind (0 input, 1 output, 2 arena, 3 weight,
 *                  4 dim) | u32 index | u64 offset
 *     char strtab[strtab_size]   (every name NUL-terminated inside it)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "aotc_internal.h"

#define AOTC_DTYPE_COUNT 24
static const uint64_t dtype_sizes[AOTC_DTYPE_COUNT] = {0, 4, 2, 2, 8, 4, 1, 1, 1,   /* f32 .. bool */
                                                       8, 2, 2, 4, 8,            /* f64 i16 u16 u32 u64 */
                                                       1, 1, 1, 1, 1, 1,         /* float8 x4, i4, u4 */
                                                       1, 1, 1,                  /* i2, u2, f4e2m1fn */
                                                       1};                       /* f8e8m0fnu */

/* A name at strtab[off, off+len) followed by NUL, with no NUL inside. */
static aotc_status_t plan_string(const uint8_t *strtab, uint64_t strtab_size, uint32_t off,
                                 uint32_t len, const char *what, uint32_t index,
                                 const char **out) {
  *out = NULL;
  if ((uint64_t)off + len >= strtab_size || strtab[(uint64_t)off + len] != 0 ||
      memchr(strtab + off, 0, len) != NULL)
    return DATA_LOSS("%s %u name [%u, +%u) outside the string table", what, index, off, len);
  *out = (const char *)strtab + off;
  return NULL;
}

/* Strings that reach messages (dim names, check messages): UTF-8, as Python's
 * strict decoder accepts it, without ASCII control characters. */
static int text_ok(const uint8_t *s, uint32_t n) {
  for (uint32_t i = 0; i < n;) {
    uint8_t c = s[i];
    if (c < 0x20 || c == 0x7f) return 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    uint32_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!len || c > 0xF4 || i + len > n) return 0;
    uint32_t cp = c & (0x3F >> (len - 1));
    for (uint32_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    i += len;
  }
  return 1;
}

typedef struct plan_layout_s {
  const uint8_t *tensors, *pool, *dims, *ops, *checks, *kernels, *launches, *args, *strtab;
  uint32_t pool_count, strtab_size;
} plan_layout_t;

static aotc_status_t parse_shape_program(aotc_engine_t *e, const plan_layout_t *L) {
  for (uint32_t i = 0; i < e->dim_count; ++i) {
    const uint8_t *d = L->dims + 24ull * i;
    aotc_dim_t *x = &e->dims[i];
    uint32_t len = rd32(d + 4);
    AOTC_RETURN_IF_ERROR(plan_string(L->strtab, L->strtab_size, rd32(d), len, "dim", i, &x->name));
    x->min = rd32(d + 8);
    x->max = rd32(d + 12);
    x->divisor = rd32(d + 16);
    if (!len || !text_ok((const uint8_t *)x->name, len) || rd32(d + 20) || x->min > x->max ||
        x->max >= 0x80000000u || x->divisor < 1)
      return DATA_LOSS("dim %u: name, range %u..%u or divisor %u invalid (need 0 <= min <= max < 2^31, "
                       "divisor >= 1)", i, x->min, x->max, x->divisor);
    for (uint32_t j = 0; j < i; ++j)
      if (strcmp(e->dims[j].name, x->name) == 0) return DATA_LOSS("duplicate dim name '%s'", x->name);
  }
  for (uint32_t k = 0; k < e->op_count; ++k) {
    const uint8_t *o = L->ops + 24ull * k;
    aotc_shape_op_t *x = &e->ops[k];
    uint32_t reg = e->dim_count + k;
    x->op = rd32(o);
    x->a = rd32(o + 4);
    x->b = rd32(o + 8);
    x->imm = (int64_t)rd64(o + 16);
    int ok = x->op < AOTC_OP_COUNT && rd32(o + 12) == 0 &&
             (x->op == AOTC_OP_CONST ? x->a == 0 && x->b == 0 : x->a < reg && x->b < reg && x->imm == 0);
    if (!ok)
      return DATA_LOSS("shape op %u (register %u): opcode %u, registers %u, %u, imm %lld invalid (operands "
                       "must be earlier registers)", k, reg, x->op, x->a, x->b, (long long)x->imm);
  }
  for (uint32_t i = 0; i < e->check_count; ++i) {
    const uint8_t *c = L->checks + 16ull * i;
    aotc_check_t *x = &e->checks[i];
    uint32_t len = rd32(c + 8);
    AOTC_RETURN_IF_ERROR(plan_string(L->strtab, L->strtab_size, rd32(c + 4), len, "check", i, &x->message));
    x->reg = rd32(c);
    if (!text_ok((const uint8_t *)x->message, len))
      return DATA_LOSS("check %u message is not UTF-8 text", i);
    if (x->reg >= e->reg_count || rd32(c + 12))
      return DATA_LOSS("check %u: register %u invalid (the program has %u)", i, x->reg, e->reg_count);
  }
  return NULL;
}

static aotc_status_t parse_tensors(aotc_engine_t *e, const plan_layout_t *L) {
  uint32_t ni = e->input_count, no = e->output_count;
  for (uint32_t i = 0; i < ni + no; ++i) {
    const uint8_t *t = L->tensors + 16ull * i;
    aotc_tensor_t *x = &e->tensors[i];
    const char *what = i < ni ? "input" : "output";
    uint32_t idx = i < ni ? i : i - ni;
    uint32_t dtype = t[8], rank = t[9], ps = rd32(t + 12);
    AOTC_RETURN_IF_ERROR(plan_string(L->strtab, L->strtab_size, rd32(t), rd32(t + 4), what, idx, &x->name));
    if (dtype < 1 || dtype >= AOTC_DTYPE_COUNT || rank > AOTC_MAX_RANK || (uint64_t)ps + 2ull * rank > L->pool_count ||
        t[10] || t[11])
      return DATA_LOSS("%s %u '%s': dtype %u, rank %u or dims [%u, +%u) invalid", what, idx, x->name,
                       dtype, rank, ps, 2 * rank);
    x->dtype = (aotc_dtype_t)dtype;
    x->rank = rank;
    uint64_t bytes = dtype_sizes[dtype];
    for (uint32_t r = 0; r < AOTC_MAX_RANK; ++r) x->reg[r] = -1;
    for (uint32_t r = 0; r < rank; ++r) {
      uint64_t dim = rd64(L->pool + 8ull * (ps + r)), top = rd64(L->pool + 8ull * (ps + rank + r));
      if (top & AOTC_REG_FLAG) return DATA_LOSS("%s %u '%s' max dim %u is a register", what, idx, x->name, r);
      if (dim & AOTC_REG_FLAG) {
        uint64_t reg = dim & ~AOTC_REG_FLAG;
        if (reg >= (i < ni ? e->dim_count : e->reg_count) || (i < ni && top < e->dims[reg].max))
          return DATA_LOSS("%s %u '%s' dim %u: register %llu or max %llu invalid (an input's dynamic dim "
                           "names a dim, its max covers the dim's range)", what, idx, x->name, r,
                           (unsigned long long)reg, (unsigned long long)top);
        x->reg[r] = (int32_t)reg;
        x->dynamic = 1;
      } else if (dim != top) {
        return DATA_LOSS("%s %u '%s' static dim %u is %llu but its max is %llu", what, idx, x->name, r,
                         (unsigned long long)dim, (unsigned long long)top);
      }
      x->dims[r] = top;
      if (top && bytes > ((1ull << 62) - 1) / top)
        return DATA_LOSS("%s %u '%s' byte size overflows", what, idx, x->name);
      bytes *= top;
    }
    x->byte_size = bytes;
    uint32_t first = i < ni ? 0 : ni;
    for (uint32_t j = first; j < i; ++j)
      if (strcmp(e->tensors[j].name, x->name) == 0) return DATA_LOSS("duplicate %s name '%s'", what, x->name);
  }
  /* A dim takes its value from the inputs: one no input names could never be set. */
  for (uint32_t d = 0; d < e->dim_count; ++d) {
    int used = 0;
    for (uint32_t i = 0; i < ni && !used; ++i)
      for (uint32_t r = 0; r < e->tensors[i].rank; ++r) used |= e->tensors[i].reg[r] == (int32_t)d;
    if (!used) return DATA_LOSS("dim %u '%s' is used by no input", d, e->dims[d].name);
  }
  return NULL;
}

static aotc_status_t parse_launches(aotc_engine_t *e, const plan_layout_t *L) {
  uint32_t ni = e->input_count, no = e->output_count;
  for (uint32_t i = 0; i < e->launch_count; ++i) {
    const uint8_t *l = L->launches + 48ull * i;
    aotc_launch_t *x = &e->launches[i];
    x->kernel = rd32(l);
    for (int k = 0; k < 3; ++k) {
      x->grid[k] = rd32(l + 4 + 4 * k);
      x->block[k] = rd32(l + 16 + 4 * k);
    }
    x->smem = rd32(l + 28);
    x->arg_start = rd32(l + 32);
    x->arg_count = rd32(l + 36);
    x->when = rd32(l + 40);
    x->grid_regs = rd32(l + 44);
    int ok = x->kernel < e->kernel_count && (uint64_t)x->arg_start + x->arg_count <= e->arg_count &&
             x->grid_regs <= 7 && (x->when == AOTC_NO_REG || x->when < e->reg_count);
    for (int k = 0; k < 3; ++k)
      ok = ok && x->block[k] && ((x->grid_regs >> k & 1) ? x->grid[k] < e->reg_count : x->grid[k] != 0);
    if (!ok)
      return DATA_LOSS("launch %u: kernel %u, args [%u, +%u), grid (registers 0x%x), block or predicate "
                       "%u invalid", i, x->kernel, x->arg_start, x->arg_count, x->grid_regs, x->when);
    if (x->arg_count > e->max_launch_args) e->max_launch_args = x->arg_count;
    for (uint32_t j = x->arg_start; j < x->arg_start + x->arg_count; ++j) {
      const uint8_t *a = L->args + 16ull * j;
      aotc_arg_t *y = &e->args[j];
      y->kind = rd32(a);
      y->index = rd32(a + 4);
      y->offset = rd64(a + 8);
      uint64_t limit = 0;
      int aok = 1;
      switch (y->kind) {
        case AOTC_REF_INPUT:
          aok = y->index < ni;
          limit = aok ? e->tensors[y->index].byte_size : 0;
          break;
        case AOTC_REF_OUTPUT:
          aok = y->index < no;
          limit = aok ? e->tensors[ni + y->index].byte_size : 0;
          break;
        case AOTC_REF_ARENA: aok = y->index == 0; limit = e->arena_size; break;
        case AOTC_REF_WEIGHT: aok = y->index == 0; limit = e->weights_size; break;
        case AOTC_REF_DIM: aok = y->index < e->reg_count && y->offset == 0; break;
        default: aok = 0;
      }
      if (!aok || (y->kind != AOTC_REF_DIM && y->offset != 0 && y->offset >= limit))
        return DATA_LOSS("launch %u arg %u: kind %u index %u offset %llu out of bounds", i,
                         j - x->arg_start, y->kind, y->index, (unsigned long long)y->offset);
    }
  }
  return NULL;
}

aotc_status_t aotc_plan_parse(aotc_engine_t *e) {
  const uint8_t *p = e->plan->data;
  uint64_t size = e->plan->size;
  if (size < 64) return DATA_LOSS("PLAN section is %llu bytes, shorter than its header",
                                  (unsigned long long)size);
  uint32_t ni = rd32(p), no = rd32(p + 4), npool = rd32(p + 8), nk = rd32(p + 12);
  uint32_t nl = rd32(p + 16), na = rd32(p + 20), ns = rd32(p + 24);
  uint32_t nd = rd32(p + 32), nops = rd32(p + 36), nc = rd32(p + 40);
  e->arena_size = rd64(p + 48);
  e->weights_size = rd64(p + 56);
  /* Every count is < 2^32 and every row < 64 bytes: the sum cannot overflow. */
  uint64_t want = 64 + 16 * ((uint64_t)ni + no) + 8ull * npool + 24ull * nd + 24ull * nops + 16ull * nc +
                  8ull * nk + 48ull * nl + 16ull * na + ns;
  if (want != size || rd32(p + 44))
    return DATA_LOSS("PLAN section is %llu bytes, its counts need %llu%s", (unsigned long long)size,
                     (unsigned long long)want, rd32(p + 44) ? " (reserved field set)" : "");
  e->arena_zeroed = rd32(p + 28);
  if (e->arena_zeroed > e->arena_size)
    return DATA_LOSS("PLAN zeroed arena tail %u exceeds the arena size %llu", e->arena_zeroed,
                     (unsigned long long)e->arena_size);
  if (e->weights_size != e->weights->size)
    return DATA_LOSS("PLAN weights size %llu != WEIGHTS section size %llu",
                     (unsigned long long)e->weights_size, (unsigned long long)e->weights->size);
  plan_layout_t L;
  L.tensors = p + 64;
  L.pool = L.tensors + 16 * ((uint64_t)ni + no);
  L.dims = L.pool + 8ull * npool;
  L.ops = L.dims + 24ull * nd;
  L.checks = L.ops + 24ull * nops;
  L.kernels = L.checks + 16ull * nc;
  L.launches = L.kernels + 8ull * nk;
  L.args = L.launches + 48ull * nl;
  L.strtab = L.args + 16ull * na;
  L.pool_count = npool;
  L.strtab_size = ns;
  e->input_count = ni;
  e->output_count = no;
  e->kernel_count = nk;
  e->launch_count = nl;
  e->arg_count = na;
  e->dim_count = nd;
  e->op_count = nops;
  e->check_count = nc;
  e->reg_count = nd + nops;
  if (e->reg_count < nd || e->reg_count >= AOTC_NO_REG)
    return DATA_LOSS("PLAN has %u dims and %u shape ops: too many registers", nd, nops);
  e->tensors = (aotc_tensor_t *)calloc((size_t)ni + no + 1, sizeof(aotc_tensor_t));
  e->kernel_names = (const char **)calloc((size_t)nk + 1, sizeof(char *));
  e->launches = (aotc_launch_t *)calloc((size_t)nl + 1, sizeof(aotc_launch_t));
  e->args = (aotc_arg_t *)calloc((size_t)na + 1, sizeof(aotc_arg_t));
  e->dims = (aotc_dim_t *)calloc((size_t)nd + 1, sizeof(aotc_dim_t));
  e->ops = (aotc_shape_op_t *)calloc((size_t)nops + 1, sizeof(aotc_shape_op_t));
  e->checks = (aotc_check_t *)calloc((size_t)nc + 1, sizeof(aotc_check_t));
  if (!e->tensors || !e->kernel_names || !e->launches || !e->args || !e->dims || !e->ops || !e->checks)
    return aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory parsing the plan");
  AOTC_RETURN_IF_ERROR(parse_shape_program(e, &L));
  AOTC_RETURN_IF_ERROR(parse_tensors(e, &L));
  for (uint32_t i = 0; i < nk; ++i) {
    const uint8_t *k = L.kernels + 8ull * i;
    AOTC_RETURN_IF_ERROR(plan_string(L.strtab, ns, rd32(k), rd32(k + 4), "kernel", i, &e->kernel_names[i]));
    const char *c = e->kernel_names[i];
    if (!*c) return DATA_LOSS("kernel %u has an empty name", i);
    for (; *c; ++c)
      if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            *c == '_'))
        return DATA_LOSS("kernel %u name is not a C identifier", i);
  }
  return parse_launches(e, &L);
}
