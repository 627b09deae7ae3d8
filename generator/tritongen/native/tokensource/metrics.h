// The token source's Prometheus metrics: output tokens sent and requests in flight, labelled by model and version.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend_util.h"

namespace tritongen {
namespace tokensource {

// One model's metrics. Owns its two metrics and a reference to the process-wide families (Prometheus names are
// global, so every model of this backend adds its labelled metrics to the same two families).
class ModelMetrics {
 public:
  static TRITONSERVER_Error* Create(const std::string& model, uint64_t version, std::unique_ptr<ModelMetrics>* out);
  ~ModelMetrics();
  ModelMetrics(const ModelMetrics&) = delete;
  ModelMetrics& operator=(const ModelMetrics&) = delete;

  void TokensSent(int64_t n) {
    LogIfError(TRITONSERVER_MetricIncrement(tokens_, static_cast<double>(n)), "token counter");
  }
  // Increments, not sets: concurrent Execute calls and timer threads would otherwise race to set stale values.
  void Started() { LogIfError(TRITONSERVER_MetricIncrement(active_, 1), "active gauge"); }
  void Ended() { LogIfError(TRITONSERVER_MetricIncrement(active_, -1), "active gauge"); }

 private:
  ModelMetrics() = default;

  bool have_families_ = false;
  TRITONSERVER_Metric* tokens_ = nullptr;
  TRITONSERVER_Metric* active_ = nullptr;
};

}  // namespace tokensource
}  // namespace tritongen
