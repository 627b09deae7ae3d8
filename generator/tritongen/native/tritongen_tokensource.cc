// tritongen_tokensource: a token source with the tensor contract of TensorRT-LLM's `tensorrt_llm` model and no
// model behind it, built as a C++ backend so that it is not the bottleneck of what it measures.
//
// Behaviour is that of the synthetic runtime's python model (generator/tritongen/served/synthetic.py): the
// same parameters (ttft_ms, itl_ms, stream_interval, vocab_size, end_id, pad_id, lora_adapters), inputs, outputs,
// token ids (lora_task_id shifts them) and timing. A python source pays an IPC round trip into its stub per response, which capped it at a few thousand
// tokens/s per host; here a response is a few Triton API calls, so the serving path around the source (BLS,
// ensemble, gRPC, clients) is what a benchmark sees.
//
// Timing: each request is due at arrival + ttft + i * itl for its i-th token. Requests are spread round-robin
// over a few timer threads (parameter `timer_threads`, default min(4, hardware threads)), each with its own heap
// and lock, so that arrivals, emission and stop requests do not contend on one lock. A thread that falls behind
// emits the late tokens back to back; lateness shows as growing TTFT/ITL on the client, not as a slower clock.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_set>
#include <vector>

#include "api_version.h"
#include "backend_util.h"
#include "engine_model.h"
#include "error_kinds.h"

namespace tritongen {
namespace {

constexpr uint32_t kFinal = TRITONSERVER_RESPONSE_COMPLETE_FINAL;

// Metric families are process-wide (Prometheus names are global); each model adds its own labelled metrics.
// Created with the first model and deleted after the last one's metrics, as Triton requires.
class Families {
 public:
  static TRITONSERVER_Error* Acquire(TRITONSERVER_MetricFamily** tokens, TRITONSERVER_MetricFamily** active) {
    std::lock_guard<std::mutex> lock(mu_);
    if (users_ == 0) {
      TG_RETURN_IF_ERROR(TRITONSERVER_MetricFamilyNew(&tokens_, TRITONSERVER_METRIC_KIND_COUNTER,
                                                      "tritongen_llm_output_tokens_total",
                                                      "Output tokens sent in responses"));
      TRITONSERVER_Error* err = TRITONSERVER_MetricFamilyNew(&active_, TRITONSERVER_METRIC_KIND_GAUGE,
                                                             "tritongen_llm_active_requests", "Requests in flight");
      if (err != nullptr) {
        LogIfError(TRITONSERVER_MetricFamilyDelete(tokens_), "metric family");
        return err;
      }
    }
    ++users_;
    *tokens = tokens_;
    *active = active_;
    return nullptr;
  }

  static void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--users_ == 0) {
      LogIfError(TRITONSERVER_MetricFamilyDelete(tokens_), "metric family");
      LogIfError(TRITONSERVER_MetricFamilyDelete(active_), "metric family");
    }
  }

 private:
  static inline std::mutex mu_;
  static inline int users_ = 0;
  static inline TRITONSERVER_MetricFamily* tokens_ = nullptr;
  static inline TRITONSERVER_MetricFamily* active_ = nullptr;
};

// Outputs a request asked for (Triton lists every output of the config when the client names none).
enum Output : unsigned { kOutputIds = 1, kSequenceLength = 2, kNumInputTokens = 4, kNumOutputTokens = 8 };

// One request in flight. Owned by the timer thread it was given to; `stopped` is set from other threads.
// Adapter k's tokens are the base's shifted by kAdapterShift x k places in the id cycle (as the python source's
// ADAPTER_SHIFT), so each adapter's stream differs deterministically.
constexpr int64_t kAdapterShift = 97;

struct Stream {
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

  ~Stream() {
    if (factory != nullptr) LogIfError(TRITONBACKEND_ResponseFactoryDelete(factory), "response factory");
  }
};

class ModelState;

// A timer thread with its own heap of due requests.
class Shard {
 public:
  explicit Shard(ModelState* model) : model_(model), thread_([this] { Loop(); }) {}
  ~Shard();

  void Add(std::unique_ptr<Stream> stream, uint64_t due_ns);
  // Marks this shard's requests with `triton_id` stopped; each ends with a flags-only FINAL when next due.
  void Stop(const std::string& triton_id);
  bool Step(Stream* s);  // one token of `s`; true when the request has ended (the engine model calls it too)

