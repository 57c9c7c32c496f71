// What engine/model.cpp and engine/ops.cpp share; not part of the public header.
#pragma once

#include <memory>

#include "npu/engine.h"

namespace npu::engine {

// A prepared node: descriptors built at load, data pointers bound per run. `ptrs` holds one
// data pointer per tensor index of the model.
struct Model::Kernel {
  virtual ~Kernel() = default;
  virtual void run(void* const* ptrs) = 0;
};

// Throws ModelError naming the node when the engine cannot run it.
std::unique_ptr<Model::Kernel> make_kernel(const ModelDef& def, const NodeInfo& node);

}  // namespace npu::engine
