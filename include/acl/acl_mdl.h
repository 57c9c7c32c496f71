/*
 * AscendCL model API (acl_mdl.h), the subset SimNPU implements: load an offline model (.om,
 * written by atc), describe its inputs and outputs, and execute it on a stream.
 *
 * Names, types and values are AscendCL's. A model is loaded on the current device; its
 * weights and its activation arena are allocated once at load, so executions allocate no
 * device memory. Inputs and outputs are device buffers (aclrtMalloc) wrapped in
 * aclDataBuffers, in the model's order (aclmdlGetInputNameByIndex). One model's executions
 * share its arena: run them on one stream, or order them.
 */
#ifndef SIMNPU_ACL_MDL_H_
#define SIMNPU_ACL_MDL_H_

#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Model errors (acl_base.h). */
static const aclError ACL_ERROR_INVALID_MODEL_ID = 100011;
static const aclError ACL_ERROR_DESERIALIZE_MODEL = 100012;
static const aclError ACL_ERROR_PARSE_MODEL = 100013;
static const aclError ACL_ERROR_READ_MODEL_FAILURE = 100014;
static const aclError ACL_ERROR_MODEL_SIZE_INVALID = 100015;
static const aclError ACL_ERROR_MODEL_INPUT_NOT_MATCH = 100017;
static const aclError ACL_ERROR_MODEL_OUTPUT_NOT_MATCH = 100018;

typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_BF16 = 27
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2
} aclFormat;

#define ACL_MAX_DIM_CNT 128
#define ACL_MAX_TENSOR_NAME_LEN 128

typedef struct aclmdlIODims {
  char name[ACL_MAX_TENSOR_NAME_LEN]; /* truncated to fit, always NUL-terminated */
  size_t dimCount;
  int64_t dims[ACL_MAX_DIM_CNT];
} aclmdlIODims;

typedef struct aclmdlDesc aclmdlDesc;
typedef struct aclmdlDataset aclmdlDataset;
typedef struct aclDataBuffer aclDataBuffer;

