#include "GraphOutputs.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <utility>

namespace torch_npu {
namespace {

// A storage over `graph`'s bytes that keeps `graph` alive (the DataPtr's context owns a
// reference) and cannot be resized: the memory is the graph's.
c10::Storage aliasOf(const c10::Storage& graph) {
  auto* keep = new c10::Storage(graph);
  c10::DataPtr data(graph.unsafeGetStorageImpl()->mutable_data(), keep,
                    [](void* ctx) { delete static_cast<c10::Storage*>(ctx); }, graph.device());
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), graph.nbytes(), std::move(data),
      /*allocator=*/nullptr, /*resizable=*/false));
}

}  // namespace

GraphOutputs::GraphOutputs(std::vector<at::Tensor> outputs) : outputs_(std::move(outputs)) {
  storage_of_.reserve(outputs_.size());
  for (const at::Tensor& out : outputs_) {
    TORCH_CHECK(out.defined() && out.device().type() == c10::DeviceType::PrivateUse1,
                "GraphOutputs: every output must be a defined npu tensor");
    const c10::StorageImpl* impl = out.storage().unsafeGetStorageImpl();
    int64_t index = 0;
    while (index < static_cast<int64_t>(storages_.size()) &&
           storages_[index].unsafeGetStorageImpl() != impl)
      ++index;
    if (index == static_cast<int64_t>(storages_.size())) storages_.push_back(out.storage());
    storage_of_.push_back(index);
  }
}

std::vector<at::Tensor> GraphOutputs::handOut() {
  std::vector<c10::Storage> aliases;
  aliases.reserve(storages_.size());
  handed_.clear();
  for (const c10::Storage& graph : storages_) {
    aliases.push_back(aliasOf(graph));
    handed_.emplace_back(aliases.back().getWeakStorageImpl());
  }
  std::vector<at::Tensor> result;
  result.reserve(outputs_.size());
  for (size_t i = 0; i < outputs_.size(); ++i) {
    // The output's own kind of tensor over the alias storage (what empty + set_ would make,
    // without two dispatches per output on every replay).
    const at::Tensor& out = outputs_[i];
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::Storage(aliases[storage_of_[i]]), out.key_set(), out.dtype());
    impl->set_sizes_and_strides(out.sizes(), out.strides(), out.storage_offset());
    result.emplace_back(std::move(impl));
  }
  return result;
}

int64_t GraphOutputs::preserveLive() {
  int64_t copied = 0;
  for (const auto& weak : handed_) {
    c10::intrusive_ptr<c10::StorageImpl> impl = weak.lock();
    if (!impl) continue;
    const int64_t nbytes = static_cast<int64_t>(impl->nbytes());
    const auto bytes = at::TensorOptions().dtype(at::kByte).device(impl->device());
    at::Tensor source = at::empty({0}, bytes);
    source.set_(c10::Storage(impl), 0, {nbytes}, {1});
    at::Tensor own = at::empty({nbytes}, bytes);
    own.copy_(source);
    // The alias storage takes the new block; the old DataPtr (its reference to the graph's
    // storage) is dropped here, after the copy was queued.
    impl->set_data_ptr_noswap(own.storage().unsafeGetStorageImpl()->set_data_ptr(
        c10::DataPtr(nullptr, impl->device())));
    ++copied;
  }
  handed_.clear();
  return copied;
}

}  // namespace torch_npu
