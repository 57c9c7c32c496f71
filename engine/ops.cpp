// The engine's operators: each .om node becomes a prepared call into the kernel library.
// Descriptors (shapes, strides, broadcasts) are built once at load; a run only fills in the
// data pointers. To add an op: a Kernel subclass here, its name in make_kernel's table, and
// its ONNX rules in atc/ops.py (ENGINE_OPS, infer).
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "engine/engine_internal.h"
#include "npu/kernels/attention.h"
#include "npu/kernels/batch_norm.h"
#include "npu/kernels/conv.h"
#include "npu/kernels/elementwise.h"
#include "npu/kernels/indexing.h"
#include "npu/kernels/matmul.h"
#include "npu/kernels/normalization.h"
#include "npu/kernels/pooling.h"
#include "npu/kernels/reduce.h"

namespace npu::engine {

namespace k = npu::kernels;
using k::DType;
using k::TensorDesc;

namespace {

// A descriptor of tensor `id` whose data pointer is filled at run time, `byte_offset` bytes
// past the tensor's start.
struct Bound {
  uint32_t id = kNoTensor;
  TensorDesc desc;
  size_t byte_offset = 0;
  void bind(void* const* ptrs) {
    desc.data = static_cast<char*>(ptrs[id]) + byte_offset;
  }
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    s[d] = acc;
    acc *= dims[d];
  }
  return s;
}

size_t itemsize(const ModelDef& def, uint32_t id) {
  return k::dtype_size(def.tensors[id].dtype);
}

Bound bound(const ModelDef& def, uint32_t id) {
  const auto& t = def.tensors[id];
  Bound b;
  b.id = id;
  b.desc = TensorDesc::make(nullptr, t.dtype, t.dims.data(), static_cast<int>(t.dims.size()));
  return b;
}

// Tensor `id` broadcast to `shape` (numpy rules: dimensions aligned on the right, size-1 and
// missing dimensions get stride 0).
Bound broadcast_to(const ModelDef& def, uint32_t id, const std::vector<int64_t>& shape) {
  const auto& dims = def.tensors[id].dims;
  auto strides = contiguous_strides(dims);
  Bound b;
  b.id = id;
  std::vector<int64_t> out_strides(shape.size(), 0);
  size_t lead = shape.size() - dims.size();
  for (size_t d = 0; d < dims.size(); ++d) {
    out_strides[lead + d] = dims[d] == 1 ? 0 : strides[d];
  }
  b.desc = TensorDesc::make(nullptr, def.tensors[id].dtype, shape.data(),
                            static_cast<int>(shape.size()), out_strides.data());
  return b;
}

void need_inputs(const NodeInfo& n, size_t lo, size_t hi) {
  if (n.inputs.size() < lo || n.inputs.size() > hi || n.outputs.size() != 1 ||
      n.inputs[0] == kNoTensor) {
    refuse(n, "unexpected number of inputs or outputs (corrupt model)");
  }
}

bool has_input(const NodeInfo& n, size_t i) {
  return n.inputs.size() > i && n.inputs[i] != kNoTensor;
}

// The activation fused into a Conv or MatMul by atc ("" for none), applied in place.
struct Activation {
  bool on = false;
  k::UnaryOp op = k::UnaryOp::Relu;
  static Activation parse(const NodeInfo& n) {
    std::string name = string_attr(n, "activation");
    if (name.empty()) return {};
    static const std::map<std::string, k::UnaryOp> ops = {
        {"Relu", k::UnaryOp::Relu}, {"Sigmoid", k::UnaryOp::Sigmoid},
        {"Tanh", k::UnaryOp::Tanh}, {"Gelu", k::UnaryOp::Gelu},
        {"GeluTanh", k::UnaryOp::GeluTanh}};
    auto it = ops.find(name);
    if (it == ops.end()) refuse(n, "unknown fused activation " + name);
    return {true, it->second};
  }
  void apply(const TensorDesc& t) const {
    if (on) k::unary(op, t, t, DType::Float32);
  }
};

// Unary and binary ops compute in their input's dtype (float32 for math, any for the tests
// that write bool) and store in the output's.
struct UnaryKernel : Model::Kernel {
  Bound out, in;
  k::UnaryOp op;
  k::Scalar p0, p1;
  void run(void* const* ptrs) override {
    out.bind(ptrs);
    in.bind(ptrs);
    k::unary(op, out.desc, in.desc, in.desc.dtype, p0, p1);
  }
};

struct BinaryKernel : Model::Kernel {
  Bound out, a, b;
  k::BinaryOp op;
  void run(void* const* ptrs) override {
    out.bind(ptrs);
    a.bind(ptrs);
    b.bind(ptrs);
    k::binary(op, out.desc, a.desc, b.desc, a.desc.dtype);
  }
};

// A float32 model weight is packed at load into the direct convolution's panels (shared by
// the gears), so that no call makes a pass over the weight before the convolution.
struct ConvKernel : Model::Kernel {
  Bound out, in, weight, bias;
  bool has_bias = false;
  bool weight_is_constant = false;
  k::Conv2dParams params;
  Activation act;
  std::shared_ptr<const k::PackedConvWeight> packed;

  void prepare_weights(void* const* ptrs, PreparedWeights& prepared) override {
    if (!weight_is_constant) return;
    weight.bind(ptrs);
    packed = prepared.packed_conv(weight.desc, params.groups);
  }

  void run(void* const* ptrs) override {
    out.bind(ptrs);
    in.bind(ptrs);
    weight.bind(ptrs);
    if (has_bias) bias.bind(ptrs);
    if (packed) {
      k::conv2d_prepacked(out.desc, in.desc, weight.desc, *packed,
                          has_bias ? &bias.desc : nullptr, params);
    } else {
      k::conv2d(out.desc, in.desc, weight.desc, has_bias ? &bias.desc : nullptr, params);
    }
    act.apply(out.desc);
  }
};

// out = alpha * A @ B + beta * bias, then the activation. A and B are split into 2-D
// matrices: a 2-D B with a row-major A is one gemm over all of A's rows; otherwise one gemm
// per broadcast batch index.
//
// A Linear layer (one gemm by a constant B, the model's weight): B is packed into the GEMM's
// panels once, at load (PreparedWeights), and a bias per output column and the activation are
// applied to each block of C as the GEMM finishes it, while it is in cache, instead of a copy
// of the bias into C before and a pass of the activation after.
struct MatMulKernel : Model::Kernel {
  struct Gemm {
    TensorDesc a, b, c;
    size_t a_off, b_off, c_off;  // bytes
    bool batched = false;        // 3-D descriptors for gemm_batched
  };
  uint32_t a_id, b_id, out_id;
  std::vector<Gemm> gemms;
  Bound bias;
  bool has_bias = false;
  double alpha = 1, beta = 1;
  Activation act;
  TensorDesc out_flat;
  // B is a float32 model weight and any bias varies along the output's columns only: the
  // Linear path (packed at load, bias and activation in the GEMM's epilogue).
  bool b_is_weight = false;
  std::shared_ptr<const k::PackedB> packed;

