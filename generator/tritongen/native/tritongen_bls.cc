// tritongen_bls: the `tensorrt_llm_bls` model as a native Triton backend.
//
// The same tensor contract and behaviour as the python BLS (model_repository_templates/tensorrt_llm_bls/1/model.py):
// one request runs `preprocessing` once, then `tensorrt_llm`, and every LLM response is detokenised
// incrementally (detok.h) and sent on, so streamed text concatenates to the unstreamed text byte for byte.
// Why native: the python BLS costs two IPC hops through its stub per token per request; here the per-token work
// is a table lookup inside tritonserver, on the thread that delivers the LLM's response, with no thread per
// request (every call is asynchronous, through Triton's in-process API).
//
// The detokenisation table comes from `preprocessing` (which owns the tokenizer) on the first request: it is
// the tokenizer's decoding as per-token bytes, checked against the tokenizer at planning time.
// Cancellation: a watcher polls each request's response factory and cancels its LLM request, which stops
// within the LLM's own cancellation period; the client gets Triton's CANCELLED error at once.

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend_util.h"
#include "detok.h"
#include "error_kinds.h"

namespace tritongen {
namespace {

// BLS input -> preprocessing input
const std::vector<std::pair<std::string, std::string>> kToPreprocessing = {
    {"text_input", "QUERY"}, {"decoder_text_input", "DECODER_QUERY"}, {"max_tokens", "REQUEST_OUTPUT_LEN"},
    {"bad_words", "BAD_WORDS_DICT"}, {"stop_words", "STOP_WORDS_DICT"},
    {"embedding_bias_words", "EMBEDDING_BIAS_WORDS"}, {"embedding_bias_weights", "EMBEDDING_BIAS_WEIGHTS"},
    {"end_id", "END_ID"}, {"pad_id", "PAD_ID"}, {"prompt_table_extra_id", "PROMPT_TABLE_EXTRA_ID"}};
// preprocessing output -> tensorrt_llm input
const std::vector<std::pair<std::string, std::string>> kFromPreprocessing = {
    {"INPUT_ID", "input_ids"}, {"REQUEST_INPUT_LEN", "input_lengths"}, {"REQUEST_OUTPUT_LEN", "request_output_len"},
    {"DECODER_INPUT_ID", "decoder_input_ids"}, {"REQUEST_DECODER_INPUT_LEN", "decoder_input_lengths"},
    {"OUT_END_ID", "end_id"}, {"OUT_PAD_ID", "pad_id"}, {"STOP_WORDS_IDS", "stop_words_list"},
    {"BAD_WORDS_IDS", "bad_words_list"}, {"EMBEDDING_BIAS", "embedding_bias"},
    {"OUT_PROMPT_TABLE_EXTRA_IDS", "prompt_table_extra_ids"}};
// BLS input -> tensorrt_llm input
const std::vector<std::pair<std::string, std::string>> kToLlm = {
    {"top_k", "runtime_top_k"}, {"top_p", "runtime_top_p"}, {"temperature", "temperature"},
    {"length_penalty", "len_penalty"}, {"repetition_penalty", "repetition_penalty"}, {"min_tokens", "min_tokens"},
    {"presence_penalty", "presence_penalty"}, {"frequency_penalty", "frequency_penalty"}, {"seed", "seed"},
    {"beam_width", "beam_width"}, {"num_return_sequences", "num_return_sequences"},
    {"exclude_input_in_output", "exclude_input_in_output"}, {"return_log_probs", "return_log_probs"},
    {"return_context_logits", "return_context_logits"}, {"return_generation_logits", "return_generation_logits"},
    {"return_perf_metrics", "return_perf_metrics"}, {"return_num_input_tokens", "return_num_input_tokens"},
    {"return_num_output_tokens", "return_num_output_tokens"}, {"stream", "streaming"},
    {"prompt_embedding_table", "prompt_embedding_table"}, {"prompt_vocab_size", "prompt_vocab_size"},
    {"lora_task_id", "lora_task_id"}, {"lora_weights", "lora_weights"}, {"lora_config", "lora_config"},
    {"guided_decoding_guide_type", "guided_decoding_guide_type"}, {"guided_decoding_guide", "guided_decoding_guide"}};
// tensorrt_llm outputs returned as they are
const std::vector<std::string> kPassedOutputs = {
    "cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index", "sequence_index",
    "kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks", "arrival_time_ns",
    "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns", "acceptance_rate",
    "total_accepted_draft_tokens", "total_draft_tokens", "num_input_tokens", "num_output_tokens"};

// ------------------------------------------------------------------ response buffers of in-process requests
TRITONSERVER_Error* Alloc(TRITONSERVER_ResponseAllocator*, const char*, size_t byte_size, TRITONSERVER_MemoryType,
                          int64_t, void*, void** buffer, void** buffer_userp, TRITONSERVER_MemoryType* actual_type,
                          int64_t* actual_id) {
  *buffer = byte_size == 0 ? nullptr : std::malloc(byte_size);
  *buffer_userp = nullptr;
  *actual_type = TRITONSERVER_MEMORY_CPU;
  *actual_id = 0;
  if (byte_size != 0 && *buffer == nullptr) return Internal("out of memory for a response buffer");
  return nullptr;
}

TRITONSERVER_Error* Release(TRITONSERVER_ResponseAllocator*, void* buffer, void*, size_t, TRITONSERVER_MemoryType,
                            int64_t) {
  std::free(buffer);
  return nullptr;
}

// An output of an in-process response, copied (the response is deleted right after it is read).
using Outputs = std::map<std::string, Tensor>;

TRITONSERVER_Error* ReadResponse(TRITONSERVER_InferenceResponse* response, Outputs* out) {
  uint32_t count = 0;
  TG_RETURN_IF_ERROR(TRITONSERVER_InferenceResponseOutputCount(response, &count));
  for (uint32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    TRITONSERVER_DataType dtype;
    const int64_t* shape = nullptr;
    uint64_t dims = 0;
    const void* base = nullptr;
    size_t size = 0;
    TRITONSERVER_MemoryType memtype;
    int64_t memid;
    void* userp;
    TG_RETURN_IF_ERROR(TRITONSERVER_InferenceResponseOutput(response, i, &name, &dtype, &shape, &dims, &base, &size,
                                                            &memtype, &memid, &userp));
    Tensor& t = (*out)[name];
    t.name = name;
    t.dtype = dtype;
    t.shape.assign(shape, shape + dims);
    t.data.assign(static_cast<const char*>(base), size);
  }
  return nullptr;
}

const Tensor* Find(const Outputs& outputs, const std::string& name) {
  auto it = outputs.find(name);
  return it == outputs.end() ? nullptr : &it->second;
}

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
      v.push_back(static_cast<int32_t>(reinterpret_cast<const int64_t*>(t.data.data())[i]));
    } else {
      v.push_back(reinterpret_cast<const int32_t*>(t.data.data())[i]);
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

struct ModelState;

// Decoding state of one output sequence (batch entry, sequence index, beam).
struct Sequence {
  Sequence(const DetokTable* table, std::vector<std::string> stops) : detok(table), stops(std::move(stops)) {}
  Detokenizer detok;
  StopStrings stops;
  std::string sent;  // text sent so far (accumulate_tokens)
  size_t tokens = 0;
  bool stopped = false;
};

// One client request through preprocessing and tensorrt_llm.
struct Stream : std::enable_shared_from_this<Stream> {
  ModelState* model = nullptr;
  TRITONBACKEND_ResponseFactory* factory = nullptr;
  // Held until the final response: a frontend cancels through its request, which must still be live then.
  TRITONBACKEND_Request* request = nullptr;
  std::atomic<int64_t>* model_in_flight = nullptr;
  std::string id;
  std::map<std::string, Tensor> inputs;       // the client's inputs, by name
  std::set<std::string> wanted;               // outputs the client asked for (empty: all)
  std::vector<Tensor> pre_inputs, llm_inputs;  // kept alive until Triton releases the inner requests
  Tensor prompt_ids, prompt_lengths;
  size_t batch = 1;
  bool streaming = false;
  int64_t max_tokens = 0;
  size_t wanted_sequences = 1;

  std::mutex mu;
  TRITONSERVER_InferenceRequest* llm = nullptr;  // until Triton releases it
  std::string llm_id;                            // the LLM request's id, unique per request (for `stop`)
  bool llm_started = false;
  bool finished = false;                         // the client has its final response
  bool counted = false;                          // holds a place in the model's in_flight count
  bool cancel_sent = false;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::unique_ptr<Sequence>>> sequences;
  std::unique_ptr<TRITONBACKEND_Response, void (*)(TRITONBACKEND_Response*)> whole{nullptr, nullptr};

  bool Wants(const std::string& name) const { return wanted.empty() || wanted.count(name) != 0; }
  const Tensor* Input(const std::string& name) const {
    auto it = inputs.find(name);
    return it == inputs.end() ? nullptr : &it->second;
  }
  // The place in the model's in_flight count goes back BEFORE the final response is sent: a client that starts its
  // next request on receiving this one's final must find the place free (a closed loop at exactly the capacity).
  void ReleasePlace() {
    if (counted) {
      counted = false;
      model_in_flight->fetch_sub(1);
    }
  }
  void ReleaseRequest() {
    ReleasePlace();
    if (request != nullptr)
      LogIfError(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL), "tensorrt_llm_bls: release");
    request = nullptr;
  }
  ~Stream() {
    ReleaseRequest();
    if (factory != nullptr) TRITONBACKEND_ResponseFactoryDelete(factory);
  }
};

struct ModelState {
  TRITONBACKEND_Model* model = nullptr;
  TRITONSERVER_Server* server = nullptr;
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
  std::string llm_name = "tensorrt_llm";
  bool accumulate = false;
  bool skip_special_tokens = true;
  bool decoupled = false;
  int64_t max_input_tokens = 0;  // 0: unknown (no byte cap)
  int64_t capacity = 0;          // requests held at once: max_in_flight + max_queue_size (0: no limit)
  std::atomic<int64_t> in_flight{0};

