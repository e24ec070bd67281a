/* triton_api.h - the part of Triton Inference Server's C API the aotc backend uses.
 *
 * Triton's own headers (tritonserver.h, tritonbackend.h) are not on PyPI, so
 * the declarations the backend needs are written here from the documented
 * API: opaque handles, the enums by their documented values, and the
 * functions tritonserver exports to backends. Only TRITONBACKEND API major
 * version 1 is supported (checked at TRITONBACKEND_Initialize).
 */
#ifndef AOTC_TRITON_API_H_
#define AOTC_TRITON_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AOTC_TRITON_EXPORT __attribute__((visibility("default")))
#define AOTC_TRITONBACKEND_API_MAJOR 1
#define AOTC_TRITONBACKEND_API_MINOR_MIN 6 /* ReportBatchStatistics, AutoCompleteConfig */

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;

typedef enum {
  TRITONSERVER_ERROR_UNKNOWN = 0, TRITONSERVER_ERROR_INTERNAL = 1, TRITONSERVER_ERROR_NOT_FOUND = 2,
  TRITONSERVER_ERROR_INVALID_ARG = 3, TRITONSERVER_ERROR_UNAVAILABLE = 4,
  TRITONSERVER_ERROR_UNSUPPORTED = 5, TRITONSERVER_ERROR_ALREADY_EXISTS = 6,
} TRITONSERVER_Error_Code;

typedef enum {
  TRITONSERVER_TYPE_INVALID = 0, TRITONSERVER_TYPE_BOOL = 1, TRITONSERVER_TYPE_UINT8 = 2,
  TRITONSERVER_TYPE_UINT16 = 3, TRITONSERVER_TYPE_UINT32 = 4, TRITONSERVER_TYPE_UINT64 = 5,
  TRITONSERVER_TYPE_INT8 = 6, TRITONSERVER_TYPE_INT16 = 7, TRITONSERVER_TYPE_INT32 = 8,
  TRITONSERVER_TYPE_INT64 = 9, TRITONSERVER_TYPE_FP16 = 10, TRITONSERVER_TYPE_FP32 = 11,
  TRITONSERVER_TYPE_FP64 = 12, TRITONSERVER_TYPE_BYTES = 13, TRITONSERVER_TYPE_BF16 = 14,
} TRITONSERVER_DataType;

typedef enum {
  TRITONSERVER_MEMORY_CPU = 0, TRITONSERVER_MEMORY_CPU_PINNED = 1, TRITONSERVER_MEMORY_GPU = 2,
} TRITONSERVER_MemoryType;

typedef enum {
  TRITONSERVER_INSTANCEGROUPKIND_AUTO = 0, TRITONSERVER_INSTANCEGROUPKIND_CPU = 1,
  TRITONSERVER_INSTANCEGROUPKIND_GPU = 2, TRITONSERVER_INSTANCEGROUPKIND_MODEL = 3,
} TRITONSERVER_InstanceGroupKind;

typedef enum {
  TRITONSERVER_LOG_INFO = 0, TRITONSERVER_LOG_WARN = 1, TRITONSERVER_LOG_ERROR = 2,
  TRITONSERVER_LOG_VERBOSE = 3,
} TRITONSERVER_LogLevel;

typedef enum { TRITONBACKEND_ARTIFACT_FILESYSTEM = 0 } TRITONBACKEND_ArtifactType;

#define AOTC_TRITON_REQUEST_RELEASE_ALL 1u
#define AOTC_TRITON_RESPONSE_COMPLETE_FINAL 1u
#define AOTC_TRITON_CONFIG_VERSION 1u

/* --- tritonserver.h --- */
TRITONSERVER_Error *TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char *msg);
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *error);
const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *error);
TRITONSERVER_Error *TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message **message,
                                                              const char *base, size_t byte_size);
TRITONSERVER_Error *TRITONSERVER_MessageDelete(TRITONSERVER_Message *message);
TRITONSERVER_Error *TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message *message,
                                                        const char **base, size_t *byte_size);
TRITONSERVER_Error *TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char *filename,
                                            int line, const char *msg);

/* --- tritonbackend.h --- */
TRITONSERVER_Error *TRITONBACKEND_ApiVersion(uint32_t *major, uint32_t *minor);
TRITONSERVER_Error *TRITONBACKEND_ModelName(TRITONBACKEND_Model *model, const char **name);
TRITONSERVER_Error *TRITONBACKEND_ModelRepository(TRITONBACKEND_Model *model,
                                                  TRITONBACKEND_ArtifactType *artifact_type,
                                                  const char **location);