  void prepare_weights(void* const* ptrs, PreparedWeights& prepared) override {
    if (!b_is_weight || gemms.size() != 1 || gemms[0].batched || gemms[0].b_off != 0) return;
    // A few rows (a decode-time Linear) read the weight directly (gemm's dot-product path):
    // panels would only take memory.
    if (gemms[0].c.sizes[0] <= k::kGemmFewRowsMax) return;
    TensorDesc b = gemms[0].b;
    b.data = ptrs[b_id];
    packed = prepared.packed_b(b);
  }

  void run(void* const* ptrs) override {
    char* a = static_cast<char*>(ptrs[a_id]);
    char* b = static_cast<char*>(ptrs[b_id]);
    char* c = static_cast<char*>(ptrs[out_id]);
    if (packed) {
      run_linear(ptrs, a, b, c);
      return;
    }
    if (has_bias) {
      bias.bind(ptrs);
      TensorDesc out = bias.desc;  // the bias broadcast to the output's shape
      out.data = c;
      int64_t stride = 1;
      for (int d = out.ndim - 1; d >= 0; --d) {
        out.strides[d] = stride;
        stride *= out.sizes[d];
      }
      k::copy(out, bias.desc);
    }
    for (auto g : gemms) {
      g.a.data = a + g.a_off;
      g.b.data = b + g.b_off;
      g.c.data = c + g.c_off;
      if (g.batched) {
        k::gemm_batched(g.c, g.a, g.b, alpha, has_bias ? beta : 0.0);
      } else {
        k::gemm(g.c, g.a, g.b, alpha, has_bias ? beta : 0.0);
      }
    }
    out_flat.data = c;
    act.apply(out_flat);
  }

  void run_linear(void* const* ptrs, char* a, char* b, char* c) {
    Gemm g = gemms[0];
    g.a.data = a + g.a_off;
    g.b.data = b;
    g.c.data = c + g.c_off;
    const float* bias_data = nullptr;
    int64_t bias_stride = 0;
    const float bias_scale = static_cast<float>(beta);
    if (has_bias) {
      bias.bind(ptrs);
      bias_data = static_cast<const float*>(bias.desc.data);
      bias_stride = bias.desc.strides[bias.desc.ndim - 1];
    }
    float* const out = static_cast<float*>(g.c.data);
    const int64_t ldc = g.c.strides[0];
    // A contiguous bias and a ReLU (the common Linear) are fused into the GEMM's stores (no pass
    // over C); a strided bias and other activations run on each finished block of C.
    const bool relu = act.on && act.op == k::UnaryOp::Relu;
    k::GemmOutputStage stage;
    if (bias_data != nullptr && bias_stride == 1) {
      stage.col_bias = bias_data;
      stage.col_scale = bias_scale;
      stage.relu = relu;
    } else if (bias_data == nullptr) {
      stage.relu = relu;
    }
    k::GemmEpilogue epilogue;
    if (!stage.active() ? (bias_data != nullptr || act.on) : (act.on && !relu)) {
      epilogue = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        for (int64_t i = r0; i < r1 && bias_data != nullptr && !stage.active(); ++i) {
          float* row = out + i * ldc;  // a strided bias, then the activation
          for (int64_t j = c0; j < c1; ++j) row[j] += bias_scale * bias_data[j * bias_stride];
          if (relu) {  // as the unary kernel's ReLU: NaN stays NaN, -0 becomes 0
            for (int64_t j = c0; j < c1; ++j) {
              const float v = row[j];
              row[j] = (v > 0.0f || v != v) ? v : 0.0f;
            }
          }
        }
        if (act.on && !relu) {
          act.apply(TensorDesc::make(out + r0 * ldc + c0, DType::Float32, {r1 - r0, c1 - c0},
                                     {ldc, 1}));
        }
      };
    }
    k::gemm_prepacked(g.c, g.a, g.b, *packed, alpha, 0.0, epilogue, stage);
  }
};