  std::mutex table_mu;
  std::shared_ptr<const DetokTable> table;

  // Requests in flight, for the cancellation watcher.
  std::mutex live_mu;
  std::unordered_map<Stream*, std::weak_ptr<Stream>> live;
  std::atomic<bool> running{true};
  std::thread watcher;
  std::condition_variable watcher_cv;
  std::mutex watcher_mu;
};

TRITONSERVER_Error* NewRequest(ModelState* m, const std::string& model, const std::string& id,
                               const std::vector<Tensor>& inputs, const std::vector<std::string>& outputs,
                               TRITONSERVER_InferenceRequest** out);

// ------------------------------------------------------------------ sending to the client
void SendError(Stream* s, TRITONSERVER_Error_Code code, const std::string& msg) {
  // Caller holds s->mu. Exactly one final response, whatever came before.
  if (s->finished) return;
  s->finished = true;
  s->ReleasePlace();
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNewFromFactory(&response, s->factory);
  if (err != nullptr) {
    LogIfError(err, "tensorrt_llm_bls: response");
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(s->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL),
               "tensorrt_llm_bls: final flag");
    s->ReleaseRequest();
    return;
  }
  LogIfError(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, Err(code, msg)),
             "tensorrt_llm_bls: error response");
  s->ReleaseRequest();
}

