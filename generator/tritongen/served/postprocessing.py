# Shipped by tritongen. The postprocessing model of the TensorRT-LLM ensemble: token ids -> text.
"""Detokenizer step of the ensemble, with the tensor contract of TensorRT-LLM's `postprocessing` model.

TOKENS_BATCH is [batch, beams, tokens] and SEQUENCE_LENGTH [batch, beams]; OUTPUT is one text per batch entry and
beam, flat ([batch * beams]), as NVIDIA's postprocessing returns it. tritongen's ensemble and BLS do not call this
model (the BLS decodes streamed text itself, see tensorrt_llm_bls/1/detokenizer.py); it is kept for clients that
call it directly. Each call is decoded on its own: it cannot know the tokens of earlier calls.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer

from .stub import exit_with_server, leave_without_teardown, param


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server("tritongen-watch")
        config = json.loads(args["model_config"])
        # The arguments NVIDIA's postprocessing loads tokenizers with.
        self.tokenizer = AutoTokenizer.from_pretrained(param(config, "tokenizer_dir"), legacy=False,
                                                       padding_side="left", trust_remote_code=True)
        self.skip_special_tokens = param(config, "skip_special_tokens", "true").lower() in ("true", "1", "yes")

    def _one(self, request):
        tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
        lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
        tokens = tokens.reshape(tokens.shape[0], -1, tokens.shape[-1])
        lengths = lengths.reshape(tokens.shape[0], -1)
        texts = [self.tokenizer.decode(beam[: int(n)], skip_special_tokens=self.skip_special_tokens,
                                       clean_up_tokenization_spaces=False).encode("utf-8")
                 for batch_tokens, batch_lengths in zip(tokens, lengths)
                 for beam, n in zip(batch_tokens, batch_lengths)]
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", np.array(texts, dtype=np.object_))])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as err:  # one bad request must not fail the others in the batch
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"postprocessing: {err}")))
        return responses

    def finalize(self):
        # Nothing to release; the interpreter's teardown alone took seconds of every unload (stub.py).
        leave_without_teardown()
