#include "ExecutionPaths.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "CardCheck.h"
#include "DeviceCheck.h"
#include "HostKernelDtypes.h"
#include "NPUGenerator.h"
#include "NPUStream.h"
#include "OpStats.h"
#include "Shadow.h"
#include "TaskTensor.h"

namespace torch_npu {
namespace {

void countCall(OpPath path, const c10::OperatorHandle& op) {
  OpStats::instance().count(path, c10::toString(op.schema().operator_name()));
}

// Ops whose outputs' sizes (or non-tensor results) depend on the data: no meta kernel can size
// them, so they wait for the stream (as torch_npu's and CUDA's versions of them do).
bool mayDependOnData(const c10::OperatorHandle& op) {
  static const std::set<std::string> names = {
      "aten::nonzero",       "aten::nonzero_static",   "aten::masked_select",
      "aten::_unique",       "aten::_unique2",          "aten::unique_dim",
      "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::index",
      "aten::repeat_interleave", "aten::bincount",     "aten::equal",
      "aten::_assert_async", "aten::histogram",         "aten::segment_reduce",
  };
  return names.count(op.schema().name()) > 0;
}

// Applies `f` to every npu tensor in `value` and `device` to every npu Device; lists are
// rebuilt with the same element type.
template <class TensorFn>
c10::IValue mapValue(const c10::IValue& value, const TensorFn& f, c10::Device device) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return (t.defined() && t.is_privateuseone()) ? c10::IValue(f(t)) : value;
  }
  if (value.isDevice()) {
    return value.toDevice().is_privateuseone() ? c10::IValue(device) : value;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    out.reserve(value.toTensorList().size());
    for (const at::Tensor& t : value.toTensorList().vec()) {
      out.push_back((t.defined() && t.is_privateuseone()) ? f(t) : t);
    }
    return out;
  }
  if (value.isList()) {
    const c10::List<c10::IValue> list = value.toList();
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue& e : list.vec()) out.push_back(mapValue(e, f, device));
    return out;
  }
  return value;
}

at::Tensor metaLike(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

at::Tensor hostAlias(const at::Tensor& t) { return TaskTensor(t).cpu(); }

// Indices of the arguments a schema writes (self of an in-place op, out= arguments), in order;
// the k-th returned alias is the k-th of them.
std::vector<size_t> writtenArguments(const c10::FunctionSchema& schema) {
  std::vector<size_t> written;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) written.push_back(i);
  }
  return written;
}

// Path 2a is possible when every result is a fresh tensor (list) or a written argument, and the
// op has a meta kernel to size the fresh ones.
bool canRunAsync(const c10::OperatorHandle& op) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) return false;
  for (const c10::Argument& ret : op.schema().returns()) {
    const c10::AliasInfo* alias = ret.alias_info();
    if (alias != nullptr && !alias->isWrite()) return false;  // a view
    const c10::TypePtr& type = ret.type();
    const bool tensor = type->kind() == c10::TypeKind::TensorType;
    const bool tensor_list = type->kind() == c10::TypeKind::ListType &&
                             type->containedType(0)->kind() == c10::TypeKind::TensorType;
    if (!tensor && !tensor_list) return false;
  }
  return true;
}

struct HostGuard {
  // The task runs CPU kernels on plain CPU tensors: autograd and our own keys have no business
  // there.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
};

// ---- arguments ----------------------------------------------------------------------------

// The npu device of the first npu tensor (or tensor list element, or npu Device argument, the
// current device when it has no index) among stack[begin:]; -1 when there is none.
c10::DeviceIndex npuDeviceOf(const torch::jit::Stack& stack, size_t begin) {
  c10::DeviceIndex found = -1;
  auto visit = [&](const at::Tensor& t) {
    if (found < 0 && t.defined() && t.is_privateuseone()) found = t.device().index();
  };
  for (size_t i = begin; i < stack.size() && found < 0; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      visit(v.toTensor());
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) visit(e.toTensor());
      }
    } else if (v.isDevice() && v.toDevice().is_privateuseone()) {  // a factory's device=
      found = v.toDevice().has_index()
                  ? v.toDevice().index()
                  : c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
    }
  }
  return found;
}

