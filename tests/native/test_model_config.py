"""The native backends' model config reader (ModelConfig in generator/tritongen/native/backend_util.h): a value
that is present but malformed is refused naming the model, the field and the value; an absent one takes its
default. A small driver compiled from tests/native/model_config_cli.cc answers each query."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_driver import build_cli


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_cli(tmp_path_factory, "model_config_cli")


def _ask(driver: Path, config: dict, *queries: tuple[str, str, str]) -> list[str]:
    text = json.dumps(config) + "\n" + "".join("\t".join(q) + "\n" for q in queries)
    return subprocess.run([str(driver)], input=text, capture_output=True, text=True, check=True).stdout.splitlines()


QUEUE = "dynamic_batching.default_queue_policy.max_queue_size"


def _queue(value) -> dict:
    return {"dynamic_batching": {"default_queue_policy": {"max_queue_size": value}}}


@pytest.mark.parametrize("config, expected", [
    (_queue("12"), "ok\t12"),  # protobuf's JSON writes 64-bit integers as strings
    (_queue(7), "ok\t7"),
    ({}, "ok\t0"),
    ({"dynamic_batching": {}}, "ok\t0"),
    (_queue("12x"), f"error\ttensorrt_llm: {QUEUE}: expected an integer, got '12x'"),
    (_queue(1.5), f"error\ttensorrt_llm: {QUEUE}: expected an integer, got '1.5'"),
    ({"dynamic_batching": {"default_queue_policy": "fifo"}},
     f"error\ttensorrt_llm: {QUEUE}: expected an integer, got '\"fifo\"'"),
])
def test_an_integer_field_is_read_or_refused_naming_model_field_and_value(driver, config, expected):
    assert _ask(driver, config, ("integer", QUEUE, "0")) == [expected]


def _params(**values: str) -> dict:
    return {"parameters": {k: {"string_value": v} for k, v in values.items()}}


def test_parameters_are_read_or_refused_naming_model_parameter_and_value(driver):
    config = _params(max_in_flight="8", ttft_ms="2.5", itl_ms="fast", max_input_tokens="-3", unfilled="${x}")
    assert _ask(driver, config,
                ("param_int", "max_in_flight", "0"), ("param_num", "ttft_ms", "50"), ("param_num", "absent", "4"),
                ("param_int", "unfilled", "5"), ("param_num", "itl_ms", "10"), ("param_int", "max_input_tokens", "0"),
                ("param_int", "ttft_ms", "0")) == [
        "ok\t8", "ok\t2.5", "ok\t4", "ok\t5",
        "error\ttensorrt_llm: parameters.itl_ms: expected a number >= 0, got 'fast'",
        "error\ttensorrt_llm: parameters.max_input_tokens: expected an integer >= 0, got '-3'",
        "error\ttensorrt_llm: parameters.ttft_ms: expected an integer >= 0, got '2.5'"]