TRITONSERVER_Error* AddOutput(TRITONBACKEND_Response* response, const std::string& name,
                              TRITONSERVER_DataType dtype, const std::vector<int64_t>& shape,
                              const std::string& data) {
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

// A response with text_output (one element per text) and the LLM's passed-through outputs.
TRITONSERVER_Error* BuildResponse(Stream* s, const std::vector<std::string>& texts, const Outputs* passed,
                                  TRITONBACKEND_Response** out) {
  TG_RETURN_IF_ERROR(TRITONBACKEND_ResponseNewFromFactory(out, s->factory));
  std::string data;
  for (auto& t : texts) AppendBytesElement(&data, t);
  TRITONSERVER_Error* err = nullptr;
  if (s->Wants("text_output"))
    err = AddOutput(*out, "text_output", TRITONSERVER_TYPE_BYTES, {static_cast<int64_t>(texts.size())}, data);
  if (passed != nullptr) {
    for (const auto& name : kPassedOutputs) {
      if (err != nullptr) break;
      const Tensor* t = Find(*passed, name);
      if (t != nullptr && s->Wants(name)) err = AddOutput(*out, name, t->dtype, t->shape, t->data);
    }
  }
  if (err != nullptr) {
    TRITONBACKEND_ResponseDelete(*out);
    *out = nullptr;
  }
  return err;
}

void Send(Stream* s, const std::vector<std::string>& texts, const Outputs* passed) {
  TRITONBACKEND_Response* response = nullptr;
  TRITONSERVER_Error* err = BuildResponse(s, texts, passed, &response);
  if (err != nullptr) {
    std::string msg = Tag(kInternal) + "tensorrt_llm_bls: " + TRITONSERVER_ErrorMessage(err);
    TRITONSERVER_ErrorDelete(err);
    SendError(s, TRITONSERVER_ERROR_INTERNAL, msg);
    return;
  }
  if (!s->model->decoupled) {
    // One response per request: keep the latest and send it with the final flag.
    s->whole = {response, [](TRITONBACKEND_Response* r) { TRITONBACKEND_ResponseDelete(r); }};
    return;
  }
  LogIfError(TRITONBACKEND_ResponseSend(response, 0, nullptr), "tensorrt_llm_bls: response");
}

void Finish(Stream* s) {
  // Caller holds s->mu: text held back at the very end goes out in one last response, then the final flag.
  if (s->finished) return;
  if (s->streaming) {
    for (auto& [key, beams] : s->sequences) {
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
      Send(s, {s->model->accumulate ? seq.sent : tail}, &index);
      if (s->finished) return;
    }
  }
  s->finished = true;
  if (!s->model->decoupled) {
    if (!s->whole) {
      s->finished = false;  // SendError sends the one final response (and gives the place back)
      SendError(s, TRITONSERVER_ERROR_INTERNAL, Tag(kInternal) + s->model->llm_name + ": returned no output_ids");
      return;
    }
    s->ReleasePlace();
    LogIfError(TRITONBACKEND_ResponseSend(s->whole.release(), TRITONSERVER_RESPONSE_COMPLETE_FINAL, nullptr),
               "tensorrt_llm_bls: response");
  } else {
    s->ReleasePlace();
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(s->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL),
               "tensorrt_llm_bls: final flag");
  }
  s->ReleaseRequest();
}

// A `stop` request for an LLM request in flight: the backend's own input, sent with the same request id (as
// NVIDIA's BLS does). Triton's cancellation alone does not reach a model that released its request early (the
// python backend releases decoupled requests when execute returns).
struct StopCall {
  std::vector<Tensor> inputs;
};

void OnStopRelease(TRITONSERVER_InferenceRequest* request, uint32_t flags, void* userp) {
  if (!(flags & TRITONSERVER_REQUEST_RELEASE_ALL)) return;
  TRITONSERVER_InferenceRequestDelete(request);
  delete static_cast<StopCall*>(userp);
}

void OnStopResponse(TRITONSERVER_InferenceResponse* response, uint32_t, void*) {
  if (response != nullptr) TRITONSERVER_InferenceResponseDelete(response);
}

void SendStop(ModelState* m, const std::string& id) {
  auto* call = new StopCall;
  int32_t zero = 0;
  bool yes = true;
  for (const char* name : {"input_ids", "input_lengths", "request_output_len"})
    call->inputs.push_back(Tensor{name, TRITONSERVER_TYPE_INT32, {1, 1}, std::string(reinterpret_cast<char*>(&zero), 4)});
  call->inputs.push_back(Tensor{"stop", TRITONSERVER_TYPE_BOOL, {1, 1}, std::string(reinterpret_cast<char*>(&yes), 1)});
  TRITONSERVER_InferenceRequest* req = nullptr;
  TRITONSERVER_Error* err = NewRequest(m, m->llm_name, id, call->inputs, {}, &req);
  if (err == nullptr) {
    err = TRITONSERVER_InferenceRequestSetReleaseCallback(req, OnStopRelease, call);
    if (err == nullptr)
      err = TRITONSERVER_InferenceRequestSetResponseCallback(req, m->allocator, nullptr, OnStopResponse, nullptr);
    if (err == nullptr) err = TRITONSERVER_ServerInferAsync(m->server, req, nullptr);
    if (err != nullptr) TRITONSERVER_InferenceRequestDelete(req);
  }
  if (err != nullptr) {
    delete call;
    LogIfError(err, "tensorrt_llm_bls: stop request");  // the request may have ended on its own meanwhile
  }
}

