// mm, addmm, bmm, baddbmm (and so matmul, linear, einsum's paths) and the vector products mv,
// addmv and dot on the library's GEMM (a vector is a one-column or one-row matrix view).
// Transposed operands need no copy: a descriptor with swapped strides is a transposed matrix.
// float32 operands are read as HF32 when torch.npu.matmul.allow_hf32 is set (KernelBridge.h).
// Integer matmul, mismatched dtypes and bad shapes go to ATen's CPU kernel, which computes the
// former and reports the latter with PyTorch's messages (dtype errors at the call, see
// raiseDtypeErrorNow).
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/addmv.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "DeviceCheck.h"
#include "ExecutionPaths.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

// Mixed dtypes go to ATen's CPU kernel, which runs later on the stream: its dtype error would
// only surface at the next synchronize, naming the task. So when the dtypes differ, the CPU
// kernel is asked now, on one-element stand-ins of the same dtypes and ranks, and the call
// raises PyTorch's own message (or goes on, for the mixes the CPU accepts).
at::Tensor standIn(const at::Tensor& t) {
  return at::zeros(std::vector<int64_t>(t.dim(), 1), t.options().device(at::kCPU));
}
template <typename CpuCall>
void raiseDtypeErrorNow(std::initializer_list<const at::Tensor*> tensors, CpuCall cpu_call) {
  const c10::ScalarType first = (*tensors.begin())->scalar_type();
  for (const at::Tensor* t : tensors) {
    if (t->scalar_type() != first) {
      cpu_call();
      return;
    }
  }
}

bool gemmOk(const at::Tensor& a, const at::Tensor& b, int dims) {
  if (a.dim() != dims || b.dim() != dims || !describable(a) || !describable(b)) return false;
  if (a.scalar_type() != b.scalar_type()) return false;
  const nk::DType t = *toKernelDType(a.scalar_type());
  if (!nk::gemm_supports(t, t, t)) return false;
  if (dims == 3 && a.size(0) != b.size(0)) return false;
  return a.size(dims - 1) == b.size(dims - 2);
}

// out (already sized [.., M, N]) = alpha * a @ b + beta * self (self broadcast; null: none).
// An out that shares memory with a or b (mm(a, b, out=a)) would be read after being written:
// the product goes to a temporary that the task then copies into out, so the result is the
// product (ATen's CPU kernel accepts these calls too, with a result that depends on its loop
// order). An out whose elements alias each other is refused, as on the CPU.
void launchGemm(const at::Tensor& out, const at::Tensor* self, const at::Tensor& a,
                const at::Tensor& b, double alpha, double beta, bool batched, const char* name,
                bool follows_hf32 = true) {
  at::assert_no_internal_overlap(out);
  if (out.numel() == 0) return;
  const bool aliased = at::get_overlap_status(out, a) != at::MemOverlapStatus::No ||
                       at::get_overlap_status(out, b) != at::MemOverlapStatus::No;
  const at::Tensor target = aliased ? at::empty(out.sizes(), out.options()) : out;
  std::optional<nk::TensorDesc> init;
  if (self != nullptr && beta != 0.0 && !self->is_same(target)) {
    init = describe(self->expand(out.sizes()));
  }
  std::optional<nk::TensorDesc> result;
  if (aliased) result = describe(out);
  if (self == nullptr) beta = 0.0;
  // torch.npu.matmul.allow_hf32, as it is when the op is called.
  const nk::CubeMath math = follows_hf32 ? cubeMath(CubeFamily::kMatmul, a.scalar_type())
                                         : nk::CubeMath::KeepDtype;
  // Work in elementwise-op units: a multiply-add of a vectorised GEMM costs ~1/32 of one.
  const int64_t work = out.numel() * a.size(-1) / 32;
  launchKernelTask(getCurrentNPUStream(out.device().index()), name, work,
                   [c = describe(target), x = describe(a), y = describe(b), init, result, alpha,
                    beta, batched, math] {
                     if (init) nk::copy(c, *init);
                     if (batched) {
                       nk::gemm_batched(c, x, y, alpha, beta, math);
                     } else {
                       nk::gemm(c, x, y, alpha, beta, math);
                     }
                     if (result) nk::copy(*result, c);
                   });
}

