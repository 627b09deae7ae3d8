// One client request of tensorrt_llm_bls, from Serve() to its one final response.
//
// Life: Serve() reads the client's inputs, asks `preprocessing` (one InferCall), then `tensorrt_llm` (another);
// each LLM response is detokenised (detok.h) and sent on. A LoRA cache miss of the LLM request is answered by one
// more LLM request, the same with the adapter's weights added (lora_resend.h), whose responses are sent on instead. The client's TRITONBACKEND_Request is held until the
// final response, so that a frontend can still cancel through it and Triton's statistics span the whole request.
//
// Ownership: a ClientRequest is shared (std::shared_ptr) by the responders and release hooks of its in-process
// calls and by the model's watcher registry (weakly); it ends when the last of them lets go. `mu` guards every field that
// callbacks change; callbacks of one stream never run the state machine concurrently.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "bls/inprocess.h"
#include "detok.h"

namespace tritongen {
namespace bls {

class ModelState;

// Decoding state of one output sequence (batch entry, sequence index, beam).
struct Sequence {
  Sequence(const DetokTable* table, std::vector<std::string> stops) : detok(table), stops(std::move(stops)) {}
  Detokenizer detok;
  StopStrings stops;
  std::string sent;  // text sent so far (accumulate_tokens)
  size_t tokens = 0;
  bool stopped = false;
};

class ClientRequest : public std::enable_shared_from_this<ClientRequest> {
 public:
  // Takes `request` (released by the stream, after its final response). Never fails: errors become the final
  // response.
  static void Serve(const std::shared_ptr<ModelState>& model, TRITONBACKEND_ModelInstance* instance,
                    TRITONBACKEND_Request* request, uint64_t exec_start_ns, TRITONSERVER_Error* table_error);
  ~ClientRequest();

  // Called by the model's watcher: ends the stream if its client cancelled.
  void CheckCancelled();
  // Ends the stream now with an error (the server stops, the model unloads), and its LLM request with it.
  void Abort(TRITONSERVER_Error_Code code, const std::string& message);

 private:
  friend class LlmResponder;
  friend class PreResponder;
  ClientRequest() = default;

  TRITONSERVER_Error* ReadRequest();
  TRITONSERVER_Error* Admit();
  TRITONSERVER_Error* Validate();
  void StartPreprocessing();
  void StartLlm(Outputs pre);
  // Returns true when the LLM request `attempt` missed the LoRA cache and has ended: the caller resends (Resend).
  bool OnLlmResponse(TRITONSERVER_InferenceResponse* response, uint32_t flags, int attempt);
  void Resend();
  void OnStreamed(const Outputs& out, const Tensor& ids, const Tensor& lengths);
  void OnWhole(const Outputs& out, const Tensor& ids, const Tensor& lengths);

  // The following run with `mu` held.
  bool CancelledLocked();
  TRITONSERVER_Error* StartLlmCall(InferCall::Spec spec, int attempt);
  bool OwnCacheMiss(TRITONSERVER_Error* err, uint64_t* task) const;
  void CancelLlm(bool send_stop = true);
  void SendStop();
  void Send(const std::vector<std::string>& texts, const Outputs* passed);
  TRITONSERVER_Error* BuildResponse(const std::vector<std::string>& texts, const Outputs* passed,
                                    TRITONBACKEND_Response** out);
  void SendError(TRITONSERVER_Error_Code code, const std::string& msg);
  void Finish();
  void ReleasePlace();
  void ReleaseRequest(bool success);

  bool Wants(const std::string& name) const { return wanted_.empty() || wanted_.count(name) != 0; }
  const Tensor* Input(const std::string& name) const {
    auto it = inputs_.find(name);
    return it == inputs_.end() ? nullptr : &it->second;
  }

  std::shared_ptr<ModelState> model_;
  TRITONBACKEND_ModelInstance* instance_ = nullptr;
  TRITONBACKEND_ResponseFactory* factory_ = nullptr;
  TRITONBACKEND_Request* request_ = nullptr;  // held until the final response
  uint64_t exec_start_ns_ = 0, compute_start_ns_ = 0;
  std::map<std::string, Tensor> inputs_;  // the client's inputs, by name
  std::set<std::string> wanted_;          // outputs the client asked for (empty: all)
  Tensor prompt_ids_, prompt_lengths_;
  size_t batch_ = 1;
  bool streaming_ = false;
  int64_t max_tokens_ = 0;
  size_t wanted_sequences_ = 1;

  std::mutex mu_;
  TRITONSERVER_InferenceRequest* llm_ = nullptr;  // until the LLM's FINAL response (InferCall keeps it valid)
  std::string llm_id_;                            // the LLM request's id, unique per request (for `stop`)
  bool llm_started_ = false;
  bool finished_ = false;  // the client has its final response
  bool counted_ = false;   // holds a place in the model's in_flight count
  bool cancel_sent_ = false;
  // The LoRA cache-miss resend (lora_resend.h): the LLM request kept while one resend may follow (null: none may),
  // the attempt whose responses count (0: the first request, 1: its resend), whether the first request missed.
  std::unique_ptr<InferCall::Spec> resend_;
  int attempt_ = 0;
  bool missed_ = false;
  uint64_t missed_task_ = 0;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::unique_ptr<Sequence>>> sequences_;
  std::unique_ptr<TRITONBACKEND_Response, void (*)(TRITONBACKEND_Response*)> whole_{nullptr, nullptr};
};

}  // namespace bls
}  // namespace tritongen
