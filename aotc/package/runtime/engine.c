/* engine.c - load, parse and validate an engine file; engine queries.
 *
 * Nothing read from the file is trusted: every offset, size, count, index and
 * string is bounds-checked (with overflow-safe arithmetic) before use, and
 * every section's CRC32 is verified. No byte escapes a check: the table sits
 * right after the header, each section at the first aligned offset after the
 * one before, the padding in between is zero, and the file ends where the last
 * section does. The byte layout (all little-endian):
 *
 *   header (64): magic "AOTCENG\0" | u32 version | u32 header_size(64) |
 *                char aotc_version[16] ("0.1.0", NUL-padded) | u32 flags(0) | u32 section_count |
 *                u64 table_offset | u64 file_size | u32 table_crc32 |
 *                u32 header_crc32 (of bytes [0,60))
 *   section entry (48): u32 kind | u32 alignment | char tag[16] |
 *                u64 offset | u64 size | u32 crc32 | u32 reserved(0)
 *   PLAN section (format 2; plan_section.py documents every field):
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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_internal.h"

#define DATA_LOSS(...) aotc_make_status(AOTC_STATUS_DATA_LOSS, "corrupt engine: " __VA_ARGS__)

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static const char *section_name(uint32_t kind) {
  static const char *names[] = {"?", "MANIFEST", "PLAN", "WEIGHTS", "CUBIN", "PTX", "HOST_LIB"};
  return kind <= 6 ? names[kind] : "?";
}

/* "MAJOR.MINOR.PATCH" then [A-Za-z0-9.+-]*, NUL-padded to 16 bytes; each
 * number at most 4 digits. Returns 0 and the numbers, or -1. */
static int parse_version(const char *v, size_t cap, int out[3]) {
  size_t i = 0;
  for (int part = 0; part < 3; ++part) {
    int n = 0, digits = 0;
    while (i < cap && v[i] >= '0' && v[i] <= '9' && digits < 5) {
      n = n * 10 + (v[i++] - '0');
      ++digits;
    }
    if (digits == 0 || digits > 4) return -1;
    out[part] = n;
    if (part < 2 && (i >= cap || v[i++] != '.')) return -1;
  }
  for (; i < cap && v[i]; ++i)
    if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
          (v[i] >= '0' && v[i] <= '9') || v[i] == '.' || v[i] == '+' || v[i] == '-'))
      return -1;
  for (; i < cap; ++i)
    if (v[i]) return -1;
  return 0;
}

static aotc_status_t check_aotc_version(aotc_engine_t *e, const uint8_t *field) {
  char v[17];
  memcpy(v, field, 16);
  v[16] = 0;
  int got[3], min[3];
  if (v[15] != 0 || parse_version(v, 16, got) != 0)
    return DATA_LOSS("header aotc version is not a NUL-padded 'MAJOR.MINOR.PATCH'");
  memcpy(e->aotc_version, v, 16);
  parse_version(AOTC_ENGINE_MIN_AOTC_VERSION, sizeof AOTC_ENGINE_MIN_AOTC_VERSION, min);
  int older = got[0] != min[0] ? got[0] < min[0] : got[1] != min[1] ? got[1] < min[1] : got[2] < min[2];
  if (older || got[0] > AOTC_ENGINE_MAX_AOTC_MAJOR)
    return aotc_make_status(AOTC_STATUS_UNIMPLEMENTED,
                            "engine written by aotc %s; this runtime runs engines from aotc %s "
                            "up to %d.x", v, AOTC_ENGINE_MIN_AOTC_VERSION,
                            AOTC_ENGINE_MAX_AOTC_MAJOR);
  return NULL;
}

static const uint64_t dtype_sizes[9] = {0, 4, 2, 2, 8, 4, 1, 1, 1};

static int tag_ok(const char *tag, uint32_t kind) {
  /* CUBIN: sm_<digits>[a-z]; PTX: compute_<digits>[a-z]; others: empty. */
  const char *prefix = kind == AOTC_SEC_CUBIN ? "sm_" : kind == AOTC_SEC_PTX ? "compute_" : NULL;
  if (!prefix) return tag[0] == 0;
  size_t n = strlen(prefix);
  if (strncmp(tag, prefix, n) != 0) return kind == AOTC_SEC_PTX && tag[0] == 0;
  const char *p = tag + n;
  if (*p < '0' || *p > '9') return 0;
  while (*p >= '0' && *p <= '9') ++p;
  if (*p >= 'a' && *p <= 'z') ++p;
  return *p == 0;
}