/* ---- data buffers and datasets (the caller owns the memory a buffer points to) ---------- */
ACL_FUNC_VISIBILITY aclDataBuffer* aclCreateDataBuffer(void* data, size_t size);
ACL_FUNC_VISIBILITY aclError aclDestroyDataBuffer(const aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY void* aclGetDataBufferAddr(const aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY size_t aclGetDataBufferSizeV2(const aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY aclmdlDataset* aclmdlCreateDataset(void);
/* Destroys the dataset, not its buffers (as AscendCL). */
ACL_FUNC_VISIBILITY aclError aclmdlDestroyDataset(const aclmdlDataset* dataset);
ACL_FUNC_VISIBILITY aclError aclmdlAddDatasetBuffer(aclmdlDataset* dataset,
                                                    aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset* dataset);
ACL_FUNC_VISIBILITY aclDataBuffer* aclmdlGetDatasetBuffer(const aclmdlDataset* dataset,
                                                          size_t index);

/* ---- loading ------------------------------------------------------------------------------ */
/* A file that is not an .om, truncated, corrupt or of another format version fails with
 * ACL_ERROR_PARSE_MODEL / ACL_ERROR_READ_MODEL_FAILURE and aclGetRecentErrMsg says why. */
ACL_FUNC_VISIBILITY aclError aclmdlLoadFromFile(const char* modelPath, uint32_t* modelId);
ACL_FUNC_VISIBILITY aclError aclmdlLoadFromMem(const void* model, size_t modelSize,
                                               uint32_t* modelId);
ACL_FUNC_VISIBILITY aclError aclmdlUnload(uint32_t modelId); /* waits for its runs */

/* ---- description -------------------------------------------------------------------------- */
ACL_FUNC_VISIBILITY aclmdlDesc* aclmdlCreateDesc(void);
ACL_FUNC_VISIBILITY aclError aclmdlDestroyDesc(aclmdlDesc* modelDesc);
ACL_FUNC_VISIBILITY aclError aclmdlGetDesc(aclmdlDesc* modelDesc, uint32_t modelId);
ACL_FUNC_VISIBILITY size_t aclmdlGetNumInputs(aclmdlDesc* modelDesc);
ACL_FUNC_VISIBILITY size_t aclmdlGetNumOutputs(aclmdlDesc* modelDesc);
/* Bytes of input / output `index`; 0 for an index out of range. */
ACL_FUNC_VISIBILITY size_t aclmdlGetInputSizeByIndex(aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY size_t aclmdlGetOutputSizeByIndex(aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY aclError aclmdlGetInputDims(const aclmdlDesc* modelDesc, size_t index,
                                                aclmdlIODims* dims);
ACL_FUNC_VISIBILITY aclError aclmdlGetOutputDims(const aclmdlDesc* modelDesc, size_t index,
                                                 aclmdlIODims* dims);
/* NULL for an index out of range. */
ACL_FUNC_VISIBILITY const char* aclmdlGetInputNameByIndex(const aclmdlDesc* modelDesc,
                                                          size_t index);
ACL_FUNC_VISIBILITY const char* aclmdlGetOutputNameByIndex(const aclmdlDesc* modelDesc,
                                                           size_t index);
ACL_FUNC_VISIBILITY aclError aclmdlGetInputIndexByName(const aclmdlDesc* modelDesc,
                                                       const char* name, size_t* index);
ACL_FUNC_VISIBILITY aclDataType aclmdlGetInputDataType(const aclmdlDesc* modelDesc,
                                                       size_t index);
ACL_FUNC_VISIBILITY aclDataType aclmdlGetOutputDataType(const aclmdlDesc* modelDesc,
                                                        size_t index);
ACL_FUNC_VISIBILITY aclFormat aclmdlGetInputFormat(const aclmdlDesc* modelDesc, size_t index);

/* ---- dynamic gears (atc --dynamic_batch_size / --dynamic_dims) ---------------------------
 * Such a model holds one planned graph per gear and runs the one the dataset selects. As in
 * CANN, the selection is made on the input dataset with the index of the input named
 * ACL_DYNAMIC_TENSOR_NAME (aclmdlGetInputIndexByName; it is the model's input count here, and
 * the dataset needs no buffer for it: one is accepted and ignored). The model's input and
 * output sizes are the largest gear's; aclmdlGetCurOutputDims gives the dims of the gear last
 * executed. A value that matches no gear fails with ACL_ERROR_INVALID_PARAM naming the gears. */
#define ACL_DYNAMIC_TENSOR_NAME "ascend_mbatch_shape_data"
/* batchSize: one of the --dynamic_batch_size gears. */
ACL_FUNC_VISIBILITY aclError aclmdlSetDynamicBatchSize(uint32_t modelId, aclmdlDataset* dataset,
                                                       size_t index, uint64_t batchSize);
/* dims: every input's dims, concatenated in input order (a --dynamic_dims gear's shapes). */
ACL_FUNC_VISIBILITY aclError aclmdlSetInputDynamicDims(uint32_t modelId, aclmdlDataset* dataset,
                                                       size_t index, const aclmdlIODims* dims);
ACL_FUNC_VISIBILITY aclError aclmdlGetCurOutputDims(const aclmdlDesc* modelDesc, size_t index,
                                                    aclmdlIODims* dims);

/* ---- execution ---------------------------------------------------------------------------- */
/* input / output: one buffer per model input / output, each at least its size. Execute
 * returns when the outputs are written; ExecuteAsync queues the run on `stream` (NULL: the
 * default stream) and returns at once, failures surfacing at aclrtSynchronizeStream. */
ACL_FUNC_VISIBILITY aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset* input,
                                           aclmdlDataset* output);
ACL_FUNC_VISIBILITY aclError aclmdlExecuteAsync(uint32_t modelId, const aclmdlDataset* input,
                                                aclmdlDataset* output, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SIMNPU_ACL_MDL_H_ */
