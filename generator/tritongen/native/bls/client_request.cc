#include "bls/client_request.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "bls/lora_resend.h"
#include "bls/model.h"
#include "bls/wiring.h"
#include "error_kinds.h"

namespace tritongen {
namespace bls {
namespace {

int64_t FirstOr(const Tensor* t, int64_t fallback) {
  int64_t v;
  return t != nullptr && FirstInteger(*t, &v) ? v : fallback;
}

std::vector<int32_t> AsInt32(const Tensor& t) {
  std::vector<int32_t> v;
  size_t n = t.elements();
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == TRITONSERVER_TYPE_INT64) {
      int64_t x;
      std::memcpy(&x, t.data.data() + i * 8, 8);
      v.push_back(static_cast<int32_t>(x));
    } else {
      int32_t x;
      std::memcpy(&x, t.data.data() + i * 4, 4);
      v.push_back(x);
    }
  }
  return v;
}

// Stop words of batch row `row` (a [batch, n] or [n] BYTES tensor).
std::vector<std::string> Words(const Tensor* t, size_t row) {
  if (t == nullptr) return {};
  std::vector<std::string> all = BytesElements(t->data);
  if (t->shape.size() < 2) return all;
  size_t width = static_cast<size_t>(t->shape.back());
  std::vector<std::string> words;
  for (size_t i = row * width; i < (row + 1) * width && i < all.size(); ++i) words.push_back(all[i]);
  return words;
}

TRITONSERVER_Error* AddOutput(TRITONBACKEND_Response* response, const std::string& name, TRITONSERVER_DataType dtype,
                              const std::vector<int64_t>& shape, const std::string& data) {
  TRITONBACKEND_Output* output = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, name.c_str(), dtype, shape.data(),
                                                  static_cast<uint32_t>(shape.size())));
  void* buffer = nullptr;
  TRITONSERVER_MemoryType memtype = TRITONSERVER_MEMORY_CPU;
  int64_t memid = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, data.size(), &memtype, &memid));
  if (!data.empty()) std::memcpy(buffer, data.data(), data.size());
  return nullptr;
}

// A unique id for each LLM request (the backend's `stop` input finds its request by id).
std::string NextLlmId(const ModelState* model) {
  static std::atomic<uint64_t> counter{0};
  return "tritongen-bls-" + std::to_string(reinterpret_cast<uintptr_t>(model)) + "-" + std::to_string(++counter);
}

// Responses of a `stop` request: nothing to do with them.
class Ignore : public Responder {
 public:
  void OnResponse(TRITONSERVER_InferenceResponse* response, uint32_t) override {
    if (response != nullptr) TRITONSERVER_InferenceResponseDelete(response);
  }
};

}  // namespace

// preprocessing answers once; its response starts the LLM request.
class PreResponder : public Responder {
 public:
  explicit PreResponder(std::shared_ptr<ClientRequest> s) : s_(std::move(s)) {}
  void OnResponse(TRITONSERVER_InferenceResponse* response, uint32_t) override {
    if (response == nullptr) return;
    Outputs out;
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
    if (err == nullptr) err = ReadResponse(response, &out);
    TRITONSERVER_InferenceResponseDelete(response);
    if (err != nullptr) {
      std::lock_guard<std::mutex> lk(s_->mu_);
      // preprocessing (python) names itself already; its tag, if any, stays in front.
      std::string msg = TRITONSERVER_ErrorMessage(err);
      s_->SendError(TRITONSERVER_ErrorCode(err),
                    msg.compare(TagLength(msg), 14, "preprocessing:") == 0 ? msg : Wrap("preprocessing", msg));
      TRITONSERVER_ErrorDelete(err);
      return;
    }
    bool go = false;
    {
      std::lock_guard<std::mutex> lk(s_->mu_);
      go = !s_->finished_ && !s_->CancelledLocked();
    }
    if (go) s_->StartLlm(std::move(out));
  }

 private:
  std::shared_ptr<ClientRequest> s_;
};