bool isGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (const auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

// Replaces each Generator argument (npu, or none: the device's default) by a CPU generator
// seeded from it, so a CPU kernel draws reproducible numbers from the npu generator's stream.
void replaceNPUGenerators(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const auto& arguments = schema.arguments();
  const size_t begin = stack->size() - arguments.size();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!isGeneratorType(arguments[i].type())) continue;
    c10::IValue& value = (*stack)[begin + i];
    std::optional<at::Generator> generator;
    c10::DeviceIndex device = npuDeviceOf(*stack, begin);
    if (value.isGenerator()) {
      generator = value.toGenerator();
      if (generator->device().type() != c10::DeviceType::PrivateUse1) continue;
      device = generator->device().index();
    }
    // A CPU generator in the task's stack would continue from its own state at each replay.
    value = c10::IValue(at::detail::createCPUGenerator(
        nextLaunchSeed(generator, device, "a random op run by the host-kernel path")));
  }
}

// The CPU kernel's arguments: stack[begin:begin + n] with every npu tensor replaced by its host
// alias and every npu Device by the CPU.
torch::jit::Stack hostArguments(const torch::jit::Stack& stack, size_t begin, size_t n) {
  torch::jit::Stack host;
  host.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    host.push_back(mapValue(stack[begin + i], hostAlias, c10::Device(c10::kCPU)));
  }
  return host;
}

// Replaces the op's arguments on the stack by its results.
void returnResults(torch::jit::Stack* stack, size_t num_args, std::vector<c10::IValue> results) {
  torch::jit::drop(*stack, num_args);
  for (c10::IValue& r : results) stack->push_back(std::move(r));
}

// True for an out= argument: keyword-only and written by the op.
bool isOutArgument(const c10::Argument& arg) {
  const c10::AliasInfo* alias = arg.alias_info();
  return arg.kwarg_only() && alias != nullptr && alias->isWrite();
}

// ---- path 2a: asynchronous host kernel ------------------------------------------------------

// The meta kernels' results, remembered. Many ops' meta kernels are Python (torch._refs and
// torch._meta_registrations, reached through the Python dispatcher): 20-45 us a call, most of
// what a tiny op costs on this path (erfinv on 64 floats: 49 us against 1.4 us on the CPU). A
// meta kernel is a function of its arguments' metadata and plain values alone, so its results
// are kept per signature of those: op, each npu tensor's dtype, sizes and strides, each scalar,
// list, string and device. A call with anything else among its arguments (a CPU tensor, whose
// values a meta kernel may read; an object) is not remembered; neither is a refusal, so bad
// input keeps raising its own message.
class MetaResultCache {
 public:
  static MetaResultCache& instance() {
    static MetaResultCache* cache = new MetaResultCache();  // leaked: used until exit
    return *cache;
  }

  // The signature of stack[begin:begin + n] for `op`; nullopt when a call cannot be remembered.
  static std::optional<std::string> signature(const c10::OperatorHandle& op,
                                              const torch::jit::Stack& stack, size_t begin,
                                              size_t n) {
    std::string key;
    key.reserve(128);
    const c10::FunctionSchema* schema = &op.schema();
    append(&key, &schema, sizeof(schema));
    for (size_t i = 0; i < n; ++i) {
      if (!appendValue(&key, stack[begin + i])) return std::nullopt;
    }
    return key;
  }

