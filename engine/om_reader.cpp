// The .om reader (docs/inference.md, "The .om format"; atc/om.py is the writer). Every count,
// index and offset is checked against the file, so a truncated, foreign or corrupt file is a
// ModelError that says which, never a crash.
#include <cstring>
#include <fstream>
#include <iterator>

#include "npu/engine.h"

namespace npu::engine {
namespace {

uint32_t crc32(const uint8_t* data, size_t size) {
  // zlib's CRC-32 (reflected polynomial 0xEDB88320), as atc/om.py computes it.
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& what)
      : data_(data), size_(size), what_(what) {}

  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint32_t n = get<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  // A count of items each at least `min_item_bytes` long: a corrupt count fails here instead
  // of asking for gigabytes.
  uint32_t count(size_t min_item_bytes) {
    uint32_t n = get<uint32_t>();
    if (static_cast<uint64_t>(n) * min_item_bytes > size_ - pos_) corrupt("a count");
    return n;
  }
  std::vector<uint32_t> indices() {
    uint32_t n = count(4);
    std::vector<uint32_t> v(n);
    for (auto& x : v) x = get<uint32_t>();
    return v;
  }
  [[noreturn]] void corrupt(const char* where) const {
    throw ModelError(what_ + " is corrupt: " + where + " in its graph section is out of range");
  }