std::unique_ptr<Model::Kernel> make_matmul(const ModelDef& def, const NodeInfo& n) {
  need_inputs(n, 2, 3);
  auto kr = std::make_unique<MatMulKernel>();
  kr->a_id = n.inputs[0];
  kr->b_id = n.inputs[1];
  kr->out_id = n.outputs[0];
  kr->alpha = float_attr(n, "alpha", 1.0);
  kr->beta = float_attr(n, "beta", 1.0);
  kr->act = Activation::parse(n);
  const auto& out_dims = def.tensors[kr->out_id].dims;
  kr->out_flat = bound(def, kr->out_id).desc;
  if (has_input(n, 2)) {
    kr->has_bias = true;
    kr->bias = broadcast_to(def, n.inputs[2], out_dims);
  }
  bool trans_a = int_attr(n, "trans_a", 0) != 0, trans_b = int_attr(n, "trans_b", 0) != 0;
  std::vector<int64_t> a = def.tensors[kr->a_id].dims, b = def.tensors[kr->b_id].dims;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  int64_t m = trans_a ? a[1] : a[a.size() - 2], kk = trans_a ? a[0] : a.back();
  // trans_b: B is stored [..., N, K] (atc folds a Transpose of B's last two dims this way).
  int64_t nn = trans_b ? b[b.size() - 2] : b.back();
  const int64_t es = 4;  // float32
  auto matrix = [](int64_t rows, int64_t cols, bool trans) {
    // A row-major [cols, rows] matrix read transposed, or a row-major [rows, cols] one.
    return trans ? TensorDesc::make(nullptr, DType::Float32, {rows, cols}, {1, rows})
                 : TensorDesc::make(nullptr, DType::Float32, {rows, cols});
  };
  // A Linear layer: packed weights and a fused epilogue (MatMulKernel), when the model's float32
  // weight is B and any bias varies along the output's columns only.
  auto as_linear = [&] {
    const auto& bt = def.tensors[kr->b_id];
    bool per_column = true;
    if (kr->has_bias) {
      const TensorDesc& d = kr->bias.desc;
      for (int i = 0; i + 1 < d.ndim; ++i) per_column = per_column && d.strides[i] == 0;
      per_column = per_column && d.dtype == DType::Float32;
    }
    kr->b_is_weight = bt.storage == Storage::Weight && bt.dtype == DType::Float32 &&
                      def.tensors[kr->a_id].dtype == DType::Float32 && per_column;
  };
  if (a.size() == 2 && b.size() == 2) {
    kr->gemms.push_back({matrix(m, kk, trans_a), matrix(kk, nn, trans_b), matrix(m, nn, false),
                         0, 0, 0});
    as_linear();
    return kr;
  }
  if (b.size() == 2 && !trans_a) {
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < a.size(); ++d) rows *= a[d];
    kr->gemms.push_back({matrix(rows, kk, false), matrix(kk, nn, trans_b),
                         matrix(rows, nn, false), 0, 0, 0});
    as_linear();
    return kr;
  }
  // Batched: broadcast the batch dimensions and issue one gemm per batch index.
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> ab(rank - 2, 1), bb(rank - 2, 1), batch(rank - 2, 1);
  for (size_t d = 0; d + 2 < a.size(); ++d) ab[rank - a.size() + d] = a[d];
  for (size_t d = 0; d + 2 < b.size(); ++d) bb[rank - b.size() + d] = b[d];
  for (size_t d = 0; d + 2 < rank; ++d) batch[d] = std::max(ab[d], bb[d]);
  auto as = contiguous_strides(ab), bs = contiguous_strides(bb), cs = contiguous_strides(batch);
  int64_t total = 1, a_total = 1, b_total = 1;
  for (int64_t v : batch) total *= v;
  for (int64_t v : ab) a_total *= v;
  for (int64_t v : bb) b_total *= v;
  // One gemm_batched call when each operand either has the full batch or none (stride 0).
  if ((a_total == total || a_total == 1) && (b_total == total || b_total == 1) &&
      (ab == batch || a_total == 1) && (bb == batch || b_total == 1)) {
    auto batch3 = [total](int64_t rows, int64_t cols, bool broadcast, bool trans = false) {
      // trans: a row-major [cols, rows] matrix per batch index, read transposed.
      return TensorDesc::make(nullptr, DType::Float32, {total, rows, cols},
                              {broadcast ? 0 : rows * cols, trans ? 1 : cols, trans ? rows : 1});
    };
    MatMulKernel::Gemm g{batch3(m, kk, a_total == 1 && total > 1),
                         batch3(kk, nn, b_total == 1 && total > 1, trans_b),
                         batch3(m, nn, false), 0, 0, 0, true};
    kr->gemms.push_back(g);
    return kr;
  }
  for (int64_t i = 0; i < total; ++i) {
    int64_t rem = i, ai = 0, bi = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      int64_t idx = rem / cs[d];
      rem %= cs[d];
      if (ab[d] != 1) ai += idx * as[d];
      if (bb[d] != 1) bi += idx * bs[d];
    }
    kr->gemms.push_back({matrix(m, kk, false), matrix(kk, nn, trans_b), matrix(m, nn, false),
                         static_cast<size_t>(ai * m * kk * es),
                         static_cast<size_t>(bi * kk * nn * es),
                         static_cast<size_t>(i * m * nn * es)});
  }
  return kr;
}

struct SoftmaxKernel : Model::Kernel {
  Bound out, in;
  int dim;
  bool log;
  void run(void* const* ptrs) override {
    out.bind(ptrs);
    in.bind(ptrs);
    k::softmax(out.desc, in.desc, dim, log);
  }
};

struct LayerNormKernel : Model::Kernel {
  Bound out, in, weight, bias;
  bool has_bias = false;
  int normalized_ndim;
  double eps;
  std::vector<float> mean, rstd;  // the kernel's row statistics, kept across runs
  TensorDesc mean_desc, rstd_desc;
  void run(void* const* ptrs) override {
    out.bind(ptrs);
    in.bind(ptrs);
    weight.bind(ptrs);
    if (has_bias) bias.bind(ptrs);
    k::layer_norm(out.desc, mean_desc, rstd_desc, in.desc, &weight.desc,
                  has_bias ? &bias.desc : nullptr, normalized_ndim, eps);
  }
};

// BatchNormalization after atc: out = x * scale + shift, scale and shift per channel (dim 1).
struct ScaleShiftKernel : Model::Kernel {
  Bound out, in, scale, shift;
  void run(void* const* ptrs) override {
    out.bind(ptrs);
    in.bind(ptrs);
    scale.bind(ptrs);
    shift.bind(ptrs);
    k::ternary(k::TernaryOp::Addcmul, out.desc, shift.desc, in.desc, scale.desc,
               DType::Float32, 1);
  }
};

struct PoolKernel : Model::Kernel {
  enum Kind { Max, Avg, GlobalAvg } kind;
  Bound out, in;
  k::Pool2dParams params;
  bool count_include_pad = false;
  TensorDesc indices_desc;  // the argmax output's shape, no data: not computed
  void run(void* const* ptrs) override {
    out.bind(ptrs);
    in.bind(ptrs);
    switch (kind) {
      case Max: k::max_pool2d(out.desc, indices_desc, in.desc, params); break;
      case Avg: k::avg_pool2d(out.desc, in.desc, params, count_include_pad); break;
      case GlobalAvg: k::adaptive_avg_pool2d(out.desc, in.desc); break;
    }
  }
};

// Reshape (and Flatten / Squeeze / Unsqueeze / a graph-output Identity): the same bytes.
struct CopyBytesKernel : Model::Kernel {
  uint32_t out_id, in_id;
  size_t nbytes;
  void run(void* const* ptrs) override {
    if (ptrs[out_id] != ptrs[in_id]) std::memcpy(ptrs[out_id], ptrs[in_id], nbytes);
  }
};

// Transpose, Concat, Split, Slice, Expand and Cast: strided (converting) copies into the
// output.
struct CopyKernel : Model::Kernel {
  std::vector<std::pair<Bound, Bound>> copies;  // (destination view, source view)
  void run(void* const* ptrs) override {
    for (auto& [dst, src] : copies) {
      dst.bind(ptrs);
      src.bind(ptrs);
      k::copy(dst.desc, src.desc);
    }
  }
};

using Factory = std::function<std::unique_ptr<Model::Kernel>(const ModelDef&, const NodeInfo&)>;

std::unique_ptr<Model::Kernel> copy_of(Bound dst, Bound src) {
  auto kr = std::make_unique<CopyKernel>();
  kr->copies.emplace_back(std::move(dst), std::move(src));
  return kr;
}

