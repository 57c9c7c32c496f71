// softmax / log_softmax, layer_norm, batch_norm, nll_loss, embedding and the indexing and shape kernels (index_select,
// gather, scatter, index_add, cat, flip, roll, tril/triu, arange, linspace) on the library.
//
// Index values are data on the device, so they are checked where the kernel runs: an index out
// of range fails the task before the kernel touches memory, and the error (PyTorch's message)
// is reported by the next synchronize, as a device-side assert is on CUDA.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

bool floating(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()) && describable(t); }

bool indexDType(const at::Tensor& t) {
  return (t.scalar_type() == at::kLong || t.scalar_type() == at::kInt) && describable(t);
}

// Throws PyTorch's message if an index in `index` is outside [-size, size) (negative = from the
// end is not accepted by these ops: [0, size)). Runs on the stream worker.
void checkIndices(const nk::TensorDesc& index, int64_t size, const char* message) {
  const int64_t n = index.numel();
  if (n == 0) return;
  int64_t pos[nk::kMaxDims] = {};
  for (int64_t k = 0; k < n; ++k) {
    int64_t offset = 0;
    for (int d = 0; d < index.ndim; ++d) offset += pos[d] * index.strides[d];
    const int64_t v = index.dtype == nk::DType::Int64
                          ? static_cast<const int64_t*>(index.data)[offset]
                          : static_cast<const int32_t*>(index.data)[offset];
    if (v < 0 || v >= size) {
      throw std::out_of_range(std::string(message) + " (index " + std::to_string(v) +
                              ", size " + std::to_string(size) + ")");
    }
    for (int d = index.ndim - 1; d >= 0; --d) {
      if (++pos[d] < index.sizes[d]) break;
      pos[d] = 0;
    }
  }
}

// ---- softmax ----------------------------------------------------------------------------

template <bool kLog>
at::Tensor& softmaxInto(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  if (self.numel() == 0) return out;
  launchTask(streamOf(self), kLog ? "log_softmax" : "softmax",
             [o = describe(out), i = describe(self), d] { nk::softmax(o, i, d, kLog); });
  return out;
}

template <bool kLog>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (!floating(self) || self.dim() == 0 || (half_to_float && self.scalar_type() != at::kHalf)) {
    return callHostKernel<at::Tensor>(
        kLog ? NPU_ATEN_OP("_log_softmax", "") : NPU_ATEN_OP("_softmax", ""), self, dim,
        half_to_float);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(half_to_float ? at::kFloat
                                                                              : self.scalar_type()));
  return softmaxInto<kLog>(self, dim, out);
}

template <bool kLog>
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                        at::Tensor& out) {
  if (!floating(self) || self.dim() == 0 || !floating(out) ||
      (half_to_float && self.scalar_type() != at::kHalf)) {
    callHostKernel<at::Tensor>(
        kLog ? NPU_ATEN_OP("_log_softmax", "out") : NPU_ATEN_OP("_softmax", "out"), self, dim,
        half_to_float, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  at::native::resize_output(out, self.sizes());
  // An out whose elements alias each other: ATen's CPU kernel writes past its memory there.
  at::assert_no_internal_overlap(out);
  if (!out.is_same(self) && at::get_overlap_status(out, self) != at::MemOverlapStatus::No) {
    // out overlaps self in part: the kernel would read rows it already wrote. Through a
    // temporary (ATen's CPU kernel's result depends on its loop order).
    out.copy_(softmax<kLog>(self, dim, half_to_float));
    return out;
  }
  return softmaxInto<kLog>(self, dim, out);
}

template <bool kLog>
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  if (!floating(grad_output) || !floating(output) || output.dim() == 0 ||
      grad_output.sizes() != output.sizes()) {
    return callHostKernel<at::Tensor>(kLog ? NPU_ATEN_OP("_log_softmax_backward_data", "")
                                           : NPU_ATEN_OP("_softmax_backward_data", ""),
                                      grad_output, output, dim, input_dtype);
  }
  const c10::DeviceGuard guard(output.device());
  at::Tensor grad_input = at::empty(output.sizes(), output.options().dtype(input_dtype));
  if (output.numel() == 0) return grad_input;
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, output.dim()));
  launchTask(streamOf(output), kLog ? "log_softmax_backward" : "softmax_backward",
             [gi = describe(grad_input), go = describe(grad_output), o = describe(output), d] {
               nk::softmax_backward(gi, go, o, d, kLog);
             });
  return grad_input;
}

