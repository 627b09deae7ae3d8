#include "bls/lora_resend.h"

#include <cstring>
#include <fstream>
#include <limits>
#include <map>

#include "error_kinds.h"

namespace tritongen {
namespace bls {
namespace {

constexpr const char* kMissFront = "LoRA task ";
constexpr const char* kMissBack = " not found in cache. Please send LoRA weights with request";

// ------------------------------------------------------------------ the .npy header
// The header is a Python dict literal, e.g. "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 4, 10), }"
// (numpy/lib/format.py); this reads exactly what numpy writes: quoted strings, True/False, tuples of integers.
struct HeaderValue {
  enum { kString, kBool, kTuple } kind = kString;
  std::string text;
  bool flag = false;
  std::vector<int64_t> items;
};

class HeaderParser {
 public:
  explicit HeaderParser(const std::string& s) : s_(s) {}

  std::string Parse(std::map<std::string, HeaderValue>* out) {
    Space();
    if (!Eat('{')) return "the header is not a dict";
    for (;;) {
      Space();
      if (Eat('}')) break;
      std::string key;
      if (!String(&key)) return "the header has a key that is not a quoted string";
      Space();
      if (!Eat(':')) return "the header has no ':' after '" + key + "'";
      Space();
      HeaderValue value;
      if (!Value(&value)) return "the header's '" + key + "' has a value this reader does not take";
      if (!out->emplace(key, std::move(value)).second) return "the header names '" + key + "' twice";
      Space();
      if (Eat('}')) break;
      if (!Eat(',')) return "the header's entries are not separated by ','";
    }
    Space();
    return at_ == s_.size() ? "" : "the header has text after its dict";
  }

 private:
  void Space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\t' || s_[at_] == '\r')) ++at_;
  }
  bool Eat(char c) {
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool Word(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(at_, n, w) != 0) return false;
    at_ += n;
    return true;
  }
  bool String(std::string* out) {
    if (at_ >= s_.size() || (s_[at_] != '\'' && s_[at_] != '"')) return false;
    const char quote = s_[at_++];
    const size_t end = s_.find(quote, at_);
    if (end == std::string::npos) return false;
    *out = s_.substr(at_, end - at_);
    if (out->find('\\') != std::string::npos) return false;  // no escapes in what numpy writes
    at_ = end + 1;
    return true;
  }
  bool Integer(int64_t* out) {
    const size_t start = at_;
    int64_t v = 0;
    while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
      v = v * 10 + (s_[at_++] - '0');
    }
    *out = v;
    return at_ > start;
  }
  bool Value(HeaderValue* v) {
    for (bool flag : {true, false}) {
      if (Word(flag ? "True" : "False")) {
        v->kind = HeaderValue::kBool;
        v->flag = flag;
        return true;
      }
    }
    if (Eat('(')) {
      v->kind = HeaderValue::kTuple;
      for (;;) {
        Space();
        if (Eat(')')) return true;
        int64_t n = 0;
        if (!Integer(&n)) return false;
        v->items.push_back(n);
        Space();
        if (Eat(')')) return v->items.size() != 1;  // a one-item tuple is written "(n,)"
        if (!Eat(',')) return false;
      }
    }
    v->kind = HeaderValue::kString;
    return String(&v->text);
  }