at::Tensor& sizedOut(at::Tensor& out, std::vector<int64_t> shape) {
  at::native::resize_output(out, shape);
  return out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  raiseDtypeErrorNow({&self, &mat2}, [&] { at::mm(standIn(self), standIn(mat2)); });
  if (!gemmOk(self, mat2, 2)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("mm", ""), self, mat2);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty({self.size(0), mat2.size(1)}, self.options());
  launchGemm(out, nullptr, self, mat2, 1.0, 0.0, false, "mm");
  return out;
}
at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  raiseDtypeErrorNow({&self, &mat2, &out}, [&] {
    at::Tensor o = standIn(out);
    at::mm_out(o, standIn(self), standIn(mat2));
  });
  if (!gemmOk(self, mat2, 2) || out.scalar_type() != self.scalar_type() || !describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("mm", "out"), self, mat2, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  launchGemm(sizedOut(out, {self.size(0), mat2.size(1)}), nullptr, self, mat2, 1.0, 0.0, false,
             "mm");
  return out;
}

bool addOk(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, int dims,
           const at::Scalar& beta, const at::Scalar& alpha) {
  if (!gemmOk(a, b, dims) || self.scalar_type() != a.scalar_type() || !describable(self)) {
    return false;
  }
  if (beta.isComplex() || alpha.isComplex()) return false;
  std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end() - 1);
  shape.push_back(b.size(-1));
  return at::is_expandable_to(self.sizes(), shape);
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  raiseDtypeErrorNow({&self, &m1, &m2},
                     [&] { at::addmm(standIn(self), standIn(m1), standIn(m2), beta, alpha); });
  if (!addOk(self, m1, m2, 2, beta, alpha)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("addmm", ""), self, m1, m2, beta, alpha);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty({m1.size(0), m2.size(1)}, m1.options());
  launchGemm(out, &self, m1, m2, alpha.toDouble(), beta.toDouble(), false, "addmm");
  return out;
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  raiseDtypeErrorNow({&self, &m1, &m2, &out}, [&] {
    at::Tensor o = standIn(out);
    at::addmm_out(o, standIn(self), standIn(m1), standIn(m2), beta, alpha);
  });
  if (!addOk(self, m1, m2, 2, beta, alpha) || out.scalar_type() != m1.scalar_type() ||
      !describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("addmm", "out"), self, m1, m2, beta, alpha, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  if (!out.is_same(self)) sizedOut(out, {m1.size(0), m2.size(1)});
  launchGemm(out, &self, m1, m2, alpha.toDouble(), beta.toDouble(), false, "addmm");
  return out;
}
at::Tensor& addmm_(at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  TORCH_CHECK(self.dim() == 2 && self.size(0) == m1.size(0) && self.size(1) == m2.size(1),
              "addmm_: self must be a [", m1.size(0), ", ", m2.size(1), "] matrix, got ",
              self.sizes());
  return addmm_out(self, m1, m2, beta, alpha, self);
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  raiseDtypeErrorNow({&self, &mat2}, [&] { at::bmm(standIn(self), standIn(mat2)); });
  if (!gemmOk(self, mat2, 3)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("bmm", ""), self, mat2);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty({self.size(0), self.size(1), mat2.size(2)}, self.options());
  launchGemm(out, nullptr, self, mat2, 1.0, 0.0, true, "bmm");
  return out;
}
at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  raiseDtypeErrorNow({&self, &mat2, &out}, [&] {
    at::Tensor o = standIn(out);
    at::bmm_out(o, standIn(self), standIn(mat2));
  });
  if (!gemmOk(self, mat2, 3) || out.scalar_type() != self.scalar_type() || !describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("bmm", "out"), self, mat2, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  launchGemm(sizedOut(out, {self.size(0), self.size(1), mat2.size(2)}), nullptr, self, mat2, 1.0,
             0.0, true, "bmm");
  return out;
}