// Attention (atc's fusion of MatMul, scale, constant mask, Softmax, MatMul): the flash
// attention kernel over [L, S, D] matrices, L = the leading dims merged (batch x heads). K
// comes as K [.., Skv, D] or as its transpose KT [.., D, Skv] (read through strides); the
// mask is a constant bool [Sq, Skv] (true = hidden) broadcast over L.
struct AttentionKernel : Model::Kernel {
  Bound q, k, v, out, mask;
  bool has_mask = false;
  k::FlashAttentionArgs args;
  std::vector<float> row_max, row_sum;  // the kernel's softmax statistics, sized at load
  TensorDesc max_desc, sum_desc;
  void run(void* const* ptrs) override {
    for (Bound* b : {&q, &k, &v, &out}) b->bind(ptrs);
    args.q = q.desc;
    args.k = k.desc;
    args.v = v.desc;
    if (has_mask) {
      mask.bind(ptrs);
      args.mask = &mask.desc;
    }
    k::flash_attention_forward(args, out.desc, max_desc, sum_desc);
  }
};

// Whether atc folded a Transpose into an Attention node (perm_q / perm_k / perm_v: the
// operand is Transpose(input, perm); perm_out: the output tensor is Transpose(result, perm)).
bool attention_perms(const NodeInfo& n) {
  for (const char* key : {"perm_q", "perm_k", "perm_v", "perm_out"}) {
    if (n.attr(key) != nullptr) return true;
  }
  return false;
}

// The 4-D logical operand of an Attention node as a strided view of tensor `id` (contiguous):
// an input is Transpose(tensor, perm), so view dim i is tensor dim perm[i]; the output tensor
// is Transpose(result, perm), so result dim perm[i] is tensor dim i. An empty perm: as is.
TensorDesc attention_view(const ModelDef& def, uint32_t id, const std::vector<int64_t>& perm,
                          bool output) {
  const auto& dims = def.tensors[id].dims;
  const std::vector<int64_t> strides = contiguous_strides(dims);
  int64_t sizes[4], st[4];
  for (int i = 0; i < 4; ++i) {
    const int from = perm.empty() ? i : static_cast<int>(perm[i]);
    const int to = perm.empty() || !output ? i : static_cast<int>(perm[i]);
    sizes[to] = dims[output ? i : from];
    st[to] = strides[output ? i : from];
  }
  return TensorDesc::make(nullptr, DType::Float32, sizes, 4, st);
}

std::unique_ptr<Model::Kernel> make_attention(const ModelDef& def, const NodeInfo& n) {
  need_inputs(n, 3, 4);
  auto kr = std::make_unique<AttentionKernel>();
  kr->q.id = n.inputs[0], kr->k.id = n.inputs[1], kr->v.id = n.inputs[2];
  kr->out.id = n.outputs[0];
  // [B, N] of the statistics (the kernel's [B, Nq, Sq, R]) and the mask's [Sq, Skv].
  int64_t stat_b = 1, stat_n = 1, sq = 0, skv = 0;
  if (attention_perms(n)) {
    // Transposes folded in by atc: 4-D operands read, and the output written, through strided
    // views ([B, N, S, D] as the kernel takes them) instead of copies by Transpose nodes.
    kr->q.desc = attention_view(def, n.inputs[0], ints_attr(n, "perm_q", {}), false);
    kr->k.desc = attention_view(def, n.inputs[1], ints_attr(n, "perm_k", {}), false);
    if (int_attr(n, "k_transposed", 0)) {  // the logical operand is K^T: read it as K
      std::swap(kr->k.desc.sizes[2], kr->k.desc.sizes[3]);
      std::swap(kr->k.desc.strides[2], kr->k.desc.strides[3]);
    }
    kr->v.desc = attention_view(def, n.inputs[2], ints_attr(n, "perm_v", {}), false);
    kr->out.desc = attention_view(def, n.outputs[0], ints_attr(n, "perm_out", {}), true);
    stat_b = kr->q.desc.sizes[0], stat_n = kr->q.desc.sizes[1];
    sq = kr->q.desc.sizes[2], skv = kr->k.desc.sizes[2];
  } else {
    // Contiguous operands: the leading dims merged into one, [1, lead, rows, cols].
    const auto& qd = def.tensors[n.inputs[0]].dims;
    const auto& vd = def.tensors[n.inputs[2]].dims;
    for (size_t i = 0; i + 2 < qd.size(); ++i) stat_n *= qd[i];
    sq = qd[qd.size() - 2], skv = vd[vd.size() - 2];
    const int64_t d = qd.back(), dv = vd.back(), lead = stat_n;
    auto view = [&](int64_t rows, int64_t cols, bool transposed) {
      return transposed ? TensorDesc::make(nullptr, DType::Float32, {1, lead, rows, cols},
                                           {0, rows * cols, 1, rows})
                        : TensorDesc::make(nullptr, DType::Float32, {1, lead, rows, cols});
    };
    kr->q.desc = view(sq, d, false);
    kr->k.desc = view(skv, d, int_attr(n, "k_transposed", 0) != 0);
    kr->v.desc = view(skv, dv, false);
    kr->out.desc = view(sq, dv, false);
  }
  if (has_input(n, 3)) {
    kr->has_mask = true;
    kr->mask.id = n.inputs[3];
    kr->mask.desc = TensorDesc::make(nullptr, DType::Bool, {1, 1, sq, skv}, {0, 0, skv, 1});
  }
  kr->args.scale = float_attr(n, "scale", 1.0);
  kr->row_max.resize(stat_b * stat_n * sq);
  kr->row_sum.resize(stat_b * stat_n * sq);
  kr->max_desc =
      TensorDesc::make(kr->row_max.data(), DType::Float32, {stat_b, stat_n, sq, 1});
  kr->sum_desc =
      TensorDesc::make(kr->row_sum.data(), DType::Float32, {stat_b, stat_n, sq, 1});
  return kr;
}

// GatherElements (ONNX's, torch.gather): out[i][j] = data[index[i][j]][j] along `axis`.
// Indices are checked and made non-negative into a buffer sized at load, then the kernel
// library's gather reads them.
struct GatherElementsKernel : Model::Kernel {
  Bound out, data, index;
  int axis = 0;
  std::string node;
  std::vector<int64_t> checked;
  TensorDesc checked_desc;
  void run(void* const* ptrs) override {
    for (Bound* b : {&out, &data, &index}) b->bind(ptrs);
    const int64_t dim = data.desc.sizes[axis];
    const bool i64 = index.desc.dtype == DType::Int64;
    for (size_t j = 0; j < checked.size(); ++j) {
      int64_t v = i64 ? static_cast<const int64_t*>(index.desc.data)[j]
                      : static_cast<const int32_t*>(index.desc.data)[j];
      if (v < -dim || v >= dim) {
        throw std::out_of_range("GatherElements node " + node + ": index " +
                                std::to_string(v) + " is out of range for a dimension of "
                                "size " + std::to_string(dim));
      }
      checked[j] = v < 0 ? v + dim : v;
    }
    checked_desc.data = checked.data();
    k::gather(out.desc, data.desc, axis, checked_desc);
  }
};

