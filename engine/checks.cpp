// The checks a node passes before it is prepared: dtypes and shapes (see engine_internal.h).
// The shape rules are atc's shape inference (atc/ops.py `infer`) restated: for each op the
// output's dims are derived from the inputs' dims and the attributes and must equal what the
// file says. A hand-made or damaged .om whose tensors disagree is refused at load, naming the
// node, instead of letting a kernel index past a buffer.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "engine/engine_internal.h"

namespace npu::engine {

namespace k = npu::kernels;
using k::DType;
using Dims = std::vector<int64_t>;

namespace {

std::string str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

const Dims& dims(const ModelDef& def, uint32_t id) { return def.tensors[id].dims; }

void need_outputs(const NodeInfo& n, size_t count) {
  if (n.outputs.size() != count) {
    refuse(n, "has " + std::to_string(n.outputs.size()) + " outputs, expected " +
                  std::to_string(count) + " (corrupt model)");
  }
}

// Numpy broadcasting of a and b (dimensions aligned on the right; 1 stretches).
Dims broadcast(const NodeInfo& n, const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (x != y && x != 1 && y != 1) {
      refuse(n, "shapes " + str(a) + " and " + str(b) + " do not broadcast");
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

void expect(const ModelDef& def, const NodeInfo& n, uint32_t out, const Dims& want) {
  if (dims(def, out) != want) {
    refuse(n, "output " + def.tensors[out].name + " has shape " + str(dims(def, out)) +
                  ", but its inputs give " + str(want) + " (corrupt model)");
  }
}

// Spatial output size of a window of `k` with the given padding, stride and dilation (ceil
// mode: a last partial window that starts inside the input or its left padding counts).
int64_t window_out(int64_t size, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                   bool ceil_mode) {
  int64_t span = size + 2 * pad - dilation * (k - 1) - 1;
  if (span < 0 || stride < 1) return -1;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

Dims matmul_shape(const NodeInfo& n, Dims a, Dims b) {
  bool ta = int_attr(n, "trans_a", 0) != 0, tb = int_attr(n, "trans_b", 0) != 0;
  if (a.empty() || b.empty()) refuse(n, "MatMul of a scalar");
  // trans_b reads B's last two dims swapped (any rank: atc's few-row weight layout, a folded
  // Transpose of K in attention); trans_a needs 2-D operands.
  if (ta && (a.size() != 2 || b.size() != 2)) {
    refuse(n, "a transposed A is supported for 2-D matrices only");
  }
  if (tb && b.size() < 2) refuse(n, "a transposed B needs at least 2 dimensions");
  if (ta) std::swap(a[0], a[1]);
  if (tb) std::swap(b[b.size() - 2], b[b.size() - 1]);
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() != b[b.size() - 2]) {
    refuse(n, "inner dimensions differ: " + str(a) + " x " + str(b));
  }
  Dims out = broadcast(n, Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2));
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  return out;
}

const std::set<std::string>& same_shape_ops() {
  static const std::set<std::string> ops = {
      "Relu", "Sigmoid", "Tanh", "Erf", "Gelu", "Sqrt", "Exp", "Log", "Neg", "Abs",
      "Reciprocal", "Sin", "Cos", "LeakyRelu", "Clip", "IsNaN", "IsInf", "Not", "Softmax",
      "LogSoftmax", "LayerNormalization", "BatchNormalization", "Cast"};
  return ops;
}

const std::set<std::string>& broadcast_ops() {
  static const std::set<std::string> ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual", "Greater",
      "GreaterOrEqual", "And", "Or", "Where"};
  return ops;
}

}  // namespace

void check_dtypes(const ModelDef& def, const NodeInfo& n) {
  // Math in float32; data movement in any dtype; Gather's indices int64 / int32; Not / And /
  // Or on bool; a comparison's or Where's two operands of one dtype.
  static const std::set<std::string> any_dtype = {
      "Reshape", "Transpose", "Concat", "Split", "Gather", "GatherElements", "Slice", "Expand",
      "Cast", "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
  static const std::set<std::string> on_bool = {"Not", "And", "Or"};
  static const std::set<std::string> paired = {"Where", "Equal", "Less", "LessOrEqual",
                                               "Greater", "GreaterOrEqual"};
  auto dtype = [&](size_t i) { return def.tensors[n.inputs[i]].dtype; };
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == kNoTensor) continue;
    DType t = dtype(i);
    const char* wanted = nullptr;
    if (n.op == "Attention" && i == 3) {
      if (t != DType::Bool) wanted = "a bool mask";
    } else if ((n.op == "Gather" || n.op == "GatherElements") && i == 1) {
      if (t != DType::Int64 && t != DType::Int32) wanted = "int64 or int32 indices";
    } else if (on_bool.count(n.op)) {
      if (t != DType::Bool) wanted = "bool";
    } else if (!any_dtype.count(n.op) && t != DType::Float32) {
      wanted = "float32";
    }
    if (wanted) {
      refuse(n, "tensor " + def.tensors[n.inputs[i]].name + " is " + k::dtype_name(t) +
                    "; the engine takes " + wanted + " there");
    }
  }
  size_t m = n.inputs.size();
  if (paired.count(n.op) && m >= 2 && dtype(m - 1) != dtype(m - 2)) {
    refuse(n, "its operands " + def.tensors[n.inputs[m - 2]].name + " and " +
                  def.tensors[n.inputs[m - 1]].name + " have different dtypes");
  }
}

