/* hello_engine.c - a serving process on the aotc C runtime.
 *
 * Loads an engine once, then answers requests from several threads, one
 * execution context per thread (contexts share the engine's weights and
 * kernels; each owns its activation arena). Every answer is checked
 * byte-for-byte against a reference computed up front by the main thread's
 * own context, so the demo doubles as a determinism and thread-safety test.
 *
 *   cc -std=c99 -I aotc/package/runtime examples/hello_engine.c \
 *      aotc/package/_aotc_runtime.so -lpthread -o hello_engine
 *   ./hello_engine model.engine [threads=4] [requests=64] [dump.bin] [--cuda]
 *
 * A dynamic engine is served at its largest shape (aotc_context_set_input_shape;
 * a static input accepts its own shape too). Request r's inputs are pseudo-random,
 * derived from r alone. dump.bin, if
 * given, receives request 0's inputs then outputs, raw, in engine order.
 * Exit status: 0 all answers right, 1 a wrong answer, 2 a runtime error.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_runtime.h"

typedef struct {
  aotc_engine_t *engine;
  aotc_device_t device;
  size_t n_in, n_out, requests, threads;
  aotc_tensor_info_t *in, *out;
  uint8_t **inputs;   /* [request][input] buffers */
  uint8_t **expected; /* [request][output] buffers */
  int out_of_memory;
} server_t;

typedef struct {
  server_t *server;
  size_t id, answered, wrong;
  aotc_status_t status;
  pthread_t thread;
} worker_t;

static const char *dtype_name(aotc_dtype_t d) {
  static const char *names[] = {"?", "f32", "f16", "bf16", "i64", "i32", "i8", "u8", "bool"};
  return (int)d >= 1 && (int)d <= 8 ? names[d] : "?";
}