// ---- layer norm -------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  const int64_t axis = input.dim() - nd;
  bool ok = floating(input) && nd > 0 && axis >= 0;
  for (int64_t i = 0; ok && i < nd; ++i) {
    ok = normalized_shape[i] == input.size(axis + i);
  }
  int64_t n = 1;
  for (int64_t i = 0; ok && i < nd; ++i) n *= input.size(axis + i);
  auto paramOk = [&](const std::optional<at::Tensor>& p) {
    return !p || !p->defined() ||
           (p->scalar_type() == input.scalar_type() && describable(*p) && p->numel() == n);
  };
  if (!ok || !paramOk(weight) || !paramOk(bias) || input.numel() == 0) {
    torch::jit::Stack stack;
    torch::jit::push(stack, input, C10_AS_INTARRAYREF_SLOW(normalized_shape).vec(), weight, bias,
                     eps);
    runOnHost(NPU_ATEN_OP("native_layer_norm", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  std::vector<int64_t> stat_shape(x.sizes().begin(), x.sizes().begin() + axis);
  stat_shape.resize(x.dim(), 1);
  at::Tensor mean = at::empty(stat_shape, x.options());
  at::Tensor rstd = at::empty(stat_shape, x.options());
  std::optional<nk::TensorDesc> w, b;
  if (weight && weight->defined()) w = describe(weight->contiguous());
  if (bias && bias->defined()) b = describe(bias->contiguous());
  launchTask(streamOf(x), "layer_norm",
             [o = describe(out), m = describe(mean), r = describe(rstd), i = describe(x), w, b,
              nd = static_cast<int>(nd), eps] {
               nk::layer_norm(o, m, r, i, w ? &*w : nullptr, b ? &*b : nullptr, nd, eps);
             });
  return {out, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  const bool has_weight = weight && weight->defined();
  const bool ok = floating(input) && floating(grad_out) && grad_out.sizes() == input.sizes() &&
                  input.numel() > 0 && mean.scalar_type() == input.scalar_type() &&
                  (!has_weight || weight->scalar_type() == input.scalar_type());
  if (!ok) {
    torch::jit::Stack stack;
    torch::jit::push(stack, grad_out, input, C10_AS_INTARRAYREF_SLOW(normalized_shape).vec(), mean,
                     rstd, weight, bias, output_mask);
    runOnHost(NPU_ATEN_OP("native_layer_norm_backward", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const at::Tensor x = input.contiguous();
  const at::Tensor g = grad_out.contiguous();
  at::Tensor gi, gw, gb;
  std::optional<nk::TensorDesc> dgi, dgw, dgb, w;
  if (output_mask[0]) dgi = describe(gi = at::empty(x.sizes(), x.options()));
  const std::vector<int64_t> param_shape(x.sizes().end() - nd, x.sizes().end());
  if (output_mask[1] && has_weight) dgw = describe(gw = at::empty(param_shape, x.options()));
  if (output_mask[2] && bias && bias->defined()) {
    dgb = describe(gb = at::empty(param_shape, x.options()));
  }
  const at::Tensor wc = has_weight ? weight->contiguous() : at::Tensor();
  if (has_weight) w = describe(wc);
  launchTask(streamOf(x), "layer_norm_backward",
             [dgi, dgw, dgb, go = describe(g), i = describe(x), m = describe(mean.contiguous()),
              r = describe(rstd.contiguous()), w, nd = static_cast<int>(nd)] {
               nk::layer_norm_backward(dgi ? &*dgi : nullptr, dgw ? &*dgw : nullptr,
                                       dgb ? &*dgb : nullptr, go, i, m, r, w ? &*w : nullptr, nd);
             });
  return {gi, gw, gb};
}

// ---- embedding / index_select / gather / scatter / index_add -------------------------------

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             at::Tensor& out) {
  // The CPU kernel's overlap rules (its messages): an out= that aliases itself or an input
  // would be written while the kernel reads it.
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  const bool ok = describable(self) && indexDType(index) && index.dim() <= 1 && self.dim() > 0 &&
                  describable(out) && out.scalar_type() == self.scalar_type();
  if (!ok) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("index_select", "out"), self, dim, index, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  std::vector<int64_t> shape = self.sizes().vec();
  shape[d] = index.numel();
  at::native::resize_output(out, shape);
  if (out.numel() == 0 && index.numel() == 0) return out;
  const at::Tensor idx = index.reshape({index.numel()});
  launchTask(streamOf(self), "index_select",
             [o = describe(out), i = describe(self), x = describe(idx), d, size = self.size(d)] {
               checkIndices(x, size, "index_select(): index out of range in self");
               nk::index_select(o, i, d, x);
             });
  return out;
}
at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq) {
  const int64_t rows = num_weights.expect_int();
  if (scale_grad_by_freq || !floating(grad_output) || !indexDType(indices)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("embedding_dense_backward", ""), grad_output,
                                      indices, rows, padding_idx.expect_int(), scale_grad_by_freq);
  }
  const c10::DeviceGuard guard(grad_output.device());
  const int64_t dim = grad_output.size(-1);
  const at::Tensor idx = indices.reshape({indices.numel()});
  const at::Tensor g = grad_output.reshape({indices.numel(), dim});
  at::Tensor grad_weight = at::empty({rows, dim}, grad_output.options());
  launchTask(streamOf(grad_output), "embedding_backward",
             [gw = describe(grad_weight), go = describe(g), x = describe(idx), rows,
              pad = padding_idx.expect_int()] {
               checkIndices(x, rows, "embedding_backward: index out of range");
               nk::embedding_backward(gw, go, x, pad);
             });
  return grad_weight;
}

bool gatherOk(const at::Tensor& self, const at::Tensor& index) {
  return describable(self) && index.scalar_type() == at::kLong && describable(index) &&
         index.dim() == self.dim() && self.dim() > 0;
}

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       bool sparse_grad, at::Tensor& out) {
  at::assert_no_internal_overlap(out);  // the CPU kernel's rules
  at::assert_no_overlap(out, self);
  at::assert_no_partial_overlap(out, index);
  if (!gatherOk(self, index) || out.scalar_type() != self.scalar_type()) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("gather", "out"), self, dim, index, sparse_grad, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  for (int64_t i = 0; i < self.dim(); ++i) {
    TORCH_CHECK(i == d || index.size(i) <= self.size(i), "Size does not match at dimension ", i,
                " expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", d);
  }
  at::native::resize_output(out, index.sizes());
  if (out.numel() == 0) return out;
  launchTask(streamOf(self), "gather",
             [o = describe(out), i = describe(self), x = describe(index), d, size = self.size(d)] {
               checkIndices(x, size, "index out of range in gather");
               nk::gather(o, i, d, x);
             });
  return out;
}
at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                  bool sparse_grad) {
  at::Tensor out = at::empty({0}, self.options());
  return gather_out(self, dim, index, sparse_grad, out);
}

// self.scatter_(dim, index, src, reduce) in place; src is a tensor or a scalar.
void scatterInto(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor* src,
                 const at::Scalar* value, nk::ScatterReduce reduce) {
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  for (int64_t i = 0; i < self.dim(); ++i) {
    TORCH_CHECK(!src || index.size(i) <= src->size(i), "Expected index ", index.sizes(),
                " to be no larger than src ", src->sizes(), " apart from dimension ", d,
                " and to be no larger size than src ", src->sizes());
    TORCH_CHECK(i == d || index.size(i) <= self.size(i), "Expected index ", index.sizes(),
                " to be no larger than self ", self.sizes(), " apart from dimension ", d);
  }
  if (index.numel() == 0) return;
  std::optional<nk::TensorDesc> s;
  nk::Scalar v;
  if (src) s = describe(*src);
  if (value) v = toKernelScalar(*value);
  launchTask(streamOf(self), "scatter",
             [o = describe(self), x = describe(index), s, v, d, reduce, size = self.size(d),
              dtype = *toKernelDType(self.scalar_type())] {
               checkIndices(x, size, "index out of range in scatter");
               if (s) {
                 nk::scatter(o, d, x, *s, reduce);
               } else {
                 // A scalar source: one value broadcast to the index's shape.
                 alignas(16) unsigned char buf[16] = {};
                 const nk::TensorDesc one = nk::TensorDesc::make(buf, dtype, {});
                 nk::fill(one, v);
                 nk::scatter(o, d, x, nk::TensorDesc::broadcast_scalar(buf, dtype, x), reduce);
               }
             });
}

// The CPU kernel's overlap rules for scatter_ / scatter_add_ / index_add_ (its messages): self
// is written while index and src are read.
void checkScatterOverlap(const at::Tensor& self, const at::Tensor& index, const at::Tensor* src) {
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  if (src != nullptr) at::assert_no_overlap(self, *src);
}

bool scatterOk(const at::Tensor& self, const at::Tensor& index, const at::Tensor* src) {
  return gatherOk(self, index) &&
         (!src || (describable(*src) && src->scalar_type() == self.scalar_type() &&
                   src->dim() == self.dim()));
}

std::optional<nk::ScatterReduce> reduceMode(c10::string_view reduce) {
  if (reduce == "add" || reduce == "sum") return nk::ScatterReduce::Add;
  if (reduce == "multiply" || reduce == "prod") return nk::ScatterReduce::Multiply;
  return std::nullopt;
}

at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src) {
  checkScatterOverlap(self, index, &src);
  if (!scatterOk(self, index, &src)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("scatter_", "src"), self, dim, index, src), self;
  }
  const c10::DeviceGuard guard(self.device());
  scatterInto(self, dim, index, &src, nullptr, nk::ScatterReduce::None);
  return self;
}
at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Scalar& value) {
  checkScatterOverlap(self, index, nullptr);
  if (!scatterOk(self, index, nullptr)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("scatter_", "value"), self, dim, index, value),
           self;
  }
  const c10::DeviceGuard guard(self.device());
  scatterInto(self, dim, index, nullptr, &value, nk::ScatterReduce::None);
  return self;
}
at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& src) {
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  return scatter_src_(out, dim, index, src);
}
at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Scalar& value) {
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  return scatter_value_(out, dim, index, value);
}
at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src) {
  checkScatterOverlap(self, index, &src);
  if (!scatterOk(self, index, &src)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("scatter_add_", ""), self, dim, index, src),
           self;
  }
  const c10::DeviceGuard guard(self.device());
  scatterInto(self, dim, index, &src, nullptr, nk::ScatterReduce::Add);
  return self;
}
at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& src) {
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  return scatter_add_(out, dim, index, src);
}

