/* fuzz_engine_load.c - fuzz target for the engine loader (aotc_runtime.h).
 *
 * Feeds arbitrary bytes to aotc_engine_load_from_memory (with and without
 * checksum verification, so mutations reach the structural checks behind the
 * CRCs), then exercises every read-only query and aotc_engine_check on a
 * loaded engine. A load may only fail with DATA_LOSS or UNIMPLEMENTED and a
 * message; a loaded engine must have zero padding and nothing after its last
 * section; anything else, a crash, a leak or undefined behaviour (ASan and
 * UBSan) is a finding. Contexts are never created: that would dlopen the
 * fuzzed host build, i.e. run attacker code by design.
 *
 * Build with libFuzzer:  clang -fsanitize=fuzzer,address,undefined ...
 * Build as a replayer:   cc -DAOTC_FUZZ_MAIN -fsanitize=address,undefined ...
 * (the replayer runs the target over every file named on its command line;
 * tests/fuzz/test_fuzz_loader.py does both).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_runtime.h"

static void expect_load_error(aotc_status_t st) {
  aotc_status_code_t code = aotc_status_code(st);
  const char *msg = aotc_status_message(st);
  if ((code != AOTC_STATUS_DATA_LOSS && code != AOTC_STATUS_UNIMPLEMENTED) || !msg || !*msg)
    __builtin_trap(); /* a corrupt engine must be DATA_LOSS / UNIMPLEMENTED with a message */
  aotc_status_free(st);
}

static void query(const aotc_engine_t *e) {
  aotc_tensor_info_t info, again;
  size_t counts[2] = {aotc_engine_input_count(e), aotc_engine_output_count(e)};
  for (int out = 0; out < 2; ++out)
    for (size_t i = 0; i <= counts[out]; ++i) {
      aotc_status_t st = out ? aotc_engine_output_info(e, i, &info) : aotc_engine_input_info(e, i, &info);
      if (st) {
        if (i < counts[out]) __builtin_trap();
        aotc_status_free(st);
        continue;
      }
      if (info.rank > AOTC_MAX_RANK || strlen(info.name) > (size_t)1 << 30) __builtin_trap();
      for (uint32_t r = 0; r < info.rank; ++r) /* static, a dim of the engine (inputs), or computed */
        if (info.dim_index[r] != AOTC_DIM_STATIC &&
            (out ? info.dim_index[r] != AOTC_DIM_COMPUTED
                 : info.dim_index[r] < 0 || (size_t)info.dim_index[r] >= aotc_engine_dim_count(e)))
          __builtin_trap();
      st = out ? aotc_engine_output_info_by_name(e, info.name, &again)
               : aotc_engine_input_info_by_name(e, info.name, &again);
      if (st || again.byte_size != info.byte_size) __builtin_trap(); /* names are unique */
    }
  size_t dim_count = aotc_engine_dim_count(e);
  for (size_t d = 0; d <= dim_count; ++d) {
    aotc_dim_info_t dim;
    aotc_status_t ds = aotc_engine_dim_info(e, d, &dim);
    if (ds) {
      if (d < dim_count) __builtin_trap();
      aotc_status_free(ds);
      continue;
    }
    if (!dim.name || !*dim.name || dim.min > dim.max || dim.max >= 0x80000000u || dim.divisor < 1)
      __builtin_trap(); /* the loader validated every dim */
  }
  const char *json = NULL;
  size_t json_size = 0;
  aotc_status_t st = aotc_engine_manifest(e, &json, &json_size);
  if (st || (json_size && !json)) __builtin_trap();
  volatile uint64_t sink = aotc_engine_device_memory_size(e, 3) + aotc_engine_arena_size(e) +
                           aotc_engine_weights_size(e) + aotc_engine_launch_count(e) +
                           strlen(aotc_engine_aotc_version(e));
  (void)sink;
}

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

/* An independent oracle for what the loader accepted: every byte outside the
 * header, the section table and the sections (padding) is zero, and nothing
 * follows the last section. Only called on a loaded engine, whose table the
 * loader has bounds-checked. */
static void expect_no_slack(const uint8_t *data, size_t size) {
  uint64_t count = le(data + 36, 4), table = le(data + 40, 8), end = table + 48 * count;
  uint8_t *covered = (uint8_t *)calloc(size ? size : 1, 1);
  if (!covered) return;
  memset(covered, 1, (size_t)end);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t *s = data + table + 48 * i;
    uint64_t off = le(s + 24, 8), n = le(s + 32, 8);
    memset(covered + off, 1, (size_t)n);
    if (off + n > end) end = off + n;
  }
  if (end != size) __builtin_trap(); /* trailing bytes after the last section */
  for (size_t k = 0; k < size; ++k)
    if (!covered[k] && data[k]) __builtin_trap(); /* nonzero padding was accepted */
  free(covered);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int verify = 1; verify >= 0; --verify) {
    aotc_engine_options_t options;
    aotc_engine_options_initialize(&options);
    options.verify_checksums = verify;
    aotc_engine_t *e = NULL;
    aotc_status_t st = aotc_engine_load_from_memory(data, size, &options, &e);
    if (st) {
      if (e) __builtin_trap(); /* out_engine stays NULL on error */
      expect_load_error(st);
      continue;
    }
    expect_no_slack(data, size);
    query(e);
    aotc_engine_release(e);
  }
  char why[200];
  aotc_status_t st = aotc_engine_check(data, size, AOTC_DEVICE_CPU, why, sizeof why);
  if (strlen(why) >= sizeof why) __builtin_trap();
  aotc_status_free(st);
  return 0;
}

#ifdef AOTC_FUZZ_MAIN
int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      fprintf(stderr, "cannot open %s\n", argv[i]);
      return 2;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = (uint8_t *)malloc(n > 0 ? (size_t)n : 1);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    printf("ok %s\n", argv[i]);
  }
  return 0;
}
#endif
