#include "tokensource/metrics.h"

#include <mutex>

namespace tritongen {
namespace tokensource {
namespace {

// The process-wide metric families: created with the first model's metrics and deleted after the last one's, as
// Triton requires (a family outlives its metrics).
class MetricFamilies {
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

}  // namespace

TRITONSERVER_Error* ModelMetrics::Create(const std::string& model, uint64_t version,
                                         std::unique_ptr<ModelMetrics>* out) {
  std::unique_ptr<ModelMetrics> m(new ModelMetrics());
  TRITONSERVER_MetricFamily* tokens = nullptr;
  TRITONSERVER_MetricFamily* active = nullptr;
  TG_RETURN_IF_ERROR(MetricFamilies::Acquire(&tokens, &active));
  m->have_families_ = true;
  const std::string version_text = std::to_string(version);
  const TRITONSERVER_Parameter* labels[] = {
      TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING, model.c_str()),
      TRITONSERVER_ParameterNew("version", TRITONSERVER_PARAMETER_STRING, version_text.c_str())};
  TRITONSERVER_Error* err = TRITONSERVER_MetricNew(&m->tokens_, tokens, labels, 2);
  if (err == nullptr) err = TRITONSERVER_MetricNew(&m->active_, active, labels, 2);
  for (const TRITONSERVER_Parameter* label : labels) {
    TRITONSERVER_ParameterDelete(const_cast<TRITONSERVER_Parameter*>(label));
  }
  TG_RETURN_IF_ERROR(err);  // `m` deletes what was made and releases the families
  *out = std::move(m);
  return nullptr;
}

ModelMetrics::~ModelMetrics() {
  if (tokens_ != nullptr) LogIfError(TRITONSERVER_MetricDelete(tokens_), "metric");
  if (active_ != nullptr) LogIfError(TRITONSERVER_MetricDelete(active_), "metric");
  if (have_families_) MetricFamilies::Release();
}

}  // namespace tokensource
}  // namespace tritongen