at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& source, const at::Scalar& alpha) {
  checkScatterOverlap(self, index, &source);
  const bool ok = describable(self) && indexDType(index) && index.dim() <= 1 &&
                  describable(source) && source.scalar_type() == self.scalar_type() &&
                  self.dim() > 0 && source.dim() == self.dim();
  if (!ok) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("index_add_", ""), self, dim, index, source, alpha);
    return self;
  }
  const c10::DeviceGuard guard(self.device());
  const int d = static_cast<int>(at::maybe_wrap_dim(dim, self.dim()));
  TORCH_CHECK(source.size(d) == index.numel(),
              "index_add_(): Number of indices (", index.numel(),
              ") should be equal to source.size(dim) (", source.size(d), ")");
  if (index.numel() == 0) return self;
  const at::Tensor idx = index.reshape({index.numel()});
  launchTask(streamOf(self), "index_add",
             [o = describe(self), x = describe(idx), s = describe(source), d,
              a = toKernelScalar(alpha), size = self.size(d)] {
               checkIndices(x, size, "index_add_(): index out of range");
               nk::index_add(o, d, x, s, a);
             });
  return self;
}
at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Tensor& source, const at::Scalar& alpha) {
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  return index_add_(out, dim, index, source, alpha);
}

// ---- cat / flip / roll / tril / triu / arange / linspace ----------------------------------

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  std::vector<at::Tensor> all;
  for (const at::Tensor& t : tensors) all.push_back(t);
  at::assert_no_internal_overlap(out);  // the CPU kernel's rules
  for (const at::Tensor& t : all) at::assert_no_overlap(out, t);
  // Legacy behaviour: 1-D empty tensors are skipped whatever the other shapes.
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : all) {
    if (!(t.dim() == 1 && t.numel() == 0)) parts.push_back(t);
  }
  bool ok = !parts.empty() && describable(out);
  for (const at::Tensor& t : parts) {
    ok = ok && describable(t) && t.dim() == parts[0].dim() && t.is_privateuseone() &&
         t.device() == out.device();
  }
  if (ok) {
    const int64_t d = at::maybe_wrap_dim(dim, parts[0].dim());
    std::vector<int64_t> shape = parts[0].sizes().vec();
    int64_t total = 0;
    for (const at::Tensor& t : parts) {
      for (int64_t i = 0; i < t.dim(); ++i) {
        if (i != d) ok = ok && t.size(i) == shape[i];
      }
      total += t.size(d);
    }
    if (ok) {
      const c10::DeviceGuard guard(out.device());
      shape[d] = total;
      at::native::resize_output(out, shape);
      std::vector<std::pair<nk::TensorDesc, nk::TensorDesc>> copies;
      int64_t offset = 0;
      for (const at::Tensor& t : parts) {
        if (t.numel() > 0) copies.emplace_back(describe(out.narrow(d, offset, t.size(d))), describe(t));
        offset += t.size(d);
      }
      if (!copies.empty()) {
        launchTask(streamOf(out), "cat", [copies = std::move(copies)] {
          for (const auto& [to, from] : copies) nk::copy(to, from);
        });
      }
      return out;
    }
  }
  callHostKernel<at::Tensor>(NPU_ATEN_OP("cat", "out"), c10::List<at::Tensor>(all), dim, out);
  return out;
}
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  std::vector<at::Tensor> all;
  for (const at::Tensor& t : tensors) all.push_back(t);
  TORCH_CHECK(!all.empty(), "torch.cat(): expected a non-empty list of Tensors");
  at::ScalarType dtype = all[0].scalar_type();
  c10::Device device = all[0].device();
  for (const at::Tensor& t : all) {
    dtype = at::promote_types(dtype, t.scalar_type());
    if (t.is_privateuseone()) device = t.device();
  }
  at::Tensor out = at::empty({0}, all[0].options().dtype(dtype).device(device));
  return cat_out(tensors, dim, out);
}

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  if (!describable(self)) return callHostKernel<at::Tensor>(NPU_ATEN_OP("flip", ""), self, dims.vec());
  const c10::DeviceGuard guard(self.device());
  unsigned mask = 0;
  for (int64_t d : dims) {
    const int64_t w = at::maybe_wrap_dim(d, self.dim());
    TORCH_CHECK(!((mask >> w) & 1), "dims has duplicates, original flip dims size=", dims.size());
    mask |= 1u << w;
  }
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return out;
  launchTask(streamOf(self), "flip", [o = describe(out), i = describe(self), mask] {
    nk::flip(o, i, mask);
  });
  return out;
}

