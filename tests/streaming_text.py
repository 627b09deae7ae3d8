"""Shared material for the streaming-text tests: texts in several scripts and the shipped detokenizer module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DETOKENIZER = ROOT / "model_repository_templates" / "tensorrt_llm_bls" / "1" / "detokenizer.py"

# What the test models recite, and what their tokenizers are trained on: CJK, Cyrillic, accents, emoji
# (with a skin-tone modifier and a flag: several code points per glyph), leading spaces, tabs, newlines.
TEXT = """Привет, мир! Съешь же ещё этих мягких французских булок.
日本語のテキスト、中文文本和한국어 문장。
Café, naïve, façade, résumé, Ångström, über, señor, smörgåsbord.
Emoji: 🙂 🚀 👍🏽 🇫🇷 ok.
  Two leading spaces,\ttabs\tand
newlines.
"""
PROMPTS = ["Привет", "日本", "Café", "Emoji:", "  Two", "\ttabs"]
SAMPLES = [" Привет мир", "日本語 🙂 ok", "\tcafé\n naïve", "  two  spaces", "👍🏽🇫🇷", "中文文本和한국어"]


def load_detokenizer():
    spec = importlib.util.spec_from_file_location("tritongen_detokenizer", DETOKENIZER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
