// AscendCL's model API (include/acl/acl_mdl.h) over the engine (include/npu/engine.h):
// loaded models live in a table under their id; each call checks its arguments as AscendCL
// does and turns the engine's ModelError into the AscendCL code plus its message.
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "acl/acl.h"
#include "acl_internal.h"
#include "npu/engine.h"

using simnpu_acl::setError;
namespace engine = npu::engine;

struct aclDataBuffer {
  void* data;
  size_t size;
};
struct aclmdlDataset {
  std::vector<aclDataBuffer*> buffers;
  std::vector<int64_t> gear_values;  // aclmdlSetDynamicBatchSize / aclmdlSetInputDynamicDims
};
struct aclmdlDesc {
  struct IO {
    std::string name;
    std::vector<int64_t> dims;
    aclDataType dtype;
    size_t bytes;
  };
  std::vector<IO> inputs, outputs;
  std::weak_ptr<npu::engine::Model> model;  // for aclmdlGetCurOutputDims; unload frees it
};

namespace {

std::mutex g_models_mutex;
std::map<uint32_t, std::shared_ptr<engine::Model>> g_models;
uint32_t g_next_id = 1;

std::shared_ptr<engine::Model> find(uint32_t id) {
  std::lock_guard<std::mutex> lock(g_models_mutex);
  auto it = g_models.find(id);
  return it == g_models.end() ? nullptr : it->second;
}

aclDataType toAcl(npu::kernels::DType t) {
  using npu::kernels::DType;
  switch (t) {
    case DType::Float32: return ACL_FLOAT;
    case DType::Float16: return ACL_FLOAT16;
    case DType::BFloat16: return ACL_BF16;
    case DType::Float64: return ACL_DOUBLE;
    case DType::Int8: return ACL_INT8;
    case DType::Int16: return ACL_INT16;
    case DType::Int32: return ACL_INT32;
    case DType::Int64: return ACL_INT64;
    case DType::UInt8: return ACL_UINT8;
    case DType::Bool: return ACL_BOOL;
  }
  return ACL_DT_UNDEFINED;
}

// Reads (read() throws ModelError for a bad file), prepares and registers a model.
aclError load(const char* api, const std::function<engine::ModelDef()>& read,
              uint32_t* modelId) {
  std::shared_ptr<engine::Model> model;
  try {
    model = std::make_shared<engine::Model>(read());
  } catch (const engine::ModelError& e) {
    bool unreadable = std::string(e.what()).rfind("cannot open", 0) == 0;
    return setError(unreadable ? ACL_ERROR_READ_MODEL_FAILURE : ACL_ERROR_PARSE_MODEL,
                    std::string(api) + ": " + e.what());
  }
  std::lock_guard<std::mutex> lock(g_models_mutex);
  *modelId = g_next_id++;
  g_models.emplace(*modelId, std::move(model));
  return ACL_SUCCESS;
}

aclError checkDataset(const char* api, const char* which, const aclmdlDataset* set,
                      const engine::Model& model, size_t gear_index, bool is_input,
                      aclError mismatch, std::vector<void*>* pointers) {
  const engine::ModelDef& gear = model.gear(gear_index);
  ACL_REQUIRE_ARG(api, set, std::string(which) + " dataset must not be NULL");
  const auto& ids = is_input ? gear.inputs : gear.outputs;
  const size_t count = ids.size();
  // A CANN program adds a buffer for the ACL_DYNAMIC_TENSOR_NAME input; it is not read here.
  const bool extra = is_input && model.def().dynamic_mode != engine::DynamicMode::Static;
  if (set->buffers.size() != count && !(extra && set->buffers.size() == count + 1)) {
    return setError(mismatch, std::string(api) + ": the " + which + " dataset has " +
                                  std::to_string(set->buffers.size()) + " buffers; the model has " +
                                  std::to_string(count) + " " + which + "s");
  }
  for (size_t i = 0; i < count; ++i) {
    const auto& t = gear.tensors[ids[i]];
    const aclDataBuffer* buf = set->buffers[i];
    if (!buf || !buf->data || buf->size < t.nbytes) {
      return setError(mismatch, std::string(api) + ": " + which + " " + std::to_string(i) +
                                    " (" + t.name + ") needs a buffer of " +
                                    std::to_string(t.nbytes) + " bytes; it was given " +
                                    std::to_string(buf ? buf->size : 0) +
                                    " (see aclmdlGet" + (which[0] == 'i' ? "Input" : "Output") +
                                    "SizeByIndex)");
    }
    pointers->push_back(buf->data);
  }
  return ACL_SUCCESS;
}

aclError fillDims(const char* api, const std::vector<aclmdlDesc::IO>& ios, size_t index,
                  aclmdlIODims* dims) {
  ACL_REQUIRE_ARG(api, dims, "dims must not be NULL");
  ACL_REQUIRE_ARG(api, index < ios.size(),
                  "index " + std::to_string(index) + " is out of range (the model has " +
                      std::to_string(ios.size()) + ")");
  const auto& io = ios[index];
  std::memset(dims->name, 0, sizeof(dims->name));
  std::strncpy(dims->name, io.name.c_str(), sizeof(dims->name) - 1);
  dims->dimCount = io.dims.size();
  for (size_t d = 0; d < io.dims.size(); ++d) dims->dims[d] = io.dims[d];
  return ACL_SUCCESS;
}

// One run of a loaded model on `stream` (NULL: the model device's default stream); `wait`:
// aclmdlExecute, which returns once the run is done (on an idle stream it runs on this thread).
aclError execute(const char* api, uint32_t modelId, const aclmdlDataset* input,
                 aclmdlDataset* output, aclrtStream stream, bool wait) {
  ACL_REQUIRE_INIT(api);
  auto model = find(modelId);
  if (!model) {
    return setError(ACL_ERROR_INVALID_MODEL_ID,
                    std::string(api) + ": no model is loaded with id " + std::to_string(modelId));
  }
  size_t gear = 0;
  if (model->def().dynamic_mode != engine::DynamicMode::Static) {
    ACL_REQUIRE_ARG(api, input, "input dataset must not be NULL");
    if (input->gear_values.empty()) {
      return setError(ACL_ERROR_INVALID_PARAM,
                      std::string(api) + ": the model has dynamic gears (atc --dynamic_" +
                          (model->def().dynamic_mode == engine::DynamicMode::Batch
                               ? "batch_size); call aclmdlSetDynamicBatchSize"
                               : "dims); call aclmdlSetInputDynamicDims") +
                          " on the input dataset first");
    }
    try {
      gear = model->find_gear(input->gear_values);
    } catch (const engine::ModelError& e) {
      return setError(ACL_ERROR_INVALID_PARAM, std::string(api) + ": " + e.what());
    }
  }
  std::vector<void*> ins, outs;
  if (aclError e = checkDataset(api, "input", input, *model, gear, true,
                                ACL_ERROR_MODEL_INPUT_NOT_MATCH, &ins)) {
    return e;
  }
  if (aclError e = checkDataset(api, "output", output, *model, gear, false,
                                ACL_ERROR_MODEL_OUTPUT_NOT_MATCH, &outs)) {
    return e;
  }
  ins.resize(model->num_inputs());
  npuStream_t s = static_cast<npuStream_t>(stream);
  if (!s) npuGetDefaultStream(model->device(), &s);
  return simnpu_acl::fromRuntimeError(wait ? model->execute(s, ins, outs, gear)
                                           : model->execute_async(s, ins, outs, gear));
}

}  // namespace

