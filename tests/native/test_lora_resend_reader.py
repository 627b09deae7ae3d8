"""The native BLS's LoRA cache-miss pieces (generator/tritongen/native/bls/lora_resend.h): the miss text and the
.npy reader give what the python BLS's (tritongen.served.lora_resend, numpy) give, and a file the reader cannot take
exactly is refused naming lora_task_id, the folder and the problem. A small driver compiled from
tests/native/lora_resend_cli.cc answers each query."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from cli_driver import build_cli
from tritongen.native import SOURCES
from tritongen.served.error_kinds import RequestError
from tritongen.served.lora_resend import CONFIG, WEIGHTS, adapter_tensors, cache_miss

MISS = "LoRA task {} not found in cache. Please send LoRA weights with request"
CONFIG_ROWS = np.array([[[1, 0, 4], [3, 0, 4], [1, 1, 4], [3, 1, 4]]], np.int32)


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_cli(tmp_path_factory, "lora_resend_cli", SOURCES / "bls" / "lora_resend.cc", sanitize=True)


def _ask(driver: Path, *queries: tuple[str, ...]) -> list[list[str]]:
    text = "".join("\t".join(q) + "\n" for q in queries)
    out = subprocess.run([str(driver)], input=text, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def _adapter(folder: Path, task: int, weights: np.ndarray, config: np.ndarray = CONFIG_ROWS) -> None:
    (folder / str(task)).mkdir(parents=True, exist_ok=True)
    np.save(folder / str(task) / WEIGHTS, weights)
    np.save(folder / str(task) / CONFIG, config)


def _tensors(driver: Path, lora_dir: Path, task: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    ((status, weights_meta, weights_hex, config_meta, config_hex),) = _ask(
        driver, ("adapter", str(lora_dir), str(task), str(batch)))
    assert status == "ok"
    (w_name, w_dtype, w_shape), (c_name, c_dtype, c_shape) = weights_meta.split(":"), config_meta.split(":")
    # TRITONSERVER_TYPE_FP16 and TRITONSERVER_TYPE_INT32 in Triton's enum
    assert (w_name, w_dtype, c_name, c_dtype) == ("lora_weights", "10", "lora_config", "8")
    weights = np.frombuffer(bytes.fromhex(weights_hex), np.float16).reshape([int(d) for d in w_shape.split(",")])
    config = np.frombuffer(bytes.fromhex(config_hex), np.int32).reshape([int(d) for d in c_shape.split(",")])
    return weights, config


@pytest.mark.parametrize("message", [
    MISS.format(7), "Encountered an error in forward: " + MISS.format(12345678901234), MISS.format(7) + " (rank 0)",
    "LoRA task 7 not found", "LoRA task  7 not found in cache. Please send LoRA weights with request",
    "LoRA task x not found in cache. Please send LoRA weights with request", "Cache is full", "",
    "LoRA task 1 failed; " + MISS.format(2), MISS.format(99999999999999999999999),
])
def test_the_miss_text_is_read_as_the_python_bls_reads_it(driver, message):
    (answer,) = _ask(driver, ("miss", message))
    expected = cache_miss(message)
    if expected is not None and expected >= 2**64:  # beyond a task id's uint64: no request names it
        expected = None
    assert answer == (["none"] if expected is None else ["task", str(expected)])


@pytest.mark.parametrize("stored, batch", [((1, 4, 10), 1), ((1, 4, 10), 3), ((4, 10), 2), ((2, 1, 4, 10), 1)])
def test_the_tensors_are_the_python_bls_tensors(driver, tmp_path, stored, batch):
    rng = np.random.default_rng(0)
    weights = rng.standard_normal(stored).astype(np.float16)
    _adapter(tmp_path, 2, weights, CONFIG_ROWS.reshape(*stored[:-1], 3) if len(stored) != 4
             else np.stack([CONFIG_ROWS, CONFIG_ROWS]))
    expected_weights, expected_config = adapter_tensors(str(tmp_path), 2, batch)
    got_weights, got_config = _tensors(driver, tmp_path, 2, batch)
    assert got_weights.shape == expected_weights.shape == (batch, 4, 10)
    assert got_weights.tobytes() == expected_weights.tobytes()
    assert got_config.shape == expected_config.shape and got_config.tolist() == expected_config.tolist()


def test_float32_and_int64_files_are_taken_where_they_convert_exactly(driver, tmp_path):
    exact = np.array([[[0.0, -0.0, 0.5, -2.0, 65504.0, 2.0**-14, 2.0**-24, 3 * 2.0**-24, np.inf, 1.5]]], np.float32)
    _adapter(tmp_path, 1, exact, CONFIG_ROWS[:, :1].astype(np.int64))
    weights, config = _tensors(driver, tmp_path, 1, 1)
    assert weights.tobytes() == exact.astype(np.float16).tobytes()
    assert config.tolist() == [[[1, 0, 4]]]


@pytest.mark.parametrize("weights, config, problem", [
    (np.full((1, 1, 2), 0.1, np.float32), CONFIG_ROWS[:, :1],
     "float32 element 0 is not exactly a float16 (lora_weights are float16)"),
    (np.full((1, 1, 2), 70000.0, np.float32), CONFIG_ROWS[:, :1], "float32 element 0 is not exactly a float16"),
    (np.full((1, 1, 2), 2.0**-25, np.float32), CONFIG_ROWS[:, :1], "float32 element 0 is not exactly a float16"),
    (np.ones((1, 1, 2), np.float16), np.array([[[1, 0, 2**40]]], np.int64),
     "int64 element 2 (1099511627776) is outside int32 (lora_config is int32)"),
    (np.ones((1, 1, 2), np.float64), CONFIG_ROWS[:, :1],
     "its elements are <f8; this reader takes little-endian <f2, <f4, <i4 and <i8"),
    (np.ones((1, 1, 2), ">f2"), CONFIG_ROWS[:, :1], "its elements are >f2; this reader takes little-endian"),
    (np.ones((1, 1, 2), np.int32), CONFIG_ROWS[:, :1],
     "its elements are <i4; expected <f2 (float16; float32 taken where exact)"),
    (np.asfortranarray(np.ones((1, 2, 2), np.float16)), CONFIG_ROWS[:, :2], "it is in Fortran order; expected C order"),
    (np.ones(3, np.float16), CONFIG_ROWS[:, :1], "its shape has 1 dimensions; expected [..., rows, width]"),
    (np.ones((1, 0, 2), np.float16), CONFIG_ROWS[:, :1], "it holds no elements"),
    (np.ones((1, 1, 2), np.float16), CONFIG_ROWS[:, :1, :2],
     f"{CONFIG}: its rows have 2 values; expected 3 (module id, layer, rank)"),
    (np.ones((1, 2, 2), np.float16), CONFIG_ROWS[:, :1],
     f"{CONFIG}: it has 1 rows and {WEIGHTS} has 2; expected one per weights row"),
])
def test_a_file_that_does_not_convert_exactly_is_refused_naming_task_folder_and_problem(driver, tmp_path, weights,
                                                                                          config, problem):
    _adapter(tmp_path, 3, weights, config)
    ((status, code, message),) = _ask(driver, ("adapter", str(tmp_path), "3", "1"))
    assert (status, code) == ("error", "INTERNAL")
    assert message.startswith(f"[internal] lora_task_id: 3 is not in the tensorrt_llm model's LoRA cache and the "
                              f"converted adapter in {tmp_path / '3'} cannot be sent: ")
    assert problem in message and message.endswith("; run `tritongen build` to convert the adapters again")


def _raw(path: Path, header: str, data: bytes, version: int = 1, magic: bytes = b"\x93NUMPY") -> str:
    head = header.encode("latin1")
    length = len(head).to_bytes(2 if version == 1 else 4, "little")
    path.write_bytes(magic + bytes([version, 0]) + length + head + data)
    return str(path)


def test_the_reader_takes_version_1_and_2_headers_and_refuses_what_it_cannot_read_exactly(driver, tmp_path):
    v2 = tmp_path / "v2.npy"
    with open(v2, "wb") as f:
        np.lib.format.write_array(f, np.ones((1, 3, 2), np.float16), version=(2, 0))
    h = "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2), }"
    two = np.ones(2, np.float16).tobytes()
    answers = _ask(driver, *[("npy", p) for p in [
        str(v2), _raw(tmp_path / "double-quotes.npy", '{"descr": "<i4", "fortran_order": False, "shape": (2,)}\n',
                      b"\0" * 8),
        _raw(tmp_path / "v3.npy", h, two, version=3), _raw(tmp_path / "magic.npy", h, two, magic=b"\x93NUMPZ"),
        _raw(tmp_path / "short.npy", h, two[:3]), _raw(tmp_path / "long.npy", h, two + b"\0"),
        _raw(tmp_path / "extra-key.npy", h[:-1] + "'x': 1}", two),
        _raw(tmp_path / "no-shape.npy", "{'descr': '<f2', 'fortran_order': False}", two),
        _raw(tmp_path / "one-tuple.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (2)}", two),
        _raw(tmp_path / "long-int.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (2L,)}", two),
        _raw(tmp_path / "twice.npy", "{'descr': '<f2', 'descr': '<f2', 'shape': (2,)}", two),
        _raw(tmp_path / "structured.npy", "{'descr': [('a', '<f2')], 'fortran_order': False, 'shape': (2,)}", two),
        str(tmp_path / "absent.npy"),
    ]])
    assert answers[:2] == [["ok", "<f2", "1,3,2"], ["ok", "<i4", "2"]]
    assert answers[2:] == [
        ["error", ".npy format version 3.0; this reader takes 1 and 2"],
        ["error", "not a .npy file (no \\x93NUMPY magic)"],
        ["error", "it holds 3 data bytes; its header's shape and <f2 make 4"],
        ["error", "it holds 5 data bytes; its header's shape and <f2 make 4"],
        ["error", "the header's 'x' has a value this reader does not take"],
        ["error", "the header's keys are not exactly descr, fortran_order and shape"],
        ["error", "the header's 'shape' has a value this reader does not take"],
        ["error", "the header's 'shape' has a value this reader does not take"],
        ["error", "the header names 'descr' twice"],
        ["error", "the header's 'descr' has a value this reader does not take"],
        ["error", "cannot open it"],
    ]


def test_a_truncated_header_is_refused(driver, tmp_path):
    path = tmp_path / "cut.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00\x40\x00{'descr'")
    assert _ask(driver, ("npy", str(path))) == [["error", "the header is cut off"]]


def test_a_task_without_converted_files_is_the_python_bls_error(driver, tmp_path):
    _adapter(tmp_path, 1, np.ones((1, 4, 10), np.float16))
    (tmp_path / "2").mkdir()
    np.save(tmp_path / "2" / WEIGHTS, np.ones((1, 4, 10), np.float16))  # its config is missing
    for task in (9, 2):
        with pytest.raises(RequestError) as err:
            adapter_tensors(str(tmp_path), task, 1)
        assert _ask(driver, ("adapter", str(tmp_path), str(task), "1")) == [["error", "INVALID_ARG", str(err.value)]]