void CancelLlm(Stream* s) {
  // Caller holds s->mu. Ends the LLM request early: Triton's cancellation while the LLM still holds the request,
  // and the backend's `stop` input by request id.
  if (s->cancel_sent || !s->llm_started) return;
  s->cancel_sent = true;
  if (s->llm != nullptr) LogIfError(TRITONSERVER_InferenceRequestCancel(s->llm), "tensorrt_llm_bls: cancel");
  SendStop(s->model, s->llm_id);
}

// ------------------------------------------------------------------ LLM responses
bool CheckCancelled(Stream* s) {
  bool cancelled = false;
  if (s->request != nullptr)
    LogIfError(TRITONBACKEND_RequestIsCancelled(s->request, &cancelled), "tensorrt_llm_bls: is cancelled");
  if (!cancelled) return false;
  CancelLlm(s);
  SendError(s, TRITONSERVER_ERROR_CANCELLED, "request cancelled");
  return true;
}

// The detokenisation table (loaded before any request reaches the LLM; it never changes afterwards).
const DetokTable* CurrentTable(ModelState* m) {
  std::lock_guard<std::mutex> lk(m->table_mu);
  return m->table.get();
}

void OnStreamed(Stream* s, const Outputs& out, const Tensor& ids_t, const Tensor& lengths_t) {
  const DetokTable* table = CurrentTable(s->model);
  std::vector<int32_t> ids = AsInt32(ids_t), lengths = AsInt32(lengths_t);
  size_t width = ids_t.shape.empty() ? 0 : static_cast<size_t>(ids_t.shape.back());
  size_t rows = width == 0 ? lengths.size() : ids.size() / width;
  std::pair<int64_t, int64_t> key{FirstOr(Find(out, "batch_index"), 0), FirstOr(Find(out, "sequence_index"), 0)};
  auto& beams = s->sequences[key];
  if (beams.empty()) {
    const Tensor* stop_words = s->Input("stop_words");
    size_t row = stop_words != nullptr && stop_words->shape.size() > 1 &&
                         key.first < stop_words->shape[0] ? static_cast<size_t>(key.first) : 0;
    for (size_t r = 0; r < rows; ++r) beams.emplace_back(new Sequence(table, Words(stop_words, row)));
  }
  std::vector<std::string> texts;
  for (size_t r = 0; r < rows && r < beams.size(); ++r) {
    Sequence& seq = *beams[r];
    size_t n = r < lengths.size() ? std::min<size_t>(lengths[r], width) : width;
    const int32_t* tokens = ids.data() + r * width;
    std::string text;
    bool ok = true;
    if (beams.size() > 1) {
      // Beam search may rewrite earlier tokens, so each response carries whole beams: whole text.
      ok = DecodeWhole(*table, tokens, n, &text);
      seq.stopped = seq.stops.Cut(&text);
    } else if (seq.stopped) {
      if (s->model->accumulate) text = seq.sent;
    } else {
      ok = seq.detok.Add(tokens, n, &text);
      seq.tokens += n;
      // A sequence at max_tokens has ended: release held-back text now rather than in an extra response.
      if (s->max_tokens > 0 && static_cast<int64_t>(seq.tokens) >= s->max_tokens) seq.detok.Finish(&text);
      seq.stopped = seq.stops.Feed(&text);
      seq.sent += text;
      if (s->model->accumulate) text = seq.sent;
    }
    if (!ok) {
      SendError(s, TRITONSERVER_ERROR_INTERNAL,
                Tag(kInternal) + s->model->llm_name + ": a token id outside the tokenizer's vocabulary");
      return;
    }
    texts.push_back(std::move(text));
  }
  Send(s, texts, &out);
  size_t done = 0;
  for (auto& [k, seqs] : s->sequences) {
    bool all = !seqs.empty();
    for (auto& q : seqs) all = all && q->stopped;
    done += all;
  }
  if (done >= s->wanted_sequences) {
    CancelLlm(s);  // every sequence hit a stop string: end generation
    Finish(s);
  }
}

