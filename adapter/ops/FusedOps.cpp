// torch_npu's fused LLM ops (npu_rms_norm, npu_add_rms_norm, npu_rotary_mul,
// npu_apply_rotary_pos_emb, npu_swiglu and their backward ops) on the library's kernels, and
// the ACL storage format as a tensor property (npu_format_cast / get_npu_format).
#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>

#include "DeviceCheck.h"
#include "KernelBridge.h"
#include "NPUStream.h"

namespace torch_npu::native {
namespace {

void checkNpuFloat(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op, ": ", name,
              " must be an npu tensor, got one on ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf ||
                  t.scalar_type() == at::kBFloat16,
              op, ": ", name, " must be float32, float16 or bfloat16, got ", t.scalar_type());
  TORCH_CHECK(describable(t), op, ": ", name, " has more than ", nk::kMaxDims, " dims");
}

// ---- rms norm -------------------------------------------------------------------------------

int64_t checkGamma(const at::Tensor& x, const at::Tensor& gamma, const char* op) {
  const int64_t k = gamma.dim();
  TORCH_CHECK(k >= 1 && k <= x.dim(), op, ": gamma must have 1 to ", x.dim(), " dims, got ",
              gamma.sizes());
  TORCH_CHECK(x.sizes().slice(x.dim() - k) == gamma.sizes(), op, ": gamma of shape ",
              gamma.sizes(), " must match the last dims of x ", x.sizes());
  return k;
}

std::vector<int64_t> rstdShape(const at::Tensor& x, int64_t k) {
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end() - k);
  s.resize(x.dim(), 1);
  return s;
}

