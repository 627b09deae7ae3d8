#include "tokensource/generation.h"

#include "error_kinds.h"

namespace tritongen {
namespace tokensource {
namespace {

// The input `name` of a request, or nullptr when the request does not carry it.
TRITONBACKEND_Input* OptionalInput(TRITONBACKEND_Request* request, const char* name) {
  TRITONBACKEND_Input* input = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestInput(request, name, &input);
  if (err != nullptr) {
    TRITONSERVER_ErrorDelete(err);
    return nullptr;
  }
  return input;
}

// The first element of input `name` as an integer; false when absent or empty.
TRITONSERVER_Error* OptionalScalar(TRITONBACKEND_Request* request, const char* name, int64_t* value, bool* present) {
  *present = false;
  TRITONBACKEND_Input* input = OptionalInput(request, name);
  if (input == nullptr) return nullptr;
  Tensor t;
  TG_RETURN_IF_ERROR(ReadInput(input, &t));
  if (t.data.empty()) return nullptr;
  if (!FirstInteger(t, value)) return BadRequest(name, "expected an integer or bool tensor");
  *present = true;
  return nullptr;
}

}  // namespace

TRITONSERVER_Error* ScalarOr(TRITONBACKEND_Request* request, const char* name, int64_t fallback, int64_t* value) {
  bool present = false;
  TG_RETURN_IF_ERROR(OptionalScalar(request, name, value, &present));
  if (!present) *value = fallback;
  return nullptr;
}

Generation::~Generation() {
  if (factory != nullptr) LogIfError(TRITONBACKEND_ResponseFactoryDelete(factory), "response factory");
}

TRITONSERVER_Error* Generation::Read(TRITONBACKEND_Request* request, const Limits& limits,
                                     std::unique_ptr<Generation>* out) {
  auto s = std::make_unique<Generation>();
  bool present = false;
  TG_RETURN_IF_ERROR(OptionalScalar(request, "input_lengths", &s->prompt_len, &present));
  if (!present) {
    s->prompt_len = 0;
    if (TRITONBACKEND_Input* ids = OptionalInput(request, "input_ids")) {
      const int64_t* shape = nullptr;
      uint32_t dims = 0;
      TG_RETURN_IF_ERROR(TRITONBACKEND_InputProperties(ids, nullptr, nullptr, &shape, &dims, nullptr, nullptr));
      s->prompt_len = 1;
      for (uint32_t d = 0; d < dims; ++d) s->prompt_len *= shape[d];
    }
  }
  if (s->prompt_len < 0) return BadRequest("input_lengths", "must be >= 0 (got " + std::to_string(s->prompt_len) + ")");
  TG_RETURN_IF_ERROR(OptionalScalar(request, "request_output_len", &s->n_out, &present));
  if (!present) return BadRequest("request_output_len", "required (the number of tokens to generate, >= 1)");
  if (s->n_out < 1) return BadRequest("request_output_len", "must be >= 1 (got " + std::to_string(s->n_out) + ")");
  int64_t exclude_input = 1;
  TG_RETURN_IF_ERROR(ScalarOr(request, "exclude_input_in_output", 1, &exclude_input));
  if (exclude_input == 0)
    return BadRequest("exclude_input_in_output", "false is not supported by the synthetic runtime (its outputs carry "
                      "the generated tokens only); send true or leave it unset");
  // A guide is refused, not ignored: fixed token ids cannot follow a grammar (docs/structured-output.md).
  if (TRITONBACKEND_Input* guide = OptionalInput(request, "guided_decoding_guide_type")) {
    Tensor t;
    TG_RETURN_IF_ERROR(ReadInput(guide, &t));
    if (t.data.size() > 4)  // BYTES: a 4-byte length, then the text; an empty type is no guide
      return BadRequest("guided_decoding_guide_type", "not supported by the synthetic runtime (its token source "
                        "emits fixed ids without a model, so they cannot follow a guide); leave it unset");
  }
  for (const char* name : {"beam_width", "num_return_sequences"}) {
    int64_t value = 1;
    TG_RETURN_IF_ERROR(ScalarOr(request, name, 1, &value));
    if (value != 1) {
      return BadRequest(name, std::to_string(value) + " > 1 is not supported by the synthetic runtime");
    }
  }
  int64_t task_id = 0;
  TG_RETURN_IF_ERROR(ScalarOr(request, "lora_task_id", 0, &task_id));
  if (task_id < 0 || task_id > limits.adapters) {
    return BadRequest("lora_task_id", std::to_string(task_id) + " is not a LoRA adapter of this deployment; known "
                      "ids: 0 (the base)" + (limits.adapters ? " to " + std::to_string(limits.adapters) : std::string()));
  }
  s->shift = kAdapterShift * task_id;
  int64_t streaming = 0, want_in = 0, want_out = 0;
  TG_RETURN_IF_ERROR(ScalarOr(request, "streaming", 0, &streaming));
  TG_RETURN_IF_ERROR(ScalarOr(request, "return_num_input_tokens", 0, &want_in));
  TG_RETURN_IF_ERROR(ScalarOr(request, "return_num_output_tokens", 0, &want_out));
  s->streaming = limits.decoupled && streaming != 0;

  uint32_t count = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_RequestOutputCount(request, &count));
  for (uint32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    TG_RETURN_IF_ERROR(TRITONBACKEND_RequestOutputName(request, i, &name));
    const std::string n(name);
    if (n == "output_ids") s->outputs |= kOutputIds;
    if (n == "sequence_length") s->outputs |= kSequenceLength;
    if (n == "num_input_tokens" && want_in) s->outputs |= kNumInputTokens;
    if (n == "num_output_tokens" && want_out) s->outputs |= kNumOutputTokens;
  }
  const char* id = nullptr;
  if (TRITONBACKEND_RequestId(request, &id) == nullptr && id != nullptr) s->triton_id = id;
  *out = std::move(s);
  return nullptr;
}

void SendFinalError(TRITONBACKEND_ResponseFactory* factory, TRITONSERVER_Error_Code code, const std::string& message) {
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNewFromFactory(&response, factory);
  if (err != nullptr) {
    LogIfError(err, "error response");
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL), "final flag");
    return;
  }
  TRITONSERVER_Error* error = TRITONSERVER_ErrorNew(code, message.c_str());
  LogIfError(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error), "error response");
  TRITONSERVER_ErrorDelete(error);
}

}  // namespace tokensource
}  // namespace tritongen
