// Indexing and shape ops on the library's indexing kernels: embedding (backward), index_select,
// gather, scatter / scatter_add, index_add, cat, flip, roll, tril / triu; index_put_'s checks.
//
// Index values are data on the device, so they are checked where the kernel runs: an index out
// of range fails the task before the kernel touches memory, and the error (PyTorch's message)
// is reported by the next synchronize, as a device-side assert is on CUDA.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/_index_put_impl.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/count_nonzero.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/index.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <sstream>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"
#include "Shadow.h"

namespace torch_npu::native {
namespace {

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
  if (scale_grad_by_freq || !describableFloating(grad_output) || !indexDType(indices)) {
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

// ---- cat / flip / roll / tril / triu ----------------------------------

// The size of cat(tensors, dim) when the inputs plainly fit together (the same number of dims
// and dtype as `out`, equal sizes but in `dim`; 1-D empty tensors skipped), else nullopt. Asking the meta kernel
// (a Python decomposition) costs 0.3-0.5 ms, the most of a small cat such as generate's append
// of the new token each step.
std::optional<std::vector<int64_t>> plainCatSize(const std::vector<at::Tensor>& all, int64_t dim,
                                                 const at::Tensor& out) {
  auto skipped = [](const at::Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  const at::Tensor* first = nullptr;
  for (const at::Tensor& t : all) {
    if (!skipped(t)) {
      first = &t;
      break;
    }
  }
  if (first == nullptr || first->dim() == 0 || dim < -first->dim() || dim >= first->dim()) {
    return std::nullopt;
  }
  const int64_t d = at::maybe_wrap_dim(dim, first->dim());
  std::vector<int64_t> size = first->sizes().vec();
  size[d] = 0;
  for (const at::Tensor& t : all) {
    if (skipped(t)) continue;
    if (t.dim() != first->dim() || t.scalar_type() != out.scalar_type()) return std::nullopt;
    for (int64_t i = 0; i < t.dim(); ++i) {
      if (i != d && t.size(i) != size[i]) return std::nullopt;
    }
    size[d] += t.size(d);
  }
  return size;
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  std::vector<at::Tensor> all;
  for (const at::Tensor& t : tensors) all.push_back(t);
  // The CPU kernel's order: out= first takes the result's size (a fresh, contiguous layout when
  // it differs, with ATen's warning), then the overlap rules apply to it. The size comes from
  // plainCatSize, or else from the meta kernel, which also raises the CPU's messages for inputs
  // that do not fit together.
  std::vector<int64_t> shape;
  if (auto plain = plainCatSize(all, dim, out)) {
    shape = std::move(*plain);
  } else {
    std::vector<at::Tensor> meta;
    for (const at::Tensor& t : all) {
      meta.push_back(at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)));
    }
    shape = at::cat(meta, dim).sizes().vec();
  }
  if (out.sizes() != c10::IntArrayRef(shape)) {
    const c10::DeviceGuard guard(out.device());
    at::native::resize_output(out, shape);
  }
  at::assert_no_internal_overlap(out);
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
      // nk::concat writes out row by row where the layouts allow; else one copy per part into
      // its narrowed view of out.
      std::vector<std::pair<nk::TensorDesc, nk::TensorDesc>> copies;
      std::vector<nk::TensorDesc> blocks;
      int64_t offset = 0;
      for (const at::Tensor& t : parts) {
        if (t.numel() > 0) {
          copies.emplace_back(describe(out.narrow(d, offset, t.size(d))), describe(t));
          blocks.push_back(copies.back().second);
        }
        offset += t.size(d);
      }
      if (!copies.empty()) {
        launchTask(streamOf(out), "cat",
                   [whole = describe(out), d, blocks = std::move(blocks),
                    copies = std::move(copies)] {
                     if (nk::concat(whole, blocks.data(), static_cast<int>(blocks.size()),
                                    static_cast<int>(d))) {
                       return;
                     }
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

// ---- index_put_ ----------------------------------------------------------------------------

// The shape of self[indices], computed on the meta device. A boolean mask is counted (waiting for
// its stream when it is on the npu) and stands for the long indices nonzero() would give, as
// ATen expands masks.
// nullopt under shadow execution when a mask is among the indices: its count is not known.
std::optional<std::vector<int64_t>> indexingResultShape(
    const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  c10::List<std::optional<at::Tensor>> meta;
  for (const std::optional<at::Tensor>& index : indices.vec()) {
    if (!index || !index->defined()) {
      meta.push_back(std::nullopt);
      continue;
    }
    if (index->scalar_type() == at::kBool || index->scalar_type() == at::kByte) {
      if (shadowExecution()) return std::nullopt;
      const int64_t count = index->count_nonzero().item<int64_t>();
      for (int64_t d = 0; d < index->dim(); ++d) {
        meta.push_back(at::empty({count}, index->options().dtype(at::kLong).device(c10::kMeta)));
      }
      continue;
    }
    meta.push_back(at::empty_strided(index->sizes(), index->strides(),
                                     index->options().device(c10::kMeta)));
  }
  // The indices must broadcast together: ATen's CPU kernel refuses them with IndexError in these
  // words, as torch_npu does (the meta kernel's own message is a RuntimeError).
  std::vector<int64_t> together;
  bool broadcast = true;
  for (const std::optional<at::Tensor>& index : meta.vec()) {
    if (!index) continue;
    const at::IntArrayRef sizes = index->sizes();
    if (together.size() < sizes.size()) together.insert(together.begin(), sizes.size() - together.size(), 1);
    const size_t offset = together.size() - sizes.size();
    for (size_t d = 0; d < sizes.size(); ++d) {
      int64_t& t = together[offset + d];
      if (t == 1) {
        t = sizes[d];
      } else if (sizes[d] != 1 && sizes[d] != t) {
        broadcast = false;
      }
    }
  }
  if (!broadcast) {
    std::ostringstream shapes;
    bool first = true;
    for (const std::optional<at::Tensor>& index : meta.vec()) {
      if (!index) continue;
      shapes << (first ? "" : ", ") << index->sizes();
      first = false;
    }
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together "
                             "with shapes ", shapes.str());
  }
  const at::Tensor meta_self =
      at::empty_strided(self.sizes(), self.strides(), self.options().device(c10::kMeta));
  return at::index(meta_self, meta).sizes().vec();
}

// index_put_ runs as ATen's CPU kernel on the stream; its value-shape check runs here first, so a
// mismatch raises at the call (with the CPU's message) rather than from a later synchronize.
at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values, bool accumulate, bool unsafe) {
  if (self.is_cpu()) {
    // A CPU self with npu indices (the device check lets only the indices be elsewhere): ATen's
    // index_put_ moves its indices to self's device, so the CPU kernel runs, as torch_npu's does.
    c10::List<std::optional<at::Tensor>> cpu_indices;
    for (const std::optional<at::Tensor>& index : indices.vec()) {
      cpu_indices.push_back(index && index->defined() ? std::optional(index->cpu()) : index);
    }
    return at::_index_put_impl_(self, cpu_indices, values, accumulate, unsafe);
  }
  if (values.numel() > 1) {  // one element broadcasts to any result
    const std::optional<std::vector<int64_t>> result = indexingResultShape(self, indices);
    TORCH_CHECK(!result || at::is_expandable_to(values.sizes(), *result),
                "shape mismatch: value tensor of shape ", values.sizes(),
                " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(*result));
  }
  callHostKernel<at::Tensor>(NPU_ATEN_OP("_index_put_impl_", ""), self, indices, values,
                             accumulate, unsafe);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_index_put_impl_", index_put_impl_);
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
}

}  // namespace torch_npu::native
