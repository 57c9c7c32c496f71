#include "CostModel.h"

#include <ATen/record_function.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <unordered_map>
#include <memory>
#include <mutex>

#include "npu/runtime.h"

namespace torch_npu {
namespace {

OpCostFigures g_figures;
std::atomic<bool> g_installed{false};

// Totals per op, keyed by the op's name as RecordFunction gives it (the operator's own string,
// stable while the operator is registered): no string is built per call.
std::mutex g_totals_mutex;
std::unordered_map<const char*, OpCostTotal>& totals() {
  static auto* t = new std::unordered_map<const char*, OpCostTotal>();  // never destroyed
  return *t;
}

thread_local uint64_t t_launches = 0;     // kernel launches by this thread
thread_local void* t_stream = nullptr;    // the stream of the latest one

// One op in flight on this thread (RecordFunction nests per thread). The inputs are kept as
// they are (references) and measured only if the op turns out to have launched kernels.
struct Frame : at::ObserverContext {
  uint64_t launches_at_start = 0;
  uint64_t claimed = 0;  // launches made by the ops nested in this one
  Frame* parent = nullptr;
  c10::SmallVector<c10::IValue, 6> inputs;
  // One per op call: recycled per thread (a frame ends on the thread that started it) rather
  // than a malloc and a free each time.
  static void* operator new(size_t size);
  static void operator delete(void* p);
};

struct FreeFrame {
  FreeFrame* next;
};
thread_local FreeFrame* t_free_frames = nullptr;

void* Frame::operator new(size_t size) {
  if (FreeFrame* f = t_free_frames) {
    t_free_frames = f->next;
    return f;
  }
  return ::operator new(size);
}

void Frame::operator delete(void* p) {
  auto* f = static_cast<FreeFrame*>(p);
  f->next = t_free_frames;
  t_free_frames = f;
}
thread_local Frame* t_top = nullptr;

void addShapes(const c10::IValue& v, OpShapes* out) {
  auto add = [out](const at::Tensor& t) {
    if (!t.defined()) return;
    out->push_back({OpSizes(t.sizes().begin(), t.sizes().end()), static_cast<int64_t>(t.element_size()),
                    static_cast<int>(t.scalar_type())});
  };
  if (v.isTensor()) {
    add(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) add(t);
  }
}

constexpr char kAutogradWrapper[] = "GeneratedBackwardFor_";

// What the cost model tells apart: the cube's ops by their operands' layout, everything else a
// vector op. Decided once per operator name (kindOf), not by string compares at every call.
enum class OpKind : uint8_t {
  kVector, kMm, kAddmm, kBmm, kBaddbmm, kConvolution, kConvolutionBackward,
  kAttention, kAttentionBackward, kNpuAttention, kNpuAttentionGrad
};

bool named(const char* op, const char* name) {
  return std::strncmp(op, "aten::", 6) == 0 && std::strcmp(op + 6, name) == 0;
}

bool isAttention(const char* name) {
  // One search for most ops (this runs for every charged op), the specific names after it.
  if (std::strstr(name, "attention") == nullptr) return false;
  return std::strstr(name, "scaled_dot_product") != nullptr ||
         std::strstr(name, "flash_attention") != nullptr ||
         std::strstr(name, "npu_fusion_attention") != nullptr;
}

OpKind classify(const char* op) {
  if (named(op, "mm")) return OpKind::kMm;
  if (named(op, "addmm")) return OpKind::kAddmm;
  if (named(op, "bmm")) return OpKind::kBmm;
  if (named(op, "baddbmm")) return OpKind::kBaddbmm;
  if (named(op, "convolution") || named(op, "_convolution") ||
      named(op, "convolution_overrideable")) {
    return OpKind::kConvolution;
  }
  if (named(op, "convolution_backward")) return OpKind::kConvolutionBackward;
  if (!isAttention(op)) return OpKind::kVector;
  const bool backward = std::strstr(op, "backward") != nullptr || std::strstr(op, "_grad") != nullptr;
  if (std::strstr(op, "npu_fusion_attention") != nullptr) {
    return backward ? OpKind::kNpuAttentionGrad : OpKind::kNpuAttention;
  }
  return backward ? OpKind::kAttentionBackward : OpKind::kAttention;
}

// classify() per operator name, remembered per thread by the name's address (RecordFunction
// gives each operator its own stable string).
OpKind kindOf(const char* name) {
  thread_local std::unordered_map<const char*, OpKind> kinds;
  auto it = kinds.find(name);
  if (it == kinds.end()) it = kinds.emplace(name, classify(name)).first;
  return it->second;
}

bool attentionKind(OpKind k) { return k >= OpKind::kAttention; }

// The positions of the arguments that matter, from the ops' schemas (adapter/ops/NpuLibrary.cpp
// and ATen's native_functions.yaml).
AttentionArgs attentionArgs(OpKind kind, const c10::SmallVector<c10::IValue, 6>& in) {
  AttentionArgs a;
  auto flag = [&](size_t i) { return i < in.size() && in[i].isBool() && in[i].toBool(); };
  auto integer = [&](size_t i, int64_t otherwise) {
    return i < in.size() && in[i].isInt() ? in[i].toInt() : otherwise;
  };
  auto list = [&](size_t i) {
    return i < in.size() && in[i].isIntList() ? in[i].toIntVector() : std::vector<int64_t>();
  };
  const bool backward = kind == OpKind::kNpuAttentionGrad;
  if (kind == OpKind::kNpuAttention || backward) {
    // forward: q k v head_num input_layout pse padding_mask atten_mask ... sparse_mode (16);
    // grad: q k v dy head_num input_layout pse padding_mask atten_mask ... sparse_mode (24).
    const size_t layout = backward ? 5 : 4, mask = backward ? 8 : 7;
    const size_t seq_q = backward ? 22 : 14, sparse = backward ? 24 : 16;
    if (layout < in.size() && in[layout].isString()) a.layout = in[layout].toStringRef();
    const int64_t mode = integer(sparse, 0);
    const bool masked = mask < in.size() && in[mask].isTensor();
    a.causal = masked && (mode == 2 || mode == 3 || mode == 7 || mode == 8);
    a.bottom_right = mode == 3 || mode == 7;
    a.seq_q = list(seq_q);
    a.seq_k = list(seq_q + 1);
  } else {
    // SDPA: (q, k, v, attn_bias, dropout_p, is_causal, ...); its backward: (grad_out, q, k, v,
    // attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    // dropout_p, is_causal, ...). Flash's own forms: is_causal after dropout_p as well.
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].isBool()) {
        a.causal = flag(i);
        break;
      }
    }
  }
  return a;
}

