import ast
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.devtools import CHROMIUM_ARGS, chromium_path
from attnviz.pretrained import MODELS, ModelRegistry, PretrainedModel
from attnviz.server.main import create_app
from fastapi.testclient import TestClient

from tests import REPO_ROOT
from tests.pretrained.support import require_pretrained_extra
from tests.support.browser import HANG_MS, SHARED_CONTEXTS

# The local Rays the Ray tests start (tests/server/test_ray_serve.py,
# tests/pretrained/test_atlas_ray.py) send no usage statistics: nothing leaves the machine.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# torch on one thread in every test process and in the servers they start (which inherit the
# environment; a server's lifespan sets ATTNVIZ_TORCH_THREADS): four workers and their servers
# share two cores, where OpenMP's threads spin waiting for each other. Measured on 189 torch-
# heavy tests on four workers: 302 s and 523 CPU-s on every core's thread, 215 s and 363 CPU-s
# on one (docs/development.md). Set OMP_NUM_THREADS to run them on more.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ATTNVIZ_TORCH_THREADS", os.environ["OMP_NUM_THREADS"])
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

PACKAGED_MODEL_FIXTURES = frozenset(
    {
        ("tests.conftest", "client"),  # the app's lifespan loads every packaged model
        ("tests.conftest", "minilm"),
        ("tests.pretrained.test_decoders", "smollm2"),
        ("tests.pretrained.test_speech", "whisper_dir"),
        ("tests.server.test_model_families_api", "smollm2"),
        ("tests.server.test_media_api", "media"),  # MiniLM, and Whisper converted
        ("tests.server.conftest", "api"),  # create_app() loads every packaged model
        ("tests.server.test_any_json", "api"),
        ("tests.server.test_fuzz", "ready_models"),
    }
)
"""(module, name) of the fixtures that load a packaged model (MiniLM, SmolLM2, Whisper):
the tests using them, directly or through another fixture, are marked ``models``. A run
that leaves ``models`` out (``make test-fast``) fails any test that loads one anyway
(:func:`pytest_configure`): a fixture missing here shows at once."""

LONGEST_FIRST = (
    "browser/test_long_inputs.py",  # 250 s of a worker
    "server/test_fuzz.py",  # 241
    "browser/test_models_page.py",  # 230
    "packaging/test_cli.py",  # 211
    "pretrained/test_decoders.py",  # 204
    "browser/test_models_explorer.py",  # 153
    "browser/test_zoom.py",  # 135
    "browser/test_media_page.py",  # 114
    "browser/test_views.py",  # 109
    "pretrained/test_tile_kernel.py",  # 96
    "pretrained/test_atlas_shards.py",  # 96
    "pretrained/test_vision_language.py",  # 86
    "browser/test_links.py",  # 86
    "pretrained/test_heads_smollm2.py",  # 84
    "packaging/test_processes.py",  # 80
    "pretrained/test_atlas_corpus.py",  # 79
    "browser/test_page.py",  # 75
    "pretrained/test_speech.py",  # 71
    "browser/test_atlas_page.py",  # 71
    "server/test_disconnect.py",  # 69
    "attention/test_cache.py",  # 65
    "server/test_any_json.py",  # 64
)
"""The test files that take longest (seconds of one worker, ``make test``'s four workers on
two cores, at 878dc4f), run first, longest first; the other files follow in the order
collected. pytest-xdist hands a worker its next file as it runs out (``--dist loadfile``);
by default it starts the files with the most tests first (``--loadscope-reorder``), so
these few-test files started last and the run ended on one or two workers with the other
cores idle. :func:`pytest_configure` turns that off (as ``--no-loadscope-reorder``): this
order is the order the workers get the files. A file missing here only runs later; a file
renamed is simply not found."""

PACKAGED_LOADS: list[str] = []
"""What loaded a packaged model in a run that leaves ``models`` out: the test and the model."""


