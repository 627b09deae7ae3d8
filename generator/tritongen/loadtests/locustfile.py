"""The Locust entry point of `tritongen loadtest`: one user class, chosen by the run's protocol.

Configuration: the environment variable TRITONGEN_LOADTEST_CONFIG names a JSON file holding a
`tritongen.loadtests.workload.LocustConfig`: the Plan's load profile (`profile`, tritongen.plan.load.LoadProfile)
and the level's facts (url, level, samples_dir, tokenizer_dir, model, ...). `tritongen loadtest` writes it next to
the report. To run Locust by hand:

    TRITONGEN_LOADTEST_CONFIG=out/locust_config.json python -m locust -f loadtests/locustfile.py \
        --headless -u 4 -r 4 -t 20s --stop-timeout 120

Only the chosen class is bound at module level, because Locust runs every concrete User class it finds here.
Each process also records its own CPU time over the test, for the report's load-generator warning.
"""

from __future__ import annotations

import gevent
from locust import events
from locust.runners import MasterRunner

from tritongen.loadtests import distributed, openai_user, users
from tritongen.loadtests.metadata import ProcessCPU

_config = users.preload()
TritonUser = (users.IDS_USER_CLASSES if _config.path == "ids" else
              {**users.USER_CLASSES, "openai": openai_user.OpenAIChatUser})[_config.profile.protocol]
_cpu = ProcessCPU(_config.samples_dir)


@events.test_start.add_listener
def _cpu_start(environment, **_kwargs) -> None:
    _cpu.start()


@events.test_stop.add_listener
def _cpu_stop(environment, **_kwargs) -> None:
    _cpu.stop("master" if isinstance(environment.runner, MasterRunner) else "worker")


# Loading the tokenizer blocked the gevent hub for seconds, and libev timers count from the loop's cached
# clock: without a refresh Locust's `-t` timer, scheduled next, would fire that much too early.
gevent.get_hub().loop.update_now()
# Master/worker mode (`tritongen loadtest --workers/--master/--worker`): samples travel to the master.
events.init.add_listener(distributed.on_init)
