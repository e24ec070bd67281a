/* aotc_runtime.h - the one public header of the aotc engine runtime.
 *
 * The runtime loads an engine file written by aotc (see engine_format.py for
 * the byte layout) and runs it on a device:
 *   AOTC_DEVICE_CPU   runs the engine's host build (HOST_LIB section): the
 *                     very CUDA C of the GPU kernels compiled for the host;
 *                     for validation, not speed.
 *   AOTC_DEVICE_CUDA  runs the cubin matching the GPU (or JIT-compiles the
 *                     PTX) through libcuda.so.1, loaded with dlopen at run
 *                     time; the runtime has no link-time CUDA dependency.
 *                     $AOTC_LIBCUDA names another driver library instead,
 *                     e.g. aotc's stand-in that runs the cuda path on a CPU
 *                     (`python -m aotc.testing.fakecuda` prints its path).
 *
 * Typical use:
 *   aotc_engine_t *engine;  aotc_context_t *ctx;
 *   AOTC_RETURN_IF_ERROR(aotc_engine_load_from_file("m.engine", NULL, &engine));
 *   AOTC_RETURN_IF_ERROR(aotc_context_create(engine, AOTC_DEVICE_CPU, &ctx));
 *   AOTC_RETURN_IF_ERROR(aotc_context_bind_input(ctx, "x", x, sizeof x));
 *   AOTC_RETURN_IF_ERROR(aotc_context_bind_output(ctx, "y", y, sizeof y));
 *   AOTC_RETURN_IF_ERROR(aotc_context_run(ctx));
 *   aotc_context_release(ctx);  aotc_engine_release(engine);
 *
 * Errors. Every fallible call returns an aotc_status_t: NULL means OK; any
 * other value is an error the caller owns and must free with
 * aotc_status_free (after reading aotc_status_code / aotc_status_message).
 * The library never exits, aborts on bad input, or prints.
 *
 * Ownership. Objects are reference counted: *_create / *_load_* return an
 * object with one reference; *_retain adds one, *_release drops one and frees
 * the object at zero. A context retains its engine. Strings returned by the
 * engine (tensor names) live as long as the engine. out_* parameters are
 * set to NULL (or 0) on entry, so they are defined even on error.
 *
 * Thread safety. An engine is immutable after loading and may be shared by
 * any number of threads; retain/release are atomic, and the device state it
 * loads lazily (host library, CUDA module, device weights) is guarded by a
 * mutex. A context is NOT thread safe: use one context per thread (or per
 * concurrent request stream); different contexts run concurrently. Contexts
 * share the engine's weights and kernels and own their activation arena.
 * Status objects belong to the thread that received them.
 *
 * Hot path. After the first run of a context nothing on the run path
 * allocates (a status is allocated only to report an error), and neither
 * does a shape change. On cuda the launch sequence is captured once per
 * shape into a CUDA graph and replayed (see aotc_context_options_t).
 *
 * Dynamic shapes. An engine may serve a range of shapes: it then has
 * dynamic dims (aotc_engine_dim_count / aotc_engine_dim_info: a name such as
 * "batch", a range min..max and a divisor), and a tensor dim may be one of
 * them (aotc_tensor_info_t.dim_index). Before running, give each input with
 * a dynamic dim its shape:
 *   int64_t shape[2] = {batch, 128};
 *   AOTC_RETURN_IF_ERROR(aotc_context_set_input_shape(ctx, "input_ids", 2, shape));
 *   ... bind buffers of at least the bytes of that shape (a buffer of the
 *   tensor's max byte_size always fits), run, and read each output's shape
 *   with aotc_context_get_output_shape. Shapes persist across runs; the
 *   engine's shape program (the grids, kernel size arguments and size-bucket
 *   kernel variants of that shape) is evaluated again only after a shape
 *   changes. The activation arena is sized for the largest shape, so it
 *   never moves.
 */
#ifndef AOTC_RUNTIME_H_
#define AOTC_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define AOTC_API __declspec(dllexport)
#else
#define AOTC_API __attribute__((visibility("default")))
#endif

