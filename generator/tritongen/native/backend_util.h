// Small helpers shared by tritongen's native backends: errors, log lines, the model config, input tensors.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "triton_api.h"

namespace tritongen {

// Names the calling thread (at most 15 characters), so per-thread profiles (top -H, /proc, perf) tell tritongen's
// threads from tritonserver's own.
inline void NameThread(const char* name) { pthread_setname_np(pthread_self(), name); }

inline TRITONSERVER_Error* Err(TRITONSERVER_Error_Code code, const std::string& msg) {
  return TRITONSERVER_ErrorNew(code, msg.c_str());
}
inline TRITONSERVER_Error* InvalidArg(const std::string& msg) { return Err(TRITONSERVER_ERROR_INVALID_ARG, msg); }
inline TRITONSERVER_Error* Internal(const std::string& msg) { return Err(TRITONSERVER_ERROR_INTERNAL, msg); }

inline void Log(TRITONSERVER_LogLevel level, const std::string& msg) {
  TRITONSERVER_LogMessage(level, __FILE__, __LINE__, msg.c_str());
}

// Logs and deletes an error the caller cannot return (callbacks have no error channel).
inline void LogIfError(TRITONSERVER_Error* err, const char* what) {
  if (err != nullptr) {
    Log(TRITONSERVER_LOG_ERROR, std::string(what) + ": " + TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
}

#define TG_RETURN_IF_ERROR(X)              \
  do {                                     \
    TRITONSERVER_Error* tg_err__ = (X);    \
    if (tg_err__ != nullptr) return tg_err__; \
  } while (false)

inline uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds streams may run on once the server stops (environment TRITONGEN_DRAIN_S, set by every generated
// deployment and `tritongen serve` from the Plan's stop budget, plan/deploy.py StopBudget). Unset: 15 s, the budget
// of Triton's default --exit-timeout-secs of 30.
inline uint64_t DrainNs() {
  const char* text = std::getenv("TRITONGEN_DRAIN_S");
  double seconds = 15;
  if (text != nullptr && *text != '\0') {
    char* end = nullptr;
    double v = std::strtod(text, &end);
    if (end != text && *end == '\0' && v >= 0) seconds = v;
  }
  return static_cast<uint64_t>(seconds * 1e9);
}

// Whether a stopping server's drain is over. A stopping server answers "not live" (Triton: "Server exiting") from
// the moment it stops accepting; not live without an error: still starting. Polled at most every 20 ms (Over() may
// be called per token); thread-safe.
class Drain {
 public:
  explicit Drain(TRITONSERVER_Server* server) : server_(server), drain_ns_(DrainNs()) {}
  uint64_t drain_ns() const { return drain_ns_; }
  // True once the server has been stopping for the drain; `name` is logged when the stop is first seen.
  bool Over(const std::string& name) {
    const uint64_t now = NowNs();
    uint64_t since = since_.load();
    if (since == 0) {
      uint64_t last = last_poll_.load();
      if (now - last < 20000000 || !last_poll_.compare_exchange_strong(last, now)) return false;
      bool live = false;
      TRITONSERVER_Error* err = TRITONSERVER_ServerIsLive(server_, &live);
      if (err == nullptr && live) was_live_ = true;
      const bool stopping = err != nullptr || (was_live_ && !live);
      if (err != nullptr) TRITONSERVER_ErrorDelete(err);
      if (!stopping) return false;
      uint64_t zero = 0;
      if (since_.compare_exchange_strong(zero, now)) {
        Log(TRITONSERVER_LOG_INFO, name + ": the server is stopping; streams in flight may finish for " +
                                       std::to_string(drain_ns_ / 1000000000.0) + " s");
      }
      since = since_.load();
    }
    return now - since >= drain_ns_;
  }

 private:
  TRITONSERVER_Server* server_;
  const uint64_t drain_ns_;
  std::atomic<uint64_t> since_{0};
  std::atomic<uint64_t> last_poll_{0};
  std::atomic<bool> was_live_{false};
};

// The model configuration, read with a JSON parser from Triton's own serialisation (TRITONBACKEND_ModelConfig).
// A value that is present but malformed is refused (INVALID_ARG naming the model, the field and the value), so the
// model fails to load instead of serving with a default nobody asked for.
class ModelConfig {
 public:
  static TRITONSERVER_Error* Read(TRITONBACKEND_Model* model, ModelConfig* out) {
    const char* name = nullptr;
    TG_RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
    TRITONSERVER_Message* message = nullptr;
    TG_RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &message));
    const char* base = nullptr;
    size_t size = 0;
    TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(message, &base, &size);
    if (err == nullptr) err = out->Parse(std::string(base, size), name);
    TRITONSERVER_MessageDelete(message);
    return err;
  }

  TRITONSERVER_Error* Parse(const std::string& text, const std::string& model) {
    model_ = model;
    json_ = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json_.is_discarded() || !json_.is_object()) return Internal(model_ + ": model config: not a JSON object");
    return nullptr;
  }

  // The model's name, for error messages.
  const std::string& model() const { return model_; }

  // The string_value of parameters.<key>, or `fallback` when it is absent, empty or an unfilled "${...}".
  std::string Parameter(const std::string& key, const std::string& fallback) const {
    auto params = json_.find("parameters");
    if (params == json_.end() || !params->is_object()) return fallback;
    auto entry = params->find(key);
    if (entry == params->end() || !entry->is_object()) return fallback;
    auto value = entry->find("string_value");
    if (value == entry->end() || !value->is_string()) return fallback;
    std::string text = value->get<std::string>();
    return (text.empty() || text.rfind("${", 0) == 0) ? fallback : text;
  }

  // parameters.<key> as an integer >= 0 (`fallback` as Parameter() has it); INVALID_ARG when malformed.
  TRITONSERVER_Error* IntegerParameter(const std::string& key, const std::string& fallback, int64_t* out) const {
    const std::string text = Parameter(key, fallback);
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || v < 0)
      return Malformed("parameters." + key, "an integer >= 0", text);
    *out = v;
    return nullptr;
  }

