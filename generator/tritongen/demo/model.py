"""A tiny Llama-architecture checkpoint and BPE tokenizer, made locally in seconds.

Nothing is downloaded: the tokenizer is trained on a small built-in corpus and the weights are random but
seeded, so the same call always writes the same model. The result loads with
AutoModelForCausalLM / AutoTokenizer.from_pretrained(DIR), the same code path a real checkpoint takes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# torch, transformers and tokenizers (several seconds of CPU to import) are imported where the model is made:
# make_demo_model returns at once for a checkpoint that exists (`tritongen demo` a second time) without them.

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
TOKENIZERS = ("bytelevel", "sentencepiece")
"""bytelevel: byte-level BPE (GPT-2 / Llama-3 style). sentencepiece: BPE over "▁"-marked words with byte fallback
and a decoder that drops the first leading space (Llama-2 / Mistral style, as their tokenizer.json is built)."""
# A plain role-tagged chat template, so the OpenAI frontend's chat endpoint works on the demo model as on a real
# instruct model (the frontend renders it; preprocessing only tokenizes).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def train_tokenizer(kind: str = "bytelevel", vocab_size: int = 512, corpus: str = _CORPUS):
    """Train a tokenizer of `kind` on `corpus` and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = corpus.splitlines() * 4
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    elif kind == "sentencepiece":
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        # A small alphabet leaves rare characters to the <0xNN> byte tokens, as SentencePiece's byte fallback does.
        # The alphabet is chosen here, not by the trainer's limit_alphabet alone: the trainer breaks frequency ties
        # in hash order, so its own cut (and with it every byte-token chain) would change from run to run.
        alphabet = _alphabet(tok.normalizer, lines, 64)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size - 256, show_progress=False, special_tokens=SPECIAL_TOKENS,
                                      initial_alphabet=alphabet, limit_alphabet=len(alphabet))
    else:
        raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, not {kind!r}")
    tok.train_from_iterator(lines, trainer=trainer)
    if kind == "sentencepiece":
        # The byte tokens are ordinary vocabulary entries (not special tokens, which decoding may skip).
        data = json.loads(tok.to_str())
        vocab = data["model"]["vocab"]
        for i in range(256):
            vocab.setdefault(f"<0x{i:02X}>", len(vocab))
        tok = Tokenizer.from_str(json.dumps(data))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )


def _alphabet(normalizer, lines: list[str], size: int) -> list[str]:
    """The `size` most frequent characters of the normalized `lines`; ties go to the lower code point."""
    counts = Counter(ch for line in lines for ch in normalizer.normalize_str(line))
    return sorted(counts, key=lambda ch: (-counts[ch], ch))[:size]


def _recite(model, tokenizer, text: str) -> None:
    """Make greedy decoding recite `text`: each token is followed by the token after its first occurrence.

    Embeddings are one-hot, attention and MLP add nothing (zero output projections), so the last hidden state
    names the current token and the output head maps it to its successor. Multi-byte characters that the
    tokenizer splits over several tokens then come out of the model split the same way.
    """
    import torch

    ids = tokenizer.encode(text, add_special_tokens=False)
    successor: dict[int, int] = {}
    for current, following in zip(ids, ids[1:] + ids[:1]):
        successor.setdefault(current, following)
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :vocab].copy_(torch.eye(vocab))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head = torch.zeros(vocab, hidden)
        for token in range(vocab):
            head[successor.get(token, ids[0]), token] = 1.0
        model.lm_head.weight.copy_(head)


def make_demo_model(out_dir: str | Path, *, seed: int = 0, vocab_size: int = 512, hidden_size: int = 64,
                    layers: int = 2, heads: int = 4, kv_heads: int = 2, force: bool = False,
                    tokenizer: str = "bytelevel", recite: str | None = None, max_positions: int = 2048) -> Path:
    """Write a tiny LlamaForCausalLM + tokenizer to `out_dir` (atomically) and return the path.

    `tokenizer` picks one of TOKENIZERS. With `recite`, the tokenizer is trained on that text too and the weights
    make greedy decoding continue it (see `_recite`); the hidden size grows to the vocabulary size for that.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    if out.exists() and not force:
        if (out / "config.json").is_file():
            return out
        raise FileExistsError(f"{out} exists and is not a demo model; pass force=True or choose another folder")
    tok = train_tokenizer(tokenizer, vocab_size, _CORPUS + (recite or ""))
    if recite:
        hidden_size = -(-len(tok) // (2 * heads)) * 2 * heads  # one-hot embeddings; even head size for RoPE
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, tie_word_embeddings=False, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Random weights give near-uniform logits; a sharper output head makes greedy and sampled text vary by
    # prompt, which is what the tests and the demo need to tell requests apart.
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    if recite:
        _recite(model, tok, recite)
    write_folder(out, lambda tmp: (model.save_pretrained(tmp, safe_serialization=True), tok.save_pretrained(tmp)))
    return out


def write_folder(out: Path, write: Callable[[Path], object]) -> None:
    """`write` fills a temporary folder beside `out`, which then replaces `out`: a failed write leaves nothing
    half-written and the old folder in place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write(tmp)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