void check_shapes(const ModelDef& def, const NodeInfo& n) {
  if (n.inputs.empty() || n.inputs[0] == kNoTensor || n.outputs.empty()) {
    refuse(n, "has no input or no output (corrupt model)");
  }
  const Dims& x = dims(def, n.inputs[0]);
  auto input = [&](size_t i) -> const Dims& {
    if (i >= n.inputs.size() || n.inputs[i] == kNoTensor) {
      refuse(n, "input " + std::to_string(i) + " is missing (corrupt model)");
    }
    return dims(def, n.inputs[i]);
  };
  auto optional = [&](size_t i) { return i < n.inputs.size() && n.inputs[i] != kNoTensor; };
  const std::string& op = n.op;

  if (same_shape_ops().count(op)) {
    need_outputs(n, 1);
    expect(def, n, n.outputs[0], x);
    if (op == "LayerNormalization") {
      int64_t axis = int_attr(n, "axis", -1);
      if (axis < 0 || axis >= static_cast<int64_t>(x.size())) refuse(n, "bad axis");
      int64_t cols = numel(Dims(x.begin() + axis, x.end()));
      for (size_t i = 1; i < 3; ++i) {
        if (optional(i) && numel(input(i)) != cols) {
          refuse(n, "scale / bias have " + std::to_string(numel(input(i))) +
                        " values for rows of " + std::to_string(cols));
        }
      }
    }
    if (op == "BatchNormalization") {
      if (x.size() < 2) refuse(n, "expects an input of rank 2 or more");
      if (numel(input(1)) != x[1] || numel(input(2)) != x[1]) {
        refuse(n, "scale / shift do not have one value per channel");
      }
    }
    if ((op == "Softmax" || op == "LogSoftmax") &&
        (int_attr(n, "axis", -1) < -static_cast<int64_t>(x.size()) ||
         int_attr(n, "axis", -1) >= static_cast<int64_t>(x.size()))) {
      refuse(n, "bad axis");
    }
    return;
  }
  if (broadcast_ops().count(op)) {
    need_outputs(n, 1);
    Dims want = broadcast(n, x, input(1));
    if (op == "Where") want = broadcast(n, want, input(2));
    expect(def, n, n.outputs[0], want);
    return;
  }
  if (op == "Expand") {
    need_outputs(n, 1);
    const Dims& out = dims(def, n.outputs[0]);
    expect(def, n, n.outputs[0], broadcast(n, x, out));
    return;
  }
  if (op == "MatMul") {
    need_outputs(n, 1);
    Dims want = matmul_shape(n, x, input(1));
    expect(def, n, n.outputs[0], want);
    if (optional(2) && broadcast(n, input(2), want) != want) {
      refuse(n, "the bias " + str(input(2)) + " does not broadcast to " + str(want));
    }
    return;
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    need_outputs(n, 1);
    if (x.size() != 4) refuse(n, "expects a rank-4 input");
    Dims k;
    int64_t channels = x[1];
    if (op == "Conv") {
      const Dims& w = input(1);
      int64_t groups = int_attr(n, "group", 1);
      if (w.size() != 4 || groups < 1 || x[1] % groups || w[0] % groups ||
          w[1] * groups != x[1]) {
        refuse(n, "weight " + str(w) + " does not fit input " + str(x) + " with " +
                      std::to_string(groups) + " groups");
      }
      if (optional(2) && numel(input(2)) != w[0]) refuse(n, "bias is not one per channel");
      k = {w[2], w[3]};
      channels = w[0];
    } else {
      k = ints_attr(n, "kernel_shape", {});
    }
    auto s = ints_attr(n, "strides", {1, 1}), d = ints_attr(n, "dilations", {1, 1});
    auto p = ints_attr(n, "pads", {0, 0, 0, 0});
    if (k.size() != 2 || s.size() != 2 || d.size() != 2 || p.size() != 4) {
      refuse(n, "2-D windows only");
    }
    bool ceil_mode = int_attr(n, "ceil_mode", 0) != 0;
    Dims want = {x[0], channels, window_out(x[2], k[0], p[0], s[0], d[0], ceil_mode),
                 window_out(x[3], k[1], p[1], s[1], d[1], ceil_mode)};
    if (op == "Conv" && int_attr(n, "max_pool", 0) != 0) {  // atc's fused 2x2 / stride 2 pool
      const Dims conv = want;
      want[2] /= 2;
      want[3] /= 2;
      if (conv[2] >= 1 && conv[3] >= 1 && (want[2] < 1 || want[3] < 1)) {
        refuse(n, "the fused 2x2 / stride 2 max pool halves the convolution's output " +
                      str(conv) + " to " + str(want) + ": it needs at least 2 rows and 2 columns");
      }
    }
    if (want[2] < 1 || want[3] < 1) refuse(n, "the window does not fit the input");
    expect(def, n, n.outputs[0], want);
    return;
  }
  if (op == "GlobalAveragePool") {
    need_outputs(n, 1);
    if (x.size() != 4) refuse(n, "expects a rank-4 input");
    expect(def, n, n.outputs[0], {x[0], x[1], 1, 1});
    return;
  }
  if (op == "Transpose") {
    need_outputs(n, 1);
    auto perm = ints_attr(n, "perm", {});
    Dims sorted = perm, want;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i] != static_cast<int64_t>(i)) sorted.clear();
    }
    if (perm.size() != x.size() || sorted.size() != x.size()) {
      refuse(n, "perm is not a permutation of the input's dimensions");
    }
    for (int64_t v : perm) want.push_back(x[v]);
    expect(def, n, n.outputs[0], want);
    return;
  }
  if (op == "Concat" || op == "Split") {
    int64_t axis = int_attr(n, "axis", 0);
    const Dims& whole = op == "Concat" ? dims(def, n.outputs[0]) : x;
    if (op == "Concat") need_outputs(n, 1);
    if (axis < 0 || axis >= static_cast<int64_t>(whole.size())) refuse(n, "bad axis");
    const auto& parts = op == "Concat" ? n.inputs : n.outputs;
    int64_t total = 0;
    for (uint32_t id : parts) {
      if (id == kNoTensor) refuse(n, "a part is missing (corrupt model)");
      Dims d = dims(def, id);
      if (d.size() != whole.size()) refuse(n, "parts of different ranks");
      total += d[axis];
      d[axis] = whole[axis];
      if (d != whole) refuse(n, "part " + def.tensors[id].name + " does not fit " + str(whole));
    }
    if (total != whole[axis]) refuse(n, "the parts do not add up along the axis");
    return;
  }
  if (op == "Gather") {
    need_outputs(n, 1);
    int64_t axis = int_attr(n, "axis", 0);
    if (axis < 0 || axis >= static_cast<int64_t>(x.size())) refuse(n, "bad axis");
    Dims want(x.begin(), x.begin() + axis);
    const Dims& idx = input(1);
    want.insert(want.end(), idx.begin(), idx.end());
    want.insert(want.end(), x.begin() + axis + 1, x.end());
    expect(def, n, n.outputs[0], want);
    return;
  }
  if (op == "GatherElements") {
    need_outputs(n, 1);
    int64_t axis = int_attr(n, "axis", 0);
    const Dims& idx = input(1);
    if (axis < 0 || axis >= static_cast<int64_t>(x.size()) || idx.size() != x.size()) {
      refuse(n, "bad axis, or indices of another rank than the data");
    }
    for (size_t d = 0; d < x.size(); ++d) {
      if (static_cast<int64_t>(d) != axis && idx[d] > x[d]) {
        refuse(n, "the indices are larger than the data outside the gather axis");
      }
    }
    expect(def, n, n.outputs[0], idx);
    return;
  }
  if (op == "Attention") {
    // q [.., Sq, D], k [.., Skv, D] (or its transpose [.., D, Skv]), v [.., Skv, Dv], the
    // leading dims equal; out [.., Sq, Dv]; mask [Sq, Skv] (any leading 1s).
    // perm_q / perm_k / perm_v (atc folded a Transpose in): the operand is Transpose(input,
    // perm); perm_out: the output is Transpose(result, perm). 4-D only.
    need_outputs(n, 1);
    auto permuted = [&](const Dims& d, const char* key) {
      const Attr* a = n.attr(key);
      if (a == nullptr) return d;
      std::vector<int64_t> perm = ints_attr(n, key, {}), seen(4, 0);
      if (d.size() != 4 || perm.size() != 4) refuse(n, std::string(key) + " needs 4-D tensors");
      Dims out(4);
      for (int i = 0; i < 4; ++i) {
        if (perm[i] < 0 || perm[i] > 3 || seen[perm[i]]++) {
          refuse(n, std::string(key) + " is not a permutation of 4 dims");
        }
        out[i] = d[perm[i]];
      }
      return out;
    };
    const Dims xq = permuted(x, "perm_q");
    Dims kd = permuted(input(1), "perm_k");
    const Dims vd = permuted(input(2), "perm_v");
    const Dims& x = xq;
    if (x.size() < 3 || kd.size() != x.size() || vd.size() != x.size()) {
      refuse(n, "q, k and v must have one rank of at least 3");
    }
    size_t r = x.size();
    if (int_attr(n, "k_transposed", 0)) std::swap(kd[r - 1], kd[r - 2]);
    if (!std::equal(x.begin(), x.end() - 2, kd.begin()) ||
        !std::equal(x.begin(), x.end() - 2, vd.begin()) || kd[r - 1] != x[r - 1] ||
        kd[r - 2] != vd[r - 2]) {
      refuse(n, "q " + str(x) + ", k " + str(input(1)) + " and v " + str(vd) + " do not fit");
    }
    if (optional(3) && numel(input(3)) != x[r - 2] * kd[r - 2]) {
      refuse(n, "the mask is not [Sq, Skv]");
    }
    Dims want(x.begin(), x.end() - 1);
    want.push_back(vd.back());
    if (const Attr* a = n.attr("perm_out"); a != nullptr) {  // the output is want transposed
      if (want.size() != 4) refuse(n, "perm_out needs 4-D tensors");
      const std::vector<int64_t> perm = ints_attr(n, "perm_out", {});
      std::vector<int64_t> seen(4, 0);
      Dims t(4);
      for (int i = 0; i < 4; ++i) {
        if (perm.size() != 4 || perm[i] < 0 || perm[i] > 3 || seen[perm[i]]++) {
          refuse(n, "perm_out is not a permutation of 4 dims");
        }
        t[i] = want[perm[i]];
      }
      want = t;
    }
    expect(def, n, n.outputs[0], want);
    return;
  }
  if (op == "Reshape") {
    need_outputs(n, 1);
    if (def.tensors[n.inputs[0]].nbytes != def.tensors[n.outputs[0]].nbytes) {
      refuse(n, "input and output sizes differ");
    }
    return;
  }
  // Slice and the reductions check their attributes against the shapes where they are
  // prepared (ops.cpp), since the attributes are what they turn into views.
}

}  // namespace npu::engine
