"""A tiny Llama-architecture checkpoint and BPE tokenizer, made locally in seconds.

Nothing is downloaded: the tokenizer is trained on a small built-in corpus and the weights are random but
seeded, so the same call always writes the same model. The result loads with
AutoModelForCausalLM / AutoTokenizer.from_pretrained(DIR), the same code path a real checkpoint takes.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

_CORPUS = """\
Triton Inference Server serves models over HTTP and gRPC.
An ensemble chains a tokenizer, a language model and a detokenizer.
In-flight batching lets new requests join a running batch at every decode step.
The KV cache keeps keys and values of earlier tokens so each step only computes one new token.
Dynamic batching groups requests that arrive close together.
A platform team deploys many models on many GPUs and checks each one under load.
MIG splits one GPU into isolated instances with their own memory and compute.
Streaming returns tokens as soon as they are generated.
The quick brown fox jumps over the lazy dog.
Once upon a time there was a small model that answered every question with a story.
Latency, throughput and goodput tell whether a deployment meets its objectives.
"""

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
# A plain role-tagged chat template, so the OpenAI frontend's chat endpoint works on the demo model as on a real
# instruct model (the frontend renders it; preprocessing only tokenizes).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines() * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )


def make_demo_model(out_dir: str | Path, *, seed: int = 0, vocab_size: int = 512, hidden_size: int = 64,
                    layers: int = 2, heads: int = 4, kv_heads: int = 2, force: bool = False) -> Path:
    """Write a tiny LlamaForCausalLM + tokenizer to `out_dir` (atomically) and return the path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    if out.exists() and not force:
        if (out / "config.json").is_file():
            return out
        raise FileExistsError(f"{out} exists and is not a demo model; pass force=True or choose another folder")
    tokenizer = _train_tokenizer(vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Random weights give near-uniform logits; a sharper output head makes greedy and sampled text vary by
    # prompt, which is what the tests and the demo need to tell requests apart.
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