/* Section i starts at the first multiple of `align` at or after `end` (the end of
 * the table or of section i-1), and the padding in between is zero: every byte of
 * an engine is checked, whether or not checksums are verified. The caller has
 * checked off <= size; an off before `end` (overlap) fails the first test. */
static aotc_status_t check_padding(const uint8_t *d, uint32_t i, const char *name, uint64_t end,
                                   uint64_t off, uint32_t align) {
  uint64_t want = (end + align - 1) / align * align; /* end <= size, align < 2^32: no overflow */
  if (off != want)
    return DATA_LOSS("section %u (%s) starts at %llu, expected %llu (the first %u-aligned offset "
                     "after %llu)", i, name, (unsigned long long)off, (unsigned long long)want,
                     align, (unsigned long long)end);
  for (uint64_t k = end; k < off; ++k)
    if (d[k])
      return DATA_LOSS("padding byte at %llu before section %u (%s) is 0x%02x, not zero",
                       (unsigned long long)k, i, name, d[k]);
  return NULL;
}

static aotc_status_t parse_sections(aotc_engine_t *e) {
  const uint8_t *d = e->buf;
  size_t size = e->size;
  if (size < 64) return DATA_LOSS("file is %zu bytes, shorter than the 64-byte header", size);
  if (memcmp(d, "AOTCENG\0", 8) != 0) return DATA_LOSS("bad magic (not an aotc engine)");
  uint32_t version = rd32(d + 8);
  if (version != AOTC_ENGINE_FORMAT_VERSION)
    return aotc_make_status(AOTC_STATUS_UNIMPLEMENTED,
                            "engine format version %u is not supported (this runtime reads %d)",
                            version, AOTC_ENGINE_FORMAT_VERSION);
  if (aotc_crc32(d, 60) != rd32(d + 60)) return DATA_LOSS("header checksum mismatch");
  AOTC_RETURN_IF_ERROR(check_aotc_version(e, d + 16));
  uint32_t flags = rd32(d + 32), count = rd32(d + 36);
  uint64_t table = rd64(d + 40), fsize = rd64(d + 48);
  if (rd32(d + 12) != 64 || flags != 0)
    return DATA_LOSS("header size %u / flags 0x%x invalid", rd32(d + 12), flags);
  if (fsize != size)
    return DATA_LOSS("header says %llu bytes but the file has %zu (truncated?)",
                     (unsigned long long)fsize, size);
  if (count < 1 || count > AOTC_MAX_SECTIONS)
    return DATA_LOSS("section count %u outside 1..%u", count, AOTC_MAX_SECTIONS);
  uint64_t table_end = table + 48ull * count;
  if (table != 64 || table_end > size)
    return DATA_LOSS("section table at %llu is not right after the header inside the file",
                     (unsigned long long)table);
  if (aotc_crc32(d + table, 48u * count) != rd32(d + 56))
    return DATA_LOSS("section table checksum mismatch");
  e->section_count = count;
  uint64_t end = table_end; /* where the table or the section before this one ends */
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t *s = d + table + 48u * i;
    aotc_section_t *sec = &e->sections[i];
    uint32_t kind = rd32(s), align = rd32(s + 4);
    uint64_t off = rd64(s + 24), sz = rd64(s + 32);
    const char *name = section_name(kind);
    if (kind < AOTC_SEC_MANIFEST || kind > AOTC_SEC_HOST_LIB)
      return DATA_LOSS("section %u has unknown kind %u", i, kind);
    if (align < AOTC_ALIGN || (align & (align - 1)) || off % align || rd32(s + 44))
      return DATA_LOSS("section %u (%s) offset %llu / alignment %u invalid", i, name,
                       (unsigned long long)off, align);
    if (off < table_end || off > size || sz > size - off)
      return DATA_LOSS("section %u (%s) [%llu, +%llu) outside the file", i, name,
                       (unsigned long long)off, (unsigned long long)sz);
    if (s[8 + 15] != 0) return DATA_LOSS("section %u (%s) tag is not NUL-terminated", i, name);
    memcpy(sec->tag, s + 8, 16);
    for (size_t k = strlen(sec->tag); k < 16; ++k)
      if (sec->tag[k]) return DATA_LOSS("section %u (%s) tag has bytes after its NUL", i, name);
    if (!tag_ok(sec->tag, kind)) return DATA_LOSS("section %u (%s) has bad tag '%s'", i, name, sec->tag);
    AOTC_RETURN_IF_ERROR(check_padding(d, i, name, end, off, align));
    end = off + sz;
    sec->kind = kind;
    sec->data = d + off;
    sec->size = sz;
    if (e->options.verify_checksums && aotc_crc32(sec->data, (size_t)sz) != rd32(s + 40))
      return DATA_LOSS("section %u (%s) checksum mismatch", i, name);
    for (uint32_t j = 0; j < i; ++j) {
      const aotc_section_t *o = &e->sections[j];
      uint64_t ooff = (uint64_t)(o->data - d);
      if (off < ooff + o->size && ooff < off + sz) return DATA_LOSS("sections %u and %u overlap", j, i);
      if (o->kind == kind && (kind != AOTC_SEC_CUBIN || strcmp(o->tag, sec->tag) == 0))
        return DATA_LOSS("duplicate %s section %s", name, sec->tag);
    }
    if (kind == AOTC_SEC_MANIFEST) e->manifest = sec;
    if (kind == AOTC_SEC_PLAN) e->plan = sec;
    if (kind == AOTC_SEC_WEIGHTS) e->weights = sec;
    if (kind == AOTC_SEC_PTX) e->ptx = sec;
    if (kind == AOTC_SEC_HOST_LIB) e->host_lib = sec;
  }
  if (end != size)
    return DATA_LOSS("%llu trailing byte(s) after the last section (it ends at %llu)",
                     (unsigned long long)(size - end), (unsigned long long)end);
  if (!e->manifest || !e->plan || !e->weights)
    return DATA_LOSS("missing %s section", !e->manifest ? "MANIFEST" : !e->plan ? "PLAN" : "WEIGHTS");
  return NULL;
}

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
    if (dtype < 1 || dtype > 8 || rank > AOTC_MAX_RANK || (uint64_t)ps + 2ull * rank > L->pool_count ||
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

static aotc_status_t parse_plan(aotc_engine_t *e) {
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

aotc_status_t aotc_engine_parse(aotc_engine_t *e) {
  AOTC_RETURN_IF_ERROR(parse_sections(e));
  return parse_plan(e);
}

void aotc_engine_options_initialize(aotc_engine_options_t *out_options) {
  if (!out_options) return;
  memset(out_options, 0, sizeof *out_options);
  out_options->verify_checksums = 1;
  out_options->cuda_device_ordinal = 0;
}

static void engine_destroy(aotc_engine_t *e) {
  if (!e) return;
  aotc_cuda_engine_destroy(e);
  aotc_cpu_engine_destroy(e);
  pthread_mutex_destroy(&e->mu);
  free(e->tensors);
  free((void *)e->kernel_names);
  free(e->launches);
  free(e->args);
  free(e->dims);
  free(e->ops);
  free(e->checks);
  free(e->buf);
  free(e);
}

/* Takes ownership of `buf` (256-aligned, `size` bytes). */
static aotc_status_t engine_from_buffer(uint8_t *buf, size_t size,
                                        const aotc_engine_options_t *options,
                                        aotc_engine_t **out_engine) {
  aotc_engine_t *e = (aotc_engine_t *)calloc(1, sizeof *e);
  if (!e) {
    free(buf);
    return aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED, "out of memory loading an engine");
  }
  e->ref = 1;
  e->buf = buf;
  e->size = size;
  if (options) e->options = *options;
  else aotc_engine_options_initialize(&e->options);
  pthread_mutex_init(&e->mu, NULL);
  aotc_status_t st = aotc_engine_parse(e);
  if (st) {
    engine_destroy(e);
    return st;
  }
  *out_engine = e;
  return NULL;
}

static uint8_t *aligned_buffer(size_t size) {
  void *p = NULL;
  if (posix_memalign(&p, AOTC_ALIGN, size ? size : 1) != 0) return NULL;
  return (uint8_t *)p;
}

aotc_status_t aotc_engine_load_from_memory(const void *bytes, size_t size,
                                           const aotc_engine_options_t *options,
                                           aotc_engine_t **out_engine) {
  if (!out_engine) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_engine is NULL");
  *out_engine = NULL;
  if (!bytes && size) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "bytes is NULL");
  uint8_t *buf = aligned_buffer(size);
  if (!buf) return aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED,
                                    "out of memory copying a %zu-byte engine", size);
  if (size) memcpy(buf, bytes, size);
  return engine_from_buffer(buf, size, options, out_engine);
}

