#include "bls/config.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "bls/wiring.h"

namespace tritongen {
namespace bls {
namespace {

bool Truthy(std::string v) {
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v == "true" || v == "1" || v == "yes" || v == "t";
}

// The inputs and outputs this backend knows: what it forwards (wiring.h) and what it reads itself.
std::set<std::string> KnownInputs() {
  std::set<std::string> names = {"num_draft_tokens", "use_draft_logits"};
  for (const auto& [from, to] : kToPreprocessing) names.insert(from);
  for (const auto& [from, to] : kToLlm) names.insert(from);
  return names;
}

}  // namespace

TRITONSERVER_Error* BlsConfig::Read(TRITONBACKEND_Model* model, BlsConfig* out) {
  ModelConfig config;
  TG_RETURN_IF_ERROR(ModelConfig::Read(model, &config));
  out->name = config.model();
  out->llm_name = config.Parameter("tensorrt_llm_model_name", "tensorrt_llm");
  if (!config.Parameter("tensorrt_llm_draft_model_name", "").empty())
    return InvalidArg(out->name + ": the native BLS does not run speculative decoding (a draft model is "
                      "configured); render with serving.bls: python");
  out->accumulate = Truthy(config.Parameter("accumulate_tokens", "false"));
  out->skip_special_tokens = Truthy(config.Parameter("skip_special_tokens", "true"));
  out->decoupled = config.Decoupled();
  out->lora_dir = config.Parameter("lora_dir", "");
  TG_RETURN_IF_ERROR(config.IntegerParameter("max_input_tokens", "0", &out->max_input_tokens));
  int64_t in_flight = 0, queue = 0;
  TG_RETURN_IF_ERROR(config.IntegerParameter("max_in_flight", "0", &in_flight));
  TG_RETURN_IF_ERROR(config.Integer({"dynamic_batching", "default_queue_policy", "max_queue_size"}, 0, &queue));
  // Triton's max_queue_size 0 is an unbounded queue: then nothing is refused here either (the LLM model's own
  // queue holds what its batch cannot run).
  out->capacity = in_flight > 0 && queue > 0 ? in_flight + queue : 0;

  const std::set<std::string> known = KnownInputs();
  const std::vector<std::string> inputs = config.TensorNames("input");
  for (const char* required : {"text_input", "max_tokens"})
    if (std::find(inputs.begin(), inputs.end(), required) == inputs.end())
      return InvalidArg(out->name + ": input " + required + " is missing from config.pbtxt; the BLS needs it");
  for (const auto& input : inputs)
    if (known.count(input) == 0)
      return InvalidArg(out->name + ": input " + input + " in config.pbtxt is not one the native BLS forwards; "
                        "remove it or render with serving.bls: python");
  const std::vector<std::string> outputs = config.TensorNames("output");
  if (std::find(outputs.begin(), outputs.end(), "text_output") == outputs.end())
    return InvalidArg(out->name + ": output text_output is missing from config.pbtxt");
  for (const auto& output : outputs)
    if (output != "text_output" && std::find(kPassedOutputs.begin(), kPassedOutputs.end(), output) == kPassedOutputs.end())
      return InvalidArg(out->name + ": output " + output + " in config.pbtxt is not one tensorrt_llm returns");
  return nullptr;
}

}  // namespace bls
}  // namespace tritongen
