// What engine/model.cpp and engine/ops.cpp share; not part of the public header.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "npu/engine.h"
#include "npu/kernels/conv.h"
#include "npu/kernels/matmul.h"

namespace npu::engine {

// Weights put once into the layout a kernel reads them in (a MatMul's constant B as GEMM
// panels, a Conv's weight as the direct convolution's), when the model is loaded; shared by every gear's kernels, which read the same
// weights. Keyed by the weight's address and how it is read (sizes and strides).
class PreparedWeights {
 public:
  std::shared_ptr<const kernels::PackedB> packed_b(const kernels::TensorDesc& b);
  // A Conv's float32 weight as the direct convolution's panels.
  std::shared_ptr<const kernels::PackedConvWeight> packed_conv(const kernels::TensorDesc& w,
                                                               int64_t groups);

 private:
  using Key = std::tuple<const void*, int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, std::shared_ptr<const kernels::PackedB>> packed_b_;
  std::map<std::pair<const void*, int64_t>, std::shared_ptr<const kernels::PackedConvWeight>>
      packed_conv_;
};

// A prepared node: descriptors built at load, data pointers bound per run. `ptrs` holds one
// data pointer per tensor index of the model.
struct Model::Kernel {
  virtual ~Kernel() = default;
  virtual void run(void* const* ptrs) = 0;
  // Called once, when the weights are in device memory (with the gear's pointers).
  virtual void prepare_weights(void* const* ptrs, PreparedWeights& prepared) {}
};

// Throws ModelError naming the node when the engine cannot run it.
std::unique_ptr<Model::Kernel> make_kernel(const ModelDef& def, const NodeInfo& node);

// Checks made before a node is prepared (engine/checks.cpp); each throws ModelError naming the
// node. A model is trusted only as far as these go: the reader checked every index and offset
// against the file, these check that the node's tensors agree with each other.
//  - check_dtypes: the dtypes the op takes (atc's check_dtypes refuses the same).
//  - check_shapes: the output shapes follow from the inputs' shapes and the attributes, as
//    atc's shape inference derived them, so no kernel reads or writes outside a tensor.
void check_dtypes(const ModelDef& def, const NodeInfo& n);
void check_shapes(const ModelDef& def, const NodeInfo& n);

[[noreturn]] inline void refuse(const NodeInfo& n, const std::string& why) {
  throw ModelError("node " + n.name + " (" + n.op + "): " + why);
}

inline int64_t int_attr(const NodeInfo& n, const char* key, int64_t fallback) {
  const Attr* a = n.attr(key);
  return a ? a->i : fallback;
}
inline double float_attr(const NodeInfo& n, const char* key, double fallback) {
  const Attr* a = n.attr(key);
  return a ? a->f : fallback;
}
inline std::vector<int64_t> ints_attr(const NodeInfo& n, const char* key,
                                      std::vector<int64_t> fallback) {
  const Attr* a = n.attr(key);
  return a ? a->ints : fallback;
}
inline std::string string_attr(const NodeInfo& n, const char* key) {
  const Attr* a = n.attr(key);
  return a ? a->s : std::string();
}

}  // namespace npu::engine