/* Engine container version this runtime reads. */
#define AOTC_ENGINE_FORMAT_VERSION 2
/* Versions of aotc whose engines this runtime runs: from
 * AOTC_ENGINE_MIN_AOTC_VERSION up to, not including, the next major version
 * after AOTC_ENGINE_MAX_AOTC_MAJOR. Patch and minor releases of aotc never
 * break engines; the format version above guards the byte layout. */
#define AOTC_ENGINE_MIN_AOTC_VERSION "0.1.0"
#define AOTC_ENGINE_MAX_AOTC_MAJOR 0
/* Highest tensor rank an engine may declare. */
#define AOTC_MAX_RANK 8

/* ------------------------------------------------------------- status -- */

typedef enum aotc_status_code_e {
  AOTC_STATUS_OK = 0,
  /* The caller passed a bad argument: NULL pointer, unknown name, wrong
   * byte size, index out of range. Fix the call. */
  AOTC_STATUS_INVALID_ARGUMENT = 1,
  /* A named thing does not exist: file, tensor name, kernel symbol. */
  AOTC_STATUS_NOT_FOUND = 2,
  /* The engine bytes are corrupt or truncated: bad magic, checksum, size,
   * offset, count, index or string. Never retry; rebuild the engine. */
  AOTC_STATUS_DATA_LOSS = 3,
  /* This runtime cannot do what was asked (engine format version, an
   * unknown device). */
  AOTC_STATUS_UNIMPLEMENTED = 4,
  /* The device is not usable here: no libcuda, no GPU, no matching cubin
   * and no usable PTX, no host build for the cpu device. */
  AOTC_STATUS_UNAVAILABLE = 5,
  /* The call is valid but the object is not ready: e.g. running a context
   * with an unbound input or output. */
  AOTC_STATUS_FAILED_PRECONDITION = 6,
  /* Out of host or device memory. */
  AOTC_STATUS_RESOURCE_EXHAUSTED = 7,
  /* A kernel or driver call failed; the message carries the detail. */
  AOTC_STATUS_INTERNAL = 8,
} aotc_status_code_t;

typedef struct aotc_status_s *aotc_status_t; /* NULL == OK */

/* The code of a status; AOTC_STATUS_OK for NULL. */
AOTC_API aotc_status_code_t aotc_status_code(aotc_status_t status);
/* A one-line message; "OK" for NULL. Valid until aotc_status_free. */
AOTC_API const char *aotc_status_message(aotc_status_t status);
/* A fixed name for a code, e.g. "DATA_LOSS". */
AOTC_API const char *aotc_status_code_string(aotc_status_code_t code);
/* Frees a status; NULL is a no-op. */
AOTC_API void aotc_status_free(aotc_status_t status);

/* Returns the status from the enclosing function if it is an error. */
#define AOTC_RETURN_IF_ERROR(expr)          \
  do {                                      \
    aotc_status_t aotc_status_tmp_ = (expr); \
    if (aotc_status_tmp_) return aotc_status_tmp_; \
  } while (0)

/* ------------------------------------------------------------- engine -- */

typedef enum aotc_dtype_e {
  AOTC_DTYPE_F32 = 1, AOTC_DTYPE_F16 = 2, AOTC_DTYPE_BF16 = 3, AOTC_DTYPE_I64 = 4,
  AOTC_DTYPE_I32 = 5, AOTC_DTYPE_I8 = 6, AOTC_DTYPE_U8 = 7, AOTC_DTYPE_BOOL = 8,
  AOTC_DTYPE_F64 = 9, AOTC_DTYPE_I16 = 10, AOTC_DTYPE_U16 = 11, AOTC_DTYPE_U32 = 12,
  AOTC_DTYPE_U64 = 13,
  /* float8, one byte per element (bit layouts as ml_dtypes / ONNX; fnuz: 0x80 is NaN) */
  AOTC_DTYPE_F8E4M3FN = 14, AOTC_DTYPE_F8E5M2 = 15, AOTC_DTYPE_F8E4M3FNUZ = 16,
  AOTC_DTYPE_F8E5M2FNUZ = 17,
  /* int4/uint4, int2/uint2, one per byte (not packed): the value in the low bits, the rest zero */
  AOTC_DTYPE_I4 = 18, AOTC_DTYPE_U4 = 19, AOTC_DTYPE_I2 = 20, AOTC_DTYPE_U2 = 21,
  /* float4 e2m1fn, one per byte: the value in the low 4 bits (sign = bit 3) */
  AOTC_DTYPE_F4E2M1FN = 22,
  /* float8 e8m0fnu (MX scales), one byte: the f32 exponent field, value 2^(code-127), 0xFF NaN */
  AOTC_DTYPE_F8E8M0FNU = 23,
} aotc_dtype_t;

