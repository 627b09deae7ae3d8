"""The LLM-API runtime (`trtllm`): NVIDIA's llmapi Triton model (TensorRT-LLM's LLM API, PyTorch backend, no engine
build). runtime.py: the runtime; settings.py: its Plan section (and how the spec sizes it); spec.py: its spec section
(`llmapi`); dialect.py: how clients speak to its model; model.py: its model.yaml and launch command; contract.py and
sizing.py: the model's keys and tensors, and the batch sizing of the release."""

from tritongen.runtimes.llmapi import contract, dialect
from tritongen.runtimes.llmapi.model import completes_own_config, launch_command, model_yaml, model_yaml_text
from tritongen.runtimes.llmapi.runtime import RUNTIME, LlmApiRuntime
from tritongen.runtimes.llmapi.settings import LlmApiPlan, make_llmapi_plan
from tritongen.runtimes.llmapi.spec import LlmApiSection

__all__ = ["RUNTIME", "LlmApiPlan", "LlmApiRuntime", "LlmApiSection", "completes_own_config", "contract", "dialect",
           "launch_command", "make_llmapi_plan", "model_yaml", "model_yaml_text"]
