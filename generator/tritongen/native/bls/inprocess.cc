#include "bls/inprocess.h"

#include <cstdlib>

namespace tritongen {
namespace bls {
namespace {

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

}  // namespace

TRITONSERVER_Error* Allocator::Create(std::unique_ptr<Allocator>* out) {
  std::unique_ptr<Allocator> a(new Allocator());
  TG_RETURN_IF_ERROR(TRITONSERVER_ResponseAllocatorNew(&a->allocator_, Alloc, Release, nullptr));
  *out = std::move(a);
  return nullptr;
}

Allocator::~Allocator() {
  if (allocator_ != nullptr) LogIfError(TRITONSERVER_ResponseAllocatorDelete(allocator_), "tensorrt_llm_bls: allocator");
}

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

InferCall::~InferCall() {
  if (request_ != nullptr) LogIfError(TRITONSERVER_InferenceRequestDelete(request_), "tensorrt_llm_bls: request");
}

void InferCall::Done() {
  // Triton holds the call through its userp from Start() on: the last of the two callbacks takes it back.
  if (pending_.fetch_sub(1) == 1) {
    std::unique_ptr<InferCall> last(this);
  }
}

void InferCall::Released(TRITONSERVER_InferenceRequest*, uint32_t flags, void* userp) {
  if (flags & TRITONSERVER_REQUEST_RELEASE_ALL) static_cast<InferCall*>(userp)->Done();
}

void InferCall::Responded(TRITONSERVER_InferenceResponse* response, uint32_t flags, void* userp) {
  auto* call = static_cast<InferCall*>(userp);
  call->responder_->OnResponse(response, flags);
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) call->Done();
}

TRITONSERVER_Error* InferCall::Start(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator, Spec spec,
                                     std::unique_ptr<Responder> responder,
                                     const std::function<void(TRITONSERVER_InferenceRequest*)>& before_send) {
  std::unique_ptr<InferCall> call(new InferCall());
  call->inputs_ = std::move(spec.inputs);
  call->responder_ = std::move(responder);
  TG_RETURN_IF_ERROR(TRITONSERVER_InferenceRequestNew(&call->request_, server, spec.model.c_str(), -1));
  TRITONSERVER_InferenceRequest* req = call->request_;
  TRITONSERVER_Error* err = spec.id.empty() ? nullptr : TRITONSERVER_InferenceRequestSetId(req, spec.id.c_str());
  for (const Tensor& t : call->inputs_) {
    if (err != nullptr) break;
    err = TRITONSERVER_InferenceRequestAddInput(req, t.name.c_str(), t.dtype, t.shape.data(), t.shape.size());
    if (err == nullptr)
      err = TRITONSERVER_InferenceRequestAppendInputData(req, t.name.c_str(), t.data.data(), t.data.size(),
                                                         TRITONSERVER_MEMORY_CPU, 0);
  }
  for (const auto& name : spec.outputs) {
    if (err != nullptr) break;
    err = TRITONSERVER_InferenceRequestAddRequestedOutput(req, name.c_str());
  }
  if (err == nullptr) err = TRITONSERVER_InferenceRequestSetReleaseCallback(req, Released, call.get());
  if (err == nullptr) err = TRITONSERVER_InferenceRequestSetResponseCallback(req, allocator, nullptr, Responded, call.get());
  if (err != nullptr) return err;
  if (before_send) before_send(req);
  err = TRITONSERVER_ServerInferAsync(server, req, nullptr);
  if (err != nullptr) return err;  // not sent: `call` deletes the request, its inputs and the responder
  call.release();
  return nullptr;
}

}  // namespace bls
}  // namespace tritongen