// The responses of one LLM request: `attempt` 0 the first, 1 its resend after a LoRA cache miss.
class LlmResponder : public Responder {
 public:
  LlmResponder(std::shared_ptr<ClientRequest> s, int attempt) : s_(std::move(s)), attempt_(attempt) {}
  void OnResponse(TRITONSERVER_InferenceResponse* response, uint32_t flags) override {
    // The resend reads the adapter's files: outside the request's lock, which the watcher takes.
    if (s_->OnLlmResponse(response, flags, attempt_)) s_->Resend();
  }

 private:
  std::shared_ptr<ClientRequest> s_;
  const int attempt_;
};

ClientRequest::~ClientRequest() {
  if (request_ != nullptr) ReleaseRequest(false);
  if (factory_ != nullptr) LogIfError(TRITONBACKEND_ResponseFactoryDelete(factory_), "tensorrt_llm_bls: factory");
}

// ------------------------------------------------------------------ admission
void ClientRequest::Serve(const std::shared_ptr<ModelState>& model, TRITONBACKEND_ModelInstance* instance,
                   TRITONBACKEND_Request* request, uint64_t exec_start_ns, TRITONSERVER_Error* table_error) {
  std::shared_ptr<ClientRequest> s(new ClientRequest());
  s->model_ = model;
  s->instance_ = instance;
  s->exec_start_ns_ = exec_start_ns;
  s->compute_start_ns_ = NowNs();
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseFactoryNew(&s->factory_, request);
  if (err != nullptr) {
    // No way to answer this request: Triton answers it with the error when it is released.
    LogIfError(err, "tensorrt_llm_bls: response factory");
    LogIfError(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL), "tensorrt_llm_bls: release");
    return;
  }
  s->request_ = request;
  err = s->ReadRequest();
  if (err == nullptr && table_error != nullptr)
    err = Err(TRITONSERVER_ErrorCode(table_error), TRITONSERVER_ErrorMessage(table_error));
  if (err == nullptr) err = s->Admit();
  if (err == nullptr) err = s->Validate();
  if (err != nullptr) {
    std::lock_guard<std::mutex> lk(s->mu_);
    s->SendError(TRITONSERVER_ErrorCode(err), TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
    return;
  }
  model->Track(s);
  s->StartPreprocessing();
}

TRITONSERVER_Error* ClientRequest::ReadRequest() {
  uint32_t count = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_RequestInputCount(request_, &count));
  for (uint32_t i = 0; i < count; ++i) {
    TRITONBACKEND_Input* input = nullptr;
    TG_RETURN_IF_ERROR(TRITONBACKEND_RequestInputByIndex(request_, i, &input));
    Tensor t;
    TG_RETURN_IF_ERROR(ReadInput(input, &t));
    inputs_[t.name] = std::move(t);
  }
  uint32_t outputs = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_RequestOutputCount(request_, &outputs));
  for (uint32_t i = 0; i < outputs; ++i) {
    const char* name = nullptr;
    TG_RETURN_IF_ERROR(TRITONBACKEND_RequestOutputName(request_, i, &name));
    wanted_.insert(name);
  }
  return nullptr;
}

// A place among the requests the model holds at once. Refused as Triton refuses a request its dynamic batcher's
// full queue cannot take: UNAVAILABLE with "Exceeds maximum queue size", the code and wording of Triton's own
// queue rejection (docs/serving-behaviour.md "Overload: the error code" says what each endpoint makes of it).
TRITONSERVER_Error* ClientRequest::Admit() {
  const int64_t capacity = model_->config().capacity;
  if (capacity <= 0) return nullptr;
  if (model_->in_flight().fetch_add(1) >= capacity) {
    model_->in_flight().fetch_sub(1);
    return Err(TRITONSERVER_ERROR_UNAVAILABLE,
               Tag(kOverloaded) + "Exceeds maximum queue size: tensorrt_llm_bls holds " + std::to_string(capacity) +
                   " requests (max_batch_size in flight plus max_queue_size waiting); retry later");
  }
  counted_ = true;
  return nullptr;
}

