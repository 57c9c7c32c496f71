// The bodies of the aten kernels the npu device implements natively. RegisterNPU.cpp is the one
// table that binds them to operator names; the bodies live in the files named below.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <c10/core/SymIntArrayRef.h>

#include <optional>
#include <tuple>

namespace torch_npu::native {

// ---- TensorFactories.cpp: allocation, views, storage -----------------------------------------
at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory);
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset);
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size);
at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride);
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step);
at::Tensor view_as_real(const at::Tensor& self);
at::Tensor view_as_complex(const at::Tensor& self);
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format);
at::Tensor& set_source_Storage_(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_Storage_storage_offset_(at::Tensor& self, c10::Storage source,
                                               c10::SymInt storage_offset,
                                               c10::SymIntArrayRef size,
                                               c10::SymIntArrayRef stride);
at::Tensor& set_source_Tensor_(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_(at::Tensor& self);
bool is_set_to(const at::Tensor& self, const at::Tensor& tensor);
bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);
void record_stream(at::Tensor& self, c10::Stream stream);

// ---- Copy.cpp: host <-> device and device <-> device copies ----------------------------------
at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);

// ---- Fill.cpp: fills and reading one element -------------------------------------------------
at::Tensor& fill_Scalar_(at::Tensor& self, const at::Scalar& value);
at::Tensor& fill_Tensor_(at::Tensor& self, const at::Tensor& value);
at::Tensor& zero_(at::Tensor& self);
at::Scalar _local_scalar_dense(const at::Tensor& self);

// ---- Random.cpp: RNG kernels on the device's generator ---------------------------------------
using OptionalGenerator = std::optional<at::Generator>;
at::Tensor& normal_(at::Tensor& self, double mean, double std, OptionalGenerator generator);
at::Tensor& uniform_(at::Tensor& self, double from, double to, OptionalGenerator generator);
at::Tensor& random_(at::Tensor& self, OptionalGenerator generator);
at::Tensor& random_from_(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         OptionalGenerator generator);
at::Tensor& random_to_(at::Tensor& self, int64_t to, OptionalGenerator generator);
at::Tensor& bernoulli_float_(at::Tensor& self, double p, OptionalGenerator generator);
at::Tensor& bernoulli_Tensor_(at::Tensor& self, const at::Tensor& p, OptionalGenerator generator);
at::Tensor bernoulli(const at::Tensor& self, OptionalGenerator generator);
at::Tensor& exponential_(at::Tensor& self, double lambd, OptionalGenerator generator);
at::Tensor& geometric_(at::Tensor& self, double p, OptionalGenerator generator);
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, OptionalGenerator generator);
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, OptionalGenerator generator);
at::Tensor& randperm_generator_out(c10::SymInt n, OptionalGenerator generator, at::Tensor& out);
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train);
at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask,
                                   double scale);

// ---- Convolution.cpp: the backend hooks aten::convolution calls for a non-CPU/CUDA device ---
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation,
                                    bool transposed, at::IntArrayRef output_padding,
                                    int64_t groups);
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask);

}  // namespace torch_npu::native