extern "C" {

aclDataBuffer* aclCreateDataBuffer(void* data, size_t size) {
  return new aclDataBuffer{data, size};
}
aclError aclDestroyDataBuffer(const aclDataBuffer* dataBuffer) {
  ACL_REQUIRE_ARG("aclDestroyDataBuffer", dataBuffer, "dataBuffer must not be NULL");
  delete dataBuffer;
  return ACL_SUCCESS;
}
void* aclGetDataBufferAddr(const aclDataBuffer* dataBuffer) {
  return dataBuffer ? dataBuffer->data : nullptr;
}
size_t aclGetDataBufferSizeV2(const aclDataBuffer* dataBuffer) {
  return dataBuffer ? dataBuffer->size : 0;
}
aclmdlDataset* aclmdlCreateDataset(void) { return new aclmdlDataset; }
aclError aclmdlDestroyDataset(const aclmdlDataset* dataset) {
  ACL_REQUIRE_ARG("aclmdlDestroyDataset", dataset, "dataset must not be NULL");
  delete dataset;
  return ACL_SUCCESS;
}
aclError aclmdlAddDatasetBuffer(aclmdlDataset* dataset, aclDataBuffer* dataBuffer) {
  ACL_REQUIRE_ARG("aclmdlAddDatasetBuffer", dataset && dataBuffer,
                  "dataset and dataBuffer must not be NULL");
  dataset->buffers.push_back(dataBuffer);
  return ACL_SUCCESS;
}
size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset* dataset) {
  return dataset ? dataset->buffers.size() : 0;
}
aclDataBuffer* aclmdlGetDatasetBuffer(const aclmdlDataset* dataset, size_t index) {
  return dataset && index < dataset->buffers.size() ? dataset->buffers[index] : nullptr;
}

aclError aclmdlLoadFromFile(const char* modelPath, uint32_t* modelId) {
  ACL_REQUIRE_INIT("aclmdlLoadFromFile");
  ACL_REQUIRE_ARG("aclmdlLoadFromFile", modelPath && modelId,
                  "modelPath and modelId must not be NULL");
  std::string path = modelPath;
  return load("aclmdlLoadFromFile", [&] { return engine::read_om_file(path); }, modelId);
}