// Gather along `axis` (embeddings: data [V, D], indices [B, T] of token ids): whole inner rows
// are copied; a negative index counts from the end, one out of range fails the run naming it.
struct GatherKernel : Model::Kernel {
  uint32_t out_id, data_id, index_id;
  bool index64 = true;
  std::string node;
  int64_t outer = 1, dim = 1, count = 1;
  size_t row_bytes = 0;
  void run(void* const* ptrs) override {
    const char* data = static_cast<const char*>(ptrs[data_id]);
    char* out = static_cast<char*>(ptrs[out_id]);
    for (int64_t j = 0; j < count; ++j) {
      int64_t idx = index64 ? static_cast<const int64_t*>(ptrs[index_id])[j]
                            : static_cast<const int32_t*>(ptrs[index_id])[j];
      if (idx < -dim || idx >= dim) {
        throw std::out_of_range("Gather node " + node + ": index " + std::to_string(idx) +
                                " is out of range for a dimension of size " +
                                std::to_string(dim));
      }
      if (idx < 0) idx += dim;
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(out + (o * count + j) * row_bytes, data + (o * dim + idx) * row_bytes,
                    row_bytes);
      }
    }
  }
};

// ReduceMean / Sum / Max / Min: the output seen with the input's rank (size 1 along each
// reduced axis), the kernel library's keepdim convention; keepdims=0 is the same bytes.
struct ReduceKernel : Model::Kernel {
  Bound out, in;
  k::ReduceOp op;
  void run(void* const* ptrs) override {
    out.bind(ptrs);
    in.bind(ptrs);
    k::reduce(op, out.desc, in.desc, DType::Float32);
  }
};

Factory reduce(k::ReduceOp op) {
  return [op](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
    need_inputs(n, 1, 1);
    auto kr = std::make_unique<ReduceKernel>();
    kr->op = op;
    kr->in = bound(def, n.inputs[0]);
    std::vector<int64_t> kept = def.tensors[n.inputs[0]].dims;
    for (int64_t a : ints_attr(n, "axes", {})) {
      if (a < 0 || a >= static_cast<int64_t>(kept.size())) refuse(n, "bad axis");
      kept[a] = 1;
    }
    Bound out;
    out.id = n.outputs[0];
    out.desc = TensorDesc::make(nullptr, DType::Float32, kept.data(),
                                static_cast<int>(kept.size()));
    if (out.desc.numel() * 4 != static_cast<int64_t>(def.tensors[out.id].nbytes)) {
      refuse(n, "the output's size does not match the reduced axes");
    }
    kr->out = out;
    return kr;
  };
}

struct WhereKernel : Model::Kernel {
  Bound out, cond, x, y;
  void run(void* const* ptrs) override {
    for (Bound* b : {&out, &cond, &x, &y}) b->bind(ptrs);
    k::ternary(k::TernaryOp::Where, out.desc, cond.desc, x.desc, y.desc, x.desc.dtype);
  }
};

void symmetric_pads(const NodeInfo& n, const std::vector<int64_t>& pads, int64_t out[2]) {
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
    refuse(n, "asymmetric padding is not supported (pads must be [h, w, h, w])");
  }
  out[0] = pads[0];
  out[1] = pads[1];
}


std::unique_ptr<Model::Kernel> make_unary(const ModelDef& def, const NodeInfo& n,
                                          k::UnaryOp op, k::Scalar p0 = {}, k::Scalar p1 = {}) {
  need_inputs(n, 1, 1);
  auto kr = std::make_unique<UnaryKernel>();
  kr->out = bound(def, n.outputs[0]);
  kr->in = bound(def, n.inputs[0]);
  kr->op = op;
  kr->p0 = p0;
  kr->p1 = p1;
  return kr;
}

Factory unary(k::UnaryOp op) {
  return [op](const ModelDef& def, const NodeInfo& n) { return make_unary(def, n, op); };
}