TRITONSERVER_Error *TRITONBACKEND_ModelVersion(TRITONBACKEND_Model *model, uint64_t *version);
TRITONSERVER_Error *TRITONBACKEND_ModelConfig(TRITONBACKEND_Model *model, uint32_t config_version,
                                              TRITONSERVER_Message **model_config);
TRITONSERVER_Error *TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model *model,
                                                          bool *auto_complete_config);
TRITONSERVER_Error *TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model *model,
                                                 uint32_t config_version,
                                                 TRITONSERVER_Message *model_config);
TRITONSERVER_Error *TRITONBACKEND_ModelState(TRITONBACKEND_Model *model, void **state);
TRITONSERVER_Error *TRITONBACKEND_ModelSetState(TRITONBACKEND_Model *model, void *state);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance *instance,
                                                    const char **name);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance *instance,
                                                    TRITONSERVER_InstanceGroupKind *kind);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance *instance,
                                                        int32_t *device_id);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance *instance,
                                                     TRITONBACKEND_Model **model);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance *instance,
                                                     void **state);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance *instance,
                                                        void *state);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportStatistics(
    TRITONBACKEND_ModelInstance *instance, TRITONBACKEND_Request *request, bool success,
    uint64_t exec_start_ns, uint64_t compute_start_ns, uint64_t compute_end_ns,
    uint64_t exec_end_ns);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance *instance, uint64_t batch_size, uint64_t exec_start_ns,
    uint64_t compute_start_ns, uint64_t compute_end_ns, uint64_t exec_end_ns);
TRITONSERVER_Error *TRITONBACKEND_RequestId(TRITONBACKEND_Request *request, const char **id);
TRITONSERVER_Error *TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request *request,
                                                    uint32_t *count);
TRITONSERVER_Error *TRITONBACKEND_RequestInput(TRITONBACKEND_Request *request, const char *name,
                                               TRITONBACKEND_Input **input);
TRITONSERVER_Error *TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request *request,
                                                     uint32_t *count);
TRITONSERVER_Error *TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request *request,
                                                    uint32_t index, const char **name);
TRITONSERVER_Error *TRITONBACKEND_RequestRelease(TRITONBACKEND_Request *request,
                                                 uint32_t release_flags);
TRITONSERVER_Error *TRITONBACKEND_InputProperties(TRITONBACKEND_Input *input, const char **name,
                                                  TRITONSERVER_DataType *datatype,
                                                  const int64_t **shape, uint32_t *dims_count,
                                                  uint64_t *byte_size, uint32_t *buffer_count);
TRITONSERVER_Error *TRITONBACKEND_InputBuffer(TRITONBACKEND_Input *input, uint32_t index,
                                              const void **buffer, uint64_t *buffer_byte_size,
                                              TRITONSERVER_MemoryType *memory_type,
                                              int64_t *memory_type_id);
TRITONSERVER_Error *TRITONBACKEND_ResponseNew(TRITONBACKEND_Response **response,
                                              TRITONBACKEND_Request *request);
TRITONSERVER_Error *TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response *response);
TRITONSERVER_Error *TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response *response,
                                                 TRITONBACKEND_Output **output, const char *name,
                                                 TRITONSERVER_DataType datatype,
                                                 const int64_t *shape, uint32_t dims_count);
TRITONSERVER_Error *TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output *output, void **buffer,
                                               uint64_t buffer_byte_size,
                                               TRITONSERVER_MemoryType *memory_type,
                                               int64_t *memory_type_id);
/* Sends and gives up the response; the error (if any) stays the caller's. */
TRITONSERVER_Error *TRITONBACKEND_ResponseSend(TRITONBACKEND_Response *response,
                                               uint32_t send_flags, TRITONSERVER_Error *error);

/* --- what the backend exports (Triton looks them up by name) --- */
AOTC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend);
AOTC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *model);
AOTC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model);
AOTC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(
    TRITONBACKEND_ModelInstance *instance);
AOTC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(
    TRITONBACKEND_ModelInstance *instance);
AOTC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance *instance, TRITONBACKEND_Request **requests,
    uint32_t request_count);

#endif /* AOTC_TRITON_API_H_ */