typedef enum aotc_device_e {
  AOTC_DEVICE_CPU = 0,
  AOTC_DEVICE_CUDA = 1,
} aotc_device_t;

typedef struct aotc_engine_s aotc_engine_t;

typedef struct aotc_engine_options_s {
  /* Verify each section's CRC32 when loading (default 1). */
  int verify_checksums;
  /* CUDA device ordinal used by AOTC_DEVICE_CUDA contexts (default 0). */
  int cuda_device_ordinal;
} aotc_engine_options_t;

AOTC_API void aotc_engine_options_initialize(aotc_engine_options_t *out_options);

/* aotc_tensor_info_t.dim_index markers. */
#define AOTC_DIM_STATIC (-1)   /* a fixed dim: dims[k] */
#define AOTC_DIM_COMPUTED (-2) /* an output dim the engine computes from the input shapes */

/* Static description of an engine input or output. */
typedef struct aotc_tensor_info_s {
  const char *name;            /* owned by the engine */
  aotc_dtype_t dtype;
  uint32_t rank;
  uint64_t dims[AOTC_MAX_RANK]; /* the shape; for a dynamic dim its maximum */
  uint64_t byte_size;          /* bytes at dims (the largest a run needs) */
  /* Per dim: AOTC_DIM_STATIC; for an input's dynamic dim the index of the
   * engine dim it is (aotc_engine_dim_info); for an output's dynamic dim
   * AOTC_DIM_COMPUTED (aotc_context_get_output_shape gives its value). */
  int32_t dim_index[AOTC_MAX_RANK];
} aotc_tensor_info_t;

/* A dynamic dim of the engine: runs accept min..max in multiples of divisor. */
typedef struct aotc_dim_info_s {
  const char *name; /* owned by the engine, e.g. "batch" */
  uint32_t min, max, divisor;
} aotc_dim_info_t;

/* Reads and validates the engine file at `path`. options may be NULL. */
AOTC_API aotc_status_t aotc_engine_load_from_file(const char *path,
                                                  const aotc_engine_options_t *options,
                                                  aotc_engine_t **out_engine);
/* Validates and copies `size` bytes; the caller keeps ownership of `bytes`
 * and may free them as soon as the call returns. */
AOTC_API aotc_status_t aotc_engine_load_from_memory(const void *bytes, size_t size,
                                                    const aotc_engine_options_t *options,
                                                    aotc_engine_t **out_engine);
AOTC_API void aotc_engine_retain(aotc_engine_t *engine);
AOTC_API void aotc_engine_release(aotc_engine_t *engine);

AOTC_API size_t aotc_engine_input_count(const aotc_engine_t *engine);
AOTC_API size_t aotc_engine_output_count(const aotc_engine_t *engine);
AOTC_API aotc_status_t aotc_engine_input_info(const aotc_engine_t *engine, size_t index,
                                              aotc_tensor_info_t *out_info);
AOTC_API aotc_status_t aotc_engine_output_info(const aotc_engine_t *engine, size_t index,
                                               aotc_tensor_info_t *out_info);
/* Index of the input/output called `name`; NOT_FOUND if there is none. */
AOTC_API aotc_status_t aotc_engine_find_input(const aotc_engine_t *engine, const char *name,
                                              size_t *out_index);
AOTC_API aotc_status_t aotc_engine_find_output(const aotc_engine_t *engine, const char *name,
                                               size_t *out_index);
/* Same, looked up by name; NOT_FOUND names the missing tensor. */
AOTC_API aotc_status_t aotc_engine_input_info_by_name(const aotc_engine_t *engine, const char *name,
                                                      aotc_tensor_info_t *out_info);