aotc_status_t aotc_engine_load_from_file(const char *path, const aotc_engine_options_t *options,
                                         aotc_engine_t **out_engine) {
  if (!out_engine) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_engine is NULL");
  *out_engine = NULL;
  if (!path) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "path is NULL");
  FILE *f = fopen(path, "rb");
  if (!f) {
    int err = errno;
    return aotc_make_status(err == ENOENT ? AOTC_STATUS_NOT_FOUND : AOTC_STATUS_INVALID_ARGUMENT,
                            "cannot open engine file '%s': %s", path, strerror(err));
  }
  long end = -1;
  if (fseek(f, 0, SEEK_END) == 0) end = ftell(f);
  if (end < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "cannot size engine file '%s'", path);
  }
  size_t size = (size_t)end;
  uint8_t *buf = aligned_buffer(size);
  if (!buf) {
    fclose(f);
    return aotc_make_status(AOTC_STATUS_RESOURCE_EXHAUSTED,
                            "out of memory reading '%s' (%zu bytes)", path, size);
  }
  size_t got = size ? fread(buf, 1, size, f) : 0;
  fclose(f);
  if (got != size) {
    free(buf);
    return aotc_make_status(AOTC_STATUS_DATA_LOSS, "short read of '%s': %zu of %zu bytes", path,
                            got, size);
  }
  return engine_from_buffer(buf, size, options, out_engine);
}

