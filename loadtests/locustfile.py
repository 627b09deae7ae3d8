"""Locust entry point for running tritongen's load test by hand from a checkout.

The load-test code is the package `tritongen.loadtests` (generator/tritongen/loadtests/); `tritongen loadtest`
runs that package's own locustfile. This file only binds the same user class, so that

    TRITONGEN_LOADTEST_CONFIG=out/locust_config.json python -m locust -f loadtests/locustfile.py \
        --headless -u 4 -r 4 -t 20s --stop-timeout 120

runs exactly what `tritongen loadtest` runs (the config JSON is the one it writes next to its report).
"""

from tritongen.loadtests.locustfile import TritonUser  # noqa: F401  (Locust runs the User classes found here)
