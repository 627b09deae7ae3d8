"""The tokenizer-info file of the tensorrt_llm model's guided decoding (its `xgrammar_tokenizer_info_path`).

The C++ backend builds XGrammar's vocabulary from this JSON file, not from a tokenizer. Its format is what
NVIDIA/TensorRT-LLM's examples/generate_xgrammar_tokenizer_info.py writes (at 7ed07f06, upstream): the dump of
tensorrt_llm.llmapi.tokenizer._xgrammar_tokenizer_info(AutoTokenizer) (tokenizer.py at 89fd9b74): `encoded_vocab`
(the vocabulary's tokens sorted by id), `tokenizer_str` (the fast tokenizer's JSON) and `stop_token_ids`
([eos_token_id]). tritongen writes it into the engine folder, next to the engine that the model loads: the engine
build runs this file as a script in the build container (`command`), and render writes it for an engine that lacks
it (`write`). The script needs only transformers, so it runs in the TensorRT-LLM container and here alike.
"""

import json
import sys
from pathlib import Path

FILE = "xgrammar_tokenizer_info.json"


def tokenizer_info(tokenizer) -> dict:
    """The file's content for a transformers fast tokenizer."""
    vocab = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    return {"encoded_vocab": vocab, "tokenizer_str": tokenizer.backend_tokenizer.to_str(),
            "stop_token_ids": [tokenizer.eos_token_id]}


def write(tokenizer_dir, out_dir) -> Path:
    """Write the file for the tokenizer in `tokenizer_dir` into `out_dir`; its path."""
    from transformers import AutoTokenizer

    out = Path(out_dir) / FILE
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(tokenizer_info(AutoTokenizer.from_pretrained(str(tokenizer_dir)))))
    partial.replace(out)
    return out


def command(python: str, tokenizer_dir: str, out_dir: str) -> list:
    """argv that writes the file with `python` (this module's source as the script: nothing of tritongen needs to
    be installed where it runs)."""
    return [python, "-c", Path(__file__).read_text(), tokenizer_dir, out_dir]


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2])
