"""The status line of a running level counts what its sample files hold so far."""

from __future__ import annotations

import io
import time

from tritongen.loadtests.progress import Progress
from tritongen.loadtests.samples import Sample, SampleWriter, per_process_path


def _sample(i: int, tokens: int, error: str | None = None) -> Sample:
    s = Sample.begin(f"r{i}", "grpc", input_tokens=8, level=2)
    s.send_wall_ns = time.time_ns() - 500_000_000
    s.mark_response(s.send_time + 0.1, tokens=tokens)
    return s.finish("x", error)


def test_status_line_counts_requests_tokens_and_errors_read_so_far(tmp_path):
    progress = Progress("users 2", tmp_path, enabled=False, stream=io.StringIO())
    with progress, SampleWriter(per_process_path(tmp_path)) as writer:
        writer.write(_sample(1, 10))
        writer.write(_sample(2, 20, error="boom"))
        progress.read()
        assert (progress.requests, progress.errors) == (2, 1)
        writer.write(_sample(3, 30))
        progress.read()
    line = progress.line()
    assert line.startswith("users 2: ") and "3 requests" in line and "1 errors" in line
    assert progress.tokens_per_s() > 0


def test_a_torn_last_line_waits_for_the_next_read(tmp_path):
    path = per_process_path(tmp_path)
    text = _sample(1, 5).to_json() + "\n"
    path.write_text(text + text[:20])
    progress = Progress("users 1", tmp_path, enabled=False)
    progress.read()
    assert progress.requests == 1
    with open(path, "a") as f:
        f.write(text[20:])
    progress.read()
    assert progress.requests == 2
