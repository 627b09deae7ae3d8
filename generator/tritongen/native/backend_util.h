// Small helpers shared by tritongen's native backends: errors, log lines, model-config parameters, input tensors.
#pragma once

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "triton_api.h"

namespace tritongen {

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

// The model configuration as JSON (Triton serializes it with `parameters: {key: {string_value: ...}}`).
inline TRITONSERVER_Error* ModelConfigJson(TRITONBACKEND_Model* model, std::string* json) {
  TRITONSERVER_Message* message = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &message));
  const char* base = nullptr;
  size_t size = 0;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(message, &base, &size);
  if (err == nullptr) json->assign(base, size);
  TRITONSERVER_MessageDelete(message);
  return err;
}

// The string_value of a config parameter, or `fallback` when it is absent or an unfilled "${...}" placeholder.
// A targeted scan, not a JSON parser: the keys tritongen renders are plain identifiers.
inline std::string ConfigParameter(const std::string& json, const std::string& key, const std::string& fallback) {
  const std::string marker = "\"" + key + "\":{\"string_value\":\"";
  size_t at = json.find(marker);
  if (at == std::string::npos) return fallback;
  std::string value;
  for (size_t i = at + marker.size(); i < json.size() && json[i] != '"'; ++i) {
    if (json[i] == '\\' && i + 1 < json.size()) {
      char c = json[++i];
      value += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      value += json[i];
    }
  }
  return (value.empty() || value.rfind("${", 0) == 0) ? fallback : value;
}

// An integer field at the top level of the config JSON (e.g. "max_batch_size":256); fallback when absent.
inline int64_t ConfigInteger(const std::string& json, const std::string& key, int64_t fallback) {
  const std::string marker = "\"" + key + "\":";
  size_t at = json.find(marker);
  if (at == std::string::npos) return fallback;
  size_t from = at + marker.size();
  if (from < json.size() && json[from] == '"') ++from;  // protobuf's JSON writes 64-bit integers as strings
  return std::strtoll(json.c_str() + from, nullptr, 10);
}

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
