// The _foreach_* ops the optimizers use (SGD, Adam/AdamW, ...): one kernel launch for the whole
// list instead of one per tensor. PyTorch's default for a backend without these kernels is a
// loop of per-tensor ops (each a dispatch and a launch); here the host builds every tensor's
// descriptors and one task runs them all in order.
//
// Lists that the fast path does not cover (mixed dtypes or devices, a dtype the library lacks,
// shape mismatches, which the slow path reports) take ATen's per-tensor loop, whose ops are
// our kernels again.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_zero_native.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

// One tensor's work: out = op(a, b or scalar, c).
struct Item {
  nk::TensorDesc out, a, b, c;
  double scalar = 0;  // the per-tensor scalar operand (read through a broadcast descriptor)
};

enum class Form { Unary, BinaryScalar, BinaryList, TernaryScalar, LerpScalar, Zero };

struct Job {
  Form form;
  nk::UnaryOp unary = nk::UnaryOp::Sqrt;
  nk::BinaryOp binary = nk::BinaryOp::Add;
  nk::TernaryOp ternary = nk::TernaryOp::Addcmul;
  nk::DType compute = nk::DType::Float32;
  nk::Scalar p0 = 1;  // alpha / value
  std::vector<Item> items;

  void run() const {
    for (const Item& it : items) {
      const nk::TensorDesc s = nk::TensorDesc::broadcast_scalar(&it.scalar, nk::DType::Float64, it.out);
      switch (form) {
        case Form::Unary: nk::unary(unary, it.out, it.a, compute); break;
        case Form::BinaryScalar: nk::binary(binary, it.out, it.a, s, compute, p0); break;
        case Form::BinaryList: nk::binary(binary, it.out, it.a, it.b, compute, p0); break;
        case Form::TernaryScalar: nk::ternary(ternary, it.out, it.a, it.b, it.c, compute, p0); break;
        case Form::LerpScalar: nk::ternary(nk::TernaryOp::Lerp, it.out, it.a, it.b, s, compute); break;
        case Form::Zero: nk::fill(it.out, nk::Scalar(0.0)); break;
      }
    }
  }
};

// True when every tensor of the lists is a describable npu tensor on one device, of one
// floating dtype, and each list matches the first's shapes, and no tensor of the first list
// (the written one, for the in-place forms) aliases itself or another list's tensor in part:
// the per-tensor loop raises the CPU's overlap errors for those.
bool fastLists(std::initializer_list<at::TensorList> lists) {
  const at::TensorList first = *lists.begin();
  if (first.empty()) return false;
  const at::Tensor& t0 = first[0];
  if (!t0.is_privateuseone() || !at::isFloatingType(t0.scalar_type())) return false;
  for (const at::TensorList& list : lists) {
    if (list.size() != first.size()) return false;
    for (size_t i = 0; i < list.size(); ++i) {
      const at::Tensor& t = list[i];
      if (!t.defined() || t.device() != t0.device() || t.scalar_type() != t0.scalar_type() ||
          !describable(t) || t.sizes() != first[i].sizes()) {
        return false;
      }
      if (&list == lists.begin() ? at::has_internal_overlap(t) != at::MemOverlap::No
                                 : at::get_overlap_status(first[i], t) ==
                                       at::MemOverlapStatus::Partial) {
        return false;
      }
    }
  }
  return nk::binary_supports(nk::BinaryOp::Add, *toKernelDType(t0.scalar_type()));
}

void launch(Job job, const at::Tensor& any, const char* name) {
  if (job.items.empty()) return;
  const c10::DeviceGuard guard(any.device());
  launchTask(getCurrentNPUStream(any.device().index()), name,
             [job = std::move(job)] { job.run(); });
}

Job makeJob(Form form, const at::TensorList self) {
  Job job;
  job.form = form;
  job.compute = *toKernelDType(self[0].scalar_type());
  job.items.reserve(self.size());
  return job;
}

double scalarValue(const at::Scalar& s) { return s.toDouble(); }

// ---- binary with a scalar (or a scalar per tensor) -----------------------------------------

void binaryScalar_(nk::BinaryOp op, at::TensorList self, const at::Scalar* scalar,
                   at::ArrayRef<at::Scalar> scalars, const char* name) {
  Job job = makeJob(Form::BinaryScalar, self);
  job.binary = op;
  for (size_t i = 0; i < self.size(); ++i) {
    Item it;
    it.out = it.a = describe(self[i]);
    it.scalar = scalarValue(scalar ? *scalar : scalars[i]);
    if (self[i].numel() > 0) job.items.push_back(it);
  }
  launch(std::move(job), self[0], name);
}

bool scalarsOk(at::TensorList self, at::ArrayRef<at::Scalar> scalars) {
  if (scalars.size() != self.size()) return false;
  for (const at::Scalar& s : scalars) {
    if (s.isComplex()) return false;
  }
  return true;
}