std::tuple<at::Tensor, at::Tensor> npu_rms_norm(const at::Tensor& self, const at::Tensor& gamma,
                                                double epsilon) {
  checkNpuFloat(self, "npu_rms_norm", "self");
  checkNpuFloat(gamma, "npu_rms_norm", "gamma");
  const int64_t k = checkGamma(self, gamma, "npu_rms_norm");
  const c10::DeviceGuard guard(self.device());
  at::Tensor y = at::empty(self.sizes(), self.options());
  at::Tensor rstd = at::empty(rstdShape(self, k), self.options().dtype(at::kFloat));
  if (self.numel() == 0) return {y, rstd};
  launchTask(streamOf(self), "npu_rms_norm",
             [o = describe(y), r = describe(rstd), x = describe(self), g = describe(gamma),
              k = static_cast<int>(k), epsilon] { nk::rms_norm(o, r, x, &g, k, epsilon); });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> npu_rms_norm_backward(const at::Tensor& dy,
                                                         const at::Tensor& self,
                                                         const at::Tensor& gamma,
                                                         const at::Tensor& rstd) {
  for (auto [t, n] : {std::pair{&dy, "dy"}, std::pair{&self, "self"}, std::pair{&gamma, "gamma"},
                      std::pair{&rstd, "rstd"}}) {
    checkNpuFloat(*t, "npu_rms_norm_backward", n);
  }
  const int64_t k = checkGamma(self, gamma, "npu_rms_norm_backward");
  TORCH_CHECK(dy.sizes() == self.sizes(), "npu_rms_norm_backward: dy ", dy.sizes(),
              " must have self's shape ", self.sizes());
  TORCH_CHECK(rstd.numel() * gamma.numel() == self.numel(), "npu_rms_norm_backward: rstd must ",
              "hold one value per row of self, got shape ", rstd.sizes());
  const c10::DeviceGuard guard(self.device());
  at::Tensor dx = at::empty(self.sizes(), self.options());
  at::Tensor dgamma = at::empty(gamma.sizes(), gamma.options());
  if (self.numel() == 0) return {dx, dgamma.zero_()};
  launchTask(streamOf(self), "npu_rms_norm_backward",
             [gx = describe(dx), gg = describe(dgamma), g = describe(dy), x = describe(self),
              r = describe(rstd), w = describe(gamma), k = static_cast<int>(k)] {
               nk::rms_norm_backward(&gx, &gg, g, x, r, &w, k);
             });
  return {dx, dgamma};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_add_rms_norm(const at::Tensor& x1,
                                                                const at::Tensor& x2,
                                                                const at::Tensor& gamma,
                                                                double epsilon) {
  checkNpuFloat(x1, "npu_add_rms_norm", "x1");
  checkNpuFloat(x2, "npu_add_rms_norm", "x2");
  checkNpuFloat(gamma, "npu_add_rms_norm", "gamma");
  TORCH_CHECK(x1.sizes() == x2.sizes(), "npu_add_rms_norm: x1 ", x1.sizes(), " and x2 ",
              x2.sizes(), " must have the same shape");
  const int64_t k = checkGamma(x1, gamma, "npu_add_rms_norm");
  const c10::DeviceGuard guard(x1.device());
  at::Tensor y = at::empty(x1.sizes(), x1.options());
  at::Tensor x = at::empty(x1.sizes(), x1.options());
  at::Tensor rstd = at::empty(rstdShape(x1, k), x1.options().dtype(at::kFloat));
  if (x1.numel() == 0) return {y, rstd, x};
  launchTask(streamOf(x1), "npu_add_rms_norm",
             [o = describe(y), r = describe(rstd), xo = describe(x), a = describe(x1),
              b = describe(x2), g = describe(gamma), k = static_cast<int>(k), epsilon] {
               nk::add_rms_norm(o, r, xo, a, b, g, k, epsilon);
             });
  return {y, rstd, x};
}

// ---- rotary ---------------------------------------------------------------------------------

nk::RotaryMode rotaryMode(c10::string_view mode, const char* op) {
  if (mode == "half") return nk::RotaryMode::Half;
  if (mode == "interleave") return nk::RotaryMode::Interleave;
  TORCH_CHECK(false, op, ": rotary_mode must be 'half' or 'interleave', got '", std::string(mode),
              "'");
  return nk::RotaryMode::Half;  // not reached
}

void checkRotary(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2,
                 const char* op) {
  checkNpuFloat(x, op, "self");
  checkNpuFloat(r1, op, "r1");
  checkNpuFloat(r2, op, "r2");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, op, ": the last dim of x must be even, got ",
              x.sizes());
  TORCH_CHECK(at::is_expandable_to(r1.sizes(), x.sizes()) &&
                  at::is_expandable_to(r2.sizes(), x.sizes()),
              op, ": r1 ", r1.sizes(), " and r2 ", r2.sizes(), " must broadcast to x ",
              x.sizes());
}

at::Tensor npu_rotary_mul(const at::Tensor& self, const at::Tensor& r1, const at::Tensor& r2,
                          c10::string_view rotary_mode) {
  checkRotary(self, r1, r2, "npu_rotary_mul");
  const nk::RotaryMode mode = rotaryMode(rotary_mode, "npu_rotary_mul");
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return out;
  launchTask(streamOf(self), "npu_rotary_mul",
             [o = describe(out), x = describe(self), a = describe(r1.expand(self.sizes())),
              b = describe(r2.expand(self.sizes())), mode] { nk::rotary_mul(o, x, a, b, mode); });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_rotary_mul_backward(
    const at::Tensor& grad, const at::Tensor& self, const at::Tensor& r1, const at::Tensor& r2,
    c10::string_view rotary_mode) {
  checkRotary(self, r1, r2, "npu_rotary_mul_backward");
  checkNpuFloat(grad, "npu_rotary_mul_backward", "grad");
  TORCH_CHECK(grad.sizes() == self.sizes(), "npu_rotary_mul_backward: grad ", grad.sizes(),
              " must have self's shape ", self.sizes());
  const nk::RotaryMode mode = rotaryMode(rotary_mode, "npu_rotary_mul_backward");
  const c10::DeviceGuard guard(self.device());
  at::Tensor dx = at::empty(self.sizes(), self.options());
  // r1 / r2 grads in x's shape and float32, summed over the broadcast dims afterwards (with
  // the reduction kernel) and rounded once.
  const bool full1 = r1.sizes() == self.sizes() && r1.scalar_type() == at::kFloat;
  const bool full2 = r2.sizes() == self.sizes() && r2.scalar_type() == at::kFloat;
  at::Tensor d1 = at::empty(self.sizes(), self.options().dtype(at::kFloat));
  at::Tensor d2 = at::empty(self.sizes(), self.options().dtype(at::kFloat));
  if (self.numel() > 0) {
    launchTask(streamOf(self), "npu_rotary_mul_backward",
               [gx = describe(dx), g1 = describe(d1), g2 = describe(d2), g = describe(grad),
                x = describe(self), a = describe(r1.expand(self.sizes())),
                b = describe(r2.expand(self.sizes())), mode] {
                 nk::rotary_mul_backward(&gx, &g1, &g2, g, x, a, b, mode);
               });
  }
  at::Tensor dr1 = full1 ? d1 : d1.sum_to_size(r1.sizes()).to(r1.scalar_type());
  at::Tensor dr2 = full2 ? d2 : d2.sum_to_size(r2.sizes()).to(r2.scalar_type());
  return {dx, dr1, dr2};
}

std::tuple<at::Tensor&, at::Tensor&> npu_apply_rotary_pos_emb(at::Tensor& query, at::Tensor& key,
                                                              const at::Tensor& cos,
                                                              const at::Tensor& sin,
                                                              c10::string_view layout,
                                                              c10::string_view rotary_mode) {
  const std::string l(layout);
  TORCH_CHECK(l == "BSND" || l == "BSH" || l == "SBND" || l == "BNSD",
              "npu_apply_rotary_pos_emb: The layout should be BSND/BSH/BNSD/SBND, but got ", l);
  // torch_npu takes 'BSH' as the BSND arrangement (one layout code for both): 4-D [B, S, N, D]
  // tensors, or here also 3-D [B, S, N * D] ones, split into heads of cos's last dim D.
  auto heads = [&](at::Tensor& t, const char* name) -> at::Tensor {
    if (l == "BSH" && t.dim() == 3) {
      const int64_t d = cos.size(-1);
      TORCH_CHECK(d > 0 && t.size(2) % d == 0, "npu_apply_rotary_pos_emb: the hidden size ",
                  t.size(2), " of ", name, " is not a multiple of cos's last dim ", d);
      TORCH_CHECK(cos.dim() == 3 || cos.dim() == 4, "npu_apply_rotary_pos_emb: with 3-D (BSH) ",
                  name, ", cos and sin must be [B|1, S, D] or [B|1, S, 1, D], got ", cos.sizes());
      return t.view({t.size(0), t.size(1), t.size(2) / d, d});
    }
    TORCH_CHECK(t.dim() == 4, "npu_apply_rotary_pos_emb: ", name, " must be 4-D (", l,
                l == "BSH" ? ", or 3-D [B, S, H]" : "", "), got ", t.sizes());
    return t;
  };
  at::Tensor q4 = heads(query, "query"), k4 = heads(key, "key");
  // [B|1, S, D] cos / sin of a 3-D (BSH) call broadcast over the heads.
  const at::Tensor c4 = cos.dim() == 3 ? cos.unsqueeze(2) : cos;
  const at::Tensor s4 = sin.dim() == 3 ? sin.unsqueeze(2) : sin;
  const nk::RotaryMode mode = rotaryMode(rotary_mode, "npu_apply_rotary_pos_emb");
  checkRotary(q4, c4, s4, "npu_apply_rotary_pos_emb");
  checkRotary(k4, c4, s4, "npu_apply_rotary_pos_emb");
  const c10::DeviceGuard guard(query.device());
  for (at::Tensor* t : {&q4, &k4}) {
    if (t->numel() == 0) continue;
    // In place: the kernel reads each row before it writes it.
    launchTask(streamOf(*t), "npu_apply_rotary_pos_emb",
               [o = describe(*t), a = describe(c4.expand(t->sizes())),
                b = describe(s4.expand(t->sizes())), mode] { nk::rotary_mul(o, o, a, b, mode); });
  }
  return {query, key};
}

// ---- swiglu ---------------------------------------------------------------------------------

// x (contiguous) as [M, 2, K] around `dim`: the two halves are [:, 0, :] and [:, 1, :].
at::Tensor halves(const at::Tensor& x, int64_t dim) {
  int64_t m = 1, k = 1;
  for (int64_t d = 0; d < dim; ++d) m *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) k *= x.size(d);
  return x.view({m, 2, x.size(dim) / 2 * k});
}

int64_t swigluDim(const at::Tensor& x, int64_t dim, const char* op) {
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dim");
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());
  TORCH_CHECK(x.size(d) % 2 == 0, op, ": the size of dim ", dim, " must be even, got ",
              x.sizes());
  return d;
}