aclError aclmdlLoadFromMem(const void* model, size_t modelSize, uint32_t* modelId) {
  ACL_REQUIRE_INIT("aclmdlLoadFromMem");
  ACL_REQUIRE_ARG("aclmdlLoadFromMem", model && modelId, "model and modelId must not be NULL");
  return load(
      "aclmdlLoadFromMem",
      [&] { return engine::parse_om(model, modelSize, "the model in memory"); }, modelId);
}

aclError aclmdlUnload(uint32_t modelId) {
  ACL_REQUIRE_INIT("aclmdlUnload");
  std::shared_ptr<engine::Model> model;
  {
    std::lock_guard<std::mutex> lock(g_models_mutex);
    auto it = g_models.find(modelId);
    if (it == g_models.end()) {
      return setError(ACL_ERROR_INVALID_MODEL_ID, "aclmdlUnload: no model is loaded with id " +
                                                      std::to_string(modelId));
    }
    model = std::move(it->second);
    g_models.erase(it);
  }
  return ACL_SUCCESS;  // ~Model waits for queued runs, then frees its memory
}

aclmdlDesc* aclmdlCreateDesc(void) { return new aclmdlDesc; }
aclError aclmdlDestroyDesc(aclmdlDesc* modelDesc) {
  ACL_REQUIRE_ARG("aclmdlDestroyDesc", modelDesc, "modelDesc must not be NULL");
  delete modelDesc;
  return ACL_SUCCESS;
}

aclError aclmdlGetDesc(aclmdlDesc* modelDesc, uint32_t modelId) {
  ACL_REQUIRE_INIT("aclmdlGetDesc");
  ACL_REQUIRE_ARG("aclmdlGetDesc", modelDesc, "modelDesc must not be NULL");
  auto model = find(modelId);
  if (!model) {
    return setError(ACL_ERROR_INVALID_MODEL_ID,
                    "aclmdlGetDesc: no model is loaded with id " + std::to_string(modelId));
  }
  auto describe = [](const engine::TensorInfo& t) {
    return aclmdlDesc::IO{t.name, t.dims, toAcl(t.dtype), static_cast<size_t>(t.nbytes)};
  };
  modelDesc->inputs.clear();
  modelDesc->outputs.clear();
  modelDesc->model = model;
  for (size_t i = 0; i < model->num_inputs(); ++i) {
    modelDesc->inputs.push_back(describe(model->input(i)));
  }
  for (size_t i = 0; i < model->num_outputs(); ++i) {
    modelDesc->outputs.push_back(describe(model->output(i)));
  }
  return ACL_SUCCESS;
}

size_t aclmdlGetNumInputs(aclmdlDesc* d) { return d ? d->inputs.size() : 0; }
size_t aclmdlGetNumOutputs(aclmdlDesc* d) { return d ? d->outputs.size() : 0; }
size_t aclmdlGetInputSizeByIndex(aclmdlDesc* d, size_t i) {
  return d && i < d->inputs.size() ? d->inputs[i].bytes : 0;
}
size_t aclmdlGetOutputSizeByIndex(aclmdlDesc* d, size_t i) {
  return d && i < d->outputs.size() ? d->outputs[i].bytes : 0;
}
aclError aclmdlGetInputDims(const aclmdlDesc* d, size_t i, aclmdlIODims* dims) {
  ACL_REQUIRE_ARG("aclmdlGetInputDims", d, "modelDesc must not be NULL");
  return fillDims("aclmdlGetInputDims", d->inputs, i, dims);
}
aclError aclmdlGetOutputDims(const aclmdlDesc* d, size_t i, aclmdlIODims* dims) {
  ACL_REQUIRE_ARG("aclmdlGetOutputDims", d, "modelDesc must not be NULL");
  return fillDims("aclmdlGetOutputDims", d->outputs, i, dims);
}
const char* aclmdlGetInputNameByIndex(const aclmdlDesc* d, size_t i) {
  return d && i < d->inputs.size() ? d->inputs[i].name.c_str() : nullptr;
}
const char* aclmdlGetOutputNameByIndex(const aclmdlDesc* d, size_t i) {
  return d && i < d->outputs.size() ? d->outputs[i].name.c_str() : nullptr;
}
aclError aclmdlGetInputIndexByName(const aclmdlDesc* d, const char* name, size_t* index) {
  ACL_REQUIRE_ARG("aclmdlGetInputIndexByName", d && name && index,
                  "modelDesc, name and index must not be NULL");
  for (size_t i = 0; i < d->inputs.size(); ++i) {
    if (d->inputs[i].name == name) {
      *index = i;
      return ACL_SUCCESS;
    }
  }
  auto model = d->model.lock();
  if (std::string(name) == ACL_DYNAMIC_TENSOR_NAME && model &&
      model->def().dynamic_mode != engine::DynamicMode::Static) {
    *index = d->inputs.size();
    return ACL_SUCCESS;
  }
  return setError(ACL_ERROR_INVALID_PARAM,
                  std::string("aclmdlGetInputIndexByName: the model has no input named ") + name);
}
aclDataType aclmdlGetInputDataType(const aclmdlDesc* d, size_t i) {
  return d && i < d->inputs.size() ? d->inputs[i].dtype : ACL_DT_UNDEFINED;
}
aclDataType aclmdlGetOutputDataType(const aclmdlDesc* d, size_t i) {
  return d && i < d->outputs.size() ? d->outputs[i].dtype : ACL_DT_UNDEFINED;
}
aclFormat aclmdlGetInputFormat(const aclmdlDesc* d, size_t i) {
  if (!d || i >= d->inputs.size()) return ACL_FORMAT_UNDEFINED;
  return d->inputs[i].dims.size() == 4 ? ACL_FORMAT_NCHW : ACL_FORMAT_ND;
}

