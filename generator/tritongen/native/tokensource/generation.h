// One request of the token source in flight: what it asked for, how far it has got, and the response factory its
// responses go through.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backend_util.h"

namespace tritongen {
namespace tokensource {

// Outputs a request asked for (Triton lists every output of the config when the client names none).
enum Output : unsigned { kOutputIds = 1, kSequenceLength = 2, kNumInputTokens = 4, kNumOutputTokens = 8 };

// Adapter k's tokens are the base's shifted by kAdapterShift x k places in the id cycle (as the python source's
// ADAPTER_SHIFT), so each adapter's stream differs deterministically.
constexpr int64_t kAdapterShift = 97;

// What the model's configuration allows a request.
struct Limits {
  bool decoupled = false;  // streamed responses possible
  int64_t adapters = 0;    // LoRA adapters: lora_task_id 1..adapters
};

// Owned by one timer thread (TimerShard) or by the engine loop (EngineLoop) from Add() until its FINAL response;
// `stopped` is set from other threads (a `stop` request with its id). Owns its response factory.
struct Generation {
  // Reads a request's inputs; INVALID_ARG naming the input when one cannot be served. The factory is set later.
  static TRITONSERVER_Error* Read(TRITONBACKEND_Request* request, const Limits& limits,
                                  std::unique_ptr<Generation>* out);
  Generation() = default;
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;
  ~Generation();

  TRITONBACKEND_ResponseFactory* factory = nullptr;
  std::string triton_id;
  int64_t prompt_len = 0;
  int64_t shift = 0;  // kAdapterShift x lora_task_id: an adapter's own token stream
  int64_t n_out = 0;
  bool streaming = false;
  unsigned outputs = 0;
  int64_t produced = 0;  // tokens generated so far
  int64_t sent = 0;      // tokens already sent (streaming)
  std::atomic<bool> stopped{false};
};

// The first element of input `name` as an integer, or `fallback` when the request does not carry it.
TRITONSERVER_Error* ScalarOr(TRITONBACKEND_Request* request, const char* name, int64_t fallback, int64_t* value);

// Ends a request with an error as its FINAL response (flags only, if even the error response cannot be made).
void SendFinalError(TRITONBACKEND_ResponseFactory* factory, TRITONSERVER_Error_Code code, const std::string& message);

}  // namespace tokensource
}  // namespace tritongen
