/* json_tree.c - parse, edit and serialize JSON (see json_tree.h). */
#include "json_tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JT_MAX_DEPTH 64

typedef struct {
  const char *start, *p, *end;
  char *err;
  size_t err_len;
} jt_parser_t;

static void *fail(jt_parser_t *ps, const char *what) {
  if (ps->err && ps->err_len && !ps->err[0])
    snprintf(ps->err, ps->err_len, "bad JSON at byte %ld: %s", (long)(ps->p - ps->start), what);
  return NULL;
}

static void skip_ws(jt_parser_t *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ++ps->p;
}

static char *dup_range(const char *s, size_t n) {
  char *d = (char *)malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

jt_value_t *jt_new(jt_kind_t kind, const char *text) {
  jt_value_t *v = (jt_value_t *)calloc(1, sizeof *v);
  if (!v) return NULL;
  v->kind = kind;
  if (text) {
    v->text = dup_range(text, strlen(text));
    if (!v->text) { free(v); return NULL; }
  }
  return v;
}

jt_value_t *jt_new_int(int64_t x) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)x);
  return jt_new(JT_NUMBER, buf);
}

void jt_free(jt_value_t *v) {
  size_t i;
  if (!v) return;
  for (i = 0; i < v->count; ++i) {
    if (v->keys) free(v->keys[i]);
    jt_free(v->items[i]);
  }
  free(v->keys);
  free(v->items);
  free(v->text);
  free(v);
}

static int grow(jt_value_t *v) {
  size_t cap = v->cap ? v->cap * 2 : 8;
  jt_value_t **items = (jt_value_t **)realloc(v->items, cap * sizeof *items);
  if (!items) return -1;
  v->items = items;
  if (v->kind == JT_OBJECT) {
    char **keys = (char **)realloc(v->keys, cap * sizeof *keys);
    if (!keys) return -1;
    v->keys = keys;
  }
  v->cap = cap;
  return 0;
}

/* Appends the UTF-8 encoding of code point c. */
static size_t put_utf8(char *out, unsigned c) {
  if (c < 0x80) { out[0] = (char)c; return 1; }
  if (c < 0x800) { out[0] = (char)(0xC0 | (c >> 6)); out[1] = (char)(0x80 | (c & 0x3F)); return 2; }
  if (c < 0x10000) {
    out[0] = (char)(0xE0 | (c >> 12)); out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F)); return 3;
  }
  out[0] = (char)(0xF0 | (c >> 18)); out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((c >> 6) & 0x3F)); out[3] = (char)(0x80 | (c & 0x3F)); return 4;
}