void OnWhole(Stream* s, const Outputs& out, const Tensor& ids_t, const Tensor& lengths_t) {
  const DetokTable* table = CurrentTable(s->model);
  std::vector<int32_t> ids = AsInt32(ids_t), lengths = AsInt32(lengths_t);
  size_t width = ids_t.shape.empty() ? 0 : static_cast<size_t>(ids_t.shape.back());
  size_t entries = ids_t.shape.empty() ? 1 : static_cast<size_t>(ids_t.shape[0]);
  size_t beams = entries == 0 || width == 0 ? 1 : ids.size() / (entries * width);
  std::vector<int32_t> prompt = AsInt32(s->prompt_ids), prompt_lengths = AsInt32(s->prompt_lengths);
  size_t prompt_width = s->prompt_ids.shape.empty() ? 0 : static_cast<size_t>(s->prompt_ids.shape.back());
  std::vector<std::string> texts;
  for (size_t b = 0; b < entries; ++b) {
    size_t row = entries == prompt_lengths.size() ? b : 0;
    StopStrings stops(Words(s->Input("stop_words"), row));
    size_t plen = row < prompt_lengths.size() ? static_cast<size_t>(prompt_lengths[row]) : 0;
    const int32_t* p = prompt.data() + row * prompt_width;
    for (size_t beam = 0; beam < beams; ++beam) {
      size_t at = b * beams + beam;
      size_t n = at < lengths.size() ? std::min<size_t>(lengths[at], width) : width;
      const int32_t* tokens = ids.data() + at * width;
      std::string text, prompt_text;
      if (!DecodeWhole(*table, tokens, n, &text)) {
        SendError(s, TRITONSERVER_ERROR_INTERNAL,
                  Tag(kInternal) + s->model->llm_name + ": a token id outside the tokenizer's vocabulary");
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
  Send(s, texts, &out);
}

void OnLlmResponse(TRITONSERVER_InferenceResponse* response, uint32_t flags, void* userp) {
  auto* holder = static_cast<std::shared_ptr<Stream>*>(userp);
  Stream* s = holder->get();
  {
    std::lock_guard<std::mutex> lk(s->mu);
    if (response != nullptr) {
      TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
      if (s->finished) {
        // Late responses after a stop string, a cancellation or an error: dropped.
      } else if (CheckCancelled(s)) {
      } else if (err != nullptr) {
        SendError(s, TRITONSERVER_ErrorCode(err), Wrap(s->model->llm_name, TRITONSERVER_ErrorMessage(err)));
      } else {
        Outputs out;
        TRITONSERVER_Error* read = ReadResponse(response, &out);
        const Tensor* ids = Find(out, "output_ids");
        const Tensor* lengths = Find(out, "sequence_length");
        if (read != nullptr) {
          SendError(s, TRITONSERVER_ERROR_INTERNAL,
                    Tag(kInternal) + "tensorrt_llm_bls: " + TRITONSERVER_ErrorMessage(read));
          TRITONSERVER_ErrorDelete(read);
        } else if (ids != nullptr && lengths != nullptr) {  // none: the empty final response of a decoupled model
          if (s->streaming)
            OnStreamed(s, out, *ids, *lengths);
          else
            OnWhole(s, out, *ids, *lengths);
        }
      }
      if (err != nullptr) TRITONSERVER_ErrorDelete(err);
      LogIfError(TRITONSERVER_InferenceResponseDelete(response), "tensorrt_llm_bls: delete response");
    }
    if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) {
      if (!s->finished && !CheckCancelled(s)) Finish(s);
    }
  }
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) {
    {
      std::lock_guard<std::mutex> lk(s->model->live_mu);
      s->model->live.erase(s);
    }
    delete holder;
  }
}

void OnLlmRelease(TRITONSERVER_InferenceRequest* request, uint32_t flags, void* userp) {
  if (!(flags & TRITONSERVER_REQUEST_RELEASE_ALL)) return;
  auto* holder = static_cast<std::shared_ptr<Stream>*>(userp);
  {
    std::lock_guard<std::mutex> lk((*holder)->mu);
    (*holder)->llm = nullptr;
  }
  TRITONSERVER_InferenceRequestDelete(request);
  delete holder;
}

// ------------------------------------------------------------------ in-process requests
TRITONSERVER_Error* NewRequest(ModelState* m, const std::string& model, const std::string& id,
                               const std::vector<Tensor>& inputs, const std::vector<std::string>& outputs,
                               TRITONSERVER_InferenceRequest** out) {
  TRITONSERVER_InferenceRequest* req = nullptr;
  TG_RETURN_IF_ERROR(TRITONSERVER_InferenceRequestNew(&req, m->server, model.c_str(), -1));
  TRITONSERVER_Error* err = id.empty() ? nullptr : TRITONSERVER_InferenceRequestSetId(req, id.c_str());
  for (const Tensor& t : inputs) {
    if (err != nullptr) break;
    err = TRITONSERVER_InferenceRequestAddInput(req, t.name.c_str(), t.dtype, t.shape.data(), t.shape.size());
    if (err == nullptr)
      err = TRITONSERVER_InferenceRequestAppendInputData(req, t.name.c_str(), t.data.data(), t.data.size(),
                                                         TRITONSERVER_MEMORY_CPU, 0);
  }
  for (const auto& name : outputs) {
    if (err != nullptr) break;
    err = TRITONSERVER_InferenceRequestAddRequestedOutput(req, name.c_str());
  }
  if (err != nullptr) {
    TRITONSERVER_InferenceRequestDelete(req);
    return err;
  }
  *out = req;
  return nullptr;
}

void StartLlm(const std::shared_ptr<Stream>& s, Outputs pre) {
  ModelState* m = s->model;
  std::vector<Tensor>& inputs = s->llm_inputs;
  for (const auto& [from, to] : kFromPreprocessing) {
    auto it = pre.find(from);
    if (it == pre.end()) continue;
    if (from == "EMBEDDING_BIAS" && it->second.data.empty()) continue;  // no bias words: send no bias
    Tensor t = it->second;
    t.name = to;
    inputs.push_back(std::move(t));
  }
  for (const auto& [from, to] : kToLlm) {
    const Tensor* in = s->Input(from);
    if (in == nullptr) continue;
    Tensor t = *in;
    t.name = to;
    // Inputs declared with `reshape: { shape: [ ] }` arrive as [batch]; tensorrt_llm wants [batch, 1].
    if (t.shape.size() == 1) t.shape = {static_cast<int64_t>(s->batch), 1};
    inputs.push_back(std::move(t));
  }
  s->prompt_ids = pre["INPUT_ID"];
  s->prompt_lengths = pre["REQUEST_INPUT_LEN"];
  std::vector<std::string> outputs = {"output_ids", "sequence_length"};
  for (const auto& name : kPassedOutputs)
    if (s->Wants(name) || name == "batch_index" || name == "sequence_index") outputs.push_back(name);
  TRITONSERVER_InferenceRequest* req = nullptr;
  static std::atomic<uint64_t> counter{0};
  s->llm_id = "tritongen-bls-" + std::to_string(reinterpret_cast<uintptr_t>(m)) + "-" + std::to_string(++counter);
  TRITONSERVER_Error* err = NewRequest(m, m->llm_name, s->llm_id, inputs, outputs, &req);
  std::lock_guard<std::mutex> lk(s->mu);
  if (err == nullptr) {
    auto* release = new std::shared_ptr<Stream>(s);
    auto* respond = new std::shared_ptr<Stream>(s);
    err = TRITONSERVER_InferenceRequestSetReleaseCallback(req, OnLlmRelease, release);
    if (err == nullptr) err = TRITONSERVER_InferenceRequestSetResponseCallback(req, m->allocator, nullptr,
                                                                               OnLlmResponse, respond);
    if (err == nullptr) {
      s->llm = req;
      s->llm_started = true;
      {
        std::lock_guard<std::mutex> live(m->live_mu);
        m->live[s.get()] = s;
      }
      err = TRITONSERVER_ServerInferAsync(m->server, req, nullptr);
      if (err != nullptr) {
        s->llm_started = false;
        std::lock_guard<std::mutex> live(m->live_mu);
        m->live.erase(s.get());
      }
    }
    if (err != nullptr) {
      s->llm = nullptr;
      TRITONSERVER_InferenceRequestDelete(req);
      delete release;
      delete respond;
    }
  }
  if (err != nullptr) {
    SendError(s.get(), TRITONSERVER_ErrorCode(err), Wrap(m->llm_name, TRITONSERVER_ErrorMessage(err)));
    TRITONSERVER_ErrorDelete(err);
  }
}

// preprocessing answers once; its callbacks start the LLM request.
struct PreCall {
  std::shared_ptr<Stream> stream;
  TRITONSERVER_InferenceRequest* request = nullptr;
};

void OnPreRelease(TRITONSERVER_InferenceRequest* request, uint32_t flags, void*) {
  if (flags & TRITONSERVER_REQUEST_RELEASE_ALL) TRITONSERVER_InferenceRequestDelete(request);
}

void OnPreResponse(TRITONSERVER_InferenceResponse* response, uint32_t flags, void* userp) {
  auto* call = static_cast<PreCall*>(userp);
  std::shared_ptr<Stream> s = call->stream;
  if (response != nullptr) {
    Outputs out;
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
    if (err == nullptr) err = ReadResponse(response, &out);
    TRITONSERVER_InferenceResponseDelete(response);
    if (err != nullptr) {
      std::lock_guard<std::mutex> lk(s->mu);
      // preprocessing (python) names itself already; its tag, if any, stays in front.
      std::string msg = TRITONSERVER_ErrorMessage(err);
      SendError(s.get(), TRITONSERVER_ErrorCode(err),
                msg.compare(TagLength(msg), 14, "preprocessing:") == 0 ? msg : Wrap("preprocessing", msg));
      TRITONSERVER_ErrorDelete(err);
    } else {
      bool go = false;
      {
        std::lock_guard<std::mutex> lk(s->mu);
        go = !s->finished && !CheckCancelled(s.get());
      }
      if (go) StartLlm(s, std::move(out));
    }
  }
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) delete call;
}