static uint64_t next(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

/* Values a model accepts for any dtype: floats in [-1, 1), small integers. */
static void fill(uint8_t *p, const aotc_tensor_info_t *t, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  size_t width = t->dtype == AOTC_DTYPE_F32 || t->dtype == AOTC_DTYPE_I32 ? 4
               : t->dtype == AOTC_DTYPE_I64 ? 8 : t->dtype == AOTC_DTYPE_F16 || t->dtype == AOTC_DTYPE_BF16 ? 2 : 1;
  for (size_t i = 0; i < t->byte_size / width; ++i) {
    uint64_t r = next(&s);
    float f = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    uint32_t bits;
    memcpy(&bits, &f, 4);
    switch (t->dtype) {
      case AOTC_DTYPE_F32: memcpy(p + 4 * i, &f, 4); break;
      case AOTC_DTYPE_BF16: { uint16_t h = (uint16_t)(bits >> 16); memcpy(p + 2 * i, &h, 2); break; }
      case AOTC_DTYPE_F16: { /* +-[0.5, 1) with a random mantissa */
        uint16_t h = (uint16_t)(((r >> 1) & 0x8000) | 0x3800 | (r & 0x3FF));
        memcpy(p + 2 * i, &h, 2);
        break;
      }
      case AOTC_DTYPE_I64: { int64_t v = (int64_t)(r % 4); memcpy(p + 8 * i, &v, 8); break; }
      case AOTC_DTYPE_I32: { int32_t v = (int32_t)(r % 4); memcpy(p + 4 * i, &v, 4); break; }
      case AOTC_DTYPE_BOOL: p[i] = (uint8_t)(r & 1); break;
      default: p[i] = (uint8_t)(r % 4); break;
    }
  }
}

/* Binds request r's inputs and the given output buffers, runs once. */
static aotc_status_t answer(aotc_context_t *ctx, const server_t *sv, size_t r, uint8_t **outs) {
  for (size_t i = 0; i < sv->n_in; ++i) { /* a dynamic engine: this demo serves its largest shape */
    int64_t dims[AOTC_MAX_RANK];
    for (uint32_t d = 0; d < sv->in[i].rank; ++d) dims[d] = (int64_t)sv->in[i].dims[d];
    AOTC_RETURN_IF_ERROR(aotc_context_set_input_shape(ctx, sv->in[i].name, sv->in[i].rank, dims));
  }
  for (size_t i = 0; i < sv->n_in; ++i)
    AOTC_RETURN_IF_ERROR(aotc_context_bind_host_input(ctx, sv->in[i].name,
                                                      sv->inputs[r * sv->n_in + i], sv->in[i].byte_size));
  for (size_t o = 0; o < sv->n_out; ++o)
    AOTC_RETURN_IF_ERROR(aotc_context_bind_host_output(ctx, sv->out[o].name, outs[o], sv->out[o].byte_size));
  return aotc_context_run(ctx);
}

static void *serve(void *arg) {
  worker_t *w = (worker_t *)arg;
  const server_t *sv = w->server;
  aotc_context_t *ctx = NULL;
  uint8_t **outs = (uint8_t **)calloc(sv->n_out + 1, sizeof *outs);
  w->status = outs ? aotc_context_create(sv->engine, sv->device, &ctx) : NULL;
  for (size_t o = 0; !w->status && outs && o < sv->n_out; ++o)
    outs[o] = (uint8_t *)malloc(sv->out[o].byte_size ? sv->out[o].byte_size : 1);
  for (size_t r = w->id; !w->status && outs && r < sv->requests; r += sv->threads) {
    w->status = answer(ctx, sv, r, outs);
    for (size_t o = 0; !w->status && o < sv->n_out; ++o)
      w->wrong += memcmp(outs[o], sv->expected[r * sv->n_out + o], sv->out[o].byte_size) != 0;
    w->answered += !w->status;
  }
  for (size_t o = 0; outs && o < sv->n_out; ++o) free(outs[o]);
  free(outs);
  aotc_context_release(ctx);
  return NULL;
}

static aotc_status_t prepare(server_t *sv) {
  sv->n_in = aotc_engine_input_count(sv->engine);
  sv->n_out = aotc_engine_output_count(sv->engine);
  sv->in = (aotc_tensor_info_t *)calloc(sv->n_in + 1, sizeof *sv->in);
  sv->out = (aotc_tensor_info_t *)calloc(sv->n_out + 1, sizeof *sv->out);
  sv->inputs = (uint8_t **)calloc(sv->requests * sv->n_in + 1, sizeof(uint8_t *));
  sv->expected = (uint8_t **)calloc(sv->requests * sv->n_out + 1, sizeof(uint8_t *));
  sv->out_of_memory = !sv->in || !sv->out || !sv->inputs || !sv->expected;
  if (sv->out_of_memory) return NULL;
  printf("engine: aotc %s, %zu launches, arena %llu B, weights %llu B, %zu contexts need %llu B\n",
         aotc_engine_aotc_version(sv->engine), aotc_engine_launch_count(sv->engine),
         (unsigned long long)aotc_engine_arena_size(sv->engine),
         (unsigned long long)aotc_engine_weights_size(sv->engine), sv->threads,
         (unsigned long long)aotc_engine_device_memory_size(sv->engine, sv->threads));
  for (size_t i = 0; i < sv->n_in + sv->n_out; ++i) {
    int is_out = i >= sv->n_in;
    size_t k = is_out ? i - sv->n_in : i;
    aotc_tensor_info_t *t = is_out ? &sv->out[k] : &sv->in[k];
    AOTC_RETURN_IF_ERROR(is_out ? aotc_engine_output_info(sv->engine, k, t)
                                : aotc_engine_input_info(sv->engine, k, t));
    aotc_tensor_info_t again; /* metadata by name gives the same answer */
    AOTC_RETURN_IF_ERROR(is_out ? aotc_engine_output_info_by_name(sv->engine, t->name, &again)
                                : aotc_engine_input_info_by_name(sv->engine, t->name, &again));
    printf("  %s %s: %s[", is_out ? "output" : "input", t->name, dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->rank; ++d) printf("%s%llu", d ? "," : "", (unsigned long long)t->dims[d]);
    printf("] %llu B\n", (unsigned long long)again.byte_size);
  }
  for (size_t r = 0; r < sv->requests; ++r) {
    for (size_t i = 0; i < sv->n_in; ++i) {
      uint8_t *p = (uint8_t *)malloc(sv->in[i].byte_size ? sv->in[i].byte_size : 1);
      sv->out_of_memory |= !p;
      if (!p) return NULL;
      fill(p, &sv->in[i], 1000 * r + i);
      sv->inputs[r * sv->n_in + i] = p;
    }
    for (size_t o = 0; o < sv->n_out; ++o) {
      uint8_t *p = (uint8_t *)malloc(sv->out[o].byte_size ? sv->out[o].byte_size : 1);
      sv->out_of_memory |= !p;
      if (!p) return NULL;
      sv->expected[r * sv->n_out + o] = p;
    }
  }
  /* The reference answers, from one context on this thread. */
  aotc_context_t *ctx = NULL;
  AOTC_RETURN_IF_ERROR(aotc_context_create(sv->engine, sv->device, &ctx));
  aotc_status_t st = NULL;
  for (size_t r = 0; !st && r < sv->requests; ++r) st = answer(ctx, sv, r, sv->expected + r * sv->n_out);
  aotc_context_release(ctx);
  return st;
}

static void dump(const server_t *sv, const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  for (size_t i = 0; i < sv->n_in; ++i) fwrite(sv->inputs[i], 1, sv->in[i].byte_size, f);
  for (size_t o = 0; o < sv->n_out; ++o) fwrite(sv->expected[o], 1, sv->out[o].byte_size, f);
  fclose(f);
}

static void cleanup(server_t *sv) {
  for (size_t i = 0; sv->inputs && i < sv->requests * sv->n_in; ++i) free(sv->inputs[i]);
  for (size_t i = 0; sv->expected && i < sv->requests * sv->n_out; ++i) free(sv->expected[i]);
  free(sv->inputs);
  free(sv->expected);
  free(sv->in);
  free(sv->out);
  aotc_engine_release(sv->engine);
}

static int fail(aotc_status_t st, server_t *sv) {
  fprintf(stderr, "hello_engine: %s: %s\n", aotc_status_code_string(aotc_status_code(st)),
          aotc_status_message(st));
  aotc_status_free(st);
  cleanup(sv);
  return 2;
}

int main(int argc, char **argv) {
  server_t sv = {0};
  sv.device = AOTC_DEVICE_CPU;
  const char *args[4] = {NULL, "4", "64", NULL};
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--cuda") == 0) sv.device = AOTC_DEVICE_CUDA;
    else if (n < 4) args[n++] = argv[i];
  }
  if (!args[0]) {
    fprintf(stderr, "usage: %s model.engine [threads] [requests] [dump.bin] [--cuda]\n", argv[0]);
    return 2;
  }
  sv.threads = (size_t)strtoul(args[1], NULL, 10);
  sv.requests = (size_t)strtoul(args[2], NULL, 10);
  if (sv.threads < 1 || sv.threads > 256 || sv.requests < 1) return 2;
  aotc_status_t st = aotc_engine_load_from_file(args[0], NULL, &sv.engine);
  if (st) return fail(st, &sv);
  if ((st = prepare(&sv)) != NULL) return fail(st, &sv);
  if (sv.out_of_memory) {
    fprintf(stderr, "hello_engine: out of memory\n");
    cleanup(&sv);
    return 2;
  }
  worker_t *workers = (worker_t *)calloc(sv.threads, sizeof *workers);
  size_t started = 0;
  for (; workers && started < sv.threads; ++started) {
    workers[started].server = &sv;
    workers[started].id = started;
    if (pthread_create(&workers[started].thread, NULL, serve, &workers[started]) != 0) break;
  }
  size_t answered = 0, wrong = 0;
  int errors = 0;
  for (size_t t = 0; t < started; ++t) {
    pthread_join(workers[t].thread, NULL);
    answered += workers[t].answered;
    wrong += workers[t].wrong;
    if (workers[t].status) {
      fprintf(stderr, "thread %zu: %s\n", t, aotc_status_message(workers[t].status));
      aotc_status_free(workers[t].status);
      ++errors;
    }
  }
  free(workers);
  printf("%zu threads answered %zu of %zu requests, %zu wrong\n", started, answered, sv.requests, wrong);
  if (args[3]) dump(&sv, args[3]);
  cleanup(&sv);
  if (errors || started != sv.threads || answered != sv.requests) return 2;
  return wrong ? 1 : 0;
}
