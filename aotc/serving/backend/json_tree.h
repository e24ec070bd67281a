/* json_tree.h - a small JSON document tree for Triton's model configuration.
 *
 * Triton hands a backend its model configuration as JSON and takes a
 * completed one back as JSON, so the backend reads, edits and writes a
 * document: parse it, look keys up, add or replace members, serialize. Numbers
 * keep their source text (protobuf writes int64 dims as strings, int32 as
 * numbers; both read through jt_int). C99, libc only.
 */
#ifndef AOTC_JSON_TREE_H_
#define AOTC_JSON_TREE_H_

#include <stddef.h>
#include <stdint.h>

typedef enum { JT_NULL, JT_FALSE, JT_TRUE, JT_NUMBER, JT_STRING, JT_ARRAY, JT_OBJECT } jt_kind_t;

typedef struct jt_value_s {
  jt_kind_t kind;
  char *text;                 /* number: its source text; string: decoded UTF-8 */
  size_t count, cap;          /* array items / object members */
  char **keys;                /* object member names (NULL for arrays) */
  struct jt_value_s **items;
} jt_value_t;

/* Parses `size` bytes; NULL on error with a one-line reason in err. */
jt_value_t *jt_parse(const char *text, size_t size, char *err, size_t err_len);
void jt_free(jt_value_t *value);
/* A new scalar (text is copied; for JT_NUMBER the digits, for JT_STRING the string). */
jt_value_t *jt_new(jt_kind_t kind, const char *text);
jt_value_t *jt_new_int(int64_t v);
/* Member `key` of an object, NULL if absent or not an object. */
jt_value_t *jt_get(const jt_value_t *object, const char *key);
/* The string of member `key`, or "" when absent or not a string. */
const char *jt_get_str(const jt_value_t *object, const char *key);
/* Sets member `key` (replacing and freeing an old value); takes `value`. 0 on success. */
int jt_set(jt_value_t *object, const char *key, jt_value_t *value);
/* Appends to an array; takes `value`. 0 on success. */
int jt_append(jt_value_t *array, jt_value_t *value);
/* An integer from a number or a string of digits; 0 on success. */
int jt_int(const jt_value_t *value, int64_t *out);
/* Serializes compactly into a malloc'd NUL-terminated string; NULL on OOM. */
char *jt_serialize(const jt_value_t *value, size_t *out_len);

#endif /* AOTC_JSON_TREE_H_ */