at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts_sym, at::IntArrayRef dims) {
  const std::vector<int64_t> shifts = C10_AS_INTARRAYREF_SLOW(shifts_sym).vec();
  if (!describable(self) || dims.empty() || shifts.size() != dims.size()) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("roll", ""), self, shifts, dims.vec());
  }
  const c10::DeviceGuard guard(self.device());
  std::vector<int> wrapped;
  for (int64_t d : dims) wrapped.push_back(static_cast<int>(at::maybe_wrap_dim(d, self.dim())));
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return out;
  launchTask(streamOf(self), "roll",
             [o = describe(out), i = describe(self), shifts, wrapped] {
               nk::roll(o, i, shifts.data(), wrapped.data(), static_cast<int>(wrapped.size()));
             });
  return out;
}

template <bool kUpper>
at::Tensor tril_triu(const at::Tensor& self, int64_t diagonal);

template <bool kUpper>
at::Tensor& tril_triu_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  if (!describable(self) || self.dim() < 2 || out.scalar_type() != self.scalar_type()) {
    callHostKernel<at::Tensor>(kUpper ? NPU_ATEN_OP("triu", "out") : NPU_ATEN_OP("tril", "out"),
                               self, diagonal, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  if (!out.is_same(self) && at::get_overlap_status(out, self) != at::MemOverlapStatus::No) {
    // out overlaps self in part: the kernel would read elements it already wrote. Through a
    // temporary, so the result is triu(self) (ATen's CPU kernel's depends on its loop order).
    const at::Tensor result = tril_triu<kUpper>(self, diagonal);
    at::native::resize_output(out, self.sizes());
    out.copy_(result);
    return out;
  }
  if (!out.is_same(self)) at::native::resize_output(out, self.sizes());
  if (self.numel() == 0) return out;
  launchTask(streamOf(self), kUpper ? "triu" : "tril",
             [o = describe(out), i = describe(self), diagonal] {
               nk::tril_triu(o, i, diagonal, kUpper);
             });
  return out;
}
template <bool kUpper>
at::Tensor tril_triu(const at::Tensor& self, int64_t diagonal) {
  at::Tensor out = at::empty({0}, self.options());
  return tril_triu_out<kUpper>(self, diagonal, out);
}
template <bool kUpper>
at::Tensor& tril_triu_(at::Tensor& self, int64_t diagonal) {
  return tril_triu_out<kUpper>(self, diagonal, self);
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       at::Tensor& out) {
  if (!describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("arange", "start_out"), start, end, step, out);
    return out;
  }
  // PyTorch's size rule and checks (RangeFactories.cpp), in double or int64.
  const double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  TORCH_CHECK(st != 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
  TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
              "upper bound and larger bound inconsistent with step sign");
  int64_t size;
  if (at::isIntegralType(out.scalar_type(), true) && start.isIntegral(true) &&
      end.isIntegral(true) && step.isIntegral(true)) {
    const int64_t a = start.toLong(), b = end.toLong(), c = step.toLong();
    size = c > 0 ? (b - a + c - 1) / c : (a - b - c - 1) / -c;
  } else {
    size = static_cast<int64_t>(std::ceil((e - s) / st));
  }
  const c10::DeviceGuard guard(out.device());
  if (out.numel() != size) out.resize_({size});
  at::assert_no_internal_overlap(out);  // as ATen's TensorIterator does for the CPU kernel
  if (size == 0) return out;
  launchTask(streamOf(out), "arange",
             [o = describe(out), a = toKernelScalar(start), c = toKernelScalar(step)] {
               nk::arange(o, a, c);
             });
  return out;
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                         at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (!describable(out) || !at::isFloatingType(out.scalar_type())) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("linspace", "out"), start, end, steps, out);
    return out;
  }
  const c10::DeviceGuard guard(out.device());
  if (out.numel() != steps) out.resize_({steps});
  at::assert_no_internal_overlap(out);  // as ATen's TensorIterator does for the CPU kernel
  if (steps == 0) return out;
  launchTask(streamOf(out), "linspace",
             [o = describe(out), a = toKernelScalar(start), b = toKernelScalar(end)] {
               nk::linspace(o, a, b);
             });
  return out;
}


