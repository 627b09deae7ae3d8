// The BLS's answer to a LoRA cache miss of the tensorrt_llm model: resend once with the adapter's weights.
//
// A request that names only `lora_task_id` fails in TensorRT-LLM when the task is not in its LoRA cache; NVIDIA's
// protocol (tensorrtllm_backend docs/lora.md) is that the client then sends the same request again with
// `lora_weights` and `lora_config`. The BLS is that client for the tensorrt_llm model, as the python BLS is
// (generator/tritongen/served/lora_resend.py, which cites where the error text comes from): on the miss it resends
// once with the tensors converted into the folder the model prefetches (BLS parameter lora_dir: <task id>/
// model.lora_weights.npy and model.lora_config.npy, written by `tritongen build`).
//
// Nothing here calls Triton but TRITONSERVER_ErrorNew, so tests/native/lora_resend_cli.cc drives it alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend_util.h"

namespace tritongen {
namespace bls {

inline constexpr const char* kLoraWeightsFile = "model.lora_weights.npy";
inline constexpr const char* kLoraConfigFile = "model.lora_config.npy";

// The task id of TensorRT-LLM's cache-miss error ("LoRA task <id> not found in cache. Please send LoRA weights with
// request", words in front allowed) found in `message`; false for any other message.
bool CacheMissTaskId(const std::string& message, uint64_t* task_id);

// Whether every element of the request's `lora_task_id` tensor (an integer tensor) is `task_id`.
bool AllTaskIds(const Tensor& ids, uint64_t task_id);

// An array of a .npy file: the element type as numpy spells it ("<f2"), the shape, the C-order bytes.
struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::string data;
};

// Reads a .npy file (format versions 1 and 2; C order; little-endian or byte-order-free element types). Returns an
// empty string, or what is wrong with the file.
std::string ReadNpy(const std::string& path, NpyArray* out);

// The task's converted adapter as the tensorrt_llm model takes it: `lora_weights` FP16 [batch, rows, width] and
// `lora_config` INT32 [batch, rows, 3], the first [rows, ...] block of each file repeated per batch row (as the
// python BLS shapes them). Stored float32 / int64 values are taken where they convert exactly. A missing folder or
// file is INVALID_ARG naming lora_task_id and the folder; an unreadable one is INTERNAL naming the file.
TRITONSERVER_Error* AdapterTensors(const std::string& lora_dir, uint64_t task_id, size_t batch, Tensor* weights,
                                   Tensor* config);

}  // namespace bls
}  // namespace tritongen