 private:
  struct Entry {
    uint64_t due;
    uint64_t seq;  // FIFO among equal due times
    Stream* stream;
    bool operator>(const Entry& other) const { return due != other.due ? due > other.due : seq > other.seq; }
  };

  void Loop();

  ModelState* model_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  std::unordered_set<Stream*> live_;
  uint64_t seq_ = 0;
  bool running_ = true;
  std::thread thread_;  // last: it starts running in the constructor
};

class ModelState {
 public:
  static TRITONSERVER_Error* Create(TRITONBACKEND_Model* model, ModelState** state);
  ~ModelState();

  void Execute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count);

  int32_t TokenAt(const Stream& s, int64_t index) const {
    return ids_[static_cast<size_t>((s.prompt_len + s.shift + index) % static_cast<int64_t>(ids_.size()))];
  }
  uint64_t itl_ns() const { return itl_ns_; }
  int64_t interval() const { return interval_; }

  // Sends tokens [from, to) of `s`; false when Triton refused the response.
  bool SendTokens(Stream* s, int64_t from, int64_t to, uint32_t flags);
  // Increments, not sets: concurrent Execute calls and timer threads would otherwise race to set stale values.
  void Started() { LogIfError(TRITONSERVER_MetricIncrement(m_active_, 1), "active gauge"); }
  void Ended() { LogIfError(TRITONSERVER_MetricIncrement(m_active_, -1), "active gauge"); }
  // Whether a stopping server's drain is over: its streams then end with UNAVAILABLE, as the BLS's do, instead of
  // keeping the model (and tritonserver) until the exit timeout.
  bool DrainOver() { return drain_->Over(name_); }
  const std::string& name() const { return name_; }

 private:
  ModelState() = default;
  TRITONSERVER_Error* Accept(TRITONBACKEND_Request* request, std::unique_ptr<Stream>* stream);
  TRITONSERVER_Error* StartEngine(const ModelConfig& config);

  std::string name_;
  bool decoupled_ = false;
  uint64_t ttft_ns_ = 0, itl_ns_ = 0;
  int64_t interval_ = 1;
  int64_t adapters_ = 0;  // LoRA adapters (parameter lora_adapters): lora_task_id 1..adapters_
  std::vector<int32_t> ids_;
  bool have_families_ = false;
  TRITONSERVER_MetricFamily* f_tokens_ = nullptr;
  TRITONSERVER_MetricFamily* f_active_ = nullptr;
  TRITONSERVER_Metric* m_tokens_ = nullptr;
  TRITONSERVER_Metric* m_active_ = nullptr;
  std::atomic<uint64_t> next_shard_{0};
  std::vector<std::unique_ptr<Shard>> shards_;
  std::unique_ptr<EngineLoop<Stream>> engine_;  // parameter engine_model: steps replace the fixed timing
  std::unique_ptr<Drain> drain_;
};

// ---- requests --------------------------------------------------------------------------------------------------

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

TRITONSERVER_Error* ScalarOr(TRITONBACKEND_Request* request, const char* name, int64_t fallback, int64_t* value) {
  bool present = false;
  TG_RETURN_IF_ERROR(OptionalScalar(request, name, value, &present));
  if (!present) *value = fallback;
  return nullptr;
}

