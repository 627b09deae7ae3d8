// In-process inference requests: what the BLS sends to `preprocessing` and `tensorrt_llm` through Triton's C API.
//
// Ownership (Triton's contract: a request's input buffers stay valid until its release callback):
// - InferCall owns the TRITONSERVER_InferenceRequest, the input tensors its buffers point into, and the Responder
//   that receives its responses. From a successful Start() Triton holds it; it is deleted when both callbacks have
//   run: the release (Triton is done with the inputs) and the FINAL response (nothing more will arrive).
// - Until then the request handle stays valid, so TRITONSERVER_InferenceRequestCancel can reach the model's
//   response factory even after a decoupled model released the request early (the python backend and
//   tritongen_tokensource do): what ends a stream whose model no longer takes a `stop` request (server stopping).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend_util.h"

namespace tritongen {
namespace bls {

// Output tensors of an in-process response, copied (the response is deleted right after it is read).
using Outputs = std::map<std::string, Tensor>;

TRITONSERVER_Error* ReadResponse(TRITONSERVER_InferenceResponse* response, Outputs* out);
const Tensor* Find(const Outputs& outputs, const std::string& name);

// The response allocator of in-process requests: CPU buffers from malloc, freed by Triton through Release.
class Allocator {
 public:
  static TRITONSERVER_Error* Create(std::unique_ptr<Allocator>* out);
  ~Allocator();
  TRITONSERVER_ResponseAllocator* get() const { return allocator_; }

 private:
  Allocator() = default;
  TRITONSERVER_ResponseAllocator* allocator_ = nullptr;
};

class Responder {
 public:
  virtual ~Responder() = default;
  // `response` may be null (a FINAL flag alone); the callee deletes a non-null response.
  virtual void OnResponse(TRITONSERVER_InferenceResponse* response, uint32_t flags) = 0;
};

class InferCall {
 public:
  struct Spec {
    std::string model;
    std::string id;                    // empty: none
    std::vector<Tensor> inputs;        // moved into the call, alive until Triton releases the request
    std::vector<std::string> outputs;  // empty: every output
  };
  // Sends the request. On success Triton owns the call and `responder`; `before_send` sees the request handle,
  // which stays valid until the responder has received the FINAL response. On error nothing was sent and both
  // are deleted here.
  static TRITONSERVER_Error* Start(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator, Spec spec,
                                   std::unique_ptr<Responder> responder,
                                   const std::function<void(TRITONSERVER_InferenceRequest*)>& before_send = nullptr);
  ~InferCall();

 private:
  InferCall() = default;
  static void Released(TRITONSERVER_InferenceRequest* request, uint32_t flags, void* userp);
  static void Responded(TRITONSERVER_InferenceResponse* response, uint32_t flags, void* userp);
  void Done();  // one of the two callbacks ended; the second deletes the call

  TRITONSERVER_InferenceRequest* request_ = nullptr;
  std::vector<Tensor> inputs_;
  std::unique_ptr<Responder> responder_;
  std::atomic<int> pending_{2};  // the release and the FINAL response
};

}  // namespace bls
}  // namespace tritongen