  // parameters.<key> as a number >= 0 (`fallback` as Parameter() has it); INVALID_ARG when malformed.
  TRITONSERVER_Error* NumberParameter(const std::string& key, const std::string& fallback, double* out) const {
    const std::string text = Parameter(key, fallback);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(v >= 0)) return Malformed("parameters." + key, "a number >= 0", text);
    *out = v;
    return nullptr;
  }

  // The integer at `path` (e.g. {"dynamic_batching", "default_queue_policy", "max_queue_size"}); protobuf's JSON
  // writes 64-bit integers as strings. `fallback` when absent; INVALID_ARG when present but not an integer.
  TRITONSERVER_Error* Integer(std::initializer_list<const char*> path, int64_t fallback, int64_t* out) const {
    std::string dotted;
    for (const char* key : path) dotted += (dotted.empty() ? "" : ".") + std::string(key);
    const nlohmann::json* at = &json_;
    for (const char* key : path) {
      if (!at->is_object()) return Malformed(dotted, "an integer", at->dump());
      auto it = at->find(key);
      if (it == at->end()) {
        *out = fallback;
        return nullptr;
      }
      at = &*it;
    }
    if (at->is_number_integer()) {
      *out = at->get<int64_t>();
      return nullptr;
    }
    if (at->is_string()) {
      const std::string text = at->get<std::string>();
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (end != text.c_str() && *end == '\0') {
        *out = v;
        return nullptr;
      }
      return Malformed(dotted, "an integer", text);
    }
    return Malformed(dotted, "an integer", at->dump());
  }

  bool Decoupled() const {
    auto policy = json_.find("model_transaction_policy");
    if (policy == json_.end() || !policy->is_object()) return false;
    auto decoupled = policy->find("decoupled");
    return decoupled != policy->end() && decoupled->is_boolean() && decoupled->get<bool>();
  }

  // Names of the config's "input" (or "output") tensors.
  std::vector<std::string> TensorNames(const char* section) const {
    std::vector<std::string> names;
    auto list = json_.find(section);
    if (list == json_.end() || !list->is_array()) return names;
    for (const auto& t : *list)
      if (t.is_object() && t.contains("name") && t["name"].is_string()) names.push_back(t["name"].get<std::string>());
    return names;
  }

  const nlohmann::json& json() const { return json_; }

 private:
  TRITONSERVER_Error* Malformed(const std::string& field, const char* expected, const std::string& got) const {
    return InvalidArg(model_ + ": " + field + ": expected " + expected + ", got '" + got + "'");
  }

  std::string model_;
  nlohmann::json json_;
};