TRITONSERVER_Error* ClientRequest::Validate() {
  const BlsConfig& c = model_->config();
  const Tensor* text = Input("text_input");
  if (text == nullptr || text->elements() == 0) return BadRequest("text_input", "required");
  if (Input("max_tokens") == nullptr) return BadRequest("max_tokens", "required");
  batch_ = static_cast<size_t>(text->shape.empty() ? 1 : text->shape[0]);
  if (c.max_input_tokens > 0) {
    // Refused before any work: no prompt of at most max_input_tokens tokens is longer than that many of the
    // longest vocabulary entry, doubled for normalisers that shorten text (as the python BLS and preprocessing).
    size_t longest = 1;
    if (auto table = model_->tables().table())
      for (const auto& b : table->bytes) longest = std::max(longest, b.size());
    int64_t limit = c.max_input_tokens * static_cast<int64_t>(longest) * 2;
    for (const std::string& item : BytesElements(text->data)) {
      if (static_cast<int64_t>(item.size()) > limit)
        return BadRequest("text_input", std::to_string(item.size()) + " bytes exceed the limit of " +
                                            std::to_string(limit) + " bytes (at most " +
                                            std::to_string(c.max_input_tokens) + " prompt tokens of at most " +
                                            std::to_string(longest) + " bytes each); shorten the prompt");
    }
  }
  int64_t v = 0;
  const Tensor* draft = Input("num_draft_tokens");
  if (draft != nullptr && FirstInteger(*draft, &v) && v > 0)
    return BadRequest("num_draft_tokens", "speculative decoding needs a draft model, and this deployment has none "
                                          "(tensorrt_llm_draft_model_name); leave it unset or 0");
  const Tensor* draft_logits = Input("use_draft_logits");
  if (draft_logits != nullptr && FirstInteger(*draft_logits, &v) && v != 0)
    return BadRequest("use_draft_logits", "needs a draft model, and this deployment has none; leave it unset");
  const Tensor* stream = Input("stream");
  streaming_ = stream != nullptr && FirstInteger(*stream, &v) && v != 0;
  if (streaming_ && !c.decoupled)
    return BadRequest("stream", "this deployment is not decoupled (serving.streaming: false); send stream=false or "
                                "render it with streaming");
  FirstInteger(*Input("max_tokens"), &max_tokens_);
  int64_t sequences = 1;
  const Tensor* nrs = Input("num_return_sequences");
  if (nrs != nullptr && FirstInteger(*nrs, &sequences) && sequences < 1) sequences = 1;
  wanted_sequences_ = batch_ * static_cast<size_t>(sequences);
  return nullptr;
}

// ------------------------------------------------------------------ in-process calls
void ClientRequest::StartPreprocessing() {
  InferCall::Spec spec;
  spec.model = "preprocessing";
  for (const auto& [from, to] : kToPreprocessing) {
    const Tensor* in = Input(from);
    if (in == nullptr) continue;
    Tensor t = *in;
    t.name = to;
    spec.inputs.push_back(std::move(t));
  }
  for (const auto& [from, to] : kFromPreprocessing) spec.outputs.push_back(from);
  TRITONSERVER_Error* err = InferCall::Start(model_->server(), model_->allocator(), std::move(spec),
                                             std::unique_ptr<Responder>(new PreResponder(shared_from_this())));
  if (err != nullptr) {
    std::lock_guard<std::mutex> lk(mu_);
    SendError(TRITONSERVER_ErrorCode(err), Wrap("preprocessing", TRITONSERVER_ErrorMessage(err)));
    TRITONSERVER_ErrorDelete(err);
  }
}