// ---- nll_loss (cross_entropy is log_softmax + nll_loss) -----------------------------------

// ATen's shape rules, checked here so the kernel gets only valid layouts; anything else goes
// to ATen's CPU kernel, which raises PyTorch's message.
bool nllOk(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& w,
           int64_t reduction, bool two_d) {
  if (!floating(self) || !nk::nll_loss_supports(*toKernelDType(self.scalar_type()))) return false;
  if (!describable(target) || !at::isIntegralType(target.scalar_type(), false)) return false;
  if (reduction < 0 || reduction > 2) return false;
  if (two_d) {
    if (self.dim() != 4 || target.dim() != 3 || target.size(0) != self.size(0) ||
        target.size(1) != self.size(2) || target.size(2) != self.size(3)) {
      return false;
    }
  } else {
    if (self.dim() < 1 || self.dim() > 2 || target.dim() > 1) return false;
    if (self.dim() == 2 && (target.dim() != 1 || target.size(0) != self.size(0))) return false;
    if (self.dim() == 1 && target.numel() != 1) return false;
  }
  const int64_t classes = self.dim() == 1 ? self.size(0) : self.size(1);
  if (w && w->defined() &&
      (!describable(*w) || w->numel() != classes || w->scalar_type() != self.scalar_type())) {
    return false;
  }
  return self.numel() > 0;
}