namespace {
aclError setGear(const char* api, uint32_t modelId, aclmdlDataset* dataset, size_t index,
                 std::vector<int64_t> values, engine::DynamicMode mode) {
  ACL_REQUIRE_INIT(api);
  ACL_REQUIRE_ARG(api, dataset, "dataset must not be NULL");
  auto model = find(modelId);
  if (!model) {
    return setError(ACL_ERROR_INVALID_MODEL_ID,
                    std::string(api) + ": no model is loaded with id " + std::to_string(modelId));
  }
  if (model->def().dynamic_mode != mode) {
    return setError(ACL_ERROR_INVALID_PARAM,
                    std::string(api) + ": the model was not converted with atc --dynamic_" +
                        (mode == engine::DynamicMode::Batch ? "batch_size" : "dims"));
  }
  ACL_REQUIRE_ARG(api, index == model->num_inputs(),
                  "index " + std::to_string(index) + " is not the index of " +
                      ACL_DYNAMIC_TENSOR_NAME + " (" + std::to_string(model->num_inputs()) +
                      ", aclmdlGetInputIndexByName)");
  try {
    model->find_gear(values);
  } catch (const engine::ModelError& e) {
    return setError(ACL_ERROR_INVALID_PARAM, std::string(api) + ": " + e.what());
  }
  dataset->gear_values = std::move(values);
  return ACL_SUCCESS;
}
}  // namespace

aclError aclmdlSetDynamicBatchSize(uint32_t modelId, aclmdlDataset* dataset, size_t index,
                                   uint64_t batchSize) {
  return setGear("aclmdlSetDynamicBatchSize", modelId, dataset, index,
                 {static_cast<int64_t>(batchSize)}, engine::DynamicMode::Batch);
}

aclError aclmdlSetInputDynamicDims(uint32_t modelId, aclmdlDataset* dataset, size_t index,
                                   const aclmdlIODims* dims) {
  ACL_REQUIRE_ARG("aclmdlSetInputDynamicDims", dims && dims->dimCount <= ACL_MAX_DIM_CNT,
                  "dims must not be NULL and hold at most ACL_MAX_DIM_CNT values");
  return setGear("aclmdlSetInputDynamicDims", modelId, dataset, index,
                 std::vector<int64_t>(dims->dims, dims->dims + dims->dimCount),
                 engine::DynamicMode::Dims);
}

aclError aclmdlGetCurOutputDims(const aclmdlDesc* d, size_t i, aclmdlIODims* dims) {
  auto model = d ? d->model.lock() : nullptr;
  ACL_REQUIRE_ARG("aclmdlGetCurOutputDims", model,
                  "modelDesc must come from aclmdlGetDesc of a model still loaded");
  ACL_REQUIRE_ARG("aclmdlGetCurOutputDims", dims && i < d->outputs.size(),
                  "dims must not be NULL and index below the output count");
  const auto& g = model->gear(model->current_gear());
  const auto& t = g.tensors[g.outputs[i]];
  std::vector<aclmdlDesc::IO> one{{t.name, t.dims, ACL_FLOAT, 0}};
  return fillDims("aclmdlGetCurOutputDims", one, 0, dims);
}

aclError aclmdlExecuteAsync(uint32_t modelId, const aclmdlDataset* input, aclmdlDataset* output,
                            aclrtStream stream) {
  return execute("aclmdlExecuteAsync", modelId, input, output, stream, false);
}

aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset* input, aclmdlDataset* output) {
  return execute("aclmdlExecute", modelId, input, output, nullptr, true);
}

}  // extern "C"
