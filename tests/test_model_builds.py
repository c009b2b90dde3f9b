"""Which pydantic models a running worker builds (issue 31, memory and start-up CPU).

Building a model's validator and serializer costs CPU at start-up and memory for the life of the
process, so a model a worker imports but does not validate in its steady state is declared with
``defer_build=True``: it is built on first use, not at import. Only the configuration's models
(and an executor's options) are built eagerly: a worker validates them as it starts. This runs
the real ``backlog-worker run`` (drain mode, ``python`` executor, a no-op job) in a subprocess
that lists, at exit, each of this project's model classes it imported with its ``defer_build``
and whether its schema was built.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.test_cold_paths import _completed, _config, _python, _seed

pytestmark = pytest.mark.timeout(120)

#: The models a worker validates as it starts (its configuration, an executor's options):
#: built at import, as nested configuration models share their schemas when built eagerly
#: (docs/benchmarks.md: deferring them measured no less memory and no less start-up CPU).
EAGER = ("worker.config.", "plugins.python.options")

_RUN = """
import atexit, json, sys
def report():
    import pydantic
    found, stack = [], [pydantic.BaseModel]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.split(".")[0] in ("worker", "tracker_client", "plugins"):
                validator = type(sub.__dict__.get("__pydantic_validator__")).__name__
                found.append([
                    f"{sub.__module__}.{sub.__qualname__}",
                    bool(sub.model_config.get("defer_build")),
                    not validator.startswith("Mock"),
                ])
    print(json.dumps(sorted(found)))
atexit.register(report)
import plugins.api
async def job(ctx):
    return plugins.api.Transition()
sys.modules["noop_job"] = type(sys)("noop_job")
sys.modules["noop_job"].run = job
sys.argv = ["backlog-worker", "run", "--config", sys.argv[1]]
from worker.cli import main
main()
"""


@pytest.mark.slow
def test_a_worker_builds_at_import_only_the_models_it_validates_as_it_starts(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db, 3)
    proc = _python(_RUN, _config(tmp_path, f"sqlite:///{db}"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _completed(db) == 3  # it really claimed, ran and transitioned every task
    models = json.loads(proc.stdout.splitlines()[-1])
    names = {name for name, _, _ in models}
    assert {"tracker_client.models.Task", "worker.config.models.Config"} <= names
    eager = [name for name, deferred, _ in models if not deferred and not name.startswith(EAGER)]
    assert eager == []  # a model built at import by every worker, whether it uses it or not
    # and much of what it imports it never builds: the wire and answer models of other calls
    unbuilt = [name for name, _, built in models if not built]
    assert len(unbuilt) > len(models) // 3, models
    # while the models it never builds are not even created (tracker_client.cold_models)
    assert not names & {
        "tracker_client.models.TaskDetail",
        "tracker_client.models.Health",
        "tracker_client.observe_models.Span",  # tracker_client.observe_cold
    }


#: The modules whose many models every worker creates at import: their annotations are objects
#: (no ``from __future__ import annotations``), so pydantic reads them as they are instead of
#: compiling and evaluating each field's string against a merged namespace, ~14 % of creating
#: a model (docs/benchmarks.md: ~3 ms of a worker's start-up CPU over these ~90 models).
OBJECT_ANNOTATIONS = (
    "tracker_client.models",
    "tracker_client.contract.wire_models",
    "tracker_client.contract.batch_models",
    "tracker_client.ops_models",
    "tracker_client.observe_models",
    "tracker_client.schedule_models",
    "worker.config.models",
    "worker.config.telemetry",
)


@pytest.mark.parametrize("module_name", OBJECT_ANNOTATIONS)
def test_the_models_a_worker_creates_at_import_are_annotated_with_objects(
    module_name: str,
) -> None:
    import importlib
    import inspect

    import pydantic

    module = importlib.import_module(module_name)
    models = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, pydantic.BaseModel)
        and value.__module__ == module_name
    ]
    assert models, module_name
    strings = {
        f"{model.__name__}.{field}": annotation
        for model in models
        for field, annotation in inspect.get_annotations(model).items()
        if isinstance(annotation, str)
    }
    assert strings == {}