void ClientRequest::StartLlm(Outputs pre) {
  InferCall::Spec spec;
  spec.model = model_->config().llm_name;
  for (const auto& [from, to] : kFromPreprocessing) {
    auto it = pre.find(from);
    if (it == pre.end()) continue;
    if (from == "EMBEDDING_BIAS" && it->second.data.empty()) continue;  // no bias words: send no bias
    Tensor t = it->second;
    t.name = to;
    spec.inputs.push_back(std::move(t));
  }
  for (const auto& [from, to] : kToLlm) {
    const Tensor* in = Input(from);
    if (in == nullptr) continue;
    Tensor t = *in;
    t.name = to;
    // Inputs declared with `reshape: { shape: [ ] }` arrive as [batch]; tensorrt_llm wants [batch, 1].
    if (t.shape.size() == 1) t.shape = {static_cast<int64_t>(batch_), 1};
    spec.inputs.push_back(std::move(t));
  }
  prompt_ids_ = pre["INPUT_ID"];
  prompt_lengths_ = pre["REQUEST_INPUT_LEN"];
  spec.outputs = {"output_ids", "sequence_length"};
  for (const auto& name : kPassedOutputs)
    if (Wants(name) || name == "batch_index" || name == "sequence_index") spec.outputs.push_back(name);
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) return;  // aborted while preprocessing answered
  // A request naming a LoRA task without its weights may miss the LLM's LoRA cache: kept for one resend.
  if (!model_->config().lora_dir.empty() && Input("lora_task_id") != nullptr && Input("lora_weights") == nullptr)
    resend_ = std::make_unique<InferCall::Spec>(spec);
  TRITONSERVER_Error* err = StartLlmCall(std::move(spec), 0);
  if (err != nullptr) {
    llm_started_ = false;
    SendError(TRITONSERVER_ErrorCode(err), Wrap(model_->config().llm_name, TRITONSERVER_ErrorMessage(err)));
    TRITONSERVER_ErrorDelete(err);
  }
}

// Sends one LLM request under a fresh id; its responses reach OnLlmResponse as `attempt`. Runs with `mu` held.
TRITONSERVER_Error* ClientRequest::StartLlmCall(InferCall::Spec spec, int attempt) {
  llm_id_ = NextLlmId(model_.get());
  spec.id = llm_id_;
  attempt_ = attempt;
  TRITONSERVER_Error* err = InferCall::Start(
      model_->server(), model_->allocator(), std::move(spec),
      std::unique_ptr<Responder>(new LlmResponder(shared_from_this(), attempt)),
      [this](TRITONSERVER_InferenceRequest* req) {
        llm_ = req;
        llm_started_ = true;
      });
  if (err != nullptr) llm_ = nullptr;
  return err;
}

// Whether `err` is TensorRT-LLM's LoRA cache miss for exactly this request's task (`task`), with a resend still
// possible.
bool ClientRequest::OwnCacheMiss(TRITONSERVER_Error* err, uint64_t* task) const {
  const Tensor* ids = Input("lora_task_id");
  return resend_ != nullptr && ids != nullptr && CacheMissTaskId(TRITONSERVER_ErrorMessage(err), task) &&
         AllTaskIds(*ids, *task);
}

// The first LLM request missed the LoRA cache and has ended: the same request again with the adapter's weights
// (lora_resend.h). Its responses are passed on as the first request's would have been; a second miss is an error
// like any other. The request may have ended meanwhile (cancelled, the server stopping): then nothing is sent.
void ClientRequest::Resend() {
  std::unique_ptr<InferCall::Spec> spec;
  uint64_t task = 0;
  size_t batch = 1;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_ || CancelledLocked()) return;
    spec = std::move(resend_);
    task = missed_task_;
    batch = static_cast<size_t>(std::max<int64_t>(Input("lora_task_id")->elements(), 1));
  }
  Tensor weights, config;
  TRITONSERVER_Error* err = AdapterTensors(model_->config().lora_dir, task, batch, &weights, &config);
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) {
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);
    return;
  }
  if (err != nullptr) {
    SendError(TRITONSERVER_ErrorCode(err), TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
    return;
  }
  if (CancelledLocked()) return;
  missed_ = false;
  spec->inputs.push_back(std::move(weights));
  spec->inputs.push_back(std::move(config));
  err = StartLlmCall(std::move(*spec), 1);
  if (err != nullptr) {
    SendError(TRITONSERVER_ErrorCode(err), Wrap(model_->config().llm_name, TRITONSERVER_ErrorMessage(err)));
    TRITONSERVER_ErrorDelete(err);
  }
}

