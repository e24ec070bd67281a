/* fakecuda_image.c - what the stand-in driver reads from a module image.
 *
 * A cubin is an ELF file (e_machine EM_CUDA, the SM version in e_flags bits
 * 8..15). Its kernels are the STT_FUNC symbols marked STO_CUDA_ENTRY; per
 * kernel, the section ".nv.info.<name>" holds attribute records (format
 * byte, attribute byte, then a 16-bit value or a 16-bit size and that many
 * bytes): KPARAM_INFO per parameter (ordinal, offset, size in bits 18..31 of
 * its flags word), CBANK_PARAM_SIZE (the parameter buffer's size) and
 * MAX_THREADS (from __launch_bounds__). ".nv.shared.<name>" is the static
 * shared memory (on sm_90 it includes 1 KiB the driver reserves, marked by a
 * ".nv.reservedSmem" symbol), and the module-wide ".nv.info" maps each
 * kernel's symbol to its register count (REGCOUNT). A PTX image names its
 * target in ".target sm_XX" and lists each ".entry"'s parameters with their
 * types, so sizes and offsets follow from the ABI's alignment rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

enum { EIATTR_MAX_THREADS = 0x05, EIATTR_REQNTID = 0x10, EIATTR_KPARAM_INFO = 0x17,
       EIATTR_CBANK_PARAM_SIZE = 0x19, EIATTR_REGCOUNT = 0x2f };
enum { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4 };
#define EM_CUDA 190
#define STO_CUDA_ENTRY 0x10
#define SM90_RESERVED_SMEM 1024u

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

typedef struct { uint32_t name, type, link; uint64_t offset, size; } section_t;

typedef struct {
  const uint8_t *b;
  uint16_t shnum;
  section_t *sh;
  const char *shstr;
  uint64_t shstr_size;
} elf_t;

static const char *section_name(const elf_t *e, uint32_t i) {
  uint32_t off = e->sh[i].name;
  return off < e->shstr_size ? e->shstr + off : "";
}

static int find_section(const elf_t *e, const char *prefix, const char *name) {
  size_t n = strlen(prefix);
  for (uint32_t i = 0; i < e->shnum; ++i) {
    const char *s = section_name(e, i);
    if (strncmp(s, prefix, n) == 0 && strcmp(s + n, name) == 0) return (int)i;
  }
  return -1;
}

/* Calls fn for each attribute record of an .nv.info section. */
static void each_attr(const elf_t *e, int sec, fk_kernel_info *k,
                      void (*fn)(fk_kernel_info *, int attr, const uint8_t *v, uint32_t len, void *),
                      void *arg) {
  if (sec < 0) return;
  const uint8_t *p = e->b + e->sh[sec].offset, *end = p + e->sh[sec].size;
  while (p + 4 <= end) {
    uint8_t fmt = p[0], attr = p[1];
    if (fmt == EIFMT_SVAL) {
      uint32_t len = rd16(p + 2);
      if (p + 4 + len > end) return;
      fn(k, attr, p + 4, len, arg);
      p += 4 + len;
    } else {
      if (fmt == EIFMT_HVAL) fn(k, attr, p + 2, 2, arg);
      p += 4; /* NVAL, BVAL, HVAL: one 4-byte record */
    }
  }
}

static void kernel_attr(fk_kernel_info *k, int attr, const uint8_t *v, uint32_t len, void *arg) {
  (void)arg;
  if (attr == EIATTR_KPARAM_INFO && len >= 12) {
    uint32_t ordinal = rd16(v + 4), offset = rd16(v + 6), size = (rd32(v + 8) >> 18) & 0x3fff;
    if (ordinal >= FK_MAX_PARAMS) return;
    k->offset[ordinal] = (uint16_t)offset;
    k->size[ordinal] = (uint16_t)size;
    if ((int)ordinal + 1 > k->nparams) k->nparams = (int)ordinal + 1;
  } else if (attr == EIATTR_CBANK_PARAM_SIZE && len == 2) {
    k->param_bytes = rd16(v);
  } else if ((attr == EIATTR_MAX_THREADS || attr == EIATTR_REQNTID) && len >= 12) {
    uint64_t t = (uint64_t)rd32(v) * rd32(v + 4) * rd32(v + 8);
    if (t && (!k->max_threads || t < (uint64_t)k->max_threads)) k->max_threads = (int)t;
  }
}

typedef struct { uint32_t *sym_of_kernel; int n; } regs_arg_t;