std::tuple<at::Tensor, at::Tensor> nllForward(const at::Tensor& self, const at::Tensor& target,
                                              const std::optional<at::Tensor>& weight,
                                              int64_t reduction, int64_t ignore_index,
                                              bool two_d) {
  if (!nllOk(self, target, weight, reduction, two_d)) {
    torch::jit::Stack stack;
    torch::jit::push(stack, self, target, weight, reduction, ignore_index);
    runOnHost(two_d ? NPU_ATEN_OP("nll_loss2d_forward", "") : NPU_ATEN_OP("nll_loss_forward", ""),
              &stack);
    return {stack[0].toTensor(), stack[1].toTensor()};
  }
  const c10::DeviceGuard guard(self.device());
  const bool per_sample = reduction == 0 && self.dim() >= 2;
  at::Tensor output = per_sample ? at::empty(target.sizes(), self.options())
                                 : at::empty({}, self.options());
  at::Tensor total_weight = at::empty({}, self.options());
  std::optional<nk::TensorDesc> w;
  if (weight && weight->defined()) w = describe(weight->contiguous());
  const at::Tensor t = self.dim() == 1 ? target.reshape({}) : target;
  launchTask(streamOf(self), "nll_loss",
             [o = describe(output), tw = describe(total_weight), i = describe(self),
              tg = describe(t), w, reduction, ignore_index] {
               nk::nll_loss(o, tw, i, tg, w ? &*w : nullptr,
                            static_cast<nk::LossReduction>(reduction), ignore_index);
             });
  return {output, total_weight};
}

