"""The synthetic runtime: a token source at a configured TTFT/ITL with the C++ model's tensors and no model
(tritongen.served.synthetic). runtime.py: the runtime; settings.py: its Plan section; spec.py: its spec section."""

from tritongen.runtimes.synthetic.runtime import (NATIVE_BACKEND, RUNTIME, SyntheticRuntime, synthetic_backend,
                                                  synthetic_parameters)
from tritongen.runtimes.synthetic.settings import SyntheticEnginePlan, SyntheticPlan
from tritongen.runtimes.synthetic.spec import SyntheticSection

__all__ = ["NATIVE_BACKEND", "RUNTIME", "SyntheticEnginePlan", "SyntheticPlan", "SyntheticRuntime", "SyntheticSection",
           "synthetic_backend", "synthetic_parameters"]