void StartPreprocessing(const std::shared_ptr<Stream>& s) {
  ModelState* m = s->model;
  for (const auto& [from, to] : kToPreprocessing) {
    const Tensor* in = s->Input(from);
    if (in == nullptr) continue;
    Tensor t = *in;
    t.name = to;
    s->pre_inputs.push_back(std::move(t));
  }
  std::vector<std::string> outputs;
  for (const auto& [from, to] : kFromPreprocessing) outputs.push_back(from);
  TRITONSERVER_InferenceRequest* req = nullptr;
  TRITONSERVER_Error* err = NewRequest(m, "preprocessing", "", s->pre_inputs, outputs, &req);
  if (err == nullptr) {
    auto* call = new PreCall{s, req};
    err = TRITONSERVER_InferenceRequestSetReleaseCallback(req, OnPreRelease, nullptr);
    if (err == nullptr)
      err = TRITONSERVER_InferenceRequestSetResponseCallback(req, m->allocator, nullptr, OnPreResponse, call);
    if (err == nullptr) err = TRITONSERVER_ServerInferAsync(m->server, req, nullptr);
    if (err != nullptr) {
      TRITONSERVER_InferenceRequestDelete(req);
      delete call;
    }
  }
  if (err != nullptr) {
    std::lock_guard<std::mutex> lk(s->mu);
    SendError(s.get(), TRITONSERVER_ErrorCode(err), Wrap("preprocessing", TRITONSERVER_ErrorMessage(err)));
    TRITONSERVER_ErrorDelete(err);
  }
}

// ------------------------------------------------------------------ the detokenisation table
struct TableCall {
  std::promise<std::pair<std::string, std::string>> done;  // (table blob, error)
};

void OnTableResponse(TRITONSERVER_InferenceResponse* response, uint32_t flags, void* userp) {
  auto* call = static_cast<TableCall*>(userp);
  if (response != nullptr) {
    Outputs out;
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
    if (err == nullptr) err = ReadResponse(response, &out);
    TRITONSERVER_InferenceResponseDelete(response);
    if (err != nullptr) {
      call->done.set_value({"", TRITONSERVER_ErrorMessage(err)});
      TRITONSERVER_ErrorDelete(err);
    } else if (const Tensor* t = Find(out, "DETOKENIZER_TABLE")) {
      std::vector<std::string> items = BytesElements(t->data);
      call->done.set_value({items.empty() ? "" : items[0], items.empty() ? "empty DETOKENIZER_TABLE" : ""});
    } else {
      call->done.set_value({"", "preprocessing returned no DETOKENIZER_TABLE"});
    }
  }
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) delete call;
}