  std::optional<torch::jit::Stack> find(const std::string& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  void insert(std::string key, const torch::jit::Stack& results) {
    const std::lock_guard<std::mutex> lock(mutex_);
    // Shapes that change at every call (a growing sequence) would grow it without end.
    if (entries_.size() >= kCapacity) entries_.clear();
    entries_.emplace(std::move(key), results);
  }

 private:
  static constexpr size_t kCapacity = 4096;

  static void append(std::string* key, const void* data, size_t bytes) {
    key->append(static_cast<const char*>(data), bytes);
  }
  template <class T>
  static void appendPod(std::string* key, char tag, T value) {
    key->push_back(tag);
    append(key, &value, sizeof(value));
  }

  static bool appendValue(std::string* key, const c10::IValue& v) {
    if (v.isNone()) {
      key->push_back('N');
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        key->push_back('U');
        return true;
      }
      if (!t.is_privateuseone() || t.layout() != c10::kStrided) return false;
      appendPod(key, 'T', static_cast<int8_t>(t.scalar_type()));
      appendPod(key, '#', static_cast<int64_t>(t.dim()));
      append(key, t.sizes().data(), t.dim() * sizeof(int64_t));
      append(key, t.strides().data(), t.dim() * sizeof(int64_t));
    } else if (v.isInt()) {
      appendPod(key, 'i', v.toInt());
    } else if (v.isDouble()) {
      appendPod(key, 'd', v.toDouble());
    } else if (v.isBool()) {
      appendPod(key, 'b', v.toBool());
    } else if (v.isComplexDouble()) {
      const c10::complex<double> c = v.toComplexDouble();
      appendPod(key, 'c', c.real());
      appendPod(key, 'j', c.imag());
    } else if (v.isString()) {
      const std::string& s = v.toStringRef();
      appendPod(key, 's', s.size());
      key->append(s);
    } else if (v.isDevice()) {
      appendPod(key, 'D', static_cast<int16_t>(v.toDevice().type()));
      appendPod(key, '@', static_cast<int16_t>(v.toDevice().index()));
    } else if (v.isGenerator()) {
      key->push_back('G');  // a CPU generator by now (replaceNPUGenerators): no size in it
    } else if (v.isList()) {
      const c10::List<c10::IValue> list = v.toList();
      appendPod(key, 'L', list.size());
      for (const c10::IValue& e : list.vec()) {
        if (!appendValue(key, e)) return false;
      }
    } else {
      return false;
    }
    return true;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, torch::jit::Stack> entries_;
};

// Runs the meta kernel on meta twins of the arguments: the results' sizes, strides and dtypes.
// nullopt when there is no meta kernel for these arguments; sets *refused when the meta kernel
// raised (a data-dependent op, as Python meta registrations raise for those, or bad input):
// then the CPU kernel itself decides, synchronously, so an error carries its own message.
// With refused == nullptr the meta kernel's error propagates (and nothing is remembered).
std::optional<torch::jit::Stack> metaResults(const c10::OperatorHandle& op,
                                             const torch::jit::Stack& stack, size_t begin,
                                             bool* refused) {
  const size_t num_args = op.schema().arguments().size();
  std::optional<std::string> key;
  if (refused != nullptr) {
    key = MetaResultCache::signature(op, stack, begin, num_args);
    if (key) {
      if (std::optional<torch::jit::Stack> known = MetaResultCache::instance().find(*key)) {
        return known;
      }
    }
  }
  torch::jit::Stack meta;
  meta.reserve(num_args);
  for (size_t i = 0; i < num_args; ++i) {
    meta.push_back(mapValue(stack[begin + i], metaLike, c10::Device(c10::kMeta)));
  }
  if (refused == nullptr) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
    return meta;
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const c10::NotImplementedError&) {
    return std::nullopt;
  } catch (const std::exception&) {
    *refused = true;
    return std::nullopt;
  }
  if (key) MetaResultCache::instance().insert(std::move(*key), meta);
  return meta;
}

// What a queued CPU kernel needs: its arguments over host memory, the aliases of the fresh npu
// outputs it fills by copy, and the out= arguments it writes through CPU buffers.
struct HostTask {
  c10::OperatorHandle op;
  torch::jit::Stack host;
  std::vector<at::Tensor> output_aliases;                   // fresh outputs, in result order
  std::vector<std::pair<at::Tensor, at::Tensor>> out_copies;  // (CPU out, host alias)