TRITONSERVER_Error* ModelState::Accept(TRITONBACKEND_Request* request, std::unique_ptr<Stream>* out) {
  auto s = std::make_unique<Stream>();
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
  if (task_id < 0 || task_id > adapters_) {
    return BadRequest("lora_task_id", std::to_string(task_id) + " is not a LoRA adapter of this deployment; known "
                      "ids: 0 (the base)" + (adapters_ ? " to " + std::to_string(adapters_) : std::string()));
  }
  s->shift = kAdapterShift * task_id;
  int64_t streaming = 0, want_in = 0, want_out = 0;
  TG_RETURN_IF_ERROR(ScalarOr(request, "streaming", 0, &streaming));
  TG_RETURN_IF_ERROR(ScalarOr(request, "return_num_input_tokens", 0, &want_in));
  TG_RETURN_IF_ERROR(ScalarOr(request, "return_num_output_tokens", 0, &want_out));
  s->streaming = decoupled_ && streaming != 0;

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

void SendError(TRITONBACKEND_ResponseFactory* factory, TRITONSERVER_Error_Code code, const std::string& message) {
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNewFromFactory(&response, factory);
  if (err != nullptr) {
    LogIfError(err, "error response");
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(factory, kFinal), "final flag");
    return;
  }
  TRITONSERVER_Error* error = TRITONSERVER_ErrorNew(code, message.c_str());
  LogIfError(TRITONBACKEND_ResponseSend(response, kFinal, error), "error response");
  TRITONSERVER_ErrorDelete(error);
}

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
    std::unique_ptr<Stream> stream;
    if (err == nullptr && stop != 0) {
      // The BLS sends stop=true with its request id when its own client cancels: end that request in flight.
      const char* id = nullptr;
      if (TRITONBACKEND_RequestId(request, &id) == nullptr && id != nullptr && id[0] != '\0') {
        for (auto& shard : shards_) shard->Stop(id);
        if (engine_) engine_->Visit([id](Stream* s) { if (s->triton_id == id) s->stopped = true; });
      }
      LogIfError(TRITONBACKEND_ResponseFactorySendFlags(factory, kFinal), "stop response");
      LogIfError(TRITONBACKEND_ResponseFactoryDelete(factory), "response factory");
    } else if (err == nullptr && (err = Accept(request, &stream)) == nullptr) {
      stream->factory = factory;
      Started();
      if (engine_) {
        const int64_t prompt_len = stream->prompt_len, n_out = stream->n_out;
        engine_->Add(stream.release(), prompt_len, n_out);
      } else {
        shards_[next_shard_++ % shards_.size()]->Add(std::move(stream), start + ttft_ns_);
      }
    }
    if (err != nullptr) {
      SendError(factory, TRITONSERVER_ErrorCode(err), TRITONSERVER_ErrorMessage(err));
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

bool ModelState::SendTokens(Stream* s, int64_t from, int64_t to, uint32_t flags) {
  const int32_t n = static_cast<int32_t>(to - from);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) tokens[i] = TokenAt(*s, from + i);
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNewFromFactory(&response, s->factory);
  if (err == nullptr && (s->outputs & kOutputIds)) {
    err = AddInt32(response, "output_ids", {1, 1, n}, tokens.data(), tokens.size());
  }
  if (err == nullptr && (s->outputs & kSequenceLength)) err = AddInt32(response, "sequence_length", {1, 1}, &n, 1);
  if (err == nullptr && (s->outputs & kNumInputTokens)) {
    const int32_t prompt = static_cast<int32_t>(s->prompt_len);
    err = AddInt32(response, "num_input_tokens", {1, 1}, &prompt, 1);
  }
  // Per response, as TensorRT-LLM's C++ backend counts: the ids in this response's output_ids.
  if (err == nullptr && (s->outputs & kNumOutputTokens)) err = AddInt32(response, "num_output_tokens", {1, 1}, &n, 1);
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
  LogIfError(TRITONSERVER_MetricIncrement(m_tokens_, n), "token counter");
  return true;
}

// ---- timer threads ---------------------------------------------------------------------------------------------

void Shard::Add(std::unique_ptr<Stream> stream, uint64_t due_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool earliest = heap_.empty() || due_ns < heap_.top().due;
  Stream* s = stream.release();
  live_.insert(s);
  heap_.push(Entry{due_ns, seq_++, s});
  if (earliest) cv_.notify_one();
}

void Shard::Stop(const std::string& triton_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Stream* s : live_) {
    if (s->triton_id == triton_id) s->stopped = true;
  }
}

bool Shard::Step(Stream* s) {
  bool cancelled = false;
  LogIfError(TRITONBACKEND_ResponseFactoryIsCancelled(s->factory, &cancelled), "cancellation check");
  if (cancelled) {
    SendError(s->factory, TRITONSERVER_ERROR_CANCELLED, "request cancelled");
    return true;
  }
  if (s->stopped) {
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(s->factory, kFinal), "stop response");
    return true;
  }
  if (model_->DrainOver()) {
    SendError(s->factory, TRITONSERVER_ERROR_UNAVAILABLE,
              Tag(kUnavailable) + model_->name() + ": the server is stopping; retry the request on another replica");
    return true;
  }
  ++s->produced;
  const bool last = s->produced >= s->n_out;
  bool ok = true;
  if (s->streaming && (last || s->produced - s->sent >= model_->interval())) {
    ok = model_->SendTokens(s, s->sent, s->produced, last ? kFinal : 0);
    s->sent = s->produced;
  } else if (last && !s->streaming) {
    ok = model_->SendTokens(s, 0, s->produced, kFinal);
  }
  if (!ok) {
    // A request whose client is gone must not stop the others: end it with an error and move on.
    SendError(s->factory, TRITONSERVER_ERROR_INTERNAL, Tag(kInternal) + "token source: sending a response failed");
    return true;
  }
  return last;
}