at::Tensor npu_swiglu(const at::Tensor& self, int64_t dim) {
  checkNpuFloat(self, "npu_swiglu", "self");
  const int64_t d = swigluDim(self, dim, "npu_swiglu");
  const c10::DeviceGuard guard(self.device());
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[d] /= 2;
  at::Tensor out = at::empty(shape, self.options());
  if (out.numel() == 0) return out;
  const at::Tensor x3 = halves(self.contiguous(), d);
  launchTask(streamOf(self), "npu_swiglu",
             [o = describe(out.view({x3.size(0), x3.size(2)})), a = describe(x3.select(1, 0)),
              b = describe(x3.select(1, 1))] { nk::swiglu(o, a, b); });
  return out;
}

at::Tensor npu_swiglu_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               int64_t dim) {
  checkNpuFloat(self, "npu_swiglu_backward", "self");
  checkNpuFloat(grad_output, "npu_swiglu_backward", "grad_output");
  const int64_t d = swigluDim(self, dim, "npu_swiglu_backward");
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[d] /= 2;
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(shape), "npu_swiglu_backward: grad_output ",
              grad_output.sizes(), " must have the output's shape ", at::IntArrayRef(shape));
  const c10::DeviceGuard guard(self.device());
  at::Tensor dx = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return dx;
  const at::Tensor x3 = halves(self.contiguous(), d), g3 = halves(dx, d);
  launchTask(streamOf(self), "npu_swiglu_backward",
             [ga = describe(g3.select(1, 0)), gb = describe(g3.select(1, 1)),
              g = describe(grad_output.contiguous().view({x3.size(0), x3.size(2)})),
              a = describe(x3.select(1, 0)), b = describe(x3.select(1, 1))] {
               nk::swiglu_backward(ga, gb, g, a, b);
             });
  return dx;
}