  void operator()() {
    HostGuard guard;
    // The kernel replaces the stack's arguments by its results, so each run works on a copy:
    // a task captured into an NPU graph runs again at every replay.
    torch::jit::Stack results = host;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &results);
    for (auto& [cpu_out, alias] : out_copies) alias.copy_(cpu_out);
    // results holds the kernel's results; copy the fresh ones into the npu outputs.
    size_t next = 0;
    auto fill = [&](const at::Tensor& result) {
      at::Tensor& alias = output_aliases[next++];
      // An output the CPU kernel leaves empty where the meta kernel sized it (native_batch_norm's
      // saved statistics in eval mode) has no values to copy; one the meta kernel sizes empty
      // where the CPU kernel fills it (_embedding_bag's bookkeeping outputs) has no room: both
      // keep the meta kernel's sizes, which the caller already holds.
      if (alias.defined() && (result.numel() == 0) == (alias.numel() == 0)) alias.copy_(result);
    };
    const auto& returns = op.schema().returns();
    for (size_t r = 0; r < returns.size(); ++r) {
      if (returns[r].alias_info() != nullptr) continue;
      const c10::IValue& v = results[r];
      if (v.isTensor()) {
        fill(v.toTensor());
      } else {
        for (const at::Tensor& t : v.toTensorList().vec()) fill(t);
      }
    }
  }
};

// Path 2a. Returns false (stack untouched) when the meta kernel cannot size the outputs.
bool runAsync(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device,
              bool* meta_refused) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;
  const std::optional<torch::jit::Stack> meta = metaResults(op, *stack, begin, meta_refused);
  if (!meta) return false;

  // The results: written arguments (resized to the meta kernel's sizes) and fresh npu tensors.
  const std::vector<size_t> written = writtenArguments(schema);
  const auto& returns = schema.returns();
  const c10::Device npu(c10::DeviceType::PrivateUse1, device);
  std::vector<c10::IValue> results(returns.size());
  std::vector<at::Tensor> fresh_outputs;
  auto allocate = [&](const at::Tensor& m) {
    // An undefined result (a gradient output_mask turned off) stays undefined.
    at::Tensor t = m.defined()
                       ? at::empty_strided(m.sizes(), m.strides(), m.options().device(npu))
                       : at::Tensor();
    fresh_outputs.push_back(t);
    return t;
  };
  size_t next_written = 0;
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::IValue& sized = (*meta)[r];
    if (returns[r].alias_info() != nullptr) {
      TORCH_INTERNAL_ASSERT(next_written < written.size(), schema, ": unmatched returned alias");
      const c10::IValue& arg = (*stack)[begin + written[next_written++]];
      // Plainly: resizing the meta twin of an out= tensor already gave ATen's warning.
      if (arg.isTensor() && arg.toTensor().sizes() != sized.toTensor().sizes()) {
        arg.toTensor().resize_(sized.toTensor().sizes());
      }
      results[r] = arg;
    } else if (sized.isTensor()) {
      results[r] = allocate(sized.toTensor());
    } else {
      c10::List<at::Tensor> list;
      for (const at::Tensor& m : sized.toTensorList().vec()) list.push_back(allocate(m));
      results[r] = list;
    }
  }

  // Host aliases are taken after any out= resize.
  HostTask task{op, hostArguments(*stack, begin, num_args), {}, {}};
  // out= arguments: some CPU kernels resize their out tensor on the way (to an intermediate
  // shape), which a host alias of device memory cannot do. They get a CPU tensor of their own,
  // copied into the device tensor after the kernel.
  for (size_t i = 0; i < num_args; ++i) {
    if (!isOutArgument(schema.arguments()[i]) || !task.host[i].isTensor()) continue;
    const at::Tensor& device_out = (*stack)[begin + i].toTensor();
    if (!device_out.defined() || !device_out.is_privateuseone()) continue;
    // Of the size the meta kernel gave it (a kernel may read out's size: normal_out), so the
    // kernel resizes it only where it moves through an intermediate shape.
    at::Tensor cpu_out = at::empty_like(task.host[i].toTensor());
    task.out_copies.emplace_back(cpu_out, task.host[i].toTensor());
    task.host[i] = cpu_out;
  }
  task.output_aliases.reserve(fresh_outputs.size());
  for (const at::Tensor& t : fresh_outputs) {
    task.output_aliases.push_back(t.defined() ? hostAlias(t) : at::Tensor());
  }

  launchTask(currentStreamHandle(device), schema.name().c_str(), std::move(task));
  returnResults(stack, num_args, std::move(results));
  return true;
}