void Shard::Loop() {
  NameThread("tg-source");
  std::vector<Entry> due;
  std::vector<Stream*> ended;
  std::unique_lock<std::mutex> lock(mu_);
  while (running_) {
    if (heap_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const uint64_t now = NowNs();
    if (heap_.top().due > now) {
      cv_.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(heap_.top().due)));
      continue;
    }
    while (!heap_.empty() && heap_.top().due <= now) {
      due.push_back(heap_.top());
      heap_.pop();
    }
    lock.unlock();
    for (Entry& e : due) {
      if (Step(e.stream)) {
        ended.push_back(e.stream);
        e.stream = nullptr;
      } else {
        e.due += model_->itl_ns();
      }
    }
    lock.lock();
    for (const Entry& e : due) {
      if (e.stream != nullptr) heap_.push(Entry{e.due, seq_++, e.stream});
    }
    for (Stream* s : ended) live_.erase(s);
    due.clear();
    lock.unlock();
    for (Stream* s : ended) {
      delete s;
      model_->Ended();
    }
    ended.clear();
    lock.lock();
  }
}

Shard::~Shard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    cv_.notify_one();
  }
  thread_.join();
  // Every request ends with exactly one FINAL, also when the model unloads with requests in flight.
  for (Stream* s : live_) {
    SendError(s->factory, TRITONSERVER_ERROR_UNAVAILABLE, Tag(kUnavailable) + "token source: the model is unloading");
    delete s;
    model_->Ended();
  }
}

// ---- model -----------------------------------------------------------------------------------------------------

TRITONSERVER_Error* NumberParameter(const ModelConfig& config, const char* key, const char* fallback, double* value) {
  const std::string text = config.Parameter(key, fallback);
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || *value < 0) {
    return InvalidArg(std::string("parameters.") + key + ": expected a number >= 0, got '" + text + "'");
  }
  return nullptr;
}

TRITONSERVER_Error* ModelState::Create(TRITONBACKEND_Model* model, ModelState** out) {
  std::unique_ptr<ModelState> state(new ModelState());
  ModelConfig config;
  TG_RETURN_IF_ERROR(ModelConfig::Read(model, &config));
  const char* name = nullptr;
  uint64_t version = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(model, &version));
  state->name_ = name;
  state->decoupled_ = config.Decoupled();
  TRITONSERVER_Server* server = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  state->drain_.reset(new Drain(server));

  double ttft_ms = 0, itl_ms = 0, interval = 0, vocab = 0, end_id = 0, pad_id = 0, threads = 0, adapters = 0;
  TG_RETURN_IF_ERROR(NumberParameter(config, "ttft_ms", "50", &ttft_ms));
  TG_RETURN_IF_ERROR(NumberParameter(config, "itl_ms", "10", &itl_ms));
  TG_RETURN_IF_ERROR(NumberParameter(config, "stream_interval", "1", &interval));
  TG_RETURN_IF_ERROR(NumberParameter(config, "vocab_size", "256", &vocab));
  TG_RETURN_IF_ERROR(NumberParameter(config, "end_id", "0", &end_id));
  TG_RETURN_IF_ERROR(NumberParameter(config, "pad_id", "0", &pad_id));
  TG_RETURN_IF_ERROR(NumberParameter(config, "lora_adapters", "0", &adapters));
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  TG_RETURN_IF_ERROR(NumberParameter(config, "timer_threads", std::to_string(std::min(4u, hw)).c_str(), &threads));
  if (vocab < 1) return InvalidArg("parameters.vocab_size: must be >= 1");
  state->ttft_ns_ = static_cast<uint64_t>(ttft_ms * 1e6);
  state->itl_ns_ = static_cast<uint64_t>(itl_ms * 1e6);
  state->interval_ = std::max<int64_t>(1, static_cast<int64_t>(interval));
  state->adapters_ = static_cast<int64_t>(adapters);
  // Skip the lowest ids, where tokenizers keep their special tokens, and the end and pad ids.
  const int64_t v = static_cast<int64_t>(vocab);
  for (int64_t i = std::min<int64_t>(16, v - 1); i < v; ++i) {
    if (i != static_cast<int64_t>(end_id) && i != static_cast<int64_t>(pad_id)) {
      state->ids_.push_back(static_cast<int32_t>(i));
    }
  }
  if (state->ids_.empty()) state->ids_.push_back(static_cast<int32_t>(v - 1));

  TG_RETURN_IF_ERROR(Families::Acquire(&state->f_tokens_, &state->f_active_));
  state->have_families_ = true;
  const std::string version_text = std::to_string(version);
  const TRITONSERVER_Parameter* labels[] = {
      TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING, name),
      TRITONSERVER_ParameterNew("version", TRITONSERVER_PARAMETER_STRING, version_text.c_str())};
  TRITONSERVER_Error* err = TRITONSERVER_MetricNew(&state->m_tokens_, state->f_tokens_, labels, 2);
  if (err == nullptr) err = TRITONSERVER_MetricNew(&state->m_active_, state->f_active_, labels, 2);
  for (const TRITONSERVER_Parameter* label : labels) {
    TRITONSERVER_ParameterDelete(const_cast<TRITONSERVER_Parameter*>(label));
  }
  TG_RETURN_IF_ERROR(err);

  for (unsigned i = 0; i < std::max(1u, static_cast<unsigned>(threads)); ++i) {
    state->shards_.push_back(std::make_unique<Shard>(state.get()));
  }
  TG_RETURN_IF_ERROR(state->StartEngine(config));
  Log(TRITONSERVER_LOG_INFO, "tritongen_tokensource: model '" + state->name_ + "' ttft " + std::to_string(ttft_ms) +
                                 " ms, itl " + std::to_string(itl_ms) + " ms, " +
                                 std::to_string(state->shards_.size()) + " timer threads, " +
                                 (state->decoupled_ ? "decoupled" : "one response per request"));
  *out = state.release();
  return nullptr;
}

