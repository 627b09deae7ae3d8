"""The repository the engine-backed runtimes share: tritongen's preprocessing, postprocessing, BLS and ensemble
around the runtime's own `tensorrt_llm` model, which speaks the TensorRT-LLM C++ model's tensors
(`tritongen.contract`).

A runtime whose model speaks that contract (hf, synthetic, tensorrtllm) takes `EnsembleRepository` as its
repository role and says only what is its own: the tensorrt_llm model's backend, parameters and instances
(`llm_config`), the files of its version folder (`model_files`) and, where it knows one, the longest prompt it
accepts (`max_input_tokens`). The wiring around it is the same for every such runtime.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from tritongen import contract, served
from tritongen.core import InstanceGroup, Locations, PlanView, Renderer, ServerGroupPlan
from tritongen.runtimes.base import ModelRepository, Repository, S

__all__ = ["EnsembleRepository", "tensors"]

BLS_BACKENDS = {"native": "tritongen_bls", "python": "python"}
"""The Triton backend of tensorrt_llm_bls for each Plan.bls_backend."""


def tensors(model: str, plan: PlanView) -> tuple[list[contract.Tensor], list[contract.Tensor]]:
    """(inputs, outputs) of one model of the ensemble, with the plan's logits data type."""
    inputs, outputs = contract.MODEL_TENSORS[model]
    return ([t.resolved(plan.logits_datatype) for t in inputs], [t.resolved(plan.logits_datatype) for t in outputs])


class EnsembleRepository(Repository[S], ABC):
    """The repository of a runtime served through tritongen's ensemble (`ensemble` True)."""

    @abstractmethod
    def llm_config(self, plan: PlanView, where: Locations, group: ServerGroupPlan | None
                   ) -> tuple[str, dict[str, str], Any]:
        """(backend, parameters, instance group) of tensorrt_llm/config.pbtxt: the plan's defaults, or one server
        group's KV budget, instances and devices."""

    @abstractmethod
    def model_files(self, plan: PlanView, where: Locations, render: Renderer) -> dict[str, bytes]:
        """The files of the tensorrt_llm model's version folder (its config.pbtxt comes from `llm_config`)."""

    def max_input_tokens(self, plan: PlanView) -> str:
        """An upper bound on the prompt tokens the LLM accepts ("" when unknown): the text models turn it into a
        byte cap, so an oversized text_input is refused before it is tokenized (the LLM still checks the exact
        limit). By default the KV budget of one instance."""
        return str(plan.kv_tokens) if plan.kv_tokens else ""

    def _llm_config(self, plan: PlanView, where: Locations, group: ServerGroupPlan | None,
                    render: Renderer) -> tuple[str, bytes]:
        llm_in, llm_out = tensors("tensorrt_llm", plan)
        backend, params, instances = self.llm_config(plan, where, group)
        return backend, render.template("tensorrt_llm/config.pbtxt.j2", plan, backend=backend, inputs=llm_in,
                                        outputs=llm_out, params=params, group=instances)

    def model_repository(self, plan: PlanView, where: Locations, render: Renderer) -> ModelRepository:
        """The ensemble's models around the runtime's tensorrt_llm model. With differing server groups
        (plan.group_configs), each group also gets tensorrt_llm/configs/<group>.pbtxt (its own KV budget and
        instances), which its tritonserver selects with --model-config-name=<group>."""
        max_input_tokens = self.max_input_tokens(plan)
        files: dict[str, bytes] = {}
        pre_in, pre_out = tensors("preprocessing", plan)
        files["preprocessing/config.pbtxt"] = render.template(
            "preprocessing/config.pbtxt.j2", plan, inputs=pre_in, outputs=pre_out,
            params={"tokenizer_dir": where.tokenizer, "add_special_tokens": plan.tokenizer.add_special_tokens,
                    "max_input_tokens": max_input_tokens},
            group=InstanceGroup(kind="KIND_CPU", count=plan.preprocessing_instances))
        post_in, post_out = tensors("postprocessing", plan)
        files["postprocessing/config.pbtxt"] = render.template(
            "postprocessing/config.pbtxt.j2", plan, inputs=post_in, outputs=post_out,
            params={"tokenizer_dir": where.tokenizer, "skip_special_tokens": plan.tokenizer.skip_special_tokens},
            group=InstanceGroup(kind="KIND_CPU", count=plan.postprocessing_instances))
        # preprocessing also builds the native BLS's detokenisation table from its tokenizer (served.detok_table).
        files.update(served.model_files("preprocessing", "preprocessing/1"))
        files.update(served.model_files("postprocessing", "postprocessing/1"))

        files.update(self.model_files(plan, where, render))
        llm_backend, files["tensorrt_llm/config.pbtxt"] = self._llm_config(plan, where, None, render)
        if plan.group_configs:
            for group in plan.server_groups:
                files[f"tensorrt_llm/configs/{group.name}.pbtxt"] = self._llm_config(plan, where, group, render)[1]
        # tensorrt_llm_bls, always rendered (docs/streaming.md says why the text path lives here); `ensemble` is the
        # same BLS under NVIDIA's entry name and tensors (serving.ensemble: bls) or Triton's scheduler with
        # tensorrt_llm_bls as its only step (triton).
        bls_backend = BLS_BACKENDS[plan.bls_backend]
        bls_params = {**plan.bls_parameters, "tokenizer_dir": where.tokenizer,
                      "skip_special_tokens": plan.tokenizer.skip_special_tokens, "max_input_tokens": max_input_tokens,
                      "max_in_flight": str(plan.max_batch_size), **self.bls_parameters(plan, where)}
        bls_group = InstanceGroup(kind="KIND_CPU", count=plan.bls_instances)
        ens_in, ens_out = tensors("ensemble", plan)
        entries = [("tensorrt_llm_bls", tensors("tensorrt_llm_bls", plan))]
        if plan.ensemble_entry == "bls":
            # A client's cancellation reaches the LLM (Triton's scheduler does not pass it on), and one hop fewer.
            entries.append(("ensemble", (ens_in, ens_out)))
        else:
            files["ensemble/config.pbtxt"] = render.template("ensemble/config.pbtxt.j2", plan, inputs=ens_in,
                                                             outputs=ens_out, steps=contract.ENSEMBLE_STEPS)
            files["ensemble/1/.keep"] = b""
        for name, (bls_in, bls_out) in entries:
            files[f"{name}/config.pbtxt"] = render.template(
                "tensorrt_llm_bls/config.pbtxt.j2", plan, name=name, inputs=bls_in, outputs=bls_out,
                backend=bls_backend, params=bls_params, group=bls_group)
            # The python BLS, with the detokenizer the ids path's clients also use (tritongen.token_ids), ships
            # either way.
            files.update(served.model_files("bls", f"{name}/1"))
            # What the python BLS forwards between the models, from the contract (the native BLS compiles the
            # same tables).
            files[f"{name}/1/wiring.json"] = (json.dumps(contract.bls_wiring(), indent=1) + "\n").encode()
        entry = bls_backend if plan.ensemble_entry == "bls" else "ensemble"
        return ModelRepository(files, {"ensemble": entry, "preprocessing": "python", "postprocessing": "python",
                                       "tensorrt_llm": llm_backend, "tensorrt_llm_bls": bls_backend})