// A `stop` request for the LLM request in flight: the backend's own input, sent with the same request id (as
// NVIDIA's BLS does). Triton's cancellation alone does not reach a model that released its request early (the
// python backend releases decoupled requests when execute returns).
void ClientRequest::SendStop() {
  InferCall::Spec spec;
  spec.model = model_->config().llm_name;
  spec.id = llm_id_;
  int32_t zero = 0;
  bool yes = true;
  for (const char* name : {"input_ids", "input_lengths", "request_output_len"})
    spec.inputs.push_back(
        Tensor{name, TRITONSERVER_TYPE_INT32, {1, 1}, std::string(reinterpret_cast<char*>(&zero), 4)});
  spec.inputs.push_back(Tensor{"stop", TRITONSERVER_TYPE_BOOL, {1, 1}, std::string(reinterpret_cast<char*>(&yes), 1)});
  // The request may have ended on its own meanwhile, or the server may be stopping: logged, nothing else.
  LogIfError(InferCall::Start(model_->server(), model_->allocator(), std::move(spec),
                              std::unique_ptr<Responder>(new Ignore())),
             "tensorrt_llm_bls: stop request");
}

void ClientRequest::CancelLlm(bool send_stop) {
  // Ends the LLM request early: Triton's cancellation (it reaches the model's response factory), and the
  // backend's `stop` input by request id for a model that does not look at its factory.
  if (cancel_sent_ || !llm_started_) return;
  cancel_sent_ = true;
  if (llm_ != nullptr) LogIfError(TRITONSERVER_InferenceRequestCancel(llm_), "tensorrt_llm_bls: cancel");
  if (send_stop) SendStop();
}

// ------------------------------------------------------------------ sending to the client
void ClientRequest::ReleasePlace() {
  // The place goes back BEFORE the final response is sent: a client that starts its next request on receiving
  // this one's final must find the place free (a closed loop at exactly the capacity).
  if (counted_) {
    counted_ = false;
    model_->in_flight().fetch_sub(1);
  }
}

void ClientRequest::ReleaseRequest(bool success) {
  ReleasePlace();
  if (request_ == nullptr) return;
  // Statistics as Triton's own backends report them, once per request and in order: exec start (execute began),
  // compute start (this request's turn), compute end (its last response), exec end (now, before release).
  const uint64_t compute_end = std::max(NowNs(), compute_start_ns_);
  const uint64_t exec_end = std::max(NowNs(), compute_end);
  LogIfError(TRITONBACKEND_ModelInstanceReportStatistics(instance_, request_, success, exec_start_ns_,
                                                         compute_start_ns_, compute_end, exec_end),
             "tensorrt_llm_bls: statistics");
  LogIfError(TRITONBACKEND_RequestRelease(request_, TRITONSERVER_REQUEST_RELEASE_ALL), "tensorrt_llm_bls: release");
  request_ = nullptr;
  model_->Forget(this);
}

void ClientRequest::SendError(TRITONSERVER_Error_Code code, const std::string& msg) {
  // Exactly one final response, whatever came before.
  if (finished_) return;
  finished_ = true;
  ReleasePlace();
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNewFromFactory(&response, factory_);
  if (err != nullptr) {
    LogIfError(err, "tensorrt_llm_bls: response");
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(factory_, TRITONSERVER_RESPONSE_COMPLETE_FINAL),
               "tensorrt_llm_bls: final flag");
  } else {
    TRITONSERVER_Error* error = Err(code, msg);
    LogIfError(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error),
               "tensorrt_llm_bls: error response");
    TRITONSERVER_ErrorDelete(error);
  }
  ReleaseRequest(false);
}