Factory binary(k::BinaryOp op) {
  return [op](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
    need_inputs(n, 2, 2);
    auto kr = std::make_unique<BinaryKernel>();
    const auto& shape = def.tensors[n.outputs[0]].dims;
    kr->out = bound(def, n.outputs[0]);
    kr->a = broadcast_to(def, n.inputs[0], shape);
    kr->b = broadcast_to(def, n.inputs[1], shape);
    kr->op = op;
    return kr;
  };
}

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = {
      {"Relu", unary(k::UnaryOp::Relu)},
      {"Sigmoid", unary(k::UnaryOp::Sigmoid)},
      {"Tanh", unary(k::UnaryOp::Tanh)},
      {"Erf", unary(k::UnaryOp::Erf)},
      {"Sqrt", unary(k::UnaryOp::Sqrt)},
      {"Exp", unary(k::UnaryOp::Exp)},
      {"Log", unary(k::UnaryOp::Log)},
      {"Neg", unary(k::UnaryOp::Neg)},
      {"Abs", unary(k::UnaryOp::Abs)},
      {"Reciprocal", unary(k::UnaryOp::Reciprocal)},
      {"Gelu",
       [](const ModelDef& def, const NodeInfo& n) {
         return make_unary(def, n, string_attr(n, "approximate") == "tanh"
                                       ? k::UnaryOp::GeluTanh : k::UnaryOp::Gelu);
       }},
      {"LeakyRelu",
       [](const ModelDef& def, const NodeInfo& n) {
         return make_unary(def, n, k::UnaryOp::LeakyRelu, float_attr(n, "alpha", 0.01));
       }},
      {"Clip",
       [](const ModelDef& def, const NodeInfo& n) {
         return make_unary(def, n, k::UnaryOp::Clamp, float_attr(n, "min", -INFINITY),
                           float_attr(n, "max", INFINITY));
       }},
      {"Sin", unary(k::UnaryOp::Sin)},
      {"Cos", unary(k::UnaryOp::Cos)},
      {"IsNaN", unary(k::UnaryOp::IsNan)},
      {"IsInf", unary(k::UnaryOp::IsInf)},
      {"Not", unary(k::UnaryOp::LogicalNot)},
      {"Equal", binary(k::BinaryOp::Eq)},
      {"Less", binary(k::BinaryOp::Lt)},
      {"LessOrEqual", binary(k::BinaryOp::Le)},
      {"Greater", binary(k::BinaryOp::Gt)},
      {"GreaterOrEqual", binary(k::BinaryOp::Ge)},
      {"And", binary(k::BinaryOp::LogicalAnd)},
      {"Or", binary(k::BinaryOp::LogicalOr)},
      {"Add", binary(k::BinaryOp::Add)},
      {"Sub", binary(k::BinaryOp::Sub)},
      {"Mul", binary(k::BinaryOp::Mul)},
      {"Div", binary(k::BinaryOp::Div)},
      {"Pow", binary(k::BinaryOp::Pow)},
      {"MatMul", make_matmul},
      {"Attention", make_attention},
      {"Conv",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 2, 3);
         auto kr = std::make_unique<ConvKernel>();
         kr->out = bound(def, n.outputs[0]);
         kr->in = bound(def, n.inputs[0]);
         kr->weight = bound(def, n.inputs[1]);
         {
           const auto& wt = def.tensors[n.inputs[1]];
           kr->weight_is_constant = wt.storage == Storage::Weight && wt.dtype == DType::Float32;
         }
         kr->has_bias = has_input(n, 2);
         if (kr->has_bias) kr->bias = bound(def, n.inputs[2]);
         auto s = ints_attr(n, "strides", {1, 1}), d = ints_attr(n, "dilations", {1, 1});
         symmetric_pads(n, ints_attr(n, "pads", {0, 0, 0, 0}), kr->params.padding);
         for (int i = 0; i < 2; ++i) {
           kr->params.stride[i] = s[i];
           kr->params.dilation[i] = d[i];
         }
         kr->params.groups = int_attr(n, "group", 1);
         kr->params.winograd = true;  // 3x3 float32 convolutions that qualify take Winograd
         kr->act = Activation::parse(n);
         if (kr->act.on && kr->act.op == k::UnaryOp::Relu) {  // applied as conv2d writes out
           kr->params.fuse_relu = true;
           kr->act = {};
         }
         // atc's Conv (+ Relu) + MaxPool 2x2 / stride 2: out is the pooled tensor.
         if (const int64_t pool = int_attr(n, "max_pool", 0); pool != 0) {
           if (pool != 2) refuse(n, "max_pool " + std::to_string(pool) + " (only 2 is fused)");
           if (kr->act.on) refuse(n, "a fused max pool after an activation other than Relu");
           kr->params.fuse_max_pool2 = true;
         }
         return kr;
       }},
      {"Softmax",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 1, 1);
         auto kr = std::make_unique<SoftmaxKernel>();
         kr->out = bound(def, n.outputs[0]);
         kr->in = bound(def, n.inputs[0]);
         kr->dim = static_cast<int>(int_attr(n, "axis", -1));
         kr->log = n.op == "LogSoftmax";
         return kr;
       }},
      {"LayerNormalization",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 2, 3);
         auto kr = std::make_unique<LayerNormKernel>();
         kr->out = bound(def, n.outputs[0]);
         kr->in = bound(def, n.inputs[0]);
         const auto& dims = def.tensors[n.inputs[0]].dims;
         int64_t axis = int_attr(n, "axis", -1);
         kr->normalized_ndim = static_cast<int>(dims.size() - axis);
         int64_t rows = 1, cols = 1;
         for (size_t d = 0; d < dims.size(); ++d) {
           (static_cast<int64_t>(d) < axis ? rows : cols) *= dims[d];
         }
         auto flat = [&](uint32_t id) {
           Bound b = bound(def, id);
           b.desc = TensorDesc::make(nullptr, def.tensors[id].dtype, {cols});
           return b;
         };
         kr->weight = flat(n.inputs[1]);
         kr->has_bias = has_input(n, 2);
         if (kr->has_bias) kr->bias = flat(n.inputs[2]);
         kr->eps = float_attr(n, "epsilon", 1e-5);
         kr->mean.resize(rows);
         kr->rstd.resize(rows);
         kr->mean_desc = TensorDesc::make(kr->mean.data(), DType::Float32, {rows});
         kr->rstd_desc = TensorDesc::make(kr->rstd.data(), DType::Float32, {rows});
         return kr;
       }},
      {"BatchNormalization",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 3, 3);  // atc folded the statistics into scale and shift
         auto kr = std::make_unique<ScaleShiftKernel>();
         const auto& shape = def.tensors[n.outputs[0]].dims;
         kr->out = bound(def, n.outputs[0]);
         kr->in = bound(def, n.inputs[0]);
         auto per_channel = [&](uint32_t id) {
           Bound b = bound(def, id);
           std::vector<int64_t> strides(shape.size(), 0);
           strides[1] = 1;
           b.desc = TensorDesc::make(nullptr, DType::Float32, shape.data(),
                                     static_cast<int>(shape.size()), strides.data());
           return b;
         };
         kr->scale = per_channel(n.inputs[1]);
         kr->shift = per_channel(n.inputs[2]);
         return kr;
       }},
      {"MaxPool",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 1, 1);
         auto kr = std::make_unique<PoolKernel>();
         kr->kind = n.op == "MaxPool" ? PoolKernel::Max : PoolKernel::Avg;
         kr->out = bound(def, n.outputs[0]);
         kr->in = bound(def, n.inputs[0]);
         auto ks = ints_attr(n, "kernel_shape", {}), s = ints_attr(n, "strides", {1, 1});
         auto d = ints_attr(n, "dilations", {1, 1});
         symmetric_pads(n, ints_attr(n, "pads", {0, 0, 0, 0}), kr->params.padding);
         for (int i = 0; i < 2; ++i) {
           kr->params.kernel[i] = ks[i];
           kr->params.stride[i] = s[i];
           kr->params.dilation[i] = d[i];
         }
         kr->params.ceil_mode = int_attr(n, "ceil_mode", 0) != 0;
         kr->count_include_pad = int_attr(n, "count_include_pad", 0) != 0;
         if (kr->kind == PoolKernel::Max) {
           const auto& od = def.tensors[n.outputs[0]].dims;
           kr->indices_desc = TensorDesc::make(nullptr, DType::Int64, od.data(), 4);
         }
         return kr;
       }},
      {"GlobalAveragePool",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 1, 1);
         auto kr = std::make_unique<PoolKernel>();
         kr->kind = PoolKernel::GlobalAvg;
         kr->out = bound(def, n.outputs[0]);
         kr->in = bound(def, n.inputs[0]);
         return kr;
       }},
      {"Reshape",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 1, 1);
         auto kr = std::make_unique<CopyBytesKernel>();
         kr->out_id = n.outputs[0];
         kr->in_id = n.inputs[0];
         kr->nbytes = def.tensors[n.outputs[0]].nbytes;
         return kr;
       }},
      {"Transpose",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 1, 1);
         const auto& in_dims = def.tensors[n.inputs[0]].dims;
         auto perm = ints_attr(n, "perm", {});
         auto in_strides = contiguous_strides(in_dims);
         std::vector<int64_t> sizes, strides;
         for (int64_t p : perm) {
           sizes.push_back(in_dims[p]);
           strides.push_back(in_strides[p]);
         }
         Bound src;
         src.id = n.inputs[0];
         src.desc = TensorDesc::make(nullptr, def.tensors[src.id].dtype, sizes.data(),
                                     static_cast<int>(sizes.size()), strides.data());
         return copy_of(bound(def, n.outputs[0]), src);
       }},
      {"Cast",
       [](const ModelDef& def, const NodeInfo& n) {
         need_inputs(n, 1, 1);
         return copy_of(bound(def, n.outputs[0]), bound(def, n.inputs[0]));
       }},
      {"Expand",
       [](const ModelDef& def, const NodeInfo& n) {
         need_inputs(n, 1, 1);
         return copy_of(bound(def, n.outputs[0]),
                        broadcast_to(def, n.inputs[0], def.tensors[n.outputs[0]].dims));
       }},
      {"Slice",
       [](const ModelDef& def, const NodeInfo& n) {
         // A strided view of the input: it starts at `starts` and moves by `steps` elements
         // per dimension (a negative step walks backwards); the output's dims are the counts.
         need_inputs(n, 1, 1);
         const auto& in_dims = def.tensors[n.inputs[0]].dims;
         const auto& out_dims = def.tensors[n.outputs[0]].dims;
         auto starts = ints_attr(n, "starts", {}), steps = ints_attr(n, "steps", {});
         if (starts.size() != in_dims.size() || steps.size() != in_dims.size() ||
             out_dims.size() != in_dims.size()) {
           refuse(n, "starts / steps / output rank do not match the input's rank");
         }
         auto in_strides = contiguous_strides(in_dims);
         std::vector<int64_t> strides(in_dims.size());
         int64_t offset = 0;
         for (size_t d = 0; d < in_dims.size(); ++d) {
           int64_t last = starts[d] + (out_dims[d] - 1) * steps[d];
           if (out_dims[d] > 0 && (starts[d] < 0 || starts[d] >= in_dims[d] || last < 0 ||
                                   last >= in_dims[d])) {
             refuse(n, "the slice of dimension " + std::to_string(d) + " leaves the input");
           }
           offset += starts[d] * in_strides[d];
           strides[d] = steps[d] * in_strides[d];
         }
         Bound src;
         src.id = n.inputs[0];
         src.desc = TensorDesc::make(nullptr, def.tensors[src.id].dtype, out_dims.data(),
                                     static_cast<int>(out_dims.size()), strides.data());
         src.byte_offset = static_cast<size_t>(offset) * itemsize(def, src.id);
         return copy_of(bound(def, n.outputs[0]), src);
       }},
      {"GatherElements",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 2, 2);
         auto kr = std::make_unique<GatherElementsKernel>();
         kr->out = bound(def, n.outputs[0]);
         kr->data = bound(def, n.inputs[0]);
         kr->index = bound(def, n.inputs[1]);
         kr->node = n.name;
         const auto& idx = def.tensors[n.inputs[1]].dims;
         kr->axis = static_cast<int>(int_attr(n, "axis", 0));
         kr->checked.resize(kr->index.desc.numel());
         kr->checked_desc = TensorDesc::make(nullptr, DType::Int64, idx.data(),
                                             static_cast<int>(idx.size()));
         return kr;
       }},
      {"ReduceMean", reduce(k::ReduceOp::Mean)},
      {"ReduceSum", reduce(k::ReduceOp::Sum)},
      {"ReduceMax", reduce(k::ReduceOp::Amax)},
      {"ReduceMin", reduce(k::ReduceOp::Amin)},
      {"Gather",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 2, 2);
         auto kr = std::make_unique<GatherKernel>();
         kr->out_id = n.outputs[0];
         kr->data_id = n.inputs[0];
         kr->index_id = n.inputs[1];
         kr->node = n.name;
         const auto& dims = def.tensors[n.inputs[0]].dims;
         int64_t axis = int_attr(n, "axis", 0);
         int64_t inner = 1;
         for (size_t d = 0; d < dims.size(); ++d) {
           if (static_cast<int64_t>(d) < axis) kr->outer *= dims[d];
           if (static_cast<int64_t>(d) > axis) inner *= dims[d];
         }
         kr->dim = dims[axis];
         kr->row_bytes = static_cast<size_t>(inner) * itemsize(def, n.inputs[0]);
         const auto& idx = def.tensors[n.inputs[1]];
         kr->index64 = idx.dtype == DType::Int64;
         kr->count = 1;
         for (int64_t v : idx.dims) kr->count *= v;
         return kr;
       }},
      {"Where",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         need_inputs(n, 3, 3);
         auto kr = std::make_unique<WhereKernel>();
         const auto& shape = def.tensors[n.outputs[0]].dims;
         kr->out = bound(def, n.outputs[0]);
         kr->cond = broadcast_to(def, n.inputs[0], shape);
         kr->x = broadcast_to(def, n.inputs[1], shape);
         kr->y = broadcast_to(def, n.inputs[2], shape);
         return kr;
       }},
      {"Split",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         if (n.inputs.size() != 1 || n.outputs.empty()) refuse(n, "needs one input");
         const auto& in_dims = def.tensors[n.inputs[0]].dims;
         auto in_strides = contiguous_strides(in_dims);
         int64_t axis = int_attr(n, "axis", 0);
         auto kr = std::make_unique<CopyKernel>();
         int64_t at = 0;
         for (uint32_t id : n.outputs) {
           const auto& dims = def.tensors[id].dims;
           Bound src;
           src.id = n.inputs[0];
           src.desc = TensorDesc::make(nullptr, def.tensors[src.id].dtype, dims.data(),
                                       static_cast<int>(dims.size()), in_strides.data());
           src.byte_offset = static_cast<size_t>(at * in_strides[axis]) * itemsize(def, src.id);
           at += dims[axis];
           kr->copies.emplace_back(bound(def, id), src);
         }
         return kr;
       }},
      {"Concat",
       [](const ModelDef& def, const NodeInfo& n) -> std::unique_ptr<Model::Kernel> {
         if (n.inputs.empty() || n.outputs.size() != 1) refuse(n, "needs inputs");
         const auto& out_dims = def.tensors[n.outputs[0]].dims;
         auto out_strides = contiguous_strides(out_dims);
         int64_t axis = int_attr(n, "axis", 0);
         auto kr = std::make_unique<CopyKernel>();
         int64_t at = 0;
         for (uint32_t id : n.inputs) {
           const auto& dims = def.tensors[id].dims;
           Bound dst;
           dst.id = n.outputs[0];
           dst.desc = TensorDesc::make(nullptr, def.tensors[dst.id].dtype, dims.data(),
                                       static_cast<int>(dims.size()), out_strides.data());
           dst.byte_offset = static_cast<size_t>(at * out_strides[axis]) * itemsize(def, dst.id);
           at += dims[axis];
           kr->copies.emplace_back(dst, bound(def, id));
         }
         return kr;
       }},
  };
  return table;
}

