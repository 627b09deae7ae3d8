// tritongen_bls: the `tensorrt_llm_bls` model as a native Triton backend.
//
// The same tensor contract and behaviour as the python BLS (generator/tritongen/served/bls.py):
// one request runs `preprocessing` once, then `tensorrt_llm`, and every LLM response is detokenised
// incrementally (detok.h) and sent on, so streamed text concatenates to the unstreamed text byte for byte.
// Why native: the python BLS costs two IPC hops through its stub per token per request; here the per-token work
// is a table lookup inside tritonserver, on the thread that delivers the LLM's response, with no thread per
// request (every call is asynchronous, through Triton's in-process API).
//
// Files, by concern: config (the model config, checked at load), inprocess (requests to other models and who owns
// their inputs), table (the detokenisation table from preprocessing), client_request (one client request),
// lora_resend (a LoRA cache miss answered with the adapter's weights), this file (the model, its watcher, the entry
// points). wiring.h is generated from contract.py.
//
// Cancellation: a watcher polls each request's cancellation flag and cancels its LLM request, which stops
// within the LLM's own cancellation period; the client gets Triton's CANCELLED error at once.
// Server shutdown: when tritonserver begins to stop (SIGTERM), streams in flight may finish for a drain period
// (TRITONGEN_DRAIN_S, set by every generated deployment and `tritongen serve` from the Plan's stop budget,
// plan/deploy.py StopBudget); those still running then end with UNAVAILABLE "the server is stopping", so the
// server's own exit timeout never expires with requests inside this backend. The exit timeout must leave room
// after the drain for clients to read what was already sent and for the models to unload.


#include "api_version.h"
#include "bls/model.h"
#include "bls/client_request.h"
#include "error_kinds.h"
#include "export.h"

namespace tritongen {
namespace bls {

TRITONSERVER_Error* ModelState::Create(TRITONBACKEND_Model* model, std::shared_ptr<ModelState>* out) {
  std::shared_ptr<ModelState> m(new ModelState());
  m->self_ = m;
  TG_RETURN_IF_ERROR(BlsConfig::Read(model, &m->config_));
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &m->server_));
  m->drain_ = std::make_unique<Drain>(m->server_);
  TG_RETURN_IF_ERROR(Allocator::Create(&m->allocator_));
  m->tables_ = std::make_unique<TableLoader>(m->server_, m->allocator_->get(), m->config_.skip_special_tokens);
  m->watcher_ = std::thread(&ModelState::Watch, m.get());
  *out = std::move(m);
  return nullptr;
}

ModelState::~ModelState() { Shutdown(); }

void ModelState::Shutdown() {
  {
    std::lock_guard<std::mutex> lk(watcher_mu_);
    running_ = false;
  }
  watcher_cv_.notify_all();
  if (watcher_.joinable() && watcher_.get_id() != std::this_thread::get_id()) watcher_.join();
  std::vector<std::shared_ptr<ClientRequest>> streams;
  {
    std::lock_guard<std::mutex> lk(live_mu_);
    for (auto& [ptr, weak] : live_)
      if (auto s = weak.lock()) streams.push_back(std::move(s));
  }
  for (auto& s : streams)
    s->Abort(TRITONSERVER_ERROR_UNAVAILABLE, Tag(kUnavailable) + config_.name + ": the model is unloading");
}

void ModelState::Track(const std::shared_ptr<ClientRequest>& s) {
  std::lock_guard<std::mutex> lk(live_mu_);
  live_[s.get()] = s;
}

void ModelState::Forget(ClientRequest* s) {
  std::lock_guard<std::mutex> lk(live_mu_);
  live_.erase(s);
}

void ModelState::Watch() {
  NameThread("tg-bls-watch");
  std::unique_lock<std::mutex> lk(watcher_mu_);
  while (running_) {
    watcher_cv_.wait_for(lk, std::chrono::milliseconds(20));
    if (!running_) break;
    lk.unlock();
    const bool abort = drain_->Over(config_.name);
    std::vector<std::shared_ptr<ClientRequest>> streams;
    {
      std::lock_guard<std::mutex> live_lk(live_mu_);
      for (auto& [ptr, weak] : live_)
        if (auto s = weak.lock()) streams.push_back(std::move(s));
    }
    for (auto& s : streams) {
      if (abort)
        s->Abort(TRITONSERVER_ERROR_UNAVAILABLE,
                 Tag(kUnavailable) + config_.name + ": the server is stopping; retry the request on another replica");
      else
        s->CheckCancelled();
    }
    streams.clear();  // a stream that ends here is destroyed outside every lock
    lk.lock();
  }
}

void ModelState::Execute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count) {
  const uint64_t start = NowNs();
  // Waits (no lock held) for the table on the first requests only; later calls return at once.
  TRITONSERVER_Error* table_error = tables_->Ensure(std::chrono::seconds(120));
  std::shared_ptr<ModelState> self = self_.lock();
  for (uint32_t r = 0; r < count; ++r) ClientRequest::Serve(self, instance, requests[r], start, table_error);
  if (table_error != nullptr) TRITONSERVER_ErrorDelete(table_error);
  const uint64_t end = NowNs();
  LogIfError(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, count, start, start, end, end),
             "tensorrt_llm_bls: batch statistics");
}

}  // namespace bls
}  // namespace tritongen

using tritongen::bls::ModelState;

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  return tritongen::CheckApiVersion(backend);
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  std::shared_ptr<ModelState> state;
  TG_RETURN_IF_ERROR(ModelState::Create(model, &state));
  // Triton's reference, freed in ModelFinalize (or here, watcher joined, if Triton does not take it).
  auto held = std::make_unique<std::shared_ptr<ModelState>>(std::move(state));
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, held.get()));
  held.release();
  return nullptr;
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  // Null when ModelInitialize failed: Triton finalizes a model whose initialization returned an error too.
  std::unique_ptr<std::shared_ptr<ModelState>> held(static_cast<std::shared_ptr<ModelState>*>(state));
  if (held != nullptr) (*held)->Shutdown();
  return nullptr;
}

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance*) { return nullptr; }

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance*) { return nullptr; }

TG_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                                TRITONBACKEND_Request** requests,
                                                                const uint32_t request_count) {
  TRITONBACKEND_Model* model = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* state = nullptr;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  (*static_cast<std::shared_ptr<ModelState>*>(state))->Execute(instance, requests, request_count);
  return nullptr;
}
