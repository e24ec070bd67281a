/* status.c - aotc_status_t: heap-allocated code + message, NULL == OK. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_internal.h"

struct aotc_status_s {
  aotc_status_code_t code;
  int is_static; /* the out-of-memory status is static and never freed */
  char message[1];
};

static struct aotc_status_s oom_status = {AOTC_STATUS_RESOURCE_EXHAUSTED, 1, {0}};

aotc_status_t aotc_make_status(aotc_status_code_t code, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) buf[0] = 0;
  size_t len = strlen(buf);
  struct aotc_status_s *s = (struct aotc_status_s *)malloc(sizeof *s + len);
  if (!s) return &oom_status;
  s->code = code == AOTC_STATUS_OK ? AOTC_STATUS_INTERNAL : code;
  s->is_static = 0;
  memcpy(s->message, buf, len + 1);
  return s;
}

aotc_status_code_t aotc_status_code(aotc_status_t status) {
  return status ? status->code : AOTC_STATUS_OK;
}

const char *aotc_status_message(aotc_status_t status) {
  if (!status) return "OK";
  if (status->is_static) return "out of host memory";
  return status->message;
}

const char *aotc_status_code_string(aotc_status_code_t code) {
  switch (code) {
    case AOTC_STATUS_OK: return "OK";
    case AOTC_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case AOTC_STATUS_NOT_FOUND: return "NOT_FOUND";
    case AOTC_STATUS_DATA_LOSS: return "DATA_LOSS";
    case AOTC_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case AOTC_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case AOTC_STATUS_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case AOTC_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case AOTC_STATUS_INTERNAL: return "INTERNAL";
  }
  return "UNKNOWN";
}

void aotc_status_free(aotc_status_t status) {
  if (status && !status->is_static) free(status);
}

/* CRC-32 (IEEE 802.3, as zlib.crc32), table built once. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

uint32_t aotc_crc32(const uint8_t *data, size_t size) {
  pthread_once(&crc_once, crc_init);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = crc_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

const char *aotc_runtime_version(void) { return "aotc-runtime 0.1.0 (format 2)"; }