#define NPU_FOREACH_BINARY_SCALAR(name, OP, slow)                                            \
  void name##_scalar_(at::TensorList self, const at::Scalar& scalar) {                       \
    if (!fastLists({self}) || scalar.isComplex()) {                                          \
      return at::native::foreach_tensor_##slow##_scalar_kernel_slow_(self, scalar);          \
    }                                                                                        \
    binaryScalar_(nk::BinaryOp::OP, self, &scalar, {}, "_foreach_" #name "_");               \
  }                                                                                          \
  void name##_scalarlist_(at::TensorList self, at::ArrayRef<at::Scalar> scalars) {           \
    if (!fastLists({self}) || !scalarsOk(self, scalars)) {                                   \
      return at::native::foreach_tensor_##slow##_scalarlist_kernel_slow_(self, scalars);     \
    }                                                                                        \
    binaryScalar_(nk::BinaryOp::OP, self, nullptr, scalars, "_foreach_" #name "_");          \
  }
NPU_FOREACH_BINARY_SCALAR(add, Add, add)
NPU_FOREACH_BINARY_SCALAR(sub, Sub, sub)
NPU_FOREACH_BINARY_SCALAR(mul, Mul, mul)
NPU_FOREACH_BINARY_SCALAR(div, Div, div)

// ---- binary list-list (add / sub with alpha) ----------------------------------------------

void binaryList_(nk::BinaryOp op, at::TensorList self, at::TensorList other, nk::Scalar alpha,
                 const char* name) {
  Job job = makeJob(Form::BinaryList, self);
  job.binary = op;
  job.p0 = alpha;
  for (size_t i = 0; i < self.size(); ++i) {
    Item it;
    it.out = it.a = describe(self[i]);
    it.b = describe(other[i]);
    if (self[i].numel() > 0) job.items.push_back(it);
  }
  launch(std::move(job), self[0], name);
}

void add_list_(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
  if (!fastLists({self, other}) || alpha.isComplex()) {
    return at::native::foreach_tensor_add_list_kernel_slow_(self, other, alpha);
  }
  binaryList_(nk::BinaryOp::Add, self, other, toKernelScalar(alpha), "_foreach_add_");
}
void sub_list_(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
  if (!fastLists({self, other}) || alpha.isComplex()) {
    return at::native::foreach_tensor_sub_list_kernel_slow_(self, other, alpha);
  }
  binaryList_(nk::BinaryOp::Sub, self, other, toKernelScalar(alpha), "_foreach_sub_");
}
void mul_list_(at::TensorList self, at::TensorList other) {
  if (!fastLists({self, other})) {
    return at::native::foreach_tensor_mul_list_kernel_slow_(self, other);
  }
  binaryList_(nk::BinaryOp::Mul, self, other, 1, "_foreach_mul_");
}
void div_list_(at::TensorList self, at::TensorList other) {
  if (!fastLists({self, other})) {
    return at::native::foreach_tensor_div_list_kernel_slow_(self, other);
  }
  binaryList_(nk::BinaryOp::Div, self, other, 1, "_foreach_div_");
}

// ---- addcmul / addcdiv / lerp ---------------------------------------------------------------

void ternary_(nk::TernaryOp op, at::TensorList self, at::TensorList t1, at::TensorList t2,
              const at::Scalar* value, at::ArrayRef<at::Scalar> values, const char* name) {
  // One value for the list is the kernel's p0; a value per tensor means a job per tensor.
  if (value) {
    Job job = makeJob(Form::TernaryScalar, self);
    job.ternary = op;
    job.p0 = toKernelScalar(*value);
    for (size_t i = 0; i < self.size(); ++i) {
      Item it;
      it.out = it.a = describe(self[i]);
      it.b = describe(t1[i]);
      it.c = describe(t2[i]);
      if (self[i].numel() > 0) job.items.push_back(it);
    }
    launch(std::move(job), self[0], name);
    return;
  }
  std::vector<Job> jobs;
  for (size_t i = 0; i < self.size(); ++i) {
    if (self[i].numel() == 0) continue;
    Job job = makeJob(Form::TernaryScalar, self);
    job.ternary = op;
    job.p0 = toKernelScalar(values[i]);
    Item it;
    it.out = it.a = describe(self[i]);
    it.b = describe(t1[i]);
    it.c = describe(t2[i]);
    job.items.push_back(it);
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) return;
  const c10::DeviceGuard guard(self[0].device());
  launchTask(getCurrentNPUStream(self[0].device().index()), name, [jobs = std::move(jobs)] {
    for (const Job& j : jobs) j.run();
  });
}