// One input tensor of a request, its bytes gathered into one buffer (inputs may arrive in several buffers).
struct Tensor {
  std::string name;
  TRITONSERVER_DataType dtype = TRITONSERVER_TYPE_INVALID;
  std::vector<int64_t> shape;
  std::string data;

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

inline TRITONSERVER_Error* ReadInput(TRITONBACKEND_Input* input, Tensor* out) {
  const char* name = nullptr;
  const int64_t* shape = nullptr;
  uint32_t dims = 0, buffers = 0;
  uint64_t size = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, &name, &out->dtype, &shape, &dims, &size, &buffers));
  out->name = name;
  out->shape.assign(shape, shape + dims);
  out->data.clear();
  out->data.reserve(size);
  for (uint32_t b = 0; b < buffers; ++b) {
    const void* buffer = nullptr;
    uint64_t bytes = 0;
    TRITONSERVER_MemoryType memtype = TRITONSERVER_MEMORY_CPU;
    int64_t memid = 0;
    TG_RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, b, &buffer, &bytes, &memtype, &memid));
    if (memtype == TRITONSERVER_MEMORY_GPU) return Internal(out->name + ": input in GPU memory; expected CPU");
    out->data.append(static_cast<const char*>(buffer), bytes);
  }
  return nullptr;
}

// The first element of a numeric or bool tensor as int64 (scalars arrive as [1] or [batch, 1]).
inline bool FirstInteger(const Tensor& t, int64_t* value) {
  if (t.data.empty()) return false;
  const char* p = t.data.data();
  switch (t.dtype) {
    case TRITONSERVER_TYPE_BOOL: case TRITONSERVER_TYPE_UINT8: *value = *reinterpret_cast<const uint8_t*>(p); return true;
    case TRITONSERVER_TYPE_INT8: *value = *reinterpret_cast<const int8_t*>(p); return true;
    case TRITONSERVER_TYPE_INT16: *value = *reinterpret_cast<const int16_t*>(p); return true;
    case TRITONSERVER_TYPE_UINT16: *value = *reinterpret_cast<const uint16_t*>(p); return true;
    case TRITONSERVER_TYPE_INT32: *value = *reinterpret_cast<const int32_t*>(p); return true;
    case TRITONSERVER_TYPE_UINT32: *value = *reinterpret_cast<const uint32_t*>(p); return true;
    case TRITONSERVER_TYPE_INT64: *value = *reinterpret_cast<const int64_t*>(p); return true;
    case TRITONSERVER_TYPE_UINT64: *value = static_cast<int64_t>(*reinterpret_cast<const uint64_t*>(p)); return true;
    default: return false;
  }
}

// Elements of a BYTES tensor: each is a 4-byte little-endian length followed by that many bytes.
inline std::vector<std::string> BytesElements(const std::string& data) {
  std::vector<std::string> items;
  size_t at = 0;
  while (at + 4 <= data.size()) {
    uint32_t len = 0;
    std::memcpy(&len, data.data() + at, 4);
    at += 4;
    if (at + len > data.size()) break;
    items.emplace_back(data.data() + at, len);
    at += len;
  }
  return items;
}

inline void AppendBytesElement(std::string* data, const std::string& item) {
  uint32_t len = static_cast<uint32_t>(item.size());
  data->append(reinterpret_cast<const char*>(&len), 4);
  data->append(item);
}

}  // namespace tritongen