void aotc_engine_retain(aotc_engine_t *engine) {
  if (engine) __atomic_add_fetch(&engine->ref, 1, __ATOMIC_RELAXED);
}

void aotc_engine_release(aotc_engine_t *engine) {
  if (engine && __atomic_sub_fetch(&engine->ref, 1, __ATOMIC_ACQ_REL) == 0) engine_destroy(engine);
}

size_t aotc_engine_input_count(const aotc_engine_t *e) { return e ? e->input_count : 0; }
size_t aotc_engine_output_count(const aotc_engine_t *e) { return e ? e->output_count : 0; }
uint64_t aotc_engine_arena_size(const aotc_engine_t *e) { return e ? e->arena_size : 0; }
uint64_t aotc_engine_weights_size(const aotc_engine_t *e) { return e ? e->weights_size : 0; }
const char *aotc_engine_aotc_version(const aotc_engine_t *e) { return e ? e->aotc_version : ""; }

uint64_t aotc_engine_device_memory_size(const aotc_engine_t *e, size_t context_count) {
  if (!e) return 0;
  uint64_t arena = (e->arena_size + AOTC_ALIGN - 1) / AOTC_ALIGN * AOTC_ALIGN;
  if (arena < e->arena_size || (context_count && arena > (UINT64_MAX - e->weights_size) / context_count))
    return UINT64_MAX;
  return e->weights_size + arena * (uint64_t)context_count;
}
size_t aotc_engine_launch_count(const aotc_engine_t *e) { return e ? e->launch_count : 0; }

static aotc_status_t tensor_info(const aotc_engine_t *e, int output, size_t index,
                                 aotc_tensor_info_t *out_info) {
  if (!out_info) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_info is NULL");
  memset(out_info, 0, sizeof *out_info);
  if (!e) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "engine is NULL");
  size_t count = output ? e->output_count : e->input_count;
  if (index >= count)
    return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "%s index %zu out of range (engine has %zu)",
                            output ? "output" : "input", index, count);
  const aotc_tensor_t *t = &e->tensors[(output ? e->input_count : 0) + index];
  out_info->name = t->name;
  out_info->dtype = t->dtype;
  out_info->rank = t->rank;
  memcpy(out_info->dims, t->dims, sizeof t->dims);
  out_info->byte_size = t->byte_size;
  for (uint32_t r = 0; r < AOTC_MAX_RANK; ++r)
    out_info->dim_index[r] = t->reg[r] < 0 ? AOTC_DIM_STATIC : output ? AOTC_DIM_COMPUTED : t->reg[r];
  return NULL;
}