OpCost modelKind(OpKind kind, const OpShapes& inputs, const OpShapes& outputs,
                 const AttentionArgs& attention);

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn) {
  auto frame = std::make_unique<Frame>();
  frame->launches_at_start = t_launches;
  frame->parent = t_top;
  const c10::ArrayRef<const c10::IValue> inputs = fn.inputs();
  frame->inputs.assign(inputs.begin(), inputs.end());
  t_top = frame.get();
  return frame;
}

void onEnd(const at::RecordFunction& fn, at::ObserverContext* context) {
  auto* frame = static_cast<Frame*>(context);
  if (frame == nullptr) return;
  t_top = frame->parent;
  const char* name = fn.name();
  if (frame->parent != nullptr && name[0] == 'G' &&
      std::strncmp(name, kAutogradWrapper, sizeof(kAutogradWrapper) - 1) == 0) {
    // The autograd.Function that torch.library.register_autograd puts under an op (npu_*
    // fused ops): its arguments are rearranged, so its kernels are charged to the op above it,
    // which has the schema's arguments and name.
    frame->parent->claimed += frame->claimed;
    return;
  }
  const uint64_t made = t_launches - frame->launches_at_start;
  if (frame->parent != nullptr) frame->parent->claimed += made;
  if (made == frame->claimed || t_stream == nullptr) return;  // no kernel of its own
  OpShapes inputs, outputs;
  for (const c10::IValue& v : frame->inputs) addShapes(v, &inputs);
  for (const c10::IValue& v : fn.outputs()) addShapes(v, &outputs);
  const OpKind kind = kindOf(name);
  const OpCost cost = modelKind(kind, inputs, outputs,
                                attentionKind(kind) ? attentionArgs(kind, frame->inputs) : AttentionArgs{});
  (void)npuSimCharge(static_cast<npuStream_t>(t_stream), name, cost.ns);
  std::lock_guard<std::mutex> lock(g_totals_mutex);
  OpCostTotal& total = totals()[name];
  if (total.calls == 0) total.name = name;
  ++total.calls;
  total.ns += cost.ns;
  total.flops += cost.flops;
}