 private:
  void need(size_t n) const {
    if (n > size_ - pos_) {
      throw ModelError(what_ + " is corrupt: its graph section ends early");
    }
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string what_;
};

uint64_t checked_bytes(const TensorInfo& t, const std::string& what) {
  uint64_t n = kernels::dtype_size(t.dtype);
  for (int64_t d : t.dims) {
    if (d < 0 || (d > 0 && n > UINT64_MAX / static_cast<uint64_t>(d))) {
      throw ModelError(what + " is corrupt: tensor " + t.name + " has an invalid shape");
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

const Attr* NodeInfo::attr(const std::string& key) const {
  for (const auto& [k, v] : attrs) {
    if (k == key) return &v;
  }
  return nullptr;
}

// One planned graph (a gear's): tensors, inputs, outputs, arena size, nodes; every reference
// checked against the graph's tensors and the weights section.
static void parse_graph(Reader& r, ModelDef& def, uint64_t weights_size, const std::string& what) {
  uint32_t num_tensors = r.count(4 + 6 + 16);
  def.tensors.resize(num_tensors);
  for (auto& t : def.tensors) {
    t.name = r.str();
    uint8_t code = r.get<uint8_t>();
    uint8_t storage = r.get<uint8_t>();
    uint32_t ndim = r.count(8);
    if (code >= kernels::kNumDTypes || storage > 3 || ndim > kernels::kMaxDims) {
      r.corrupt("a tensor's dtype, storage or rank");
    }
    t.dtype = static_cast<kernels::DType>(code);
    t.storage = static_cast<Storage>(storage);
    t.dims.resize(ndim);
    for (auto& d : t.dims) d = r.get<int64_t>();
    t.offset = r.get<uint64_t>();
    t.nbytes = r.get<uint64_t>();
    if (checked_bytes(t, what) != t.nbytes) r.corrupt("a tensor's byte size");
  }
  def.inputs = r.indices();
  def.outputs = r.indices();
  def.arena_size = r.get<uint64_t>();
  uint32_t num_nodes = r.count(16);
  def.nodes.resize(num_nodes);
  for (auto& n : def.nodes) {
    n.op = r.str();
    n.name = r.str();
    n.inputs = r.indices();
    n.outputs = r.indices();
    uint32_t num_attrs = r.count(5);
    for (uint32_t a = 0; a < num_attrs; ++a) {
      std::string key = r.str();
      Attr v;
      v.kind = static_cast<Attr::Kind>(r.get<uint8_t>());
      switch (v.kind) {
        case Attr::Int: v.i = r.get<int64_t>(); break;
        case Attr::Float: v.f = r.get<double>(); break;
        case Attr::String: v.s = r.str(); break;
        case Attr::Ints:
          v.ints.resize(r.count(8));
          for (auto& x : v.ints) x = r.get<int64_t>();
          break;
        case Attr::Floats:
          v.floats.resize(r.count(8));
          for (auto& x : v.floats) x = r.get<double>();
          break;
        default: r.corrupt("an attribute type");
      }
      n.attrs.emplace_back(std::move(key), std::move(v));
    }
  }

  // Every reference must land inside the file's tensors and sections.
  for (size_t k = 0; k < def.inputs.size(); ++k) {
    uint32_t i = def.inputs[k];
    if (i >= num_tensors || def.tensors[i].storage != Storage::Input ||
        def.tensors[i].offset != k) {
      r.corrupt("an input index");
    }
  }
  for (size_t k = 0; k < def.outputs.size(); ++k) {
    uint32_t i = def.outputs[k];
    if (i >= num_tensors || def.tensors[i].storage != Storage::Output ||
        def.tensors[i].offset != k) {
      r.corrupt("an output index");
    }
  }
  for (const auto& t : def.tensors) {
    uint64_t limit = t.storage == Storage::Arena ? def.arena_size
                     : t.storage == Storage::Weight ? weights_size
                                                    : UINT64_MAX;
    if ((t.storage == Storage::Arena || t.storage == Storage::Weight) &&
        (t.offset > limit || t.nbytes > limit - t.offset)) {
      r.corrupt("a tensor's offset");
    }
    if (t.storage == Storage::Input && t.offset >= def.inputs.size()) r.corrupt("an input");
    if (t.storage == Storage::Output && t.offset >= def.outputs.size()) r.corrupt("an output");
  }
  for (const auto& n : def.nodes) {
    for (uint32_t i : n.inputs) {
      if (i != kNoTensor && i >= num_tensors) r.corrupt("a node's input");
    }
    for (uint32_t i : n.outputs) {
      if (i >= num_tensors) r.corrupt("a node's output");
    }
  }
}

ModelDef parse_om(const void* data_v, size_t size, const std::string& what) {
  const auto* data = static_cast<const uint8_t*>(data_v);
  if (size < sizeof(kOmMagic) || std::memcmp(data, kOmMagic, sizeof(kOmMagic)) != 0) {
    throw ModelError(what + " is not an offline model (.om): it does not start with the magic "
                     "'SIMNPUOM'; convert the model with atc first");
  }
  if (size < kOmHeaderSize) {
    throw ModelError(what + " is truncated: " + std::to_string(size) +
                     " bytes, shorter than the 64-byte header");
  }
  Reader header(data, kOmHeaderSize, what);
  header.get<uint64_t>();  // the magic
  ModelDef def;
  def.version = header.get<uint32_t>();
  uint32_t header_size = header.get<uint32_t>();
  uint64_t file_size = header.get<uint64_t>();
  uint64_t graph_offset = header.get<uint64_t>(), graph_size = header.get<uint64_t>();
  uint64_t weights_offset = header.get<uint64_t>(), weights_size = header.get<uint64_t>();
  uint32_t checksum = header.get<uint32_t>();
  if (def.version < 1 || def.version > kOmVersion) {
    throw ModelError(what + " has .om format version " + std::to_string(def.version) +
                     "; this engine reads versions 1 to " + std::to_string(kOmVersion) +
                     ": convert the model again with this atc");
  }
  if (file_size != size) {
    throw ModelError(what + " is truncated or padded: its header says " +
                     std::to_string(file_size) + " bytes, the file has " + std::to_string(size));
  }
  if (header_size != kOmHeaderSize || graph_offset > size || graph_size > size - graph_offset ||
      weights_offset > size || weights_size > size - weights_offset) {
    throw ModelError(what + " is corrupt: its header's section offsets lie outside the file");
  }
  if (crc32(data + kOmHeaderSize, size - kOmHeaderSize) != checksum) {
    throw ModelError(what + " is corrupt: its checksum does not match its contents");
  }

  Reader r(data + graph_offset, graph_size, what);
  def.soc_version = r.str();
  def.source = r.str();
  parse_graph(r, def, weights_size, what);
  if (def.version >= 2) {
    // The gear trailer (docs/inference.md): u8 mode, u32 gear count, u32 values per gear, the
    // values of every gear, then the planned graph of every gear after the first.
    uint8_t mode = r.get<uint8_t>();
    uint32_t num_gears = r.count(8);
    uint32_t per_gear = r.count(8);
    if (mode < 1 || mode > 2 || num_gears < 1 || per_gear < 1) r.corrupt("the gear table");
    def.dynamic_mode = static_cast<DynamicMode>(mode);
    def.gear_values.resize(num_gears, std::vector<int64_t>(per_gear));
    for (auto& g : def.gear_values) {
      for (auto& v : g) v = r.get<int64_t>();
    }
    for (uint32_t k = 1; k < num_gears; ++k) {
      ModelDef gear;
      parse_graph(r, gear, weights_size, what);
      if (gear.inputs.size() != def.inputs.size() || gear.outputs.size() != def.outputs.size()) {
        r.corrupt("a gear's inputs or outputs");
      }
      for (size_t i = 0; i < def.inputs.size(); ++i) {
        const auto &a = gear.tensors[gear.inputs[i]], &b = def.tensors[def.inputs[i]];
        if (a.name != b.name || a.dtype != b.dtype || a.nbytes > b.nbytes) {
          r.corrupt("a gear's inputs (names, dtypes or sizes differ from the first gear's)");
        }
      }
      for (size_t i = 0; i < def.outputs.size(); ++i) {
        const auto &a = gear.tensors[gear.outputs[i]], &b = def.tensors[def.outputs[i]];
        if (a.name != b.name || a.dtype != b.dtype || a.nbytes > b.nbytes) {
          r.corrupt("a gear's outputs (names, dtypes or sizes differ from the first gear's)");
        }
      }
      def.gears.push_back(std::move(gear));
    }
  }
  def.weights.assign(data + weights_offset, data + weights_offset + weights_size);
  return def;
}

ModelDef read_om_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw ModelError("cannot open the model file " + path + ": check that the path exists");
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  return parse_om(bytes.data(), bytes.size(), path);
}

}  // namespace npu::engine