at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  raiseDtypeErrorNow({&self, &b1, &b2},
                     [&] { at::baddbmm(standIn(self), standIn(b1), standIn(b2), beta, alpha); });
  if (!addOk(self, b1, b2, 3, beta, alpha)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("baddbmm", ""), self, b1, b2, beta, alpha);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty({b1.size(0), b1.size(1), b2.size(2)}, b1.options());
  launchGemm(out, &self, b1, b2, alpha.toDouble(), beta.toDouble(), true, "baddbmm");
  return out;
}
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  raiseDtypeErrorNow({&self, &b1, &b2, &out}, [&] {
    at::Tensor o = standIn(out);
    at::baddbmm_out(o, standIn(self), standIn(b1), standIn(b2), beta, alpha);
  });
  if (!addOk(self, b1, b2, 3, beta, alpha) || out.scalar_type() != b1.scalar_type() ||
      !describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("baddbmm", "out"), self, b1, b2, beta, alpha, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  if (!out.is_same(self)) sizedOut(out, {b1.size(0), b1.size(1), b2.size(2)});
  launchGemm(out, &self, b1, b2, alpha.toDouble(), beta.toDouble(), true, "baddbmm");
  return out;
}
at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  TORCH_CHECK(self.dim() == 3 && self.size(0) == b1.size(0) && self.size(1) == b1.size(1) &&
                  self.size(2) == b2.size(2),
              "baddbmm_: self must be a [", b1.size(0), ", ", b1.size(1), ", ", b2.size(2),
              "] batch, got ", self.sizes());
  return baddbmm_out(self, b1, b2, beta, alpha, self);
}

// ---- matrix-vector and vector-vector products -------------------------------------------------
// The same GEMM (and so the same torch.npu.matmul.allow_hf32 rounding, but for dot, and float32
// accumulation) on views: mv's vector is a [K, 1] matrix and its result an [M, 1] one; dot is [1, K] @ [K, 1].
// Shapes and dtypes the GEMM does not take go to ATen's CPU kernel, which reports bad ones.

bool mvOk(const at::Tensor& mat, const at::Tensor& vec) {
  return mat.dim() == 2 && vec.dim() == 1 && gemmOk(mat, vec.unsqueeze(1), 2);
}

bool addmvOk(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
             const at::Scalar& beta, const at::Scalar& alpha) {
  if (!mvOk(mat, vec) || self.scalar_type() != mat.scalar_type() || !describable(self)) {
    return false;
  }
  if (beta.isComplex() || alpha.isComplex()) return false;
  return self.dim() <= 1 && at::is_expandable_to(self.sizes(), {mat.size(0)});
}