  const std::string& s_;
  size_t at_ = 0;
};

uint32_t LittleEndian(const unsigned char* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ------------------------------------------------------------------ exact conversions
// float32 bits -> float16 bits when the value is exactly a float16 (NaN: a quiet NaN of the same sign).
bool HalfOf(uint32_t f, uint16_t* h) {
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000);
  const int exponent = static_cast<int>((f >> 23) & 0xff);
  const uint32_t mantissa = f & 0x7fffff;
  if (exponent == 0xff) {
    *h = sign | (mantissa == 0 ? 0x7c00 : 0x7e00);
    return true;
  }
  if (exponent == 0 && mantissa == 0) {
    *h = sign;
    return true;
  }
  if (exponent == 0) return false;  // a float32 subnormal is below float16's smallest value
  const int e = exponent - 127;
  if (e >= -14 && e <= 15) {  // a float16 normal: the low 13 mantissa bits must be zero
    if ((mantissa & 0x1fff) != 0) return false;
    *h = sign | static_cast<uint16_t>((e + 15) << 10) | static_cast<uint16_t>(mantissa >> 13);
    return true;
  }
  if (e >= -24 && e < -14) {  // a float16 subnormal: m x 2^-24
    const uint32_t full = mantissa | 0x800000;
    const int shift = -e - 1;
    if ((full & ((1u << shift) - 1)) != 0) return false;
    *h = sign | static_cast<uint16_t>(full >> shift);
    return true;
  }
  return false;
}

// The element types ReadNpy takes, and their sizes.
const std::map<std::string, size_t>& ItemSizes() {
  static const std::map<std::string, size_t> sizes = {{"<f2", 2}, {"<f4", 4}, {"<i4", 4}, {"<i8", 8}};
  return sizes;
}

// The array's elements as `want` ("<f2" or "<i4"): as stored, or converted exactly from "<f4" / "<i8".
std::string Convert(const NpyArray& a, const std::string& want, std::string* out) {
  const size_t n = a.data.size() / ItemSizes().at(a.descr);
  if (a.descr == want) {
    *out = a.data;
    return "";
  }
  if (want == "<f2" && a.descr == "<f4") {
    out->resize(n * 2);
    for (size_t i = 0; i < n; ++i) {
      uint32_t f;
      uint16_t h;
      std::memcpy(&f, a.data.data() + i * 4, 4);
      if (!HalfOf(f, &h))
        return "float32 element " + std::to_string(i) + " is not exactly a float16 (lora_weights are float16)";
      std::memcpy(&(*out)[i * 2], &h, 2);
    }
    return "";
  }
  if (want == "<i4" && a.descr == "<i8") {
    out->resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, a.data.data() + i * 8, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        return "int64 element " + std::to_string(i) + " (" + std::to_string(v) + ") is outside int32 "
               "(lora_config is int32)";
      const int32_t w = static_cast<int32_t>(v);
      std::memcpy(&(*out)[i * 4], &w, 4);
    }
    return "";
  }
  return "its elements are " + a.descr + "; expected " + want +
         (want == "<f2" ? " (float16; float32 taken where exact)" : " (int32; int64 taken where in range)");
}

// One adapter file as [rows, width] (the first block of a [..., rows, width] array) in the element type `want`.
std::string ReadBlock(const std::string& path, const std::string& want, std::vector<int64_t>* rows_width,
                      std::string* block) {
  NpyArray a;
  std::string problem = ReadNpy(path, &a);
  if (!problem.empty()) return problem;
  if (a.shape.size() < 2)
    return "its shape has " + std::to_string(a.shape.size()) + " dimensions; expected [..., rows, width]";
  const int64_t rows = a.shape[a.shape.size() - 2], width = a.shape.back();
  if (rows == 0 || width == 0 || a.data.empty()) return "it holds no elements";
  std::string converted;
  problem = Convert(a, want, &converted);
  if (!problem.empty()) return problem;
  const size_t item = want == "<f2" ? 2 : 4;
  *rows_width = {rows, width};
  block->assign(converted, 0, static_cast<size_t>(rows * width) * item);
  return "";
}

}  // namespace

bool CacheMissTaskId(const std::string& message, uint64_t* task_id) {
  const size_t front = std::strlen(kMissFront), back = std::strlen(kMissBack);
  for (size_t at = message.find(kMissFront); at != std::string::npos; at = message.find(kMissFront, at + 1)) {
    size_t p = at + front;
    uint64_t v = 0;
    bool overflow = false;
    const size_t digits = p;
    while (p < message.size() && message[p] >= '0' && message[p] <= '9') {
      overflow = overflow || v > (std::numeric_limits<uint64_t>::max() - 9) / 10;
      v = v * 10 + static_cast<uint64_t>(message[p++] - '0');
    }
    if (p == digits || overflow || message.compare(p, back, kMissBack) != 0) continue;
    *task_id = v;
    return true;
  }
  return false;
}

bool AllTaskIds(const Tensor& ids, uint64_t task_id) {
  size_t item = 0;
  switch (ids.dtype) {
    case TRITONSERVER_TYPE_UINT64: case TRITONSERVER_TYPE_INT64: item = 8; break;
    case TRITONSERVER_TYPE_UINT32: case TRITONSERVER_TYPE_INT32: item = 4; break;
    default: return false;
  }
  if (ids.data.empty() || ids.data.size() % item != 0) return false;
  for (size_t at = 0; at < ids.data.size(); at += item) {
    uint64_t v = 0;
    if (item == 8) {
      std::memcpy(&v, ids.data.data() + at, 8);
    } else {
      uint32_t w;
      std::memcpy(&w, ids.data.data() + at, 4);
      v = w;
    }
    if (v != task_id) return false;
  }
  return true;
}