// ---- ACL formats ----------------------------------------------------------------------------

// The ACL storage format of a tensor, kept in its TensorImpl's backend metadata (copied with
// the impl's metadata). SimNPU stores every format as ND: the values never change, only the
// reported id does.
struct NPUFormatMeta final : c10::BackendMeta {
  int64_t format;
  explicit NPUFormatMeta(int64_t f) : format(f) {}
  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    return c10::make_intrusive<NPUFormatMeta>(format);
  }
};

constexpr int64_t kFormatND = 2;

void checkFormat(int64_t f) {
  // NCHW 0, NHWC 1, ND 2, NC1HWC0 3, FRACTAL_Z 4, NC1HWC0_C04 12, HWCN 16, NDHWC 27,
  // FRACTAL_NZ 29, NCDHW 30, NDC1HWC0 32, FRACTAL_Z_3D 33.
  static const int64_t known[] = {0, 1, 2, 3, 4, 12, 16, 27, 29, 30, 32, 33};
  for (int64_t k : known) {
    if (k == f) return;
  }
  TORCH_CHECK(false, "npu_format_cast: unknown acl_format ", f,
              "; use one of NCHW 0, NHWC 1, ND 2, NC1HWC0 3, FRACTAL_Z 4, FRACTAL_NZ 29, "
              "NDC1HWC0 32, FRACTAL_Z_3D 33");
}