AOTC_API aotc_status_t aotc_engine_output_info_by_name(const aotc_engine_t *engine,
                                                       const char *name,
                                                       aotc_tensor_info_t *out_info);
/* The engine's dynamic dims: 0 for an engine with static shapes only. */
AOTC_API size_t aotc_engine_dim_count(const aotc_engine_t *engine);
AOTC_API aotc_status_t aotc_engine_dim_info(const aotc_engine_t *engine, size_t index,
                                            aotc_dim_info_t *out_info);
/* Bytes of activation arena each context allocates (planned at the largest shape). */
AOTC_API uint64_t aotc_engine_arena_size(const aotc_engine_t *engine);
/* Device memory the engine needs for `context_count` contexts on one
 * device: the shared weights once plus one 256-byte aligned arena per
 * context (I/O buffers are the caller's). UINT64_MAX on overflow. */
AOTC_API uint64_t aotc_engine_device_memory_size(const aotc_engine_t *engine,
                                                 size_t context_count);
/* The aotc version that wrote the engine, e.g. "0.1.0"; owned by the engine. */
AOTC_API const char *aotc_engine_aotc_version(const aotc_engine_t *engine);
AOTC_API uint64_t aotc_engine_weights_size(const aotc_engine_t *engine);
AOTC_API size_t aotc_engine_launch_count(const aotc_engine_t *engine);
/* The MANIFEST JSON (not NUL-terminated), owned by the engine. */
AOTC_API aotc_status_t aotc_engine_manifest(const aotc_engine_t *engine, const char **out_json,
                                            size_t *out_size);

/* Can this runtime run the engine bytes on `device` here? Returns NULL if
 * yes. Either way writes a one-line reason into why[why_len] (if why is not
 * NULL): what would be used ("cubin sm_90", "host build") or what is wrong:
 *   UNIMPLEMENTED  format version, or an aotc version outside this
 *                  runtime's range (AOTC_ENGINE_MIN_AOTC_VERSION ...);
 *   DATA_LOSS      bad magic, checksum, truncation, any invalid field;
 *   UNAVAILABLE    no driver, driver too old for the engine's kernels, no
 *                  GPU, no cubin for the GPU's arch and no usable PTX, no
 *                  host build for this CPU.
 * Nothing is loaded or executed: the host build is not dlopen'ed, no CUDA
 * module is created (the driver is asked only for its version and the
 * device's compute capability). */
AOTC_API aotc_status_t aotc_engine_check(const void *bytes, size_t size, aotc_device_t device,
                                         char *why, size_t why_len);

/* ------------------------------------------------------------ context -- */

typedef struct aotc_context_s aotc_context_t;

typedef struct aotc_context_options_s {
  /* cuda: capture the launch sequence into a CUDA graph and replay it
   * (default 1). A graph is keyed by the bindings (pointers) and the dim
   * values: a context captures on the second run of a key and replays it
   * from then on. It keeps the graphs of the last 8 keys (least recently
   * used goes first), so shapes that alternate replay without capturing
   * again; a rebind to a new pointer starts new keys (plain launches until
   * a key's second run). Ignored on cpu. */
  int use_cuda_graph;
} aotc_context_options_t;

AOTC_API void aotc_context_options_initialize(aotc_context_options_t *out_options);

/* Creates an execution context on `device`. The first context of a device
 * loads the engine's kernels for it (host library or CUDA module and device
 * weights); later contexts share them. Each context owns a 256-byte aligned
 * activation arena of aotc_engine_arena_size bytes (device memory on cuda). */
AOTC_API aotc_status_t aotc_context_create(aotc_engine_t *engine, aotc_device_t device,
                                           aotc_context_t **out_context);
/* Same with options (NULL: the defaults of aotc_context_options_initialize). */
AOTC_API aotc_status_t aotc_context_create_with_options(aotc_engine_t *engine,
                                                        aotc_device_t device,
                                                        const aotc_context_options_t *options,
                                                        aotc_context_t **out_context);
AOTC_API void aotc_context_retain(aotc_context_t *context);
AOTC_API void aotc_context_release(aotc_context_t *context);
AOTC_API aotc_device_t aotc_context_device(const aotc_context_t *context);