at::Tensor nllBackward(const at::Tensor& grad_output, const at::Tensor& self,
                       const at::Tensor& target, const std::optional<at::Tensor>& weight,
                       int64_t reduction, int64_t ignore_index, const at::Tensor& total_weight,
                       bool two_d) {
  if (!nllOk(self, target, weight, reduction, two_d) || !floating(grad_output) ||
      !describable(total_weight)) {
    return callHostKernel<at::Tensor>(
        two_d ? NPU_ATEN_OP("nll_loss2d_backward", "") : NPU_ATEN_OP("nll_loss_backward", ""),
        grad_output, self, target, weight, reduction, ignore_index, total_weight);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  std::optional<nk::TensorDesc> w;
  if (weight && weight->defined()) w = describe(weight->contiguous());
  const at::Tensor t = self.dim() == 1 ? target.reshape({}) : target;
  launchTask(streamOf(self), "nll_loss_backward",
             [gi = describe(grad_input), go = describe(grad_output), tg = describe(t), w,
              reduction, ignore_index, tw = describe(total_weight)] {
               nk::nll_loss_backward(gi, go, tg, w ? &*w : nullptr,
                                     static_cast<nk::LossReduction>(reduction), ignore_index, tw);
             });
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self,
                                                    const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight,
                                                    int64_t reduction, c10::SymInt ignore_index) {
  return nllForward(self, target, weight, reduction, ignore_index.expect_int(), false);
}
std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self,
                                                      const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight,
                                                      int64_t reduction,
                                                      c10::SymInt ignore_index) {
  return nllForward(self, target, weight, reduction, ignore_index.expect_int(), true);
}
at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight,
                             int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight) {
  return nllBackward(grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                     total_weight, false);
}
at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target, const std::optional<at::Tensor>& weight,
                               int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight) {
  return nllBackward(grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                     total_weight, true);
}

// ---- batch norm -------------------------------------------------------------------------

bool bnParamOk(const std::optional<at::Tensor>& p, const at::Tensor& input) {
  return !p || !p->defined() ||
         (describable(*p) && p->scalar_type() == input.scalar_type() && p->dim() == 1 &&
          p->numel() == input.size(1));
}

std::optional<nk::TensorDesc> optDesc(const std::optional<at::Tensor>& p) {
  if (!p || !p->defined()) return std::nullopt;
  return describe(*p);
}

const nk::TensorDesc* ptr(const std::optional<nk::TensorDesc>& d) { return d ? &*d : nullptr; }