TRITONSERVER_Error* EnsureTable(ModelState* m) {
  std::lock_guard<std::mutex> lk(m->table_mu);
  if (m->table) return nullptr;
  std::vector<Tensor> inputs(3);
  inputs[0] = Tensor{"QUERY", TRITONSERVER_TYPE_BYTES, {1, 1}, std::string(4, '\0')};
  inputs[1] = Tensor{"REQUEST_OUTPUT_LEN", TRITONSERVER_TYPE_INT32, {1, 1}, std::string(4, '\0')};
  inputs[2] = Tensor{"DETOKENIZER_TABLE_REQUEST", TRITONSERVER_TYPE_INT32, {1, 1}, std::string(4, '\0')};
  int32_t one = 1, flags = m->skip_special_tokens ? 1 : 0;
  std::memcpy(&inputs[1].data[0], &one, 4);
  std::memcpy(&inputs[2].data[0], &flags, 4);
  TRITONSERVER_InferenceRequest* req = nullptr;
  TG_RETURN_IF_ERROR(NewRequest(m, "preprocessing", "", inputs, {"DETOKENIZER_TABLE"}, &req));
  auto* call = new TableCall;
  auto result = call->done.get_future();
  TRITONSERVER_Error* err = TRITONSERVER_InferenceRequestSetReleaseCallback(req, OnPreRelease, nullptr);
  if (err == nullptr)
    err = TRITONSERVER_InferenceRequestSetResponseCallback(req, m->allocator, nullptr, OnTableResponse, call);
  if (err == nullptr) err = TRITONSERVER_ServerInferAsync(m->server, req, nullptr);
  if (err != nullptr) {
    TRITONSERVER_InferenceRequestDelete(req);
    delete call;
    return err;
  }
  // `inputs` must outlive the request: wait here for its answer (once per model load).
  if (result.wait_for(std::chrono::seconds(120)) != std::future_status::ready)
    return Err(TRITONSERVER_ERROR_UNAVAILABLE,
               Tag(kInternal) + "tensorrt_llm_bls: preprocessing did not send the detokenizer table");
  auto [blob, error] = result.get();
  if (!error.empty())
    return Err(TRITONSERVER_ERROR_UNAVAILABLE, Tag(kInternal) + "tensorrt_llm_bls: detokenizer table: " + error);
  auto table = std::make_shared<DetokTable>();
  std::string problem;
  if (!table->Parse(blob, &problem))
    return Internal(Tag(kInternal) + "tensorrt_llm_bls: detokenizer table: " + problem);
  m->table = table;
  return nullptr;
}

// ------------------------------------------------------------------ cancellation watcher
void Watch(ModelState* m) {
  std::unique_lock<std::mutex> lk(m->watcher_mu);
  while (m->running) {
    m->watcher_cv.wait_for(lk, std::chrono::milliseconds(20));
    std::vector<std::shared_ptr<Stream>> streams;
    {
      std::lock_guard<std::mutex> live(m->live_mu);
      for (auto& [ptr, weak] : m->live)
        if (auto s = weak.lock()) streams.push_back(std::move(s));
    }
    for (auto& s : streams) {
      std::lock_guard<std::mutex> slk(s->mu);
      if (!s->finished) CheckCancelled(s.get());
    }
  }
}

// ------------------------------------------------------------------ one client request
TRITONSERVER_Error* Validate(ModelState* m, Stream* s) {
  const Tensor* text = s->Input("text_input");
  if (text == nullptr || text->elements() == 0) return BadRequest("text_input", "required");
  if (s->Input("max_tokens") == nullptr) return BadRequest("max_tokens", "required");
  s->batch = static_cast<size_t>(text->shape.empty() ? 1 : text->shape[0]);
  if (m->max_input_tokens > 0) {
    // Refused before any work: no prompt of at most max_input_tokens tokens is longer than that many of the
    // longest vocabulary entry, doubled for normalisers that shorten text (as the python BLS and preprocessing).
    size_t longest = 1;
    {
      std::lock_guard<std::mutex> lk(m->table_mu);
      if (m->table)
        for (const auto& b : m->table->bytes) longest = std::max(longest, b.size());
    }
    int64_t limit = m->max_input_tokens * static_cast<int64_t>(longest) * 2;
    for (const std::string& item : BytesElements(text->data)) {
      if (static_cast<int64_t>(item.size()) > limit)
        return BadRequest("text_input", std::to_string(item.size()) + " bytes exceed the limit of " +
                          std::to_string(limit) + " bytes (at most " + std::to_string(m->max_input_tokens) +
                          " prompt tokens of at most " + std::to_string(longest) + " bytes each); shorten the prompt");
    }
  }
  int64_t v = 0;
  const Tensor* draft = s->Input("num_draft_tokens");
  if (draft != nullptr && FirstInteger(*draft, &v) && v > 0)
    return BadRequest("num_draft_tokens", "speculative decoding needs a draft model, and this deployment has none "
                      "(tensorrt_llm_draft_model_name); leave it unset or 0");
  const Tensor* draft_logits = s->Input("use_draft_logits");
  if (draft_logits != nullptr && FirstInteger(*draft_logits, &v) && v != 0)
    return BadRequest("use_draft_logits", "needs a draft model, and this deployment has none; leave it unset");
  const Tensor* stream = s->Input("stream");
  s->streaming = stream != nullptr && FirstInteger(*stream, &v) && v != 0;
  if (s->streaming && !m->decoupled)
    return BadRequest("stream", "this deployment is not decoupled (serving.streaming: false); send stream=false or "
                      "render it with streaming");
  FirstInteger(*s->Input("max_tokens"), &s->max_tokens);
  int64_t sequences = 1;
  const Tensor* nrs = s->Input("num_return_sequences");
  if (nrs != nullptr && FirstInteger(*nrs, &sequences) && sequences < 1) sequences = 1;
  s->wanted_sequences = s->batch * static_cast<size_t>(sequences);
  return nullptr;
}