/* Sets the shape of input `name` for the next runs: `rank` dims. Each dim
 * must equal the engine's where it is static, and lie in its dim's range
 * (a multiple of its divisor) where it is dynamic; otherwise
 * INVALID_ARGUMENT names the input, the dim position, the dim name, the
 * value and the range, e.g. "input 'input_ids' dim 0 (batch) is 65,
 * outside 1..64", and the shape is not changed. Inputs sharing a dim must
 * agree, which the next run (or get_output_shape) checks, along with the
 * engine's own shape assertions: an error there launches nothing and
 * writes nothing. Setting the same shape again costs nothing; a static
 * input accepts its own shape. Never allocates. */
AOTC_API aotc_status_t aotc_context_set_input_shape(aotc_context_t *context, const char *name,
                                                    size_t rank, const int64_t *dims);
/* The shape of output `name` at the input shapes set: *out_rank dims in
 * out_dims. FAILED_PRECONDITION while a dynamic input has no shape;
 * INVALID_ARGUMENT if the input shapes disagree or break an engine
 * assertion (as a run would report). */
AOTC_API aotc_status_t aotc_context_get_output_shape(aotc_context_t *context, const char *name,
                                                     size_t *out_rank,
                                                     int64_t out_dims[AOTC_MAX_RANK]);

/* Binds a buffer to the input/output called `name`. byte_size must equal
 * the tensor's byte size for a static tensor; for one with dynamic dims it
 * must be at least the bytes of its shape at run time (checked by the run;
 * a buffer of the max byte_size always fits). The pointer is a host pointer on the cpu device
 * and a device pointer (CUdeviceptr) on cuda. The buffer must stay valid
 * while aotc_context_run uses it; bindings persist across runs. */
AOTC_API aotc_status_t aotc_context_bind_input(aotc_context_t *context, const char *name,
                                               const void *ptr, size_t byte_size);
AOTC_API aotc_status_t aotc_context_bind_output(aotc_context_t *context, const char *name,
                                                void *ptr, size_t byte_size);
/* Convenience: bind host buffers on any device. On cuda the context keeps a
 * device copy, uploads inputs before and downloads outputs after each run;
 * on cpu these are the same as the plain binds. */
AOTC_API aotc_status_t aotc_context_bind_host_input(aotc_context_t *context, const char *name,
                                                    const void *host_ptr, size_t byte_size);
AOTC_API aotc_status_t aotc_context_bind_host_output(aotc_context_t *context, const char *name,
                                                     void *host_ptr, size_t byte_size);

/* Runs every launch of the engine in order and waits for completion. */
AOTC_API aotc_status_t aotc_context_run(aotc_context_t *context);
/* cuda: enqueues one run on `stream` (a CUstream, or (void *)1 / (void *)2 for
 * the legacy / per-thread default stream, CU_STREAM_LEGACY / CU_STREAM_PER_THREAD;
 * NULL means the context's own stream) and returns without waiting: inputs bound with
 * bind_host_input are uploaded and outputs bound with bind_host_output
 * downloaded on that stream, so host buffers must stay valid until it is
 * synchronized (aotc_context_synchronize, or the caller's own sync). Work
 * queued on `stream` before the call (e.g. producing the inputs) completes
 * first. cpu: `stream` must be NULL; runs synchronously. */
AOTC_API aotc_status_t aotc_context_enqueue(aotc_context_t *context, void *stream);
/* Waits for the stream of the last aotc_context_enqueue (cpu: no-op). */
AOTC_API aotc_status_t aotc_context_synchronize(aotc_context_t *context);
/* 1 if the context's next run replays a captured CUDA graph (of the current
 * bindings and, for a dynamic engine, the current input shapes), else 0. */
AOTC_API int aotc_context_uses_cuda_graph(const aotc_context_t *context);

/* Runtime library version string, e.g. "aotc-runtime 0.1.0 (format 2)". */
AOTC_API const char *aotc_runtime_version(void);

#ifdef __cplusplus
}
#endif

#endif /* AOTC_RUNTIME_H_ */