int64_t get_npu_format(const at::Tensor& self) {
  auto* meta = dynamic_cast<NPUFormatMeta*>(self.unsafeGetTensorImpl()->get_backend_meta());
  return meta ? meta->format : kFormatND;
}

void setFormat(const at::Tensor& t, int64_t f) {
  t.unsafeGetTensorImpl()->set_backend_meta(c10::make_intrusive<NPUFormatMeta>(f));
}

bool isBaseFormat(int64_t f) {
  // NCHW, NHWC, ND, HWCN, NDHWC, NCDHW: the layouts a host tensor can have; the others
  // (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ...) are the card's private blocked layouts.
  return f == 0 || f == 1 || f == kFormatND || f == 16 || f == 27 || f == 30;
}

// The format a cast to `acl_format` leaves on a tensor of `dim` dims. A cast between two base
// formats only relabels; a cast out of a private format makes a new tensor, and torch_npu
// chooses the storage format of a new tensor as the card needs it: ND for a 4-d tensor is
// stored NCHW, FRACTAL_NZ needs at least 2 dims (ND below).
int64_t castFormat(int64_t from, int64_t acl_format, int64_t dim) {
  if (acl_format == 29 && dim < 2) return kFormatND;
  if (!isBaseFormat(from) && acl_format == kFormatND && dim == 4) return 0;
  return acl_format;
}

// As in torch_npu: the same format returns self; another gives a new tensor (a copy; clone is
// differentiable, so gradients flow through as they do on the NPU).
at::Tensor npu_format_cast(const at::Tensor& self, int64_t acl_format) {
  checkFormat(acl_format);
  const int64_t from = get_npu_format(self);
  if (from == acl_format) return self;
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  setFormat(out, castFormat(from, acl_format, self.dim()));
  return out;
}

// npu_format_cast.Tensor: to the format of `dst`.
at::Tensor npu_format_cast_tensor(const at::Tensor& self, const at::Tensor& dst) {
  TORCH_CHECK(dst.defined(), "npu_format_cast: dst is undefined; pass a tensor whose format "
              "to take, or an acl_format number");
  return npu_format_cast(self, get_npu_format(dst));
}

at::Tensor& npu_format_cast_(at::Tensor& self, int64_t acl_format) {
  checkFormat(acl_format);
  setFormat(self, castFormat(get_npu_format(self), acl_format, self.dim()));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) {
  NPU_IMPL(m, "npu_rms_norm", npu_rms_norm);
  NPU_IMPL(m, "npu_rms_norm_backward", npu_rms_norm_backward);
  NPU_IMPL(m, "npu_add_rms_norm", npu_add_rms_norm);
  NPU_IMPL(m, "npu_rotary_mul", npu_rotary_mul);
  NPU_IMPL(m, "npu_rotary_mul_backward", npu_rotary_mul_backward);
  NPU_IMPL(m, "npu_apply_rotary_pos_emb", npu_apply_rotary_pos_emb);
  NPU_IMPL(m, "npu_swiglu", npu_swiglu);
  NPU_IMPL(m, "npu_swiglu_backward", npu_swiglu_backward);
  NPU_IMPL(m, "npu_format_cast_", npu_format_cast_);
  NPU_IMPL(m, "get_npu_format", get_npu_format);
}

// Composite: built on clone(), so autograd and every backend key come for free.
TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) {
  m.impl("npu_format_cast", TORCH_FN(npu_format_cast));
  m.impl("npu_format_cast.Tensor", TORCH_FN(npu_format_cast_tensor));
}

}  // namespace torch_npu::native