bool bnOk(const at::Tensor& input, const std::optional<at::Tensor>& weight,
          const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
          const std::optional<at::Tensor>& running_var, bool training) {
  if (!floating(input) || input.dim() < 2 || input.numel() == 0 ||
      (input.scalar_type() != at::kFloat && input.scalar_type() != at::kDouble)) {
    return false;  // 16-bit inputs keep float statistics in ATen: its kernel does those
  }
  const bool has_stats = running_mean && running_mean->defined() && running_var &&
                         running_var->defined();
  if (!training && !has_stats) return false;
  return bnParamOk(weight, input) && bnParamOk(bias, input) && bnParamOk(running_mean, input) &&
         bnParamOk(running_var, input);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  if (!bnOk(input, weight, bias, running_mean, running_var, training)) {
    torch::jit::Stack stack;
    torch::jit::push(stack, input, weight, bias, running_mean, running_var, training, momentum,
                     eps);
    runOnHost(NPU_ATEN_OP("native_batch_norm", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const int64_t c = input.size(1);
  at::Tensor out = at::empty(input.sizes(), input.options());
  // As ATen's CPU kernel: the saved statistics are empty in eval mode.
  at::Tensor save_mean = at::empty({training ? c : 0}, input.options());
  at::Tensor save_invstd = at::empty({training ? c : 0}, input.options());
  std::optional<nk::TensorDesc> sm, si;
  if (training) {
    sm = describe(save_mean);
    si = describe(save_invstd);
  }
  launchTask(streamOf(input), "batch_norm",
             [o = describe(out), sm, si, i = describe(input), w = optDesc(weight),
              b = optDesc(bias), rm = optDesc(running_mean), rv = optDesc(running_var), training,
              momentum, eps] {
               nk::batch_norm(o, ptr(sm), ptr(si), i, ptr(w), ptr(b), ptr(rm), ptr(rv), training,
                              momentum, eps);
             });
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
    bool train, double eps, std::array<bool, 3> output_mask) {
  const bool saved_ok = !train || (save_mean && save_mean->defined() && save_invstd &&
                                   save_invstd->defined() && bnParamOk(save_mean, input) &&
                                   bnParamOk(save_invstd, input));
  if (!bnOk(input, weight, std::nullopt, running_mean, running_var, train) || !saved_ok ||
      !describable(grad_out) || grad_out.sizes() != input.sizes() ||
      grad_out.scalar_type() != input.scalar_type()) {
    torch::jit::Stack stack;
    torch::jit::push(stack, grad_out, input, weight, running_mean, running_var, save_mean,
                     save_invstd, train, eps, output_mask);
    runOnHost(NPU_ATEN_OP("native_batch_norm_backward", ""), &stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  const c10::DeviceGuard guard(input.device());
  const int64_t c = input.size(1);
  at::Tensor gi, gw, gb;
  std::optional<nk::TensorDesc> dgi, dgw, dgb;
  if (output_mask[0]) dgi = describe(gi = at::empty(input.sizes(), input.options()));
  if (output_mask[1]) dgw = describe(gw = at::empty({c}, input.options()));
  if (output_mask[2]) dgb = describe(gb = at::empty({c}, input.options()));
  launchTask(streamOf(input), "batch_norm_backward",
             [dgi, dgw, dgb, go = describe(grad_out), i = describe(input), w = optDesc(weight),
              rm = optDesc(running_mean), rv = optDesc(running_var), sm = optDesc(save_mean),
              si = optDesc(save_invstd), train, eps] {
               nk::batch_norm_backward(ptr(dgi), ptr(dgw), ptr(dgb), go, i, ptr(w), ptr(rm),
                                       ptr(rv), ptr(sm), ptr(si), train, eps);
             });
  return {gi, gw, gb};
}


// The functional forms torch.compile / decompositions call: the same kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    bool training, double momentum, double eps) {
  return native::native_batch_norm(input, weight, bias, running_mean, running_var, training,
                                   momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  return native::native_batch_norm(input, weight, bias, std::nullopt, std::nullopt, training,
                                   momentum, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_softmax", softmax<false>);
  NPU_IMPL(m, "_softmax.out", softmax_out<false>);
  NPU_IMPL(m, "_log_softmax", softmax<true>);
  NPU_IMPL(m, "_log_softmax.out", softmax_out<true>);
  NPU_IMPL(m, "_softmax_backward_data", softmax_backward<false>);
  NPU_IMPL(m, "_log_softmax_backward_data", softmax_backward<true>);
  NPU_IMPL(m, "native_layer_norm", native_layer_norm);
  NPU_IMPL(m, "native_layer_norm_backward", native_layer_norm_backward);
  NPU_IMPL(m, "native_batch_norm", native_batch_norm);
  NPU_IMPL(m, "native_batch_norm_backward", native_batch_norm_backward);
  NPU_IMPL(m, "_native_batch_norm_legit", native_batch_norm_legit);
  NPU_IMPL(m, "_native_batch_norm_legit.no_stats", native_batch_norm_legit_no_stats);
  NPU_IMPL(m, "nll_loss_forward", nll_loss_forward);
  NPU_IMPL(m, "nll_loss_backward", nll_loss_backward);
  NPU_IMPL(m, "nll_loss2d_forward", nll_loss2d_forward);
  NPU_IMPL(m, "nll_loss2d_backward", nll_loss2d_backward);
  NPU_IMPL(m, "index_select", index_select);
  NPU_IMPL(m, "index_select.out", index_select_out);
  NPU_IMPL(m, "embedding_dense_backward", embedding_dense_backward);
  NPU_IMPL(m, "gather", gather);
  NPU_IMPL(m, "gather.out", gather_out);
  NPU_IMPL(m, "scatter.src", scatter_src);
  NPU_IMPL(m, "scatter_.src", scatter_src_);
  NPU_IMPL(m, "scatter.value", scatter_value);
  NPU_IMPL(m, "scatter_.value", scatter_value_);
  NPU_IMPL(m, "scatter_add", scatter_add);
  NPU_IMPL(m, "scatter_add_", scatter_add_);
  NPU_IMPL(m, "index_add", index_add);
  NPU_IMPL(m, "index_add_", index_add_);
  NPU_IMPL(m, "cat", cat);
  NPU_IMPL(m, "cat.out", cat_out);
  NPU_IMPL(m, "flip", flip);
  NPU_IMPL(m, "roll", roll);
  NPU_IMPL(m, "tril", tril_triu<false>);
  NPU_IMPL(m, "tril.out", tril_triu_out<false>);
  NPU_IMPL(m, "tril_", tril_triu_<false>);
  NPU_IMPL(m, "triu", tril_triu<true>);
  NPU_IMPL(m, "triu.out", tril_triu_out<true>);
  NPU_IMPL(m, "triu_", tril_triu_<true>);
  NPU_IMPL(m, "arange.start_out", arange_out);
  NPU_IMPL(m, "linspace.out", linspace_out);
}

}  // namespace torch_npu::native