TRITONSERVER_Error* ClientRequest::BuildResponse(const std::vector<std::string>& texts, const Outputs* passed,
                                          TRITONBACKEND_Response** out) {
  TG_RETURN_IF_ERROR(TRITONBACKEND_ResponseNewFromFactory(out, factory_));
  std::string data;
  for (auto& t : texts) AppendBytesElement(&data, t);
  TRITONSERVER_Error* err = nullptr;
  if (Wants("text_output"))
    err = AddOutput(*out, "text_output", TRITONSERVER_TYPE_BYTES, {static_cast<int64_t>(texts.size())}, data);
  if (passed != nullptr) {
    for (const auto& name : kPassedOutputs) {
      if (err != nullptr) break;
      const Tensor* t = Find(*passed, name);
      if (t != nullptr && Wants(name)) err = AddOutput(*out, name, t->dtype, t->shape, t->data);
    }
  }
  if (err != nullptr) {
    TRITONBACKEND_ResponseDelete(*out);
    *out = nullptr;
  }
  return err;
}

void ClientRequest::Send(const std::vector<std::string>& texts, const Outputs* passed) {
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = BuildResponse(texts, passed, &response);
  if (err != nullptr) {
    std::string msg = Tag(kInternal) + "tensorrt_llm_bls: " + TRITONSERVER_ErrorMessage(err);
    TRITONSERVER_ErrorDelete(err);
    SendError(TRITONSERVER_ERROR_INTERNAL, msg);
    return;
  }
  if (!model_->config().decoupled) {
    // One response per request: keep the latest and send it with the final flag.
    whole_ = {response, [](TRITONBACKEND_Response* r) { TRITONBACKEND_ResponseDelete(r); }};
    return;
  }
  LogIfError(TRITONBACKEND_ResponseSend(response, 0, nullptr), "tensorrt_llm_bls: response");
}

void ClientRequest::Finish() {
  // Text held back at the very end goes out in one last response, then the final flag.
  if (finished_) return;
  if (streaming_) {
    for (auto& [key, beams] : sequences_) {
      if (beams.size() != 1 || beams[0]->stopped) continue;
      Sequence& seq = *beams[0];
      std::string tail;
      seq.detok.Finish(&tail);
      seq.stopped = seq.stops.Feed(&tail);
      if (tail.empty()) continue;
      seq.sent += tail;
      Outputs index;
      index["batch_index"] = Tensor{"batch_index", TRITONSERVER_TYPE_INT32, {1, 1}, std::string(4, '\0')};
      index["sequence_index"] = Tensor{"sequence_index", TRITONSERVER_TYPE_INT32, {1, 1}, std::string(4, '\0')};
      int32_t b = static_cast<int32_t>(key.first), q = static_cast<int32_t>(key.second);
      std::memcpy(&index["batch_index"].data[0], &b, 4);
      std::memcpy(&index["sequence_index"].data[0], &q, 4);
      Send({model_->config().accumulate ? seq.sent : tail}, &index);
      if (finished_) return;
    }
  }
  if (!model_->config().decoupled && !whole_) {
    SendError(TRITONSERVER_ERROR_INTERNAL, Tag(kInternal) + model_->config().llm_name + ": returned no output_ids");
    return;
  }
  finished_ = true;
  ReleasePlace();
  if (!model_->config().decoupled) {
    LogIfError(TRITONBACKEND_ResponseSend(whole_.release(), TRITONSERVER_RESPONSE_COMPLETE_FINAL, nullptr),
               "tensorrt_llm_bls: response");
  } else {
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(factory_, TRITONSERVER_RESPONSE_COMPLETE_FINAL),
               "tensorrt_llm_bls: final flag");
  }
  ReleaseRequest(true);
}

// ------------------------------------------------------------------ cancellation and shutdown
bool ClientRequest::CancelledLocked() {
  bool cancelled = false;
  if (request_ != nullptr)
    LogIfError(TRITONBACKEND_RequestIsCancelled(request_, &cancelled), "tensorrt_llm_bls: is cancelled");
  if (!cancelled) return false;
  CancelLlm();
  SendError(TRITONSERVER_ERROR_CANCELLED, "request cancelled");
  return true;
}

