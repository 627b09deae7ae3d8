// The kinds of request errors and their tag in an error message, spelled as generator/tritongen/error_kinds.py
// defines them (that module's docstring describes the form; tests/test_error_kinds.py checks the two agree).
#pragma once

#include <cctype>
#include <initializer_list>
#include <string>

#include "backend_util.h"

namespace tritongen {

inline constexpr const char* kBadRequest = "bad_request";
inline constexpr const char* kContextLengthExceeded = "context_length_exceeded";
inline constexpr const char* kOverloaded = "overloaded";
inline constexpr const char* kUnavailable = "unavailable";
inline constexpr const char* kInternal = "internal";

// "[kind] " or "[kind:input] ": the start of a tagged message.
inline std::string Tag(const char* kind, const std::string& input = "") {
  return std::string("[") + kind + (input.empty() ? "" : ":" + input) + "] ";
}

// A refused request: INVALID_ARG, its message "[bad_request:input] input: problem".
inline TRITONSERVER_Error* BadRequest(const std::string& input, const std::string& problem) {
  return InvalidArg(Tag(kBadRequest, input) + input + ": " + problem);
}

// The length of the tag `message` starts with ("[kind] " or "[kind:input] ", input of [A-Za-z0-9_.]); 0 if none.
inline size_t TagLength(const std::string& message) {
  for (const char* kind : {kBadRequest, kContextLengthExceeded, kOverloaded, kUnavailable, kInternal}) {
    const std::string open = std::string("[") + kind;
    if (message.compare(0, open.size(), open) != 0) continue;
    size_t at = open.size();
    if (at < message.size() && message[at] == ':') {
      const size_t start = ++at;
      while (at < message.size() && (std::isalnum(static_cast<unsigned char>(message[at])) || message[at] == '_' ||
                                     message[at] == '.'))
        ++at;
      if (at == start) continue;
    }
    if (message.compare(at, 2, "] ") == 0) return at + 2;
  }
  return 0;
}

// "prefix: message" for an error passed on from another model, its tag (if it starts with one) kept in front.
// An untagged message (Triton core's, the TensorRT-LLM backend's) stays untagged.
inline std::string Wrap(const std::string& prefix, const std::string& message) {
  const size_t tag = TagLength(message);
  return message.substr(0, tag) + prefix + ": " + message.substr(tag);
}

}  // namespace tritongen