#define NPU_FOREACH_ADDC(name, OP)                                                           \
  void name##_scalar_(at::TensorList self, at::TensorList t1, at::TensorList t2,             \
                      const at::Scalar& value) {                                             \
    if (!fastLists({self, t1, t2}) || value.isComplex()) {                                   \
      return at::native::foreach_tensor_##name##_scalar_slow_(self, t1, t2, value);          \
    }                                                                                        \
    ternary_(nk::TernaryOp::OP, self, t1, t2, &value, {}, "_foreach_" #name "_");            \
  }                                                                                          \
  void name##_scalarlist_(at::TensorList self, at::TensorList t1, at::TensorList t2,         \
                          at::ArrayRef<at::Scalar> values) {                                 \
    if (!fastLists({self, t1, t2}) || !scalarsOk(self, values)) {                            \
      return at::native::foreach_tensor_##name##_scalarlist_slow_(self, t1, t2, values);     \
    }                                                                                        \
    ternary_(nk::TernaryOp::OP, self, t1, t2, nullptr, values, "_foreach_" #name "_");       \
  }
NPU_FOREACH_ADDC(addcmul, Addcmul)
NPU_FOREACH_ADDC(addcdiv, Addcdiv)

void lerp_scalar_(at::TensorList self, at::TensorList end, const at::Scalar& weight) {
  if (!fastLists({self, end}) || weight.isComplex()) {
    return at::native::foreach_tensor_lerp_list_kernel_slow_(self, end, weight);
  }
  Job job = makeJob(Form::LerpScalar, self);
  for (size_t i = 0; i < self.size(); ++i) {
    Item it;
    it.out = it.a = describe(self[i]);
    it.b = describe(end[i]);
    it.scalar = weight.toDouble();
    if (self[i].numel() > 0) job.items.push_back(it);
  }
  launch(std::move(job), self[0], "_foreach_lerp_");
}

// ---- unary --------------------------------------------------------------------------------

void unaryInto(nk::UnaryOp op, at::TensorList out, at::TensorList self, const char* name) {
  Job job = makeJob(Form::Unary, self);
  job.unary = op;
  for (size_t i = 0; i < self.size(); ++i) {
    Item it;
    it.out = describe(out[i]);
    it.a = describe(self[i]);
    if (self[i].numel() > 0) job.items.push_back(it);
  }
  launch(std::move(job), self[0], name);
}

void sqrt_(at::TensorList self) {
  if (!fastLists({self})) return at::native::foreach_tensor_sqrt_slow_(self);
  unaryInto(nk::UnaryOp::Sqrt, self, self, "_foreach_sqrt_");
}
std::vector<at::Tensor> sqrt(at::TensorList self) {
  if (!fastLists({self})) return at::native::foreach_tensor_sqrt_slow(self);
  std::vector<at::Tensor> out;
  out.reserve(self.size());
  for (const at::Tensor& t : self) out.push_back(at::empty_like(t));
  unaryInto(nk::UnaryOp::Sqrt, out, self, "_foreach_sqrt");
  return out;
}
void neg_(at::TensorList self) {
  if (!fastLists({self})) return at::native::foreach_tensor_neg_slow_(self);
  unaryInto(nk::UnaryOp::Neg, self, self, "_foreach_neg_");
}
void zero_(at::TensorList self) {
  if (!fastLists({self})) return at::native::foreach_tensor_zero_slow_(self);
  Job job = makeJob(Form::Zero, self);
  for (const at::Tensor& t : self) {
    Item it;
    it.out = describe(t);
    if (t.numel() > 0) job.items.push_back(it);
  }
  launch(std::move(job), self[0], "_foreach_zero_");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "_foreach_add_.Scalar", add_scalar_);
  NPU_IMPL(m, "_foreach_add_.ScalarList", add_scalarlist_);
  NPU_IMPL(m, "_foreach_add_.List", add_list_);
  NPU_IMPL(m, "_foreach_sub_.Scalar", sub_scalar_);
  NPU_IMPL(m, "_foreach_sub_.ScalarList", sub_scalarlist_);
  NPU_IMPL(m, "_foreach_sub_.List", sub_list_);
  NPU_IMPL(m, "_foreach_mul_.Scalar", mul_scalar_);
  NPU_IMPL(m, "_foreach_mul_.ScalarList", mul_scalarlist_);
  NPU_IMPL(m, "_foreach_mul_.List", mul_list_);
  NPU_IMPL(m, "_foreach_div_.Scalar", div_scalar_);
  NPU_IMPL(m, "_foreach_div_.ScalarList", div_scalarlist_);
  NPU_IMPL(m, "_foreach_div_.List", div_list_);
  NPU_IMPL(m, "_foreach_addcmul_.Scalar", addcmul_scalar_);
  NPU_IMPL(m, "_foreach_addcmul_.ScalarList", addcmul_scalarlist_);
  NPU_IMPL(m, "_foreach_addcdiv_.Scalar", addcdiv_scalar_);
  NPU_IMPL(m, "_foreach_addcdiv_.ScalarList", addcdiv_scalarlist_);
  NPU_IMPL(m, "_foreach_lerp_.Scalar", lerp_scalar_);
  NPU_IMPL(m, "_foreach_sqrt_", sqrt_);
  NPU_IMPL(m, "_foreach_sqrt", sqrt);
  NPU_IMPL(m, "_foreach_neg_", neg_);
  NPU_IMPL(m, "_foreach_zero_", zero_);
}

}  // namespace torch_npu::native