// ---- path 2b: synchronizing host kernel -----------------------------------------------------

// Waits for the stream, runs the CPU kernel on aliases, brings the results to the device.
void runSynchronizing(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                      c10::DeviceIndex device) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;
  getCurrentNPUStream(device).synchronize();

  torch::jit::Stack host = hostArguments(*stack, begin, num_args);
  // out= arguments: the result's size is only known once the kernel ran (masked_select), and a
  // host alias of device memory cannot grow. The kernel fills an empty CPU tensor instead (so it
  // sizes it without a warning); the device tensor is then resized as ATen resizes an out=
  // tensor, with its warning, and receives the values.
  std::vector<bool> in_cpu_buffer(num_args, false);
  for (size_t i = 0; i < num_args; ++i) {
    if (!isOutArgument(schema.arguments()[i]) || !host[i].isTensor()) continue;
    const at::Tensor& device_out = (*stack)[begin + i].toTensor();
    if (!device_out.defined() || !device_out.is_privateuseone()) continue;
    host[i] = at::empty({0}, device_out.options().device(c10::kCPU));
    in_cpu_buffer[i] = true;
  }
  {
    HostGuard guard;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &host);
  }
  const std::vector<size_t> written = writtenArguments(schema);
  const c10::Device npu(c10::DeviceType::PrivateUse1, device);
  size_t next_written = 0;
  std::vector<c10::IValue> results;
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const c10::IValue& v = host[r];
    if (schema.returns()[r].alias_info() != nullptr) {
      const size_t index = written[next_written++];
      const c10::IValue& arg = (*stack)[begin + index];
      if (arg.isTensor() && v.isTensor()) {
        const at::Tensor& out = arg.toTensor();
        const at::Tensor& got = v.toTensor();
        // An in-place self was written through its alias; an out= lives in its CPU buffer.
        if (in_cpu_buffer[index]) {
          // As ATen's kernels resize an out= tensor: the deprecation warning when it had elements.
          at::native::resize_output(out, got.sizes());
          if (got.numel() > 0) out.copy_(got);
        }
      }
      results.push_back(arg);
    } else {
      results.push_back(v);
      if (v.isTensor()) {
        if (v.toTensor().defined()) results.back() = v.toTensor().to(npu);
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> list;
        for (const at::Tensor& t : v.toTensorList().vec()) list.push_back(t.to(npu));
        results.back() = list;
      }
    }
  }
  returnResults(stack, num_args, std::move(results));
}

// ---- path 3: CPU fallback ---------------------------------------------------------------------

constexpr const char* kDisableVariable = "TORCH_NPU_FALLBACK_CPU_DISABLE";