// A float32 tensor of the plan rounded through a 16-bit type, to nearest even, by way of a
// 16-bit buffer of the node's (sized at load): what both 16-bit wrappers below do.
struct Narrowing {
  uint32_t id;
  std::vector<uint16_t> narrow;
  TensorDesc narrow_desc, wide_desc;  // wide_desc.data is set at each run

  Narrowing(const ModelDef& def, uint32_t tensor, DType type) : id(tensor) {
    const int64_t count = static_cast<int64_t>(def.tensors[tensor].nbytes / 4);
    narrow.resize(count);  // a move keeps the buffer, so narrow_desc stays valid
    narrow_desc = TensorDesc::make(narrow.data(), type, {count});
    wide_desc = TensorDesc::make(nullptr, DType::Float32, {count});
  }
  // The float32 values at src, rounded, into dst (src itself: in place).
  void round(void* src, void* dst) {
    wide_desc.data = src;
    k::copy(narrow_desc, wide_desc);
    wide_desc.data = dst;
    k::copy(wide_desc, narrow_desc);
  }
};

DType narrow_type(const NodeInfo& n, const std::string& kind, const char* what) {
  if (kind != "float16" && kind != "bfloat16") {
    refuse(n, std::string("unknown ") + what + " " + kind);
  }
  return kind == "float16" ? DType::Float16 : DType::BFloat16;
}

