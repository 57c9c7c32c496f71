#include "HostKernel.h"

#include <atomic>
#include <mutex>
#include <set>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "DeviceCheck.h"
#include "Fallback.h"
#include "OpStats.h"
#include "NPUStream.h"
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

// Path 1 is possible when every result is a fresh tensor (list) or a written argument, and the
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

// Path 1. Returns false (stack untouched) when the meta kernel cannot size the outputs.
bool runAsync(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device,
              bool* meta_refused) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;

  torch::jit::Stack meta;
  meta.reserve(num_args);
  for (size_t i = 0; i < num_args; ++i) {
    meta.push_back(mapValue((*stack)[begin + i], metaLike, c10::Device(c10::kMeta)));
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const c10::NotImplementedError&) {
    return false;  // no meta kernel for these arguments
  } catch (const std::exception&) {
    // The meta kernel refused: a data-dependent op (Python meta registrations raise for those)
    // or bad input. Either way the CPU kernel itself decides, synchronously (path 2), so an
    // error carries the CPU kernel's own message.
    *meta_refused = true;
    return false;
  }

  const std::vector<size_t> written = writtenArguments(schema);
  const auto& returns = schema.returns();
  const c10::Device npu(c10::DeviceType::PrivateUse1, device);
  std::vector<c10::IValue> results(returns.size());
  std::vector<at::Tensor> fresh_outputs;       // npu outputs the task fills by copy
  std::vector<size_t> fresh_slots;             // their positions in the flattened result
  size_t next_written = 0;
  for (size_t r = 0; r < returns.size(); ++r) {
    if (returns[r].alias_info() != nullptr) {
      TORCH_INTERNAL_ASSERT(next_written < written.size(), schema, ": unmatched returned alias");
      const c10::IValue& arg = (*stack)[begin + written[next_written++]];
      if (arg.isTensor()) {
        const at::Tensor& out = arg.toTensor();
        const at::Tensor& sized = meta[r].toTensor();
        if (out.sizes() != sized.sizes()) out.resize_(sized.sizes());
      }
      results[r] = arg;
      continue;
    }
    auto allocate = [&](const at::Tensor& m) {
      // An undefined result (a gradient output_mask turned off) stays undefined.
      at::Tensor t = m.defined() ? at::empty_strided(m.sizes(), m.strides(),
                                                     m.options().device(npu))
                                 : at::Tensor();
      fresh_outputs.push_back(t);
      return t;
    };
    if (meta[r].isTensor()) {
      results[r] = allocate(meta[r].toTensor());
    } else {
      c10::List<at::Tensor> list;
      for (const at::Tensor& m : meta[r].toTensorList().vec()) list.push_back(allocate(m));
      results[r] = list;
    }
  }

  // The CPU kernel's arguments: host aliases of the npu tensors, taken after any out= resize.
  torch::jit::Stack host;
  host.reserve(num_args);
  for (size_t i = 0; i < num_args; ++i) {
    host.push_back(mapValue((*stack)[begin + i], hostAlias, c10::Device(c10::kCPU)));
  }
  // out= arguments: some CPU kernels resize their out tensor on the way (to an intermediate
  // shape), which a host alias of device memory cannot do. They get a CPU tensor of their own,
  // copied into the device tensor after the kernel.
  std::vector<std::pair<at::Tensor, at::Tensor>> out_copies;  // (CPU out, host alias)
  for (size_t i = 0; i < num_args; ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    const c10::AliasInfo* alias = arg.alias_info();
    if (!arg.kwarg_only() || alias == nullptr || !alias->isWrite() || !host[i].isTensor()) {
      continue;
    }
    const at::Tensor& device_out = (*stack)[begin + i].toTensor();
    if (!device_out.defined() || !device_out.is_privateuseone()) continue;
    // Empty, so the kernel sizes it without the "resized a non-empty output" warning.
    at::Tensor cpu_out = at::empty({0}, device_out.options().device(c10::kCPU));
    out_copies.emplace_back(cpu_out, host[i].toTensor());
    host[i] = cpu_out;
  }
  std::vector<at::Tensor> output_aliases;
  output_aliases.reserve(fresh_outputs.size());
  for (const at::Tensor& t : fresh_outputs) {
    output_aliases.push_back(t.defined() ? hostAlias(t) : at::Tensor());
  }

  const NPUStream stream = getCurrentNPUStream(device);
  launchTask(stream, schema.name().c_str(),
             [op, host = std::move(host), output_aliases = std::move(output_aliases),
              out_copies = std::move(out_copies)]() {
               HostGuard guard;
               // The kernel replaces the stack's arguments by its results, so each run works
               // on a copy: a task captured into an NPU graph runs again at every replay.
               torch::jit::Stack results = host;
               op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &results);
               for (auto& [cpu_out, alias] : out_copies) alias.copy_(cpu_out);
               // host now holds the results; copy the fresh ones into the npu outputs.
               size_t next = 0;
               const auto& rets = op.schema().returns();
               for (size_t r = 0; r < rets.size(); ++r) {
                 if (rets[r].alias_info() != nullptr) continue;
                 const c10::IValue& v = results[r];
                 auto fill = [&](const at::Tensor& result) {
                   const at::Tensor& alias = output_aliases[next++];
                   // An output the CPU kernel leaves empty where the meta kernel sized it
                   // (native_batch_norm's saved statistics in eval mode) has no values to copy.
                   if (alias.defined() && !(result.numel() == 0 && alias.numel() != 0)) {
                     alias.copy_(result);
                   }
                 };
                 if (v.isTensor()) {
                   fill(v.toTensor());
                 } else {
                   for (const at::Tensor& t : v.toTensorList().vec()) fill(t);
                 }
               }
             });

  torch::jit::drop(*stack, num_args);
  for (c10::IValue& r : results) stack->push_back(std::move(r));
  return true;
}

// Path 2: wait for the stream, run on aliases, bring the results to the device.
void runSynchronizing(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                      c10::DeviceIndex device) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;
  getCurrentNPUStream(device).synchronize();

  torch::jit::Stack host;
  host.reserve(num_args);
  for (size_t i = 0; i < num_args; ++i) {
    host.push_back(mapValue((*stack)[begin + i], hostAlias, c10::Device(c10::kCPU)));
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
      const c10::IValue& arg = (*stack)[begin + written[next_written++]];
      if (arg.isTensor() && v.isTensor()) {
        // An out= the CPU kernel had to resize now lives in a CPU buffer: bring it over.
        const at::Tensor& out = arg.toTensor();
        const at::Tensor& got = v.toTensor();
        if (got.numel() > 0 && got.data_ptr() != hostAlias(out).data_ptr()) {
          out.resize_(got.sizes());
          out.copy_(got);
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
  torch::jit::drop(*stack, num_args);
  for (c10::IValue& r : results) stack->push_back(std::move(r));
}

}  // namespace

void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
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
  if (meta_refused || mayDependOnData(op)) {
    runSynchronizing(op, stack, device);
    countCall(OpPath::kHostKernelSync, op);
    return;
  }
  cpuFallback(op, stack);
}

void countHostKernelCall(const char* name) {
  OpStats::instance().count(OpPath::kHostKernel, std::string("aten::") + name);
}

}  // namespace torch_npu