std::string ReadNpy(const std::string& path, NpyArray* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "cannot open it";
  std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return "cannot read it";
  const auto* p = reinterpret_cast<const unsigned char*>(file.data());
  if (file.size() < 10 || file.compare(0, 6, "\x93NUMPY") != 0) return "not a .npy file (no \\x93NUMPY magic)";
  const int major = p[6];
  if (major != 1 && major != 2)
    return ".npy format version " + std::to_string(major) + "." + std::to_string(p[7]) + "; this reader takes 1 and 2";
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t start = 8 + length_bytes;
  if (file.size() < start) return "the header is cut off";
  const size_t header_len = LittleEndian(p + 8, static_cast<int>(length_bytes));
  if (file.size() < start + header_len) return "the header is cut off";
  std::map<std::string, HeaderValue> header;
  std::string problem = HeaderParser(file.substr(start, header_len)).Parse(&header);
  if (!problem.empty()) return problem;
  auto descr = header.find("descr"), fortran = header.find("fortran_order"), shape = header.find("shape");
  if (header.size() != 3 || descr == header.end() || fortran == header.end() || shape == header.end())
    return "the header's keys are not exactly descr, fortran_order and shape";
  if (descr->second.kind != HeaderValue::kString || fortran->second.kind != HeaderValue::kBool ||
      shape->second.kind != HeaderValue::kTuple)
    return "the header's descr, fortran_order or shape has the wrong type";
  if (fortran->second.flag) return "it is in Fortran order; expected C order";
  auto item = ItemSizes().find(descr->second.text);
  if (item == ItemSizes().end())
    return "its elements are " + descr->second.text + "; this reader takes little-endian <f2, <f4, <i4 and <i8";
  uint64_t elements = 1;
  for (int64_t d : shape->second.items) {
    if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d) / item->second)
      return "its shape is too large";
    elements *= static_cast<uint64_t>(d);
  }
  const uint64_t bytes = elements * item->second;
  if (file.size() - start - header_len != bytes)
    return "it holds " + std::to_string(file.size() - start - header_len) + " data bytes; its header's shape and " +
           descr->second.text + " make " + std::to_string(bytes);
  out->descr = descr->second.text;
  out->shape = shape->second.items;
  out->data = file.substr(start + header_len);
  return "";
}

TRITONSERVER_Error* AdapterTensors(const std::string& lora_dir, uint64_t task_id, size_t batch, Tensor* weights,
                                   Tensor* config) {
  const std::string folder = lora_dir + (lora_dir.empty() || lora_dir.back() == '/' ? "" : "/") +
                             std::to_string(task_id);
  const std::string id = std::to_string(task_id);
  for (const char* name : {kLoraWeightsFile, kLoraConfigFile}) {
    std::ifstream probe(folder + "/" + name, std::ios::binary);
    if (!probe)
      return BadRequest("lora_task_id", id + " is not in the tensorrt_llm model's LoRA cache and " + folder +
                                            " has no converted adapter (" + kLoraWeightsFile + ", " + kLoraConfigFile +
                                            "); use a task id of the deployment's adapters, or run `tritongen build` "
                                            "to convert them");
  }
  auto unusable = [&](const char* name, const std::string& problem) {
    return Err(TRITONSERVER_ERROR_INTERNAL,
               Tag(kInternal) + "lora_task_id: " + id + " is not in the tensorrt_llm model's LoRA cache and the "
               "converted adapter in " + folder + " cannot be sent: " + name + ": " + problem +
               "; run `tritongen build` to convert the adapters again");
  };
  std::vector<int64_t> w_shape, c_shape;
  std::string w_block, c_block;
  std::string problem = ReadBlock(folder + "/" + kLoraWeightsFile, "<f2", &w_shape, &w_block);
  if (!problem.empty()) return unusable(kLoraWeightsFile, problem);
  problem = ReadBlock(folder + "/" + kLoraConfigFile, "<i4", &c_shape, &c_block);
  if (!problem.empty()) return unusable(kLoraConfigFile, problem);
  if (c_shape[1] != 3)
    return unusable(kLoraConfigFile, "its rows have " + std::to_string(c_shape[1]) +
                                         " values; expected 3 (module id, layer, rank)");
  if (c_shape[0] != w_shape[0])
    return unusable(kLoraConfigFile, "it has " + std::to_string(c_shape[0]) + " rows and " + kLoraWeightsFile +
                                         " has " + std::to_string(w_shape[0]) + "; expected one per weights row");
  const int64_t rows = static_cast<int64_t>(batch);
  *weights = Tensor{"lora_weights", TRITONSERVER_TYPE_FP16, {rows, w_shape[0], w_shape[1]}, ""};
  *config = Tensor{"lora_config", TRITONSERVER_TYPE_INT32, {rows, c_shape[0], 3}, ""};
  weights->data.reserve(w_block.size() * batch);
  config->data.reserve(c_block.size() * batch);
  for (size_t b = 0; b < batch; ++b) {
    weights->data += w_block;
    config->data += c_block;
  }
  return nullptr;
}

}  // namespace bls
}  // namespace tritongen
