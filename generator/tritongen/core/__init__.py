"""The bottom room: the data the runtimes consume, and the views through which they see the Plan and the Spec.

Everything here is plain data (frozen pydantic models, dataclasses) or a `typing.Protocol`; it imports only the
standard library and pydantic. The runtimes (`tritongen.runtimes`) import these types instead of the stages above
them (plan, render, spec), so at the type level as at run time the runtimes sit below every stage that uses them:
- `tritongen.core.sections`: the Plan's parts a runtime reads or writes (tokenizer, paths, instance groups, server
  groups); `tritongen.plan.model.Plan` is made of them.
- `tritongen.core.repository`: where the serving process sees the files (`Locations`), the render stage's tools
  handed to a runtime (`Renderer`), a tritonserver's ports (`Ports`).
- `tritongen.core.views`: `PlanView` and `SpecView`, the parts of the Plan and the Spec the runtimes read, as
  Protocols that `Plan` and `Spec` satisfy.
- `tritongen.core.source`: the safe YAML reader every file-reading room shares (spec, inventory, tune); it adds
  PyYAML and `tritongen.errors` to the imports above.
"""

from tritongen.core.repository import Locations, Ports, Renderer
from tritongen.core.sections import (
    GUIDE_INPUT, GUIDE_TYPE_INPUT, GUIDE_TYPES, AdapterPlan, InstanceGroup, PathsPlan, ServerGroupPlan,
    StructuredOutputPlan, TokenizerPlan,
)
from tritongen.core.views import PlanView, SpecView

__all__ = ["GUIDE_INPUT", "GUIDE_TYPES", "GUIDE_TYPE_INPUT", "AdapterPlan", "InstanceGroup", "Locations", "PathsPlan",
           "PlanView", "Ports", "Renderer", "ServerGroupPlan", "SpecView", "StructuredOutputPlan", "TokenizerPlan"]
