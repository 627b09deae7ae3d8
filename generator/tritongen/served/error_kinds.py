# Shipped by tritongen. The kinds of request errors tritongen's own models report, and their tag.
"""Request error kinds, defined once for the models tritongen ships and for the OpenAI frontend that reads them.

Triton errors are text only (a streamed response's error is a string), so the kind travels inside the message as
a leading tag, `[kind] ` or `[kind:input] `, where `input` is the name of the model input the error concerns:

    [bad_request:runtime_top_p] tensorrt_llm (hf): runtime_top_p: 2.0 is outside [0, 1]
    [context_length_exceeded:input_ids] tensorrt_llm (hf): input_ids: 5000 tokens exceed the model's limit ...
    [overloaded] Exceeds maximum queue size: tensorrt_llm_bls holds 8 requests per instance ...

Kinds: `bad_request` (the request is wrong; the input named, when one is), `context_length_exceeded` (the prompt
does not fit the model), `overloaded` (at capacity; retry later), `unavailable` (the model cannot serve now, e.g.
it is shutting down) and `internal` (a fault of the server, not of the request). A model that passes on the error
of a model it called keeps that error's tag in front (`wrap`). An error with no tag comes from code tritongen does
not own (Triton core, NVIDIA's TensorRT-LLM backend and llmapi model, transformers).

The native backends (generator/tritongen/native/error_kinds.h) spell the same tags; tests check both agree.
Render ships this module beside each python model that imports it (tritongen.served.SHIPPED), so it imports
nothing but the standard library.
"""

import re

BAD_REQUEST = "bad_request"
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
OVERLOADED = "overloaded"
UNAVAILABLE = "unavailable"
INTERNAL = "internal"
KINDS = (BAD_REQUEST, CONTEXT_LENGTH_EXCEEDED, OVERLOADED, UNAVAILABLE, INTERNAL)

# A tag anywhere in a message: Triton core may put its own words in front ("in ensemble 'ensemble', ...").
_TAG = re.compile(r"\[(" + "|".join(KINDS) + r")(?::([A-Za-z0-9_.]+))?\] ")


def tag(kind, input_name=None):
    """The tag that starts a message of this kind: `[kind] ` or `[kind:input] `."""
    if kind not in KINDS:
        raise ValueError(f"unknown error kind {kind!r}; known: {', '.join(KINDS)}")
    return f"[{kind}:{input_name}] " if input_name else f"[{kind}] "


def tagged(kind, message, input_name=None):
    """`message` with the tag of `kind` in front."""
    return tag(kind, input_name) + message


def parse(message):
    """(kind, input name or None, message without the tag) of the first tag in `message`; None without one."""
    found = _TAG.search(message)
    if found is None:
        return None
    return found.group(1), found.group(2), message[:found.start()] + message[found.end():]


def wrap(prefix, message, kind=None):
    """`prefix: message` for an error passed on from another model, its tag (if any) kept in front; an untagged
    message gets the tag of `kind`, or none when `kind` is None (an error whose kind this caller cannot tell)."""
    found = _TAG.match(message)
    if found is not None:
        return f"{found.group(0)}{prefix}: {message[found.end():]}"
    return f"{tag(kind)}{prefix}: {message}" if kind else f"{prefix}: {message}"


class RequestError(ValueError):
    """A request a model refuses or cannot finish; str() is the message that goes into the Triton error, tagged
    with `kind` (kind None: `message` as it is, e.g. another model's error passed on with `wrap`)."""

    def __init__(self, message, kind=BAD_REQUEST, input_name=None):
        super().__init__(tagged(kind, message, input_name) if kind else message)