static void module_attr(fk_kernel_info *ks, int attr, const uint8_t *v, uint32_t len, void *arg) {
  regs_arg_t *r = (regs_arg_t *)arg;
  if (attr != EIATTR_REGCOUNT || len < 8) return;
  for (int i = 0; i < r->n; ++i)
    if (r->sym_of_kernel[i] == rd32(v)) ks[i].regs = (int)rd32(v + 4);
}

static CUresult parse_cubin(const uint8_t *b, fk_image_info *out, char *err, size_t err_len) {
  if (b[4] != 2 || b[5] != 1 || rd16(b + 18) != EM_CUDA) {
    snprintf(err, err_len, "not a 64-bit little-endian CUDA ELF (e_machine %u)", rd16(b + 18));
    return CUDA_ERROR_INVALID_IMAGE;
  }
  elf_t e = {b, rd16(b + 0x3c), NULL, NULL, 0};
  uint64_t shoff = rd64(b + 0x28);
  uint16_t shentsize = rd16(b + 0x3a), shstrndx = rd16(b + 0x3e);
  if (shentsize < 64 || e.shnum == 0 || shstrndx >= e.shnum || shoff > (1ull << 32)) {
    snprintf(err, err_len, "malformed ELF section table");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  out->arch = (int)((rd32(b + 0x30) >> 8) & 0xff);
  e.sh = (section_t *)calloc(e.shnum, sizeof *e.sh);
  if (!e.sh) return CUDA_ERROR_OUT_OF_MEMORY;
  int symtab = -1;
  for (uint32_t i = 0; i < e.shnum; ++i) {
    const uint8_t *h = b + shoff + (uint64_t)i * shentsize;
    e.sh[i] = (section_t){rd32(h), rd32(h + 4), rd32(h + 40), rd64(h + 24), rd64(h + 32)};
    if (e.sh[i].type == 2 /* SHT_SYMTAB */) symtab = (int)i;
  }
  e.shstr = (const char *)b + e.sh[shstrndx].offset;
  e.shstr_size = e.sh[shstrndx].size;
  CUresult r = CUDA_SUCCESS;
  uint32_t *sym_of_kernel = NULL;
  if (symtab < 0 || e.sh[symtab].link >= e.shnum) {
    snprintf(err, err_len, "cubin has no symbol table");
    r = CUDA_ERROR_INVALID_IMAGE;
    goto done;
  }
  const uint8_t *syms = b + e.sh[symtab].offset;
  const char *strs = (const char *)b + e.sh[e.sh[symtab].link].offset;
  uint64_t nsyms = e.sh[symtab].size / 24, strs_size = e.sh[e.sh[symtab].link].size;
  unsigned reserved = 0;
  out->kernels = (fk_kernel_info *)calloc(nsyms + 1, sizeof *out->kernels);
  sym_of_kernel = (uint32_t *)calloc(nsyms + 1, sizeof *sym_of_kernel);
  if (!out->kernels || !sym_of_kernel) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto done;
  }
  for (uint64_t i = 0; i < nsyms; ++i) {
    const uint8_t *s = syms + 24 * i;
    uint32_t name = rd32(s);
    if (name >= strs_size) continue;
    if (strncmp(strs + name, ".nv.reservedSmem", 16) == 0) reserved = SM90_RESERVED_SMEM;
    if ((s[4] & 0xf) != 2 /* STT_FUNC */ || !(s[5] & STO_CUDA_ENTRY)) continue;
    fk_kernel_info *k = &out->kernels[out->nkernels];
    snprintf(k->name, sizeof k->name, "%s", strs + name);
    sym_of_kernel[out->nkernels++] = (uint32_t)i;
  }
  for (int i = 0; i < out->nkernels; ++i) {
    fk_kernel_info *k = &out->kernels[i];
    each_attr(&e, find_section(&e, ".nv.info.", k->name), k, kernel_attr, NULL);
    int sh = find_section(&e, ".nv.shared.", k->name);
    uint64_t smem = sh >= 0 ? e.sh[sh].size : 0;
    k->static_smem = (uint32_t)(smem > reserved ? smem - reserved : 0);
  }
  regs_arg_t ra = {sym_of_kernel, out->nkernels};
  each_attr(&e, find_section(&e, ".nv.info", ""), out->kernels, module_attr, &ra);
done:
  free(sym_of_kernel);
  free(e.sh);
  return r;
}

