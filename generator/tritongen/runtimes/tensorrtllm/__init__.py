"""The tensorrtllm runtime: the C++ `tensorrtllm` backend serving an engine built with trtllm-build, behind tritongen's
ensemble. runtime.py: the runtime; settings.py: its Plan section; spec.py: its spec section (`engine`); checks.py: the
engine-vs-plan checks; backend.py: the pure build, parameter and launch functions; build.py: running the build and
the engine cache; lora.py, release.py, xgrammar_info.py: LoRA adapters, the pinned release, XGrammar's vocabulary."""

from tritongen.core import Ports
from tritongen.runtimes.tensorrtllm.backend import (CONTAINER_EXAMPLES, DEFAULT_MAX_NUM_TOKENS, LLAMA_FAMILY,
                                                    build_commands, ensemble_server_command, id_groups, launch_command,
                                                    orchestrator_env, tensorrt_llm_parameters)
from tritongen.runtimes.tensorrtllm.release import TRTLLM, TrtllmRelease
from tritongen.runtimes.tensorrtllm.runtime import RUNTIME, TensorrtllmRuntime
from tritongen.runtimes.tensorrtllm.settings import BuildSettings, TensorrtllmPlan
from tritongen.runtimes.tensorrtllm.spec import EngineSection

__all__ = ["BuildSettings", "CONTAINER_EXAMPLES", "DEFAULT_MAX_NUM_TOKENS", "EngineSection", "LLAMA_FAMILY", "Ports",
           "RUNTIME", "TRTLLM", "TensorrtllmPlan", "TensorrtllmRuntime", "TrtllmRelease", "build_commands",
           "ensemble_server_command", "id_groups", "launch_command", "orchestrator_env", "tensorrt_llm_parameters"]
