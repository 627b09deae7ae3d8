// The tensorrt_llm_bls model configuration, read and checked once at model load.
#pragma once

#include <cstdint>
#include <string>

#include "backend_util.h"

namespace tritongen {
namespace bls {

struct BlsConfig {
  std::string name;                   // the model's name, for error messages
  std::string llm_name = "tensorrt_llm";
  bool accumulate = false;
  bool skip_special_tokens = true;
  bool decoupled = false;
  int64_t max_input_tokens = 0;  // 0: unknown (no byte cap)
  std::string lora_dir;           // converted LoRA adapters, resent on a cache miss (lora_resend.h); empty: none
  int64_t capacity = 0;          // requests held at once: max_in_flight + max_queue_size (0: no limit, as max_queue_size 0)

  // Reads the model's config; INVALID_ARG naming the field when it cannot be served (a draft model, an input or
  // output this backend does not know, a required one missing).
  static TRITONSERVER_Error* Read(TRITONBACKEND_Model* model, BlsConfig* out);
};

}  // namespace bls
}  // namespace tritongen