/* PTX parameter type -> size in bytes, 0 if unknown. */
static unsigned ptx_type_size(const char *t) {
  static const struct { const char *name; unsigned size; } types[] = {
      {".u64", 8}, {".s64", 8}, {".b64", 8}, {".f64", 8}, {".u32", 4}, {".s32", 4}, {".b32", 4},
      {".f32", 4}, {".u16", 2}, {".s16", 2}, {".b16", 2}, {".f16", 2}, {".u8", 1}, {".s8", 1},
      {".b8", 1}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i)
    if (strncmp(t, types[i].name, strlen(types[i].name)) == 0) return types[i].size;
  return 0;
}

/* Parses one ".param ..." declaration at p into k; returns 0 if malformed. */
static int ptx_param(const char *p, const char *end, fk_kernel_info *k) {
  unsigned align = 0, size = 0, count = 1;
  for (const char *q = p; q < end; ++q) {
    if (strncmp(q, ".align", 6) == 0) align = (unsigned)strtoul(q + 6, NULL, 10);
    else if (*q == '.' && !size) size = ptx_type_size(q);
    else if (*q == '[') count = (unsigned)strtoul(q + 1, NULL, 10);
  }
  if (!size || !count || k->nparams >= FK_MAX_PARAMS) return 0;
  if (!align) align = size;
  uint32_t off = (k->param_bytes + align - 1) / align * align;
  k->offset[k->nparams] = (uint16_t)off;
  k->size[k->nparams++] = (uint16_t)(size * count);
  k->param_bytes = off + size * count;
  return 1;
}

static CUresult parse_ptx(const char *text, fk_image_info *out, char *err, size_t err_len) {
  out->is_ptx = 1;
  const char *t = strstr(text, ".target sm_");
  if (!t) {
    snprintf(err, err_len, "PTX has no '.target sm_XX'");
    return CUDA_ERROR_INVALID_PTX;
  }
  out->arch = (int)strtol(t + 11, NULL, 10);
  int cap = 0;
  for (const char *p = text; (p = strstr(p, ".entry ")) != NULL; ++p) ++cap;
  out->kernels = (fk_kernel_info *)calloc((size_t)cap + 1, sizeof *out->kernels);
  if (!out->kernels) return CUDA_ERROR_OUT_OF_MEMORY;
  for (const char *p = text; (p = strstr(p, ".entry ")) != NULL;) {
    fk_kernel_info *k = &out->kernels[out->nkernels++];
    p += 7;
    size_t n = strcspn(p, "( \t\n");
    snprintf(k->name, sizeof k->name, "%.*s", (int)(n < FK_NAME_MAX - 1 ? n : FK_NAME_MAX - 1), p);
    const char *open = strchr(p, '('), *close = open ? strchr(open, ')') : NULL;
    if (!close) {
      snprintf(err, err_len, "PTX entry '%s' has no parameter list", k->name);
      return CUDA_ERROR_INVALID_PTX;
    }
    for (const char *q = open; (q = strstr(q, ".param")) != NULL && q < close; q += 6) {
      const char *end = q + strcspn(q, ",)");
      if (!ptx_param(q + 6, end, k)) {
        snprintf(err, err_len, "PTX entry '%s': unreadable parameter %d", k->name, k->nparams);
        return CUDA_ERROR_INVALID_PTX;
      }
    }
    const char *body = strchr(close, '{'), *nt = strstr(close, ".maxntid");
    if (nt && body && nt < body) {
      unsigned x = 1, y = 1, z = 1;
      sscanf(nt + 8, " %u , %u , %u", &x, &y, &z);
      k->max_threads = (int)(x * y * z);
    }
    p = close;
  }
  return CUDA_SUCCESS;
}

CUresult fk_parse_image(const void *image, fk_image_info *out, char *err, size_t err_len) {
  memset(out, 0, sizeof *out);
  err[0] = 0;
  const uint8_t *b = (const uint8_t *)image;
  CUresult r;
  if (!b) r = CUDA_ERROR_INVALID_VALUE;
  else if (memcmp(b, "\177ELF", 4) == 0) r = parse_cubin(b, out, err, err_len);
  else if (strstr((const char *)b, ".version") && strstr((const char *)b, ".target"))
    r = parse_ptx((const char *)b, out, err, err_len);
  else {
    snprintf(err, err_len, "neither a cubin (ELF) nor PTX text");
    r = CUDA_ERROR_INVALID_IMAGE;
  }
  if (r != CUDA_SUCCESS) fk_image_free(out);
  return r;
}

void fk_image_free(fk_image_info *info) {
  free(info->kernels);
  info->kernels = NULL;
  info->nkernels = 0;
}