TRITONSERVER_Error* ModelState::StartEngine(const ModelConfig& config) {
  if (config.Parameter("engine_model", "false") != "true") return nullptr;
  EngineParams p;
  double max_batch = 0, kv_tokens = 0;
  TG_RETURN_IF_ERROR(NumberParameter(config, "engine_step_base_ms", "0", &p.step_base_ms));
  TG_RETURN_IF_ERROR(NumberParameter(config, "engine_per_sequence_ms", "0", &p.per_sequence_ms));
  TG_RETURN_IF_ERROR(NumberParameter(config, "engine_per_prefill_token_ms", "0", &p.per_prefill_token_ms));
  TG_RETURN_IF_ERROR(NumberParameter(config, "engine_max_batch", "1", &max_batch));
  TG_RETURN_IF_ERROR(NumberParameter(config, "engine_kv_tokens", "0", &kv_tokens));
  p.max_batch = std::max<int64_t>(1, static_cast<int64_t>(max_batch));
  p.kv_tokens = static_cast<int64_t>(kv_tokens);
  Shard* shard = shards_.front().get();
  engine_ = std::make_unique<EngineLoop<Stream>>(
      p, [shard](Stream* s) { return shard->Step(s); }, [this](Stream* s) { delete s; Ended(); },
      [this](Stream* s) {
        SendError(s->factory, TRITONSERVER_ERROR_UNAVAILABLE, Tag(kUnavailable) + "token source: the model is unloading");
        delete s;
        Ended();
      });
  return nullptr;
}

ModelState::~ModelState() {
  engine_.reset();  // before the shards: its steps call a shard's Step
  shards_.clear();  // joins the timer threads and ends what is still in flight
  if (m_tokens_ != nullptr) LogIfError(TRITONSERVER_MetricDelete(m_tokens_), "metric");
  if (m_active_ != nullptr) LogIfError(TRITONSERVER_MetricDelete(m_active_), "metric");
  if (have_families_) Families::Release();
}

}  // namespace
}  // namespace tritongen

// ---- entry points ----------------------------------------------------------------------------------------------

#define TG_EXPORT extern "C" __attribute__((visibility("default")))

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  return tritongen::CheckApiVersion(backend);
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  tritongen::ModelState* state = nullptr;
  TG_RETURN_IF_ERROR(tritongen::ModelState::Create(model, &state));
  std::unique_ptr<tritongen::ModelState> owned(state);  // freed (threads joined) if Triton does not take it
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, owned.get()));
  owned.release();
  return nullptr;
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  delete static_cast<tritongen::ModelState*>(state);
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
  static_cast<tritongen::ModelState*>(state)->Execute(instance, requests, request_count);
  return nullptr;
}
