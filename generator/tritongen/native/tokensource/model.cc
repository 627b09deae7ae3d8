#include "tokensource/model.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "error_kinds.h"

namespace tritongen {
namespace tokensource {
namespace {

TRITONSERVER_Error* AddInt32(TRITONBACKEND_Response* response, const char* name, const std::vector<int64_t>& shape,
                             const int32_t* values, size_t n) {
  TRITONBACKEND_Output* output = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, name, TRITONSERVER_TYPE_INT32, shape.data(),
                                                  static_cast<uint32_t>(shape.size())));
  void* buffer = nullptr;
  TRITONSERVER_MemoryType memtype = TRITONSERVER_MEMORY_CPU;
  int64_t memid = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, n * sizeof(int32_t), &memtype, &memid));
  if (memtype == TRITONSERVER_MEMORY_GPU) return Internal(Tag(kInternal) + name + ": output buffer in GPU memory");
  std::memcpy(buffer, values, n * sizeof(int32_t));
  return nullptr;
}

}  // namespace

// ---- requests --------------------------------------------------------------------------------------------------

void ModelState::Execute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
                         uint32_t count) {
  const uint64_t start = NowNs();
  for (uint32_t r = 0; r < count; ++r) {
    TRITONBACKEND_Request* request = requests[r];
    TRITONBACKEND_ResponseFactory* factory = nullptr;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseFactoryNew(&factory, request);
    if (err != nullptr) {
      // No way to answer this request: Triton ends it with this error when the request is released.
      LogIfError(err, "response factory");
      LogIfError(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL), "request release");
      continue;
    }
    int64_t stop = 0;
    err = ScalarOr(request, "stop", 0, &stop);
    std::unique_ptr<Generation> generation;
    if (err == nullptr && stop != 0) {
      // The BLS sends stop=true with its request id when its own client cancels: end that request in flight.
      const char* id = nullptr;
      if (TRITONBACKEND_RequestId(request, &id) == nullptr && id != nullptr && id[0] != '\0') {
        for (auto& shard : shards_) shard->Stop(id);
        if (engine_) engine_->Visit([id](Generation* g) { if (g->triton_id == id) g->stopped = true; });
      }
      LogIfError(TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL),
                 "stop response");
      LogIfError(TRITONBACKEND_ResponseFactoryDelete(factory), "response factory");
    } else if (err == nullptr && (err = Generation::Read(request, limits_, &generation)) == nullptr) {
      generation->factory = factory;  // the generation owns it from here
      metrics_->Started();
      if (engine_) {
        const int64_t prompt_len = generation->prompt_len, n_out = generation->n_out;
        engine_->Add(std::move(generation), prompt_len, n_out);
      } else {
        shards_[next_shard_++ % shards_.size()]->Add(std::move(generation), start + ttft_ns_);
      }
    }
    if (err != nullptr) {
      SendFinalError(factory, TRITONSERVER_ErrorCode(err), TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
      LogIfError(TRITONBACKEND_ResponseFactoryDelete(factory), "response factory");
    }
    const uint64_t now = NowNs();
    LogIfError(TRITONBACKEND_ModelInstanceReportStatistics(instance, request, true, start, start, now, now),
               "statistics");
    LogIfError(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL), "request release");
  }
  const uint64_t end = NowNs();
  LogIfError(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, count, start, start, end, end), "statistics");
}

// ---- responses -------------------------------------------------------------------------------------------------

bool ModelState::SendTokens(Generation* g, int64_t from, int64_t to, uint32_t flags) {
  const int32_t n = static_cast<int32_t>(to - from);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) tokens[i] = TokenAt(*g, from + i);
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNewFromFactory(&response, g->factory);
  if (err == nullptr && (g->outputs & kOutputIds)) {
    err = AddInt32(response, "output_ids", {1, 1, n}, tokens.data(), tokens.size());
  }
  if (err == nullptr && (g->outputs & kSequenceLength)) err = AddInt32(response, "sequence_length", {1, 1}, &n, 1);
  if (err == nullptr && (g->outputs & kNumInputTokens)) {
    const int32_t prompt = static_cast<int32_t>(g->prompt_len);
    err = AddInt32(response, "num_input_tokens", {1, 1}, &prompt, 1);
  }
  // Per response, as TensorRT-LLM's C++ backend counts: the ids in this response's output_ids.
  if (err == nullptr && (g->outputs & kNumOutputTokens)) err = AddInt32(response, "num_output_tokens", {1, 1}, &n, 1);
  if (err != nullptr) {
    if (response != nullptr) LogIfError(TRITONBACKEND_ResponseDelete(response), "response");
    LogIfError(err, "token response");
    return false;
  }
  err = TRITONBACKEND_ResponseSend(response, flags, nullptr);
  if (err != nullptr) {
    LogIfError(err, "token response");
    return false;
  }
  metrics_->TokensSent(n);
  return true;
}

// ---- model -----------------------------------------------------------------------------------------------------

