/* fakecuda.h - private declarations of the stand-in CUDA driver (fakecuda.c).
 *
 * The stand-in parses each module image it is given (cubin ELF or PTX text)
 * for what a real driver reads from it: the kernels, their parameter layout,
 * static shared memory, registers and launch bounds (fakecuda_image.c).
 */
#ifndef AOTC_FAKECUDA_H_
#define AOTC_FAKECUDA_H_

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200, CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209, CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_ILLEGAL_STATE = 401, CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600, CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701, CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
  CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908, CUDA_ERROR_UNKNOWN = 999,
};

#define FK_MAX_PARAMS 512
#define FK_NAME_MAX 256

typedef struct fk_kernel_info_s {
  char name[FK_NAME_MAX];
  int nparams;
  uint32_t param_bytes;              /* the parameter buffer (constant bank) size */
  uint16_t offset[FK_MAX_PARAMS], size[FK_MAX_PARAMS];
  uint32_t static_smem;              /* bytes, without the arch's reserved shared memory */
  int max_threads;                   /* __launch_bounds__ / .maxntid product, 0 if none */
  int regs;                          /* registers per thread, 0 if unknown (PTX) */
} fk_kernel_info;

typedef struct fk_image_info_s {
  int arch;      /* 90 for sm_90 (cubin) or the PTX .target */
  int is_ptx;
  int nkernels;
  fk_kernel_info *kernels; /* malloc'ed */
} fk_image_info;

/* Parses a cubin ELF or NUL-terminated PTX image. Returns CUDA_SUCCESS, or
 * CUDA_ERROR_INVALID_IMAGE / CUDA_ERROR_INVALID_PTX with `err` filled. */
CUresult fk_parse_image(const void *image, fk_image_info *out, char *err, size_t err_len);
void fk_image_free(fk_image_info *info);

#endif /* AOTC_FAKECUDA_H_ */