bool fallbackDisabled() {
  const char* value = std::getenv(kDisableVariable);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// Copies the inputs to the CPU, runs the op there and copies the results back.
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.schema().operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(!fallbackDisabled(), "The operator [", name,
                              "] is not supported on NPU and ", kDisableVariable,
                              "=1 forbids the CPU fallback; unset it to run the op on the CPU");
  if (OpStats::instance().count(OpPath::kCpuFallback, name) == 1) {
    std::fprintf(stderr,
                 "Warning: CAUTION: The operator '%s' is not currently supported on the NPU "
                 "backend and will fall back to run on the CPU. This may have performance "
                 "implications.\n",
                 name.c_str());
    std::fflush(stderr);
  }
  replaceNPUGenerators(op.schema(), stack);
  // View ops must alias their input, which a copy to the CPU cannot do: every view op without a
  // composite kernel is registered for the npu (TensorFactories.cpp), so reaching here with one
  // is an error.
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

// ---- shadow execution: what paths 2b and 3 become without data (Shadow.h) -------------------

// An op that path 2a could not run, under NPU_SIM_SHADOW=1: nothing may read the data, so the
// synchronizing kernel and the CPU fallback are out. What remains is decided from shapes alone.
void runShadowed(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool meta_refused) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;
  const std::string& name = schema.name();
  if (name == "aten::equal") {  // all elements read as zero: equal when the shapes are
    const bool same = (*stack)[begin].toTensor().sizes() == (*stack)[begin + 1].toTensor().sizes();
    returnResults(stack, num_args, {c10::IValue(same)});
    return;
  }
  if (name == "aten::_assert_async") {  // assertions on values do not fire without values
    returnResults(stack, num_args, {});
    return;
  }
  if (mayDependOnData(op)) refuseDataDependent(c10::toString(schema.operator_name()));
  if (meta_refused) {  // bad input: the meta kernel raises its own message
    metaResults(op, *stack, begin, nullptr);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, c10::toString(schema.operator_name()),
                              ": shadow execution (NPU_SIM_SHADOW=1) sizes an op's results with "
                              "its meta kernel, and this op has none for these arguments (it "
                              "would run by the CPU fallback, which needs the data)");
}

}  // namespace

void runByCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // Shadow execution has no data to copy to the host: the op is sized as runOnHost sizes it.
  if (shadowExecution()) {
    runOnHost(op, stack);
    return;
  }
  const size_t begin = stack->size() - op.schema().arguments().size();
  checkDevices(op, *stack, begin);
  const c10::DeviceIndex device = npuDeviceOf(*stack, begin);
  std::optional<c10::DeviceGuard> guard;
  if (device >= 0) guard.emplace(c10::Device(c10::DeviceType::PrivateUse1, device));
  cpuFallback(op, stack);
}

void runUnregistered(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const card_check::BoxedBinding& binding = card_check::bindingFor(op);
  if (const card_check::OpRule* rule = binding.get(); C10_UNLIKELY(rule != nullptr)) {
    const size_t begin = stack->size() - op.schema().arguments().size();
    if (card_check::judge(*rule, card_check::firstDtype(*stack, begin), binding.op) ==
        card_check::Route::kCpuFallback) {
      runByCpuFallback(op, stack);
      return;
    }
  }
  runOnHost(op, stack);
}

void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // A dtype the card takes and ATen's CPU kernel does not: widened, run, narrowed back.
  if (runWidened(op, stack, &runOnHost)) return;
  const size_t begin = stack->size() - op.schema().arguments().size();
  // Before anything reads a tensor: the CPU kernel would read every device's memory, racing
  // with the other devices' streams, and the fallback would hide the mistake CUDA reports.
  checkDevices(op, *stack, begin);
  const c10::DeviceIndex device = npuDeviceOf(*stack, begin);
  if (device < 0) {
    cpuFallback(op, stack);
    return;
  }
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  replaceNPUGenerators(op.schema(), stack);
  bool meta_refused = false;
  if (canRunAsync(op) && runAsync(op, stack, device, &meta_refused)) {
    countCall(OpPath::kHostKernel, op);
    return;
  }
  if (shadowExecution()) {
    runShadowed(op, stack, meta_refused);
    return;
  }
  if (meta_refused || mayDependOnData(op)) {
    runSynchronizing(op, stack, device);
    countCall(OpPath::kHostKernelSync, op);
    return;
  }
  cpuFallback(op, stack);
}

}  // namespace torch_npu