void Serve(ModelState* m, TRITONBACKEND_Request* request, TRITONSERVER_Error* table_error) {
  auto s = std::make_shared<Stream>();
  s->model = m;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseFactoryNew(&s->factory, request);
  if (err != nullptr) {
    // No way to answer this request: Triton answers it with the error when it is released.
    LogIfError(err, "tensorrt_llm_bls: response factory");
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
    return;
  }
  const char* id = nullptr;
  if (TRITONBACKEND_RequestId(request, &id) == nullptr && id != nullptr) s->id = id;
  uint32_t count = 0;
  err = TRITONBACKEND_RequestInputCount(request, &count);
  for (uint32_t i = 0; err == nullptr && i < count; ++i) {
    TRITONBACKEND_Input* input = nullptr;
    err = TRITONBACKEND_RequestInputByIndex(request, i, &input);
    Tensor t;
    if (err == nullptr) err = ReadInput(input, &t);
    if (err == nullptr) s->inputs[t.name] = std::move(t);
  }
  uint32_t outputs = 0;
  if (err == nullptr) err = TRITONBACKEND_RequestOutputCount(request, &outputs);
  for (uint32_t i = 0; err == nullptr && i < outputs; ++i) {
    const char* name = nullptr;
    err = TRITONBACKEND_RequestOutputName(request, i, &name);
    if (err == nullptr) s->wanted.insert(name);
  }
  s->request = request;
  if (err == nullptr && table_error != nullptr)
    err = Err(TRITONSERVER_ErrorCode(table_error), TRITONSERVER_ErrorMessage(table_error));
  s->model_in_flight = &m->in_flight;
  if (err == nullptr && m->capacity > 0) {
    if (m->in_flight.fetch_add(1) >= m->capacity) {
      m->in_flight.fetch_sub(1);
      err = Err(TRITONSERVER_ERROR_UNAVAILABLE,
                Tag(kOverloaded) + "Exceeds maximum queue size: tensorrt_llm_bls holds " + std::to_string(m->capacity) +
                " requests (max_batch_size in flight plus max_queue_size waiting); retry later");
    } else {
      s->counted = true;
    }
  }
  if (err == nullptr) err = Validate(m, s.get());
  if (err != nullptr) {
    std::lock_guard<std::mutex> lk(s->mu);
    SendError(s.get(), TRITONSERVER_ErrorCode(err), TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
    return;
  }
  StartPreprocessing(s);
}

}  // namespace
}  // namespace tritongen

using namespace tritongen;

extern "C" {

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  auto m = std::make_unique<ModelState>();
  m->model = model;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &m->server));
  std::string json;
  TG_RETURN_IF_ERROR(ModelConfigJson(model, &json));
  m->llm_name = ConfigParameter(json, "tensorrt_llm_model_name", "tensorrt_llm");
  std::string draft = ConfigParameter(json, "tensorrt_llm_draft_model_name", "");
  if (!draft.empty())
    return InvalidArg("tensorrt_llm_bls: the native BLS does not run speculative decoding (a draft model is "
                      "configured); render with serving.bls: python");
  auto truthy = [](std::string v) {
    for (auto& c : v) c = static_cast<char>(std::tolower(c));
    return v == "true" || v == "1" || v == "yes" || v == "t";
  };
  m->accumulate = truthy(ConfigParameter(json, "accumulate_tokens", "false"));
  m->skip_special_tokens = truthy(ConfigParameter(json, "skip_special_tokens", "true"));
  m->decoupled = json.find("\"decoupled\":true") != std::string::npos;
  m->max_input_tokens = std::atoll(ConfigParameter(json, "max_input_tokens", "0").c_str());
  int64_t in_flight = std::atoll(ConfigParameter(json, "max_in_flight", "0").c_str());
  int64_t queue = ConfigInteger(json, "max_queue_size", 0);
  m->capacity = in_flight > 0 ? in_flight + queue : 0;
  TG_RETURN_IF_ERROR(TRITONSERVER_ResponseAllocatorNew(&m->allocator, Alloc, Release, nullptr));
  m->watcher = std::thread(Watch, m.get());
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, m.release()));
  return nullptr;
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  auto* m = static_cast<ModelState*>(state);
  m->running = false;
  m->watcher_cv.notify_all();
  if (m->watcher.joinable()) m->watcher.join();
  TRITONSERVER_ResponseAllocatorDelete(m->allocator);
  delete m;
  return nullptr;
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(
    TRITONBACKEND_ModelInstance*) {
  return nullptr;
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(
    TRITONBACKEND_ModelInstance*) {
  return nullptr;
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  TRITONBACKEND_Model* model = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* state = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  auto* m = static_cast<ModelState*>(state);
  uint64_t start = NowNs();
  TRITONSERVER_Error* table_error = EnsureTable(m);
  for (uint32_t r = 0; r < request_count; ++r) {
    LogIfError(TRITONBACKEND_ModelInstanceReportStatistics(instance, requests[r], table_error == nullptr, start,
                                                           start, NowNs(), NowNs()),
               "tensorrt_llm_bls: statistics");
    Serve(m, requests[r], table_error);
  }
  if (table_error != nullptr) TRITONSERVER_ErrorDelete(table_error);
  uint64_t end = NowNs();
  LogIfError(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, request_count, start, start, end, end),
             "tensorrt_llm_bls: batch statistics");
  return nullptr;
}

}  // extern "C"