at::Tensor mv(const at::Tensor& self, const at::Tensor& vec) {
  raiseDtypeErrorNow({&self, &vec}, [&] { at::mv(standIn(self), standIn(vec)); });
  if (!mvOk(self, vec)) return callHostKernel<at::Tensor>(NPU_ATEN_OP("mv", ""), self, vec);
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty({self.size(0)}, self.options());
  launchGemm(out.unsqueeze(1), nullptr, self, vec.unsqueeze(1), 1.0, 0.0, false, "mv");
  return out;
}
at::Tensor& mv_out(const at::Tensor& self, const at::Tensor& vec, at::Tensor& out) {
  raiseDtypeErrorNow({&self, &vec, &out}, [&] {
    at::Tensor o = standIn(out);
    at::mv_out(o, standIn(self), standIn(vec));
  });
  if (!mvOk(self, vec) || out.scalar_type() != self.scalar_type() || !describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("mv", "out"), self, vec, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  launchGemm(sizedOut(out, {self.size(0)}).unsqueeze(1), nullptr, self, vec.unsqueeze(1), 1.0,
             0.0, false, "mv");
  return out;
}

at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  raiseDtypeErrorNow({&self, &mat, &vec},
                     [&] { at::addmv(standIn(self), standIn(mat), standIn(vec), beta, alpha); });
  if (!addmvOk(self, mat, vec, beta, alpha)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("addmv", ""), self, mat, vec, beta, alpha);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty({mat.size(0)}, mat.options());
  const at::Tensor self_col = self.dim() == 0 ? self.view({1, 1}) : self.unsqueeze(1);
  launchGemm(out.unsqueeze(1), &self_col, mat, vec.unsqueeze(1), alpha.toDouble(),
             beta.toDouble(), false, "addmv");
  return out;
}
at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  raiseDtypeErrorNow({&self, &mat, &vec, &out}, [&] {
    at::Tensor o = standIn(out);
    at::addmv_out(o, standIn(self), standIn(mat), standIn(vec), beta, alpha);
  });
  if (!addmvOk(self, mat, vec, beta, alpha) || out.scalar_type() != mat.scalar_type() ||
      !describable(out)) {
    callHostKernel<at::Tensor>(NPU_ATEN_OP("addmv", "out"), self, mat, vec, beta, alpha, out);
    return out;
  }
  const c10::DeviceGuard guard(self.device());
  if (!out.is_same(self)) sizedOut(out, {mat.size(0)});
  // In place (addmv_) `self` is the output itself: launchGemm then reads it as C (beta * C).
  const at::Tensor self_col = out.is_same(self) ? out.unsqueeze(1)
                              : self.dim() == 0 ? self.view({1, 1})
                                                : self.unsqueeze(1);
  const at::Tensor out_col = out.unsqueeze(1);
  launchGemm(out_col, out.is_same(self) ? &out_col : &self_col, mat, vec.unsqueeze(1),
             alpha.toDouble(), beta.toDouble(), false, "addmv");
  return out;
}
at::Tensor& addmv_(at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  TORCH_CHECK(self.dim() == 1 && mat.dim() == 2 && self.size(0) == mat.size(0),
              "addmv_: self must be a vector with one element per row of the matrix mat, got "
              "self of shape ", self.sizes(), " and mat of shape ", mat.sizes());
  return addmv_out(self, mat, vec, beta, alpha, self);
}

at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
  raiseDtypeErrorNow({&self, &other}, [&] { at::dot(standIn(self), standIn(other)); });
  if (self.dim() != 1 || other.dim() != 1 ||
      !gemmOk(self.unsqueeze(0), other.unsqueeze(1), 2)) {
    return callHostKernel<at::Tensor>(NPU_ATEN_OP("dot", ""), self, other);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty({}, self.options());
  // Not under allow_hf32: the card's dot is the aclop Dot kernel, which op-plugin gives no cube
  // math type (DotKernelNpu.cpp), unlike mv and addmv; it stays float32 with the flag on.
  launchGemm(out.view({1, 1}), nullptr, self.unsqueeze(0), other.unsqueeze(1), 1.0, 0.0, false,
             "dot", /*follows_hf32=*/false);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  NPU_IMPL(m, "mm", mm);
  NPU_IMPL(m, "mm.out", mm_out);
  NPU_IMPL(m, "addmm", addmm);
  NPU_IMPL(m, "addmm.out", addmm_out);
  NPU_IMPL(m, "addmm_", addmm_);
  NPU_IMPL(m, "bmm", bmm);
  NPU_IMPL(m, "bmm.out", bmm_out);
  NPU_IMPL(m, "baddbmm", baddbmm);
  NPU_IMPL(m, "baddbmm.out", baddbmm_out);
  NPU_IMPL(m, "baddbmm_", baddbmm_);
  NPU_IMPL(m, "mv", mv);
  NPU_IMPL(m, "mv.out", mv_out);
  NPU_IMPL(m, "addmv", addmv);
  NPU_IMPL(m, "addmv.out", addmv_out);
  NPU_IMPL(m, "addmv_", addmv_);
  NPU_IMPL(m, "dot", dot);
}

}  // namespace torch_npu::native
