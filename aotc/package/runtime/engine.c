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
 *   PLAN section: parsed by plan.c (its layout is there and in plan_section.py).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_internal.h"


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

aotc_status_t aotc_engine_parse(aotc_engine_t *e) {
  AOTC_RETURN_IF_ERROR(parse_sections(e));
  return aotc_plan_parse(e);
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
