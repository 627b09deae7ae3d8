# Shipped by tritongen. The tensorrt_llm_bls model: the ensemble's pipeline as business logic scripting.
"""tokenize -> tensorrt_llm -> detokenize in one python model, with the `tensorrt_llm_bls` tensor contract.

Unlike the ensemble, a BLS request is one request end to end, so cancellation reaches the LLM, and with
`accumulate_tokens` each streamed response carries the text of all tokens so far (decoded together, so
multi-byte characters split across tokens come out whole). Each instance serves one request at a time:
set the instance count to the concurrency you expect (the engine's max batch size).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# BLS input -> (model, input) it feeds
TO_PREPROCESSING = {"text_input": "QUERY", "max_tokens": "REQUEST_OUTPUT_LEN", "bad_words": "BAD_WORDS_DICT",
                    "stop_words": "STOP_WORDS_DICT", "end_id": "END_ID", "pad_id": "PAD_ID",
                    "embedding_bias_words": "EMBEDDING_BIAS_WORDS", "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS"}
PASSED_TO_LLM = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "temperature": "temperature",
                 "length_penalty": "len_penalty", "repetition_penalty": "repetition_penalty",
                 "min_tokens": "min_tokens", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty", "seed": "seed", "beam_width": "beam_width",
                 "num_return_sequences": "num_return_sequences", "exclude_input_in_output": "exclude_input_in_output",
                 "return_num_input_tokens": "return_num_input_tokens",
                 "return_num_output_tokens": "return_num_output_tokens", "stream": "streaming"}
FROM_PREPROCESSING = {"INPUT_ID": "input_ids", "REQUEST_INPUT_LEN": "input_lengths",
                      "REQUEST_OUTPUT_LEN": "request_output_len", "OUT_END_ID": "end_id", "OUT_PAD_ID": "pad_id",
                      "STOP_WORDS_IDS": "stop_words_list", "BAD_WORDS_IDS": "bad_words_list"}
LLM_OUTPUTS = ("num_input_tokens", "num_output_tokens")


def _param(config, key, default=None):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return default if value in ("", None) or value.startswith("${") else value


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.accumulate = _param(config, "accumulate_tokens", "false").lower() == "true"
        self.llm_name = _param(config, "tensorrt_llm_model_name", "tensorrt_llm")

    def _call(self, model, inputs, outputs):
        response = pb_utils.InferenceRequest(model_name=model, inputs=inputs,
                                             requested_output_names=list(outputs)).exec()
        if response.has_error():
            raise pb_utils.TritonModelException(f"{model}: {response.error().message()}")
        return {name: pb_utils.get_output_tensor_by_name(response, name) for name in outputs}

    def _text(self, tokens):
        lengths = np.array([[tokens.shape[-1]]], dtype=np.int32)
        out = self._call("postprocessing", [pb_utils.Tensor("TOKENS_BATCH", tokens.reshape(1, 1, -1)),
                                            pb_utils.Tensor("SEQUENCE_LENGTH", lengths)], ["OUTPUT"])
        return out["OUTPUT"].as_numpy().reshape(-1)

    def _run(self, request, send):
        pre_inputs = [pb_utils.Tensor(TO_PREPROCESSING[name], tensor.as_numpy())
                      for name in TO_PREPROCESSING
                      if (tensor := pb_utils.get_input_tensor_by_name(request, name)) is not None]
        pre = self._call("preprocessing", pre_inputs, FROM_PREPROCESSING)
        llm_inputs = [pb_utils.Tensor(target, pre[name].as_numpy()) for name, target in FROM_PREPROCESSING.items()]
        for name, target in PASSED_TO_LLM.items():
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                llm_inputs.append(pb_utils.Tensor(target, tensor.as_numpy()))
        stream = pb_utils.get_input_tensor_by_name(request, "stream")
        streaming = self.decoupled and stream is not None and bool(stream.as_numpy().reshape(-1)[0])
        llm = pb_utils.InferenceRequest(model_name=self.llm_name, inputs=llm_inputs,
                                        requested_output_names=["output_ids", "sequence_length", *LLM_OUTPUTS])
        # The LLM is decoupled exactly when this model is (both follow serving.streaming).
        responses = llm.exec(decoupled=True) if self.decoupled else [llm.exec()]
        accumulated = np.zeros((0,), dtype=np.int32)
        for response in responses:
            if request.is_cancelled():
                cancel = getattr(responses, "cancel", None)  # stops the LLM request where the backend supports it
                if cancel is not None:
                    cancel()
                return
            if response.has_error():
                raise pb_utils.TritonModelException(f"{self.llm_name}: {response.error().message()}")
            ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
            if ids is None:  # the empty final response of a stream
                continue
            lengths = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy().reshape(-1)
            tokens = ids.as_numpy().reshape(-1)[: int(lengths[0])]
            if streaming and self.accumulate:
                accumulated = np.concatenate([accumulated, tokens])
                tokens = accumulated
            extra = [pb_utils.Tensor(name, t.as_numpy()) for name in LLM_OUTPUTS
                     if (t := pb_utils.get_output_tensor_by_name(response, name)) is not None]
            text = self._text(tokens)
            send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", text.astype(np.object_)), *extra]))

    def execute(self, requests):
        if not self.decoupled:
            responses = []
            for request in requests:
                collected = []
                try:
                    self._run(request, collected.append)
                    responses.append(collected[-1])
                except Exception as err:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))))
            return responses
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._run(request, sender.send)
                sender.send(flags=FINAL)
            except Exception as err:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))), flags=FINAL)
        return None