static int hex4(const char *s, unsigned *out) {
  unsigned v = 0;
  int i;
  for (i = 0; i < 4; ++i) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

/* Parses a string at ps->p (on the opening quote) into a malloc'd decoded copy. */
static char *parse_string(jt_parser_t *ps) {
  const char *s = ++ps->p;
  char *out, *o;
  while (ps->p < ps->end && *ps->p != '"') ps->p += (*ps->p == '\\') ? 2 : 1;
  if (ps->p >= ps->end) return (char *)fail(ps, "unterminated string");
  out = o = (char *)malloc((size_t)(ps->p - s) + 1); /* decoding never grows */
  if (!out) return (char *)fail(ps, "out of memory");
  while (s < ps->p) {
    unsigned c, lo;
    if (*s != '\\') { *o++ = *s++; continue; }
    switch (s[1]) {
      case '"': case '\\': case '/': *o++ = s[1]; s += 2; break;
      case 'b': *o++ = '\b'; s += 2; break;
      case 'f': *o++ = '\f'; s += 2; break;
      case 'n': *o++ = '\n'; s += 2; break;
      case 'r': *o++ = '\r'; s += 2; break;
      case 't': *o++ = '\t'; s += 2; break;
      case 'u':
        if (ps->p - s < 6 || hex4(s + 2, &c)) { free(out); return (char *)fail(ps, "bad \\u escape"); }
        s += 6;
        if (c >= 0xD800 && c < 0xDC00 && ps->p - s >= 6 && s[0] == '\\' && s[1] == 'u' &&
            !hex4(s + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
          c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
          s += 6;
        }
        o += put_utf8(o, c);
        break;
      default: free(out); return (char *)fail(ps, "bad escape");
    }
  }
  *o = '\0';
  ++ps->p; /* closing quote */
  return out;
}

static jt_value_t *parse_value(jt_parser_t *ps, int depth);

static jt_value_t *parse_container(jt_parser_t *ps, int depth, jt_kind_t kind) {
  char close = kind == JT_OBJECT ? '}' : ']';
  jt_value_t *v = jt_new(kind, NULL);
  if (!v) return (jt_value_t *)fail(ps, "out of memory");
  ++ps->p;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) { ++ps->p; return v; }
  for (;;) {
    char *key = NULL;
    jt_value_t *item;
    skip_ws(ps);
    if (kind == JT_OBJECT) {
      if (ps->p >= ps->end || *ps->p != '"') { jt_free(v); return (jt_value_t *)fail(ps, "expected a key"); }
      if (!(key = parse_string(ps))) { jt_free(v); return NULL; }
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') { free(key); jt_free(v); return (jt_value_t *)fail(ps, "expected ':'"); }
      ++ps->p;
    }
    item = parse_value(ps, depth + 1);
    if (!item || (v->count == v->cap && grow(v))) {
      free(key); jt_free(item); jt_free(v);
      return item ? (jt_value_t *)fail(ps, "out of memory") : NULL;
    }
    if (v->keys) v->keys[v->count] = key;
    v->items[v->count++] = item;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') { ++ps->p; continue; }
    if (ps->p < ps->end && *ps->p == close) { ++ps->p; return v; }
    jt_free(v);
    return (jt_value_t *)fail(ps, "expected ',' or a closing bracket");
  }
}

static jt_value_t *parse_value(jt_parser_t *ps, int depth) {
  const char *s;
  if (depth > JT_MAX_DEPTH) return (jt_value_t *)fail(ps, "nested too deeply");
  skip_ws(ps);
  if (ps->p >= ps->end) return (jt_value_t *)fail(ps, "unexpected end");
  s = ps->p;
  switch (*s) {
    case '{': return parse_container(ps, depth, JT_OBJECT);
    case '[': return parse_container(ps, depth, JT_ARRAY);
    case '"': {
      char *str = parse_string(ps);
      jt_value_t *v;
      if (!str) return NULL;
      if (!(v = jt_new(JT_STRING, NULL))) { free(str); return (jt_value_t *)fail(ps, "out of memory"); }
      v->text = str;
      return v;
    }
    default: break;
  }
  if ((size_t)(ps->end - s) >= 4 && !memcmp(s, "null", 4)) { ps->p += 4; return jt_new(JT_NULL, NULL); }
  if ((size_t)(ps->end - s) >= 4 && !memcmp(s, "true", 4)) { ps->p += 4; return jt_new(JT_TRUE, NULL); }
  if ((size_t)(ps->end - s) >= 5 && !memcmp(s, "false", 5)) { ps->p += 5; return jt_new(JT_FALSE, NULL); }
  while (ps->p < ps->end && strchr("+-0123456789.eE", *ps->p)) ++ps->p;
  if (ps->p == s) return (jt_value_t *)fail(ps, "unexpected character");
  {
    jt_value_t *v = jt_new(JT_NUMBER, NULL);
    if (!v || !(v->text = dup_range(s, (size_t)(ps->p - s)))) { jt_free(v); return (jt_value_t *)fail(ps, "out of memory"); }
    return v;
  }
}

jt_value_t *jt_parse(const char *text, size_t size, char *err, size_t err_len) {
  jt_parser_t ps;
  jt_value_t *v;
  ps.start = ps.p = text; ps.end = text + size; ps.err = err; ps.err_len = err_len;
  if (err && err_len) err[0] = '\0';
  v = parse_value(&ps, 0);
  if (!v) return NULL;
  skip_ws(&ps);
  if (ps.p != ps.end) { jt_free(v); return (jt_value_t *)fail(&ps, "trailing bytes"); }
  return v;
}

jt_value_t *jt_get(const jt_value_t *o, const char *key) {
  size_t i;
  if (!o || o->kind != JT_OBJECT) return NULL;
  for (i = 0; i < o->count; ++i)
    if (!strcmp(o->keys[i], key)) return o->items[i];
  return NULL;
}

const char *jt_get_str(const jt_value_t *o, const char *key) {
  const jt_value_t *v = jt_get(o, key);
  return v && v->kind == JT_STRING ? v->text : "";
}

int jt_set(jt_value_t *o, const char *key, jt_value_t *value) {
  size_t i;
  char *k;
  if (!o || o->kind != JT_OBJECT || !value) { jt_free(value); return -1; }
  for (i = 0; i < o->count; ++i)
    if (!strcmp(o->keys[i], key)) { jt_free(o->items[i]); o->items[i] = value; return 0; }
  if ((o->count == o->cap && grow(o)) || !(k = dup_range(key, strlen(key)))) { jt_free(value); return -1; }
  o->keys[o->count] = k;
  o->items[o->count++] = value;
  return 0;
}

int jt_append(jt_value_t *a, jt_value_t *value) {
  if (!a || a->kind != JT_ARRAY || !value || (a->count == a->cap && grow(a))) { jt_free(value); return -1; }
  a->items[a->count++] = value;
  return 0;
}

int jt_int(const jt_value_t *v, int64_t *out) {
  char *end;
  long long x;
  if (!v || (v->kind != JT_NUMBER && v->kind != JT_STRING) || !v->text || !v->text[0]) return -1;
  errno = 0;
  x = strtoll(v->text, &end, 10);
  if (errno || *end) return -1;
  *out = (int64_t)x;
  return 0;
}

/* A growable output buffer. */
typedef struct { char *s; size_t len, cap; int oom; } jt_buf_t;

static void put(jt_buf_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    char *p;
    while (b->len + n + 1 > cap) cap *= 2;
    if (!(p = (char *)realloc(b->s, cap))) { b->oom = 1; return; }
    b->s = p; b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void put_string(jt_buf_t *b, const char *s) {
  put(b, "\"", 1);
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; put(b, esc, 2); }
    else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); put(b, esc, 6); }
    else put(b, s, 1);
  }
  put(b, "\"", 1);
}

static void put_value(jt_buf_t *b, const jt_value_t *v) {
  size_t i;
  switch (v->kind) {
    case JT_NULL: put(b, "null", 4); return;
    case JT_FALSE: put(b, "false", 5); return;
    case JT_TRUE: put(b, "true", 4); return;
    case JT_NUMBER: put(b, v->text, strlen(v->text)); return;
    case JT_STRING: put_string(b, v->text); return;
    case JT_ARRAY: case JT_OBJECT:
      put(b, v->kind == JT_ARRAY ? "[" : "{", 1);
      for (i = 0; i < v->count; ++i) {
        if (i) put(b, ",", 1);
        if (v->keys) { put_string(b, v->keys[i]); put(b, ":", 1); }
        put_value(b, v->items[i]);
      }
      put(b, v->kind == JT_ARRAY ? "]" : "}", 1);
      return;
  }
}

char *jt_serialize(const jt_value_t *v, size_t *out_len) {
  jt_buf_t b = {NULL, 0, 0, 0};
  put_value(&b, v);
  if (b.oom) { free(b.s); return NULL; }
  if (out_len) *out_len = b.len;
  return b.s;
}