def pytest_configure(config: pytest.Config) -> None:
    """In a run whose ``-m`` leaves ``models`` out, make loading a packaged model fail.

    AttnViz's loaders (a folder, a GGUF file, a CTranslate2 Whisper) refuse any path inside
    an installed packaged model and note the test; :func:`packaged_models_stay_out` fails it.

    Under pytest-xdist, its workers get the files in the order collected
    (:data:`LONGEST_FIRST`), not those with the most tests first.
    """
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if "not models" not in (config.option.markexpr or ""):
        return
    from attnviz.pretrained import loading

    roots = [path.resolve() for m in loading.PACKAGED_MODELS if (path := m.locate()) is not None]

    def guarded(load: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(load)
        def refusing(name: str, path: Path, *args: Any, **kwargs: Any) -> Any:
            where = Path(path).resolve()
            if any(where == root or root in where.parents for root in roots):
                test = os.environ.get("PYTEST_CURRENT_TEST", "outside a test")
                PACKAGED_LOADS.append(f"{test}: {name} ({path})")
                raise RuntimeError(f"{name}: a packaged model, in a run without 'models'")
            return load(name, path, *args, **kwargs)

        return refusing

    import attnviz.pretrained as package

    for function in ("load_model_dir", "load_gguf", "load_ctranslate2_whisper"):
        original = getattr(loading, function)
        setattr(loading, function, guarded(original))
        if getattr(package, function, None) is original:  # re-exported: attnviz.pretrained.X
            setattr(package, function, getattr(loading, function))


@pytest.fixture(autouse=True)
def packaged_models_stay_out() -> Iterator[None]:
    """Fail a test during which a packaged model was loaded where ``models`` is left out."""
    before = len(PACKAGED_LOADS)
    yield
    if len(PACKAGED_LOADS) > before:
        pytest.fail(
            "a packaged model was loaded in a run that leaves 'models' out: "
            f"{PACKAGED_LOADS[before:]}; add its fixture to PACKAGED_MODEL_FIXTURES "
            "(tests/conftest.py)"
        )


def _uses_packaged_model(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name in item.fixturenames:  # type: ignore[attr-defined]
        definitions = info.name2fixturedefs.get(name) or ()
        if definitions:  # the last definition is the one the test gets
            module = definitions[-1].func.__module__
            if (module, name) in PACKAGED_MODEL_FIXTURES:
                return True
    return False


@functools.cache
def ray_pass_files() -> frozenset[str]:
    """The files ``make test``'s Ray pass collects (scripts/suite.py's ``RAY_FILES``, read
    from its source: the script is not imported), relative to tests/."""
    tree = ast.parse((REPO_ROOT / "scripts" / "suite.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "RAY_FILES":
            return frozenset(name.removeprefix("tests/") for name in ast.literal_eval(node.value))
    raise AssertionError("scripts/suite.py sets no RAY_FILES")


def relative_to_tests(item: pytest.Item) -> Path:
    """The item's file relative to tests/ (its absolute path when it lies elsewhere)."""
    tests = REPO_ROOT / "tests"
    return item.path.relative_to(tests) if item.path.is_relative_to(tests) else item.path


def check_ray_files(items: list[pytest.Item]) -> None:
    """Refuse a test marked ``ray`` in a file that ``make test``'s Ray pass does not collect.

    Raises:
        pytest.UsageError: naming the test and what to do.
    """
    for item in items:
        if item.get_closest_marker("ray") is None:
            continue
        if relative_to_tests(item).as_posix() not in ray_pass_files():
            raise pytest.UsageError(
                f"{item.nodeid} is marked ray: add its file to RAY_FILES in scripts/suite.py, "
                "or make test's Ray pass, which collects those files alone, leaves it out"
            )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tiers by where a test lives and what it loads (``make test-fast`` runs
    ``-m "not slow and not browser and not models and not cuda"``); put the files of
    :data:`LONGEST_FIRST` first.

    * ``browser``: everything under tests/browser/ (real Chromium, real uvicorn), and
      any test using the ``browser`` fixture;
    * ``models``: a test that uses a packaged model's fixture (:data:`PACKAGED_MODEL_FIXTURES`);
    * ``slow`` is marked where the test is (``pytestmark`` of a file, or a decorator):
      virtual environments, server processes, subprocesses, fuzzing, property tests.
    """
    first = {name: rank for rank, name in enumerate(LONGEST_FIRST)}  # a stable sort:
    items.sort(key=lambda item: first.get(relative_to_tests(item).as_posix(), len(first)))
    check_ray_files(items)
    for item in items:
        if relative_to_tests(item).parts[0] == "browser" or "browser" in item.fixturenames:  # type: ignore[attr-defined]
            item.add_marker(pytest.mark.browser)
        if _uses_packaged_model(item):
            item.add_marker(pytest.mark.models)


@pytest.fixture
def client() -> Iterator[TestClient]:
    """The app in-process; its pretrained models (loaded in the background) are ready.

    One per test: the lifespan's registry (MODELS), compute pool, response and module
    caches are process-wide, and a test that starts an app of its own, or clears the
    registry, would stop or empty them under a client shared by the module."""
    with TestClient(create_app()) as test_client:
        assert MODELS.wait(300), "the pretrained models did not load within 300 s"
        yield test_client


TEST_CHROMIUM_ARGS = ["--renderer-process-limit=1"]
"""The session browser's pages share one renderer process, which each new page reuses,
instead of starting a renderer of its own: a page of / or /models then costs Chromium 0.63
CPU-s instead of 0.82 (20 pages each way, back to back; docs/development.md). A test's pages
open at once (a link in a second tab) take turns on that renderer's main thread."""


# One Playwright per test session (a second sync Playwright in the same thread fails):
# shared by the browser tests and the export test.
@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    executable = chromium_path()
    if executable is None:
        message = "Debian's chromium is not installed (make browser installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; with CI=true the browser tests must run")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Launched with a persistent context (a profile in a temporary folder): the shared
        # context of the pages that need no options of their own (new_page), whose disk
        # cache keeps the static files and V8's compiled code between tests; .browser
        # opens the other contexts (tests/support/browser.py: opened_page).
        shared = playwright.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"),
            executable_path=executable,
            args=[*CHROMIUM_ARGS, *TEST_CHROMIUM_ARGS],
            bypass_csp=True,
            viewport={"width": 1400, "height": 950},
        )
        shared.set_default_timeout(HANG_MS)  # a bound on a hang: a busy machine draws slowly
        launched = shared.browser
        SHARED_CONTEXTS[id(launched)] = shared
        yield launched
        del SHARED_CONTEXTS[id(launched)]
        shared.close()


@pytest.fixture
def pretrained_extra() -> None:
    """Skip without the pretrained extra; with CI=true (make test installs it) fail."""
    require_pretrained_extra()


@pytest.fixture(scope="session")
def minilm() -> PretrainedModel:
    """The packaged all-MiniLM-L6-v2, loaded by AttnViz's registry (transformers inside)."""
    require_pretrained_extra()
    registry = ModelRegistry()
    registry.configure([], packaged=["all-MiniLM-L6-v2"])
    registry.load()
    return registry.get("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def reference_bert(minilm: PretrainedModel):  # type: ignore[no-untyped-def]
    """transformers' BertModel from the same directory, eager attention, offline."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel

    model = BertModel.from_pretrained(
        str(minilm.path), attn_implementation="eager", local_files_only=True
    )
    return model.eval()
