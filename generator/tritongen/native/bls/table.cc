#include "bls/table.h"

#include <cstring>

#include "bls/inprocess.h"
#include "error_kinds.h"

namespace tritongen {
namespace bls {

class TableLoader::Responder : public bls::Responder {
 public:
  explicit Responder(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~Responder() override {
    // Ends the attempt whatever happened (a FINAL without a response included).
    std::lock_guard<std::mutex> lk(state_->mu);
    if (state_->loading) {
      state_->loading = false;
      if (!state_->table && state_->error.empty()) state_->error = "preprocessing sent no response";
      state_->cv.notify_all();
    }
  }

  void OnResponse(TRITONSERVER_InferenceResponse* response, uint32_t) override {
    if (response == nullptr) return;
    Outputs out;
    std::string error;
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
    if (err == nullptr) err = ReadResponse(response, &out);
    LogIfError(TRITONSERVER_InferenceResponseDelete(response), "tensorrt_llm_bls: table response");
    std::shared_ptr<DetokTable> table;
    if (err != nullptr) {
      error = TRITONSERVER_ErrorMessage(err);
      TRITONSERVER_ErrorDelete(err);
    } else if (const Tensor* t = Find(out, "DETOKENIZER_TABLE")) {
      std::vector<std::string> items = BytesElements(t->data);
      table = std::make_shared<DetokTable>();
      std::string problem;
      if (items.empty()) {
        error = "empty DETOKENIZER_TABLE";
      } else if (!table->Parse(items[0], &problem)) {
        error = problem;
      }
    } else {
      error = "preprocessing returned no DETOKENIZER_TABLE";
    }
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->loading = false;
    if (error.empty()) {
      state_->table = std::move(table);
      state_->error.clear();
    } else {
      state_->error = error;
    }
    state_->cv.notify_all();
  }

 private:
  std::shared_ptr<State> state_;
};

std::shared_ptr<const DetokTable> TableLoader::table() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->table;
}

TRITONSERVER_Error* TableLoader::Ensure(std::chrono::seconds timeout) {
  std::unique_lock<std::mutex> lk(state_->mu);
  if (state_->table) return nullptr;
  if (!state_->loading) {
    state_->loading = true;
    state_->error.clear();
    lk.unlock();
    InferCall::Spec spec;
    spec.model = "preprocessing";
    spec.inputs = {Tensor{"QUERY", TRITONSERVER_TYPE_BYTES, {1, 1}, std::string(4, '\0')},
                   Tensor{"REQUEST_OUTPUT_LEN", TRITONSERVER_TYPE_INT32, {1, 1}, std::string(4, '\0')},
                   Tensor{"DETOKENIZER_TABLE_REQUEST", TRITONSERVER_TYPE_INT32, {1, 1}, std::string(4, '\0')}};
    int32_t one = 1, flags = skip_special_ ? 1 : 0;
    std::memcpy(&spec.inputs[1].data[0], &one, 4);
    std::memcpy(&spec.inputs[2].data[0], &flags, 4);
    spec.outputs = {"DETOKENIZER_TABLE"};
    TRITONSERVER_Error* err = InferCall::Start(server_, allocator_, std::move(spec),
                                               std::unique_ptr<bls::Responder>(new Responder(state_)));
    lk.lock();
    if (err != nullptr) {
      state_->loading = false;
      std::string msg = TRITONSERVER_ErrorMessage(err);
      TRITONSERVER_ErrorDelete(err);
      return Err(TRITONSERVER_ERROR_UNAVAILABLE,
                 Tag(kUnavailable) + "tensorrt_llm_bls: detokenizer table: preprocessing: " + msg);
    }
  }
  if (!state_->cv.wait_for(lk, timeout, [this] { return state_->table != nullptr || !state_->loading; }))
    return Err(TRITONSERVER_ERROR_UNAVAILABLE,
               Tag(kUnavailable) + "tensorrt_llm_bls: preprocessing did not send the detokenizer table yet; retry");
  if (state_->table) return nullptr;
  return Err(TRITONSERVER_ERROR_UNAVAILABLE,
             Tag(kInternal) + "tensorrt_llm_bls: detokenizer table: " + state_->error);
}

}  // namespace bls
}  // namespace tritongen
