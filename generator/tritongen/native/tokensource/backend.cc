// tritongen_tokensource: a token source with the tensor contract of TensorRT-LLM's `tensorrt_llm` model and no
// model behind it, built as a C++ backend so that it is not the bottleneck of what it measures.
//
// Behaviour is that of the synthetic runtime's python model (generator/tritongen/served/synthetic.py): the
// same parameters (ttft_ms, itl_ms, stream_interval, vocab_size, end_id, pad_id, lora_adapters), inputs, outputs,
// token ids (lora_task_id shifts them) and timing. A python source pays an IPC round trip into its stub per
// response, which capped it at a few thousand tokens/s per host; here a response is a few Triton API calls, so the
// serving path around the source (BLS, ensemble, gRPC, clients) is what a benchmark sees.
//
// Timing: each request is due at arrival + ttft + i * itl for its i-th token. Requests are spread round-robin
// over a few timer threads (parameter `timer_threads`, default min(4, hardware threads)), each with its own heap
// and lock, so that arrivals, emission and stop requests do not contend on one lock. A thread that falls behind
// emits the late tokens back to back; lateness shows as growing TTFT/ITL on the client, not as a slower clock.
// With parameter `engine_model: true` one engine thread (engine_model.h) steps every running request instead.
//
// Files, by class: generation (one request in flight), timer (TimerShard, a timer thread), metrics (the Prometheus
// metrics), model (ModelState: parameters, Execute, responses), this file (the entry points).

#include "api_version.h"
#include "export.h"
#include "tokensource/model.h"

using tritongen::tokensource::ModelState;

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  return tritongen::CheckApiVersion(backend);
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  std::unique_ptr<ModelState> state;
  TG_RETURN_IF_ERROR(ModelState::Create(model, &state));
  // Triton holds the model until ModelFinalize; if it does not take it, `state` frees it here (threads joined).
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, state.get()));
  state.release();
  return nullptr;
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  // Null when ModelInitialize failed (Triton finalizes such a model too); else its destruction joins every thread.
  std::unique_ptr<ModelState> owned(static_cast<ModelState*>(state));
  return nullptr;
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance*) {
  return nullptr;  // instances share the model's timer threads
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance*) { return nullptr; }

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                                TRITONBACKEND_Request** requests,
                                                                uint32_t request_count) {
  TRITONBACKEND_Model* model = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* state = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  static_cast<ModelState*>(state)->Execute(instance, requests, request_count);
  return nullptr;
}