double numel(const OpShape& s) {
  double n = 1;
  for (int64_t d : s.sizes) n *= double(d);
  return n;
}


// Query-key pairs one sequence computes under the mask: all sq x sk, or under a causal mask
// the pairs on and below the diagonal (top-left aligned, or bottom-right: ending at the last key).
double pairs(double sq, double sk, const AttentionArgs& a) {
  if (!a.causal) return sq * sk;
  double n = 0;
  const double shift = a.bottom_right ? sk - sq : 0;
  // Rows i see min(sk, max(0, i + 1 + shift)) keys: a ramp, then a plateau at sk.
  for (double i = 0; i < sq; ++i) n += std::min(sk, std::max(0.0, i + 1 + shift));
  return n;
}

// Sum over sequences and heads of (query-key pairs) x head dim, from q's and k's shapes in the
// op's layout: 4-D BNSD / BSND, 3-D BSH / SBH (the hidden size is heads x head dim, which is all
// the product needs), TND with the cumulative sequence ends.
double attentionPairs(const AttentionArgs& a, const OpSizes& q, const OpSizes& k) {
  const std::string& l = a.layout;
  if (l == "TND" && q.size() == 3) {
    const double width = double(q[1]) * double(q[2]);
    if (a.seq_q.empty() || a.seq_q.size() != a.seq_k.size()) return pairs(q[0], k[0], a) * width;
    double n = 0;
    for (size_t i = 0; i < a.seq_q.size(); ++i) {
      const double sq = double(a.seq_q[i] - (i ? a.seq_q[i - 1] : 0));
      const double sk = double(a.seq_k[i] - (i ? a.seq_k[i - 1] : 0));
      n += pairs(sq, sk, a);
    }
    return n * width;
  }
  if (q.size() == 4 && k.size() == 4) {
    if (l == "BSND") return double(q[0]) * double(q[2]) * double(q[3]) * pairs(q[1], k[1], a);
    return double(q[0]) * double(q[1]) * double(q[3]) * pairs(q[2], k[2], a);  // BNSD
  }
  if (q.size() == 3 && k.size() == 3) {
    if (l == "SBH") return double(q[1]) * double(q[2]) * pairs(q[0], k[0], a);
    return double(q[0]) * double(q[2]) * pairs(q[1], k[1], a);  // BSH
  }
  return 0;
}

// The cube's multiply-accumulate work of an op, 0 for a vector op.
double cubeFlops(OpKind kind, const OpShapes& in, const OpShapes& out,
                 const AttentionArgs& attention) {
  auto dim = [&](size_t i, size_t d) { return double(in[i].sizes[d]); };
  auto rank = [&](size_t i) { return i < in.size() ? in[i].sizes.size() : 0; };
  if (kind == OpKind::kVector) return 0;
  if (kind == OpKind::kMm && rank(0) == 2 && rank(1) == 2) return 2 * dim(0, 0) * dim(0, 1) * dim(1, 1);
  if (kind == OpKind::kAddmm && rank(1) == 2 && rank(2) == 2) {
    return 2 * dim(1, 0) * dim(1, 1) * dim(2, 1);
  }
  if (kind == OpKind::kBmm && rank(0) == 3 && rank(1) == 3) {
    return 2 * dim(0, 0) * dim(0, 1) * dim(0, 2) * dim(1, 2);
  }
  if (kind == OpKind::kBaddbmm && rank(1) == 3 && rank(2) == 3) {
    return 2 * dim(1, 0) * dim(1, 1) * dim(1, 2) * dim(2, 2);
  }
  const bool conv = kind == OpKind::kConvolution;
  if ((conv && rank(1) >= 3 && !out.empty()) ||
      (kind == OpKind::kConvolutionBackward && rank(2) >= 3)) {
    // Each output element of a forward convolution is a dot product of Cin/groups x kernel
    // taps (the weight's sizes after its first); the backward computes the input's and the
    // weight's gradients, twice the forward's work.
    const size_t w = conv ? 1 : 2;
    double taps = 1;
    for (size_t d = 1; d < in[w].sizes.size(); ++d) taps *= dim(w, d);
    return conv ? 2 * numel(out[0]) * taps : 2 * 2 * numel(in[0]) * taps;
  }
  if (attentionKind(kind)) {
    // Q K^T then P V: 4 x (query positions) x (key positions each sees) x (heads x head dim);
    // the backward recomputes P and makes dQ, dK, dV: about 2.5 x.
    const bool backward = kind == OpKind::kAttentionBackward || kind == OpKind::kNpuAttentionGrad;
    const size_t q = kind == OpKind::kAttentionBackward ? 1 : 0;  // SDPA's starts with grad_out
    if (rank(q) < 3 || rank(q + 1) < 3) return 0;
    const double f = 4 * attentionPairs(attention, in[q].sizes, in[q + 1].sizes);
    return backward ? 2.5 * f : f;
  }
  return 0;
}