// atc's --precision_mode=allow_fp32_to_fp16 / _bf16 (node attr "precision"): a matrix op runs
// on 16-bit operands with float32 accumulation and gives a 16-bit result, as on the cube unit.
// Its constant operands were rounded by atc; here each run-time float32 input is rounded
// through the 16-bit type into a buffer of this node's (sized at load), the op reads those,
// and its output is rounded in place.
struct Rounded16Kernel : Model::Kernel {
  std::unique_ptr<Model::Kernel> inner;
  std::vector<Narrowing> operands;
  std::vector<std::vector<float>> rounded;  // rounded[i]: operands[i] as the op reads it
  std::optional<Narrowing> result;          // the output, rounded in place
  std::vector<void*> local;

  void run(void* const* ptrs) override {
    std::copy(ptrs, ptrs + local.size(), local.begin());
    for (size_t i = 0; i < operands.size(); ++i) {
      operands[i].round(ptrs[operands[i].id], rounded[i].data());
      local[operands[i].id] = rounded[i].data();
    }
    inner->run(local.data());
    result->round(ptrs[result->id], ptrs[result->id]);
  }
};

std::unique_ptr<Model::Kernel> rounded16(const ModelDef& def, const NodeInfo& n,
                                         std::unique_ptr<Model::Kernel> inner) {
  const DType narrow = narrow_type(n, string_attr(n, "precision"), "precision");
  if (n.op != "MatMul" && n.op != "Conv" && n.op != "Attention") {
    refuse(n, "a precision is given only to matrix ops (MatMul, Conv, Attention)");
  }
  auto kr = std::make_unique<Rounded16Kernel>();
  kr->inner = std::move(inner);
  kr->local.resize(def.tensors.size());
  std::set<uint32_t> seen;
  for (uint32_t id : n.inputs) {
    if (id == kNoTensor || !seen.insert(id).second) continue;
    const auto& t = def.tensors[id];
    if (t.storage != Storage::Weight && t.dtype == DType::Float32) {
      kr->operands.emplace_back(def, id, narrow);
      kr->rounded.emplace_back(t.nbytes / 4);
    }
  }
  kr->result.emplace(def, n.outputs[0], narrow);
  return kr;
}

// A float16 / bfloat16 model (node attr "round"): atc made the graph float32 and marks each
// op whose result stands for a 16-bit tensor; the op computes in float32 (the card's 16-bit
// kernels accumulate in float32 too) and its float32 outputs are rounded in place to the
// model's type, to nearest even, through a 16-bit buffer of this node's (sized at load).
struct RoundOutputsKernel : Model::Kernel {
  std::unique_ptr<Model::Kernel> inner;
  std::vector<Narrowing> outputs;
  void run(void* const* ptrs) override {
    inner->run(ptrs);
    for (auto& o : outputs) o.round(ptrs[o.id], ptrs[o.id]);
  }
};

std::unique_ptr<Model::Kernel> round_outputs(const ModelDef& def, const NodeInfo& n,
                                             std::unique_ptr<Model::Kernel> inner) {
  const DType narrow = narrow_type(n, string_attr(n, "round"), "rounding type");
  auto kr = std::make_unique<RoundOutputsKernel>();
  kr->inner = std::move(inner);
  for (uint32_t id : n.outputs) {
    if (def.tensors[id].dtype == DType::Float32) kr->outputs.emplace_back(def, id, narrow);
  }
  return kr;
}

}  // namespace

std::unique_ptr<Model::Kernel> make_kernel(const ModelDef& def, const NodeInfo& n) {
  std::string op = n.op == "LogSoftmax" ? "Softmax" : n.op == "AveragePool" ? "MaxPool" : n.op;
  auto it = factories().find(op);
  if (it == factories().end()) {
    throw ModelError("node " + n.name + ": op " + n.op + " is not supported by this engine "
                     "(the .om was written by a newer atc?)");
  }
  check_dtypes(def, n);
  check_shapes(def, n);
  auto kernel = it->second(def, n);
  if (!string_attr(n, "precision").empty()) kernel = rounded16(def, n, std::move(kernel));
  if (!string_attr(n, "round").empty()) kernel = round_outputs(def, n, std::move(kernel));
  return kernel;
}

}  // namespace npu::engine