void ClientRequest::CheckCancelled() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!finished_) CancelledLocked();
}

void ClientRequest::Abort(TRITONSERVER_Error_Code code, const std::string& message) {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) return;
  CancelLlm(/*send_stop=*/false);  // a stopping server takes no new request, a `stop` included
  SendError(code, message);
}

// ------------------------------------------------------------------ LLM responses
bool ClientRequest::OnLlmResponse(TRITONSERVER_InferenceResponse* response, uint32_t flags, int attempt) {
  std::lock_guard<std::mutex> lk(mu_);
  // Responses of a request that missed the LoRA cache (its error is its final; nothing else is expected): dropped.
  const bool superseded = attempt != attempt_ || missed_;
  if (response != nullptr) {
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
    if (finished_ || superseded) {
      // Late responses after a stop string, a cancellation or an error: dropped.
    } else if (CancelledLocked()) {
    } else if (err != nullptr && OwnCacheMiss(err, &missed_task_)) {
      missed_ = true;  // the resend starts at this request's FINAL
    } else if (err != nullptr) {
      SendError(TRITONSERVER_ErrorCode(err), Wrap(model_->config().llm_name, TRITONSERVER_ErrorMessage(err)));
    } else {
      Outputs out;
      TRITONSERVER_Error* read = ReadResponse(response, &out);
      const Tensor* ids = Find(out, "output_ids");
      const Tensor* lengths = Find(out, "sequence_length");
      if (read != nullptr) {
        SendError(TRITONSERVER_ERROR_INTERNAL, Tag(kInternal) + "tensorrt_llm_bls: " + TRITONSERVER_ErrorMessage(read));
        TRITONSERVER_ErrorDelete(read);
      } else if (ids != nullptr && lengths != nullptr) {  // none: the empty final response of a decoupled model
        if (streaming_)
          OnStreamed(out, *ids, *lengths);
        else
          OnWhole(out, *ids, *lengths);
      }
    }
    // Only the first response may be the miss: when it is anything else, nothing is resent.
    if (attempt == 0 && !missed_) resend_.reset();
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);
    LogIfError(TRITONSERVER_InferenceResponseDelete(response), "tensorrt_llm_bls: delete response");
  }
  if ((flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) && attempt == attempt_) {
    llm_ = nullptr;  // its InferCall is deleted once this returns (and the request was released)
    if (missed_) return !finished_;
    if (!finished_ && !CancelledLocked()) Finish();
  }
  return false;
}

