/* fake_triton.c - a stand-in for tritonserver that drives the aotc backend from the command line.
 *
 * It implements the part of the Triton C API the backend calls, loads one model
 * the way Triton does (ModelInitialize with a config, one instance, Execute on
 * one list of requests, finalize), and prints what came back, so the backend can
 * run under AddressSanitizer without a server. Usage:
 *   fake_triton MODEL_DIR MODEL CONFIG_JSON AUTOCOMPLETE(0|1) [NAME:TYPE:D0,D1,..:FILE[+NAME:...]]...
 * Each request argument lists its inputs joined by '+'; TYPE is the TRITONSERVER_DataType
 * number. Prints "config: JSON" when the backend set a config, "response I: OK" with each
 * output written to OUT_DIR/rI_NAME.bin (OUT_DIR is $FAKE_TRITON_OUT) or "response I: ERROR
 * message", and "batch: N" per batch the backend reported. FAKE_TRITON_KIND=gpu makes the
 * instance KIND_GPU on GPU 0 (with AOTC_LIBCUDA naming aotc's stand-in driver, no GPU needed). Exit 0 unless the harness
 * itself fails (a model that fails to load prints "model: ERROR message").
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton_api.h"

struct TRITONSERVER_Error { int code; char *msg; };
struct TRITONSERVER_Message { char *json; size_t size; };
struct TRITONBACKEND_Model { const char *name, *repo; char *config; bool autocomplete; void *state; };
struct TRITONBACKEND_ModelInstance { TRITONBACKEND_Model *model; void *state; };
struct TRITONBACKEND_Input { char *name; int dtype; int64_t shape[8]; uint32_t rank; void *data; uint64_t bytes; };
struct TRITONBACKEND_Output { char *name; int dtype; int64_t shape[8]; uint32_t rank; void *buf; uint64_t bytes; };
struct TRITONBACKEND_Request { int id, n_in, released, responses; TRITONBACKEND_Input in[8]; };
struct TRITONBACKEND_Response { TRITONBACKEND_Request *req; int n_out; TRITONBACKEND_Output out[8]; };

static char *dupstr(const char *s) { char *d = (char *)malloc(strlen(s) + 1); strcpy(d, s); return d; }

TRITONSERVER_Error *TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char *msg) {
  TRITONSERVER_Error *e = (TRITONSERVER_Error *)malloc(sizeof *e);
  e->code = code; e->msg = dupstr(msg);
  return e;
}
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *e) { if (e) { free(e->msg); free(e); } }
const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *e) { return e->msg; }
TRITONSERVER_Error *TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message **m, const char *b, size_t n) {
  *m = (TRITONSERVER_Message *)malloc(sizeof **m);
  (*m)->json = (char *)malloc(n + 1); memcpy((*m)->json, b, n); (*m)->json[n] = 0; (*m)->size = n;
  return NULL;
}
TRITONSERVER_Error *TRITONSERVER_MessageDelete(TRITONSERVER_Message *m) { free(m->json); free(m); return NULL; }
TRITONSERVER_Error *TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message *m, const char **b, size_t *n) {
  *b = m->json; *n = m->size; return NULL;
}
TRITONSERVER_Error *TRITONSERVER_LogMessage(TRITONSERVER_LogLevel l, const char *f, int line, const char *msg) {
  (void)l; (void)f; (void)line; printf("log: %s\n", msg); return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ApiVersion(uint32_t *major, uint32_t *minor) { *major = 1; *minor = 19; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelName(TRITONBACKEND_Model *m, const char **n) { *n = m->name; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelRepository(TRITONBACKEND_Model *m, TRITONBACKEND_ArtifactType *t, const char **l) {
  *t = TRITONBACKEND_ARTIFACT_FILESYSTEM; *l = m->repo; return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelVersion(TRITONBACKEND_Model *m, uint64_t *v) { (void)m; *v = 1; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelConfig(TRITONBACKEND_Model *m, uint32_t v, TRITONSERVER_Message **out) {
  (void)v; return TRITONSERVER_MessageNewFromSerializedJson(out, m->config, strlen(m->config));
}
TRITONSERVER_Error *TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model *m, bool *a) { *a = m->autocomplete; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model *m, uint32_t v, TRITONSERVER_Message *c) {
  (void)v; free(m->config); m->config = dupstr(c->json); printf("config: %s\n", m->config); return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelState(TRITONBACKEND_Model *m, void **s) { *s = m->state; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelSetState(TRITONBACKEND_Model *m, void *s) { m->state = s; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance *i, const char **n) { (void)i; *n = "fake_0"; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance *i, TRITONSERVER_InstanceGroupKind *k) {
  const char *kind = getenv("FAKE_TRITON_KIND"); /* "gpu": a KIND_GPU instance */
  (void)i;
  *k = kind && !strcmp(kind, "gpu") ? TRITONSERVER_INSTANCEGROUPKIND_GPU : TRITONSERVER_INSTANCEGROUPKIND_CPU;
  return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance *i, int32_t *d) { (void)i; *d = 0; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance *i, TRITONBACKEND_Model **m) { *m = i->model; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance *i, void **s) { *s = i->state; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance *i, void *s) { i->state = s; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance *i, TRITONBACKEND_Request *r,
                                                                bool ok, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  (void)i; (void)a; (void)b; (void)c; (void)d;
  if (r->released) { printf("harness: statistics after release\n"); exit(3); }
  printf("stat %d: %s\n", r->id, ok ? "success" : "failure");
  return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance *i, uint64_t n, uint64_t a,
                                                                     uint64_t b, uint64_t c, uint64_t d) {
  (void)i; (void)a; (void)b; (void)c; (void)d; printf("batch: %llu\n", (unsigned long long)n); return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestId(TRITONBACKEND_Request *r, const char **id) { (void)r; *id = ""; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request *r, uint32_t *n) { *n = (uint32_t)r->n_in; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_RequestInput(TRITONBACKEND_Request *r, const char *name, TRITONBACKEND_Input **in) {
  int i;
  for (i = 0; i < r->n_in; ++i) if (!strcmp(r->in[i].name, name)) { *in = &r->in[i]; return NULL; }
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no such input");
}
TRITONSERVER_Error *TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request *r, uint32_t *n) { (void)r; *n = 0; return NULL; }
TRITONSERVER_Error *TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request *r, uint32_t i, const char **n) {
  (void)r; (void)i; (void)n; return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no outputs requested");
}
TRITONSERVER_Error *TRITONBACKEND_RequestRelease(TRITONBACKEND_Request *r, uint32_t f) {
  (void)f; if (r->released++) { printf("harness: request %d released twice\n", r->id); exit(3); } return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_InputProperties(TRITONBACKEND_Input *in, const char **name, TRITONSERVER_DataType *t,
                                                  const int64_t **shape, uint32_t *rank, uint64_t *bytes, uint32_t *bufs) {
  if (name) *name = in->name;
  if (t) *t = (TRITONSERVER_DataType)in->dtype;
  if (shape) *shape = in->shape;
  if (rank) *rank = in->rank;
  if (bytes) *bytes = in->bytes;
  if (bufs) *bufs = in->bytes > 8 ? 2 : 1; /* split in two, as Triton may */
  return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_InputBuffer(TRITONBACKEND_Input *in, uint32_t i, const void **b, uint64_t *n,
                                              TRITONSERVER_MemoryType *t, int64_t *id) {
  uint64_t half = in->bytes > 8 ? in->bytes / 2 : in->bytes;
  *b = (char *)in->data + (i ? half : 0); *n = i ? in->bytes - half : half; *t = TRITONSERVER_MEMORY_CPU; *id = 0;
  return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseNew(TRITONBACKEND_Response **r, TRITONBACKEND_Request *req) {
  *r = (TRITONBACKEND_Response *)calloc(1, sizeof **r); (*r)->req = req; return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response *r) {
  int i; for (i = 0; i < r->n_out; ++i) { free(r->out[i].name); free(r->out[i].buf); } free(r); return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response *r, TRITONBACKEND_Output **o, const char *name,
                                                 TRITONSERVER_DataType t, const int64_t *shape, uint32_t rank) {
  TRITONBACKEND_Output *out = &r->out[r->n_out++];
  out->name = dupstr(name); out->dtype = t; out->rank = rank; memcpy(out->shape, shape, rank * sizeof *shape);
  *o = out;
  return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output *o, void **b, uint64_t n, TRITONSERVER_MemoryType *t,
                                               int64_t *id) {
  o->buf = malloc(n ? n : 1); memset(o->buf, 0xA5, n); o->bytes = n; *b = o->buf; *t = TRITONSERVER_MEMORY_CPU; *id = 0;
  return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseSend(TRITONBACKEND_Response *r, uint32_t flags, TRITONSERVER_Error *e) {
  int i;
  if (flags != AOTC_TRITON_RESPONSE_COMPLETE_FINAL || r->req->responses++ || r->req->released) {
    printf("harness: bad response for request %d\n", r->req->id); exit(3);
  }
  if (e) printf("response %d: ERROR %s\n", r->req->id, e->msg);
  else {
    printf("response %d: OK\n", r->req->id);
    for (i = 0; i < r->n_out; ++i) {
      char path[4096];
      FILE *f;
      snprintf(path, sizeof path, "%s/r%d_%s.bin", getenv("FAKE_TRITON_OUT") ? getenv("FAKE_TRITON_OUT") : ".",
               r->req->id, r->out[i].name);
      f = fopen(path, "wb");
      if (!f || fwrite(r->out[i].buf, 1, r->out[i].bytes, f) != r->out[i].bytes) exit(4);
      fclose(f);
    }
  }
  TRITONBACKEND_ResponseDelete(r);
  return NULL;
}

static void *read_all(const char *path, uint64_t *n) {
  FILE *f = fopen(path, "rb");
  void *p;
  if (!f) { perror(path); exit(4); }
  fseek(f, 0, SEEK_END); *n = (uint64_t)ftell(f); fseek(f, 0, SEEK_SET);
  p = malloc(*n ? *n : 1);
  if (fread(p, 1, *n, f) != *n) exit(4);
  fclose(f);
  return p;
}

/* NAME:TYPE:D0,D1:FILE */
static void parse_input(TRITONBACKEND_Input *in, char *spec) {
  char *name = strtok(spec, ":"), *type = strtok(NULL, ":"), *dims = strtok(NULL, ":"), *file = strtok(NULL, ":"), *d;
  if (!name || !type || !dims || !file) { fprintf(stderr, "bad input spec\n"); exit(2); }
  in->name = dupstr(name); in->dtype = atoi(type); in->rank = 0;
  for (d = dims; d && *d; d = strchr(d, ',') ? strchr(d, ',') + 1 : NULL) in->shape[in->rank++] = atoll(d);
  in->data = read_all(file, &in->bytes);
}

static int report(const char *what, TRITONSERVER_Error *e) {
  if (!e) return 0;
  printf("%s: ERROR %s\n", what, e->msg);
  TRITONSERVER_ErrorDelete(e);
  return 1;
}

int main(int argc, char **argv) {
  TRITONBACKEND_Model model;
  TRITONBACKEND_ModelInstance inst;
  TRITONBACKEND_Request *reqs;
  TRITONBACKEND_Request **ptrs;
  uint64_t n;
  int nreq = argc - 5, i, j, executed = 0;
  if (argc < 5) { fprintf(stderr, "usage: see fake_triton.c\n"); return 2; }
  setvbuf(stdout, NULL, _IOLBF, 0);
  memset(&model, 0, sizeof model);
  memset(&inst, 0, sizeof inst);
  model.repo = argv[1]; model.name = argv[2]; model.autocomplete = atoi(argv[4]) != 0;
  model.config = (char *)read_all(argv[3], &n);
  model.config = (char *)realloc(model.config, n + 1); model.config[n] = 0;
  inst.model = &model;
  reqs = (TRITONBACKEND_Request *)calloc((size_t)nreq + 1, sizeof *reqs);
  ptrs = (TRITONBACKEND_Request **)calloc((size_t)nreq + 1, sizeof *ptrs);
  for (i = 0; i < nreq; ++i) {
    char *spec = argv[5 + i], *next;
    reqs[i].id = i;
    for (; spec; spec = next) {
      next = strchr(spec, '+');
      if (next) *next++ = 0;
      parse_input(&reqs[i].in[reqs[i].n_in++], spec);
    }
    ptrs[i] = &reqs[i];
  }
  if (report("backend", TRITONBACKEND_Initialize(NULL))) return 0;
  if (!report("model", TRITONBACKEND_ModelInitialize(&model))) {
    if (!report("instance", TRITONBACKEND_ModelInstanceInitialize(&inst))) {
      if (nreq) report("execute", TRITONBACKEND_ModelInstanceExecute(&inst, ptrs, (uint32_t)nreq));
      executed = 1;
      report("instance finalize", TRITONBACKEND_ModelInstanceFinalize(&inst));
    }
    report("model finalize", TRITONBACKEND_ModelFinalize(&model));
  }
  for (i = 0; i < nreq; ++i) {
    if (executed && (!reqs[i].released || reqs[i].responses != 1)) {
      printf("harness: request %d released %d, %d responses\n", i, reqs[i].released, reqs[i].responses);
      return 3;
    }
    for (j = 0; j < reqs[i].n_in; ++j) { free(reqs[i].in[j].name); free(reqs[i].in[j].data); }
  }
  free(reqs); free(ptrs); free(model.config);
  printf("harness: done\n");
  return 0;
}
