// The tensorrt_llm_bls model: its configuration, the shared in-process machinery, and the streams in flight.
//
// Ownership: Triton holds one std::shared_ptr<ModelState> (ModelSetState) until ModelFinalize; every ClientRequest
// holds another, so the allocator and table stay valid for callbacks that arrive while the model unloads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bls/config.h"
#include "bls/inprocess.h"
#include "bls/table.h"

namespace tritongen {
namespace bls {

class ClientRequest;

class ModelState {
 public:
  static TRITONSERVER_Error* Create(TRITONBACKEND_Model* model, std::shared_ptr<ModelState>* out);
  ~ModelState();

  // Stops the watcher and ends every stream still in flight (the model is unloading).
  void Shutdown();

  void Execute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count);

  // Streams whose LLM request is in flight, for the watcher (cancellation and server shutdown).
  void Track(const std::shared_ptr<ClientRequest>& s);
  void Forget(ClientRequest* s);

  const BlsConfig& config() const { return config_; }
  TRITONSERVER_Server* server() const { return server_; }
  TRITONSERVER_ResponseAllocator* allocator() const { return allocator_->get(); }
  const TableLoader& tables() const { return *tables_; }
  std::atomic<int64_t>& in_flight() { return in_flight_; }

 private:
  ModelState() = default;
  void Watch();

  std::weak_ptr<ModelState> self_;
  BlsConfig config_;
  TRITONSERVER_Server* server_ = nullptr;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<TableLoader> tables_;
  std::atomic<int64_t> in_flight_{0};

  std::mutex live_mu_;
  std::unordered_map<ClientRequest*, std::weak_ptr<ClientRequest>> live_;

  std::mutex watcher_mu_;
  std::condition_variable watcher_cv_;
  bool running_ = true;      // guarded by watcher_mu_
  std::unique_ptr<Drain> drain_;  // when a stopping server's streams end
  std::thread watcher_;      // last: started once everything above exists
};

}  // namespace bls
}  // namespace tritongen
