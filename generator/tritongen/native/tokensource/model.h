// The token source's model: its parameters, its timer threads or engine loop, its metrics, and the requests Triton
// hands it.
//
// Ownership: TRITONBACKEND_ModelInitialize makes a std::unique_ptr<ModelState> and gives Triton its pointer
// (ModelSetState); ModelFinalize takes it back into a std::unique_ptr, whose destruction stops the engine loop and
// the timer threads (each ends its requests still in flight) before the metrics go. Model instances own nothing:
// they share the model's threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend_util.h"
#include "engine_model.h"
#include "tokensource/generation.h"
#include "tokensource/metrics.h"
#include "tokensource/timer.h"

namespace tritongen {
namespace tokensource {

class ModelState {
 public:
  static TRITONSERVER_Error* Create(TRITONBACKEND_Model* model, std::unique_ptr<ModelState>* out);
  ~ModelState();
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  // Takes every request (a new generation, or a `stop` of one in flight) and releases it before returning.
  void Execute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count);

  int32_t TokenAt(const Generation& g, int64_t index) const {
    return ids_[static_cast<size_t>((g.prompt_len + g.shift + index) % static_cast<int64_t>(ids_.size()))];
  }
  uint64_t itl_ns() const { return itl_ns_; }
  int64_t interval() const { return interval_; }

  // Sends tokens [from, to) of `g`; false when Triton refused the response.
  bool SendTokens(Generation* g, int64_t from, int64_t to, uint32_t flags);
  void Ended() { metrics_->Ended(); }
  // Whether a stopping server's drain is over: its requests then end with UNAVAILABLE, as the BLS's do, instead of
  // keeping the model (and tritonserver) until the exit timeout.
  bool DrainOver() { return drain_->Over(name_); }
  const std::string& name() const { return name_; }

 private:
  ModelState() = default;
  TRITONSERVER_Error* StartEngine(const ModelConfig& config);

  std::string name_;
  Limits limits_;
  uint64_t ttft_ns_ = 0, itl_ns_ = 0;
  int64_t interval_ = 1;
  std::vector<int32_t> ids_;
  std::unique_ptr<ModelMetrics> metrics_;
  std::unique_ptr<Drain> drain_;
  std::atomic<uint64_t> next_shard_{0};
  // Destroyed first, in this order (~ModelState says it too): the engine loop (its steps call a shard's Step),
  // then the shards; the metrics and the drain they use outlive both.
  std::vector<std::unique_ptr<TimerShard>> shards_;
  std::unique_ptr<EngineLoop<Generation>> engine_;  // parameter engine_model: steps replace the fixed timing
};

}  // namespace tokensource
}  // namespace tritongen
