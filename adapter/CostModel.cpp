#include "CostModel.h"

#include <ATen/record_function.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
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
};
thread_local Frame* t_top = nullptr;

void addShapes(const c10::IValue& v, std::vector<OpShape>* out) {
  auto add = [out](const at::Tensor& t) {
    if (!t.defined()) return;
    out->push_back({t.sizes().vec(), static_cast<int64_t>(t.element_size()),
                    static_cast<int>(t.scalar_type())});
  };
  if (v.isTensor()) {
    add(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) add(t);
  }
}

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
  const uint64_t made = t_launches - frame->launches_at_start;
  if (frame->parent != nullptr) frame->parent->claimed += made;
  if (made == frame->claimed || t_stream == nullptr) return;  // no kernel of its own
  std::vector<OpShape> inputs, outputs;
  for (const c10::IValue& v : frame->inputs) addShapes(v, &inputs);
  for (const c10::IValue& v : fn.outputs()) addShapes(v, &outputs);
  const char* name = fn.name();
  const OpCost cost = modelOp(name, inputs, outputs);
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

bool named(const std::string& op, const char* name) {
  return op.size() > 6 && op.compare(0, 6, "aten::") == 0 && op.compare(6, std::string::npos, name) == 0;
}

// The cube's multiply-accumulate work of an op, 0 for a vector op.
double cubeFlops(const std::string& op, const std::vector<OpShape>& in,
                 const std::vector<OpShape>& out) {
  auto dim = [&](size_t i, size_t d) { return double(in[i].sizes[d]); };
  auto rank = [&](size_t i) { return i < in.size() ? in[i].sizes.size() : 0; };
  if (named(op, "mm") && rank(0) == 2 && rank(1) == 2) return 2 * dim(0, 0) * dim(0, 1) * dim(1, 1);
  if (named(op, "addmm") && rank(1) == 2 && rank(2) == 2) {
    return 2 * dim(1, 0) * dim(1, 1) * dim(2, 1);
  }
  if (named(op, "bmm") && rank(0) == 3 && rank(1) == 3) {
    return 2 * dim(0, 0) * dim(0, 1) * dim(0, 2) * dim(1, 2);
  }
  if (named(op, "baddbmm") && rank(1) == 3 && rank(2) == 3) {
    return 2 * dim(1, 0) * dim(1, 1) * dim(1, 2) * dim(2, 2);
  }
  const bool conv = named(op, "convolution") || named(op, "_convolution") ||
                    named(op, "convolution_overrideable");
  if ((conv && rank(1) >= 3 && !out.empty()) || (named(op, "convolution_backward") && rank(2) >= 3)) {
    // Each output element of a forward convolution is a dot product of Cin/groups x kernel
    // taps (the weight's sizes after its first); the backward computes the input's and the
    // weight's gradients, twice the forward's work.
    const size_t w = conv ? 1 : 2;
    double taps = 1;
    for (size_t d = 1; d < in[w].sizes.size(); ++d) taps *= dim(w, d);
    return conv ? 2 * numel(out[0]) * taps : 2 * 2 * numel(in[0]) * taps;
  }
  if (op.find("scaled_dot_product") != std::string::npos ||
      op.find("flash_attention") != std::string::npos) {
    // q [b, h, s, d] @ k^T [b, h, d, s_k], then @ v: 4 b h s s_k d; the backward about 2.5 x.
    const bool backward = op.find("backward") != std::string::npos;
    const size_t q = backward ? 1 : 0;
    if (rank(q) != 4 || rank(q + 1) != 4) return 0;
    const double f = 4 * dim(q, 0) * dim(q, 1) * dim(q, 2) * dim(q + 1, 2) * dim(q, 3);
    return backward ? 2.5 * f : f;
  }
  return 0;
}

}  // namespace

OpCost modelOp(const std::string& op, const std::vector<OpShape>& inputs,
               const std::vector<OpShape>& outputs) {
  OpCost c;
  for (const OpShape& s : inputs) c.bytes += numel(s) * double(s.element_size);
  for (const OpShape& s : outputs) c.bytes += numel(s) * double(s.element_size);
  const OpCostFigures& f = g_figures;
  c.flops = cubeFlops(op, inputs, outputs);
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