TRITONSERVER_Error* ModelState::Create(TRITONBACKEND_Model* model, std::unique_ptr<ModelState>* out) {
  std::unique_ptr<ModelState> state(new ModelState());
  ModelConfig config;
  TG_RETURN_IF_ERROR(ModelConfig::Read(model, &config));
  uint64_t version = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(model, &version));
  state->name_ = config.model();
  state->limits_.decoupled = config.Decoupled();
  TRITONSERVER_Server* server = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  state->drain_ = std::make_unique<Drain>(server);

  double ttft_ms = 0, itl_ms = 0, interval = 0, vocab = 0, end_id = 0, pad_id = 0, threads = 0, adapters = 0;
  TG_RETURN_IF_ERROR(config.NumberParameter("ttft_ms", "50", &ttft_ms));
  TG_RETURN_IF_ERROR(config.NumberParameter("itl_ms", "10", &itl_ms));
  TG_RETURN_IF_ERROR(config.NumberParameter("stream_interval", "1", &interval));
  TG_RETURN_IF_ERROR(config.NumberParameter("vocab_size", "256", &vocab));
  TG_RETURN_IF_ERROR(config.NumberParameter("end_id", "0", &end_id));
  TG_RETURN_IF_ERROR(config.NumberParameter("pad_id", "0", &pad_id));
  TG_RETURN_IF_ERROR(config.NumberParameter("lora_adapters", "0", &adapters));
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  TG_RETURN_IF_ERROR(config.NumberParameter("timer_threads", std::to_string(std::min(4u, hw)), &threads));
  if (vocab < 1) return InvalidArg(state->name_ + ": parameters.vocab_size: must be >= 1");
  state->ttft_ns_ = static_cast<uint64_t>(ttft_ms * 1e6);
  state->itl_ns_ = static_cast<uint64_t>(itl_ms * 1e6);
  state->interval_ = std::max<int64_t>(1, static_cast<int64_t>(interval));
  state->limits_.adapters = static_cast<int64_t>(adapters);
  // Skip the lowest ids, where tokenizers keep their special tokens, and the end and pad ids.
  const int64_t v = static_cast<int64_t>(vocab);
  for (int64_t i = std::min<int64_t>(16, v - 1); i < v; ++i) {
    if (i != static_cast<int64_t>(end_id) && i != static_cast<int64_t>(pad_id)) {
      state->ids_.push_back(static_cast<int32_t>(i));
    }
  }
  if (state->ids_.empty()) state->ids_.push_back(static_cast<int32_t>(v - 1));

  TG_RETURN_IF_ERROR(ModelMetrics::Create(state->name_, version, &state->metrics_));
  for (unsigned i = 0; i < std::max(1u, static_cast<unsigned>(threads)); ++i) {
    state->shards_.push_back(std::make_unique<TimerShard>(state.get()));
  }
  TG_RETURN_IF_ERROR(state->StartEngine(config));
  Log(TRITONSERVER_LOG_INFO, "tritongen_tokensource: model '" + state->name_ + "' ttft " + std::to_string(ttft_ms) +
                                 " ms, itl " + std::to_string(itl_ms) + " ms, " +
                                 std::to_string(state->shards_.size()) + " timer threads, " +
                                 (state->limits_.decoupled ? "decoupled" : "one response per request"));
  *out = std::move(state);
  return nullptr;
}

TRITONSERVER_Error* ModelState::StartEngine(const ModelConfig& config) {
  if (config.Parameter("engine_model", "false") != "true") return nullptr;
  EngineParams p;
  double max_batch = 0, kv_tokens = 0;
  TG_RETURN_IF_ERROR(config.NumberParameter("engine_step_base_ms", "0", &p.step_base_ms));
  TG_RETURN_IF_ERROR(config.NumberParameter("engine_per_sequence_ms", "0", &p.per_sequence_ms));
  TG_RETURN_IF_ERROR(config.NumberParameter("engine_per_prefill_token_ms", "0", &p.per_prefill_token_ms));
  TG_RETURN_IF_ERROR(config.NumberParameter("engine_max_batch", "1", &max_batch));
  TG_RETURN_IF_ERROR(config.NumberParameter("engine_kv_tokens", "0", &kv_tokens));
  p.max_batch = std::max<int64_t>(1, static_cast<int64_t>(max_batch));
  p.kv_tokens = static_cast<int64_t>(kv_tokens);
  TimerShard* shard = shards_.front().get();
  engine_ = std::make_unique<EngineLoop<Generation>>(
      p, [shard](Generation* g) { return shard->Step(g); },
      [this](std::unique_ptr<Generation>) { Ended(); },
      [this](std::unique_ptr<Generation> g) {
        SendFinalError(g->factory, TRITONSERVER_ERROR_UNAVAILABLE,
                       Tag(kUnavailable) + "token source: the model is unloading");
        Ended();
      });
  return nullptr;
}

ModelState::~ModelState() {
  engine_.reset();  // before the shards: its steps call a shard's Step
  shards_.clear();  // joins the timer threads and ends what is still in flight
}

}  // namespace tokensource
}  // namespace tritongen