void ClientRequest::OnStreamed(const Outputs& out, const Tensor& ids_t, const Tensor& lengths_t) {
  std::shared_ptr<const DetokTable> table = model_->tables().table();
  std::vector<int32_t> ids = AsInt32(ids_t), lengths = AsInt32(lengths_t);
  size_t width = ids_t.shape.empty() ? 0 : static_cast<size_t>(ids_t.shape.back());
  size_t rows = width == 0 ? lengths.size() : ids.size() / width;
  std::pair<int64_t, int64_t> key{FirstOr(Find(out, "batch_index"), 0), FirstOr(Find(out, "sequence_index"), 0)};
  auto& beams = sequences_[key];
  if (beams.empty()) {
    const Tensor* stop_words = Input("stop_words");
    size_t row = stop_words != nullptr && stop_words->shape.size() > 1 && key.first < stop_words->shape[0]
                     ? static_cast<size_t>(key.first)
                     : 0;
    for (size_t r = 0; r < rows; ++r) beams.emplace_back(new Sequence(table.get(), Words(stop_words, row)));
  }
  std::vector<std::string> texts;
  for (size_t r = 0; r < rows && r < beams.size(); ++r) {
    Sequence& seq = *beams[r];
    size_t n = r < lengths.size() ? std::min<size_t>(static_cast<size_t>(std::max(lengths[r], 0)), width) : width;
    const int32_t* tokens = ids.data() + r * width;
    std::string text;
    bool ok = true;
    if (beams.size() > 1) {
      // Beam search may rewrite earlier tokens, so each response carries whole beams: whole text.
      ok = DecodeWhole(*table, tokens, n, &text);
      seq.stopped = seq.stops.Cut(&text);
    } else if (seq.stopped) {
      if (model_->config().accumulate) text = seq.sent;
    } else {
      ok = seq.detok.Add(tokens, n, &text);
      seq.tokens += n;
      // A sequence at max_tokens has ended: release held-back text now rather than in an extra response.
      if (max_tokens_ > 0 && static_cast<int64_t>(seq.tokens) >= max_tokens_) seq.detok.Finish(&text);
      seq.stopped = seq.stops.Feed(&text);
      seq.sent += text;
      if (model_->config().accumulate) text = seq.sent;
    }
    if (!ok) {
      SendError(TRITONSERVER_ERROR_INTERNAL,
                Tag(kInternal) + model_->config().llm_name + ": a token id outside the tokenizer's vocabulary");
      return;
    }
    texts.push_back(std::move(text));
  }
  Send(texts, &out);
  size_t done = 0;
  for (auto& [k, seqs] : sequences_) {
    bool all = !seqs.empty();
    for (auto& q : seqs) all = all && q->stopped;
    done += all;
  }
  if (done >= wanted_sequences_) {
    CancelLlm();  // every sequence hit a stop string: end generation
    Finish();
  }
}

void ClientRequest::OnWhole(const Outputs& out, const Tensor& ids_t, const Tensor& lengths_t) {
  std::shared_ptr<const DetokTable> table = model_->tables().table();
  std::vector<int32_t> ids = AsInt32(ids_t), lengths = AsInt32(lengths_t);
  size_t width = ids_t.shape.empty() ? 0 : static_cast<size_t>(ids_t.shape.back());
  size_t entries = ids_t.shape.empty() ? 1 : static_cast<size_t>(ids_t.shape[0]);
  size_t beams = entries == 0 || width == 0 ? 1 : ids.size() / (entries * width);
  std::vector<int32_t> prompt = AsInt32(prompt_ids_), prompt_lengths = AsInt32(prompt_lengths_);
  size_t prompt_width = prompt_ids_.shape.empty() ? 0 : static_cast<size_t>(prompt_ids_.shape.back());
  std::vector<std::string> texts;
  for (size_t b = 0; b < entries; ++b) {
    size_t row = entries == prompt_lengths.size() ? b : 0;
    StopStrings stops(Words(Input("stop_words"), row));
    size_t plen = row < prompt_lengths.size() ? static_cast<size_t>(std::max(prompt_lengths[row], 0)) : 0;
    if (row * prompt_width + plen > prompt.size()) plen = 0;
    const int32_t* p = prompt.data() + row * prompt_width;
    for (size_t beam = 0; beam < beams; ++beam) {
      size_t at = b * beams + beam;
      size_t n = at < lengths.size() ? std::min<size_t>(static_cast<size_t>(std::max(lengths[at], 0)), width) : width;
      if (at * width + n > ids.size()) n = ids.size() > at * width ? ids.size() - at * width : 0;
      const int32_t* tokens = ids.data() + at * width;
      std::string text, prompt_text;
      if (!DecodeWhole(*table, tokens, n, &text)) {
        SendError(TRITONSERVER_ERROR_INTERNAL,
                  Tag(kInternal) + model_->config().llm_name + ": a token id outside the tokenizer's vocabulary");
        return;
      }
      // Stop strings are looked for in the completion only, also when the output repeats the prompt.
      size_t start = 0;
      if (plen > 0 && n >= plen && std::equal(p, p + plen, tokens) && DecodeWhole(*table, p, plen, &prompt_text))
        start = prompt_text.size();
      stops.Cut(&text, start);
      texts.push_back(std::move(text));
    }
  }
  Send(texts, &out);
}

}  // namespace bls
}  // namespace tritongen