OpCost modelKind(OpKind kind, const OpShapes& inputs, const OpShapes& outputs,
                 const AttentionArgs& attention) {
  OpCost c;
  for (const OpShape& s : inputs) c.bytes += numel(s) * double(s.element_size);
  for (const OpShape& s : outputs) c.bytes += numel(s) * double(s.element_size);
  const OpCostFigures& f = g_figures;
  c.flops = cubeFlops(kind, inputs, outputs, attention);
  c.cube = c.flops > 0;
  double tflops = f.vector_tflops, efficiency = f.vector_efficiency;
  if (c.cube) {
    // The operands' dtype: the first floating-point input's (an attention backward's last
    // inputs are its random generator's int64 seed and offset).
    auto dtype = c10::kFloat;
    for (const OpShape& s : inputs) {
      if (c10::isFloatingType(static_cast<c10::ScalarType>(s.dtype))) {
        dtype = static_cast<c10::ScalarType>(s.dtype);
        break;
      }
    }
    tflops = dtype == c10::kHalf       ? f.cube_tflops_fp16
             : dtype == c10::kBFloat16 ? f.cube_tflops_bf16
                                       : f.cube_tflops_fp32;
    efficiency = f.cube_efficiency;
  } else {
    for (const OpShape& s : outputs) c.flops += numel(s);
  }
  // 1 TFLOPS is 1e3 flop per ns; 1 GB/s is 1 byte per ns.
  const double compute_ns = tflops > 0 ? c.flops / (tflops * 1e3 * efficiency) : 0;
  const double memory_ns = f.hbm_gbps > 0 ? c.bytes / (f.hbm_gbps * f.hbm_efficiency) : 0;
  c.ns = static_cast<uint64_t>(std::max(compute_ns, memory_ns) + f.launch_overhead_us * 1e3);
  return c;
}

}  // namespace

OpCost modelOp(const std::string& op, const OpShapes& inputs, const OpShapes& outputs,
               const AttentionArgs& attention) {
  return modelKind(classify(op.c_str()), inputs, outputs, attention);
}

void installCostModel(const OpCostFigures& figures) {
  TORCH_CHECK(!g_installed.load(), "the cost model is installed already (once per process)");
  g_figures = figures;
  at::addGlobalCallback(at::RecordFunctionCallback(&onStart, &onEnd)
                            .needsInputs(true)
                            .needsOutputs(true)
                            .scopes({at::RecordScope::FUNCTION}));
  g_installed.store(true, std::memory_order_release);
}

bool costModelInstalled() { return g_installed.load(std::memory_order_relaxed); }

void noteKernelLaunch(void* stream) {
  ++t_launches;
  t_stream = stream;
}

std::vector<OpCostTotal> costTotals() {
  std::lock_guard<std::mutex> lock(g_totals_mutex);
  std::vector<OpCostTotal> out;
  for (const auto& [name, total] : totals()) out.push_back(total);
  std::sort(out.begin(), out.end(),
            [](const OpCostTotal& a, const OpCostTotal& b) { return a.name < b.name; });
  return out;
}

void resetCostTotals() {
  std::lock_guard<std::mutex> lock(g_totals_mutex);
  totals().clear();
}

}  // namespace torch_npu