size_t aotc_engine_dim_count(const aotc_engine_t *e) { return e ? e->dim_count : 0; }

aotc_status_t aotc_engine_dim_info(const aotc_engine_t *e, size_t index, aotc_dim_info_t *out_info) {
  if (!out_info) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_info is NULL");
  memset(out_info, 0, sizeof *out_info);
  if (!e) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "engine is NULL");
  if (index >= e->dim_count)
    return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "dim index %zu out of range (engine has %u)",
                            index, e->dim_count);
  const aotc_dim_t *d = &e->dims[index];
  out_info->name = d->name;
  out_info->min = d->min;
  out_info->max = d->max;
  out_info->divisor = d->divisor;
  return NULL;
}

aotc_status_t aotc_engine_input_info(const aotc_engine_t *e, size_t i, aotc_tensor_info_t *out) {
  return tensor_info(e, 0, i, out);
}
aotc_status_t aotc_engine_output_info(const aotc_engine_t *e, size_t i, aotc_tensor_info_t *out) {
  return tensor_info(e, 1, i, out);
}

static aotc_status_t find_tensor(const aotc_engine_t *e, int output, const char *name,
                                 size_t *out_index) {
  if (!out_index) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_index is NULL");
  *out_index = 0;
  if (!e || !name) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "engine or name is NULL");
  size_t base = output ? e->input_count : 0, count = output ? e->output_count : e->input_count;
  for (size_t i = 0; i < count; ++i)
    if (strcmp(e->tensors[base + i].name, name) == 0) {
      *out_index = i;
      return NULL;
    }
  return aotc_make_status(AOTC_STATUS_NOT_FOUND, "engine has no %s named '%s'",
                          output ? "output" : "input", name);
}

aotc_status_t aotc_engine_find_input(const aotc_engine_t *e, const char *name, size_t *out) {
  return find_tensor(e, 0, name, out);
}
aotc_status_t aotc_engine_find_output(const aotc_engine_t *e, const char *name, size_t *out) {
  return find_tensor(e, 1, name, out);
}

static aotc_status_t info_by_name(const aotc_engine_t *e, int output, const char *name,
                                  aotc_tensor_info_t *out_info) {
  if (!out_info) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_info is NULL");
  memset(out_info, 0, sizeof *out_info);
  size_t index = 0;
  AOTC_RETURN_IF_ERROR(find_tensor(e, output, name, &index));
  return tensor_info(e, output, index, out_info);
}

aotc_status_t aotc_engine_input_info_by_name(const aotc_engine_t *e, const char *name,
                                             aotc_tensor_info_t *out) {
  return info_by_name(e, 0, name, out);
}
aotc_status_t aotc_engine_output_info_by_name(const aotc_engine_t *e, const char *name,
                                              aotc_tensor_info_t *out) {
  return info_by_name(e, 1, name, out);
}

aotc_status_t aotc_engine_manifest(const aotc_engine_t *e, const char **out_json, size_t *out_size) {
  if (!out_json || !out_size)
    return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "out_json or out_size is NULL");
  *out_json = NULL;
  *out_size = 0;
  if (!e) return aotc_make_status(AOTC_STATUS_INVALID_ARGUMENT, "engine is NULL");
  *out_json = (const char *)e->manifest->data;
  *out_size = (size_t)e->manifest->size;
  return NULL;
}

aotc_status_t aotc_engine_check(const void *bytes, size_t size, aotc_device_t device, char *why,
                                size_t why_len) {
  aotc_engine_t *e = NULL;
  char desc[256] = "";
  aotc_status_t st = NULL;
  if (device != AOTC_DEVICE_CPU && device != AOTC_DEVICE_CUDA)
    st = aotc_make_status(AOTC_STATUS_UNIMPLEMENTED, "unknown device %d", (int)device);
  if (!st) st = aotc_engine_load_from_memory(bytes, size, NULL, &e);
  if (!st) st = device == AOTC_DEVICE_CPU ? aotc_cpu_check(e, desc, sizeof desc)
                                          : aotc_cuda_check(e, desc, sizeof desc);
  aotc_engine_release(e);
  if (why && why_len) snprintf(why, why_len, "%s", st ? aotc_status_message(st) : desc);
  return st;
}
