"""Models named by Hugging Face id, resolved from a hand-made hub cache while offline.

The cache is laid out as huggingface_hub lays it out (``models--org--name/refs/main``
holding a commit hash, ``snapshots/<commit>/`` the files), with a tiny random GPT-2
inside, and ``HF_HUB_OFFLINE=1``: the id is served through the API, the CLI and Python,
its maps equal transformers' own eager ``output_attentions`` of the same folder, and an
id that is not cached fails with a reason saying so and how to fetch it.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from attnviz.pretrained import ModelRegistry
from attnviz.pretrained.hub import HubId, parse_hub_id

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.server.support import serving

REPO = "tiny-org/tiny-gpt2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLDER = "89abcdef0123456789abcdef0123456789abcdef"
TEXT = "the cat sat on the mat because it was tired"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hub cache with REPO at COMMIT (branch main) and at OLDER (tag v1, other weights)."""
    require_transformers()
    cache = tmp_path_factory.mktemp("hf") / "hub"
    repo = cache / ("models--" + REPO.replace("/", "--"))
    for commit, seed in ((COMMIT, 0), (OLDER, 1)):
        tiny.save_tiny("gpt2", repo / "snapshots" / commit, seed=seed)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "refs" / "v1").write_text(OLDER)
    return cache


@pytest.fixture
def offline(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    yield hub_cache


def eager_weights(folder: Path, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    import transformers

    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()
    with torch.inference_mode():
        return reference(ids, output_attentions=True).attentions  # type: ignore[no-any-return]


def test_ids_are_parsed_as_the_hub_writes_them() -> None:
    assert parse_hub_id("gpt2") == HubId("gpt2")
    assert parse_hub_id("EleutherAI/pythia-160m") == HubId("EleutherAI/pythia-160m")
    assert parse_hub_id("org/name@v1.0") == HubId("org/name", "v1.0")
    assert str(parse_hub_id("org/name@" + COMMIT)) == f"org/name@{COMMIT}"
    for not_an_id in ("/abs/path", "a/b/c", "../up", "two words", "model.gguf", "org/", ""):
        assert parse_hub_id(not_an_id) is None, not_an_id


def test_an_id_is_served_from_the_cache_offline_through_the_api(offline: Path) -> None:
    env = {
        "ATTNVIZ_MODELS": json.dumps([REPO, f"{REPO}@v1", "tiny-org/not-cached"]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
    }
    with serving(env) as client:
        listing = client.get("/api/v1/models").json()
        names = [m["name"] for m in listing["models"]]
        assert names == [REPO, f"{REPO}@v1", "tiny-org/not-cached"]
        assert listing["default"] == REPO
        info = {m["name"]: m for m in listing["models"]}
        assert info[REPO]["state"] == "ready", info[REPO]
        assert COMMIT[:12] in info[REPO]["source"]
        assert info[f"{REPO}@v1"]["state"] == "ready"
        missing = info["tiny-org/not-cached"]
        assert missing["state"] == "failed"
        assert "not in the local Hugging Face cache" in missing["error"]
        assert "HF_HUB_OFFLINE is set" in missing["error"]
        assert "hf download tiny-org/not-cached" in missing["error"]

        for name, commit in ((REPO, COMMIT), (f"{REPO}@v1", OLDER)):
            body = {"model": name, "texts": [TEXT], "sequence_index": 0}
            response = client.post("/api/v1/models/attention", json=body)
            assert response.status_code == 200, response.text
            got = torch.tensor(response.json()["attentions"])  # (N, 1, H, L, L)
            snapshot = offline / f"models--{REPO.replace('/', '--')}" / "snapshots" / commit
            ids = torch.tensor(response.json()["input_ids"])
            for layer, weights in enumerate(eager_weights(snapshot, ids)):
                torch.testing.assert_close(got[layer], weights, atol=1e-5, rtol=0)
        refused = client.post(
            "/api/v1/models/attention", json={"model": "tiny-org/not-cached", "texts": [TEXT]}
        )
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["loc"][-1] == "model"
        assert "not in the local Hugging Face cache" in refused.text


def test_an_id_is_served_from_python(offline: Path) -> None:
    from attnviz import show

    view = show(TEXT, REPO, layer=1)
    snapshot = offline / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT
    import transformers

    ids = transformers.AutoTokenizer.from_pretrained(snapshot)([TEXT], return_tensors="pt")
    expected = eager_weights(snapshot, ids["input_ids"])[1]
    torch.testing.assert_close(
        torch.as_tensor(view.maps).reshape(expected.shape), expected, atol=1e-5, rtol=0
    )
    from attnviz.attention import AttentionInputError

    with pytest.raises(AttentionInputError, match="not in the local Hugging Face cache"):
        show(TEXT, "tiny-org/not-cached")


@pytest.mark.slow  # a real server process
def test_an_id_is_served_from_the_command_line(offline: Path, tmp_path: Path) -> None:
    env = {**os.environ, "ATTNVIZ_PACKAGED_MODELS": "false", "ATTNVIZ_CACHE_DIR": str(tmp_path)}
    listed = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", "models", "--model", REPO],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{REPO}: decoder (gpt2), 2 layers x 4 heads")
    assert COMMIT[:12] in listed.stdout
    page = tmp_path / "view.html"
    exported = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", "export", "--model", REPO, "--text", TEXT,
         "--layer", "0", "--output", str(page)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert page.stat().st_size > 10_000 and REPO in page.read_text()
    missing = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", "models", "--model", "tiny-org/not-cached"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert missing.returncode == 1
    assert "tiny-org/not-cached: failed: " in missing.stdout
    assert "not in the local Hugging Face cache" in missing.stdout


def test_a_name_that_is_no_model_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r"ATTNVIZ_MODELS: 'two words' is neither"):
        ModelRegistry().configure([], models=["two words"], packaged=[])


class FakeHub:
    """The few routes of the Hugging Face hub that ``snapshot_download`` calls, on 127.0.0.1.

    One repository, ``org/online`` at commit ONLINE, holding a tiny GPT-2 and a Flax file
    that a download must leave alone; every request is logged.
    """

    def __init__(self, folder: Path) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.folder, self.requests = folder, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                hub.requests.append(self.path)
                data, headers = hub.route(self.path)
                self.send_response(200 if data is not None else 404)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                if body and data:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def route(self, path: str) -> tuple[bytes | None, dict[str, str]]:
        import hashlib

        files = sorted(self.folder.iterdir())
        as_json = {"Content-Type": "application/json"}
        if path.startswith("/api/models/org/online/tree/"):
            tree = [
                {"type": "file", "path": f.name, "size": f.stat().st_size,
                 "oid": hashlib.sha1(f.read_bytes()).hexdigest()}
                for f in files
            ]  # fmt: skip
            return json.dumps(tree).encode(), as_json
        if path.startswith("/api/models/org/online/revision/"):
            info = {
                "id": "org/online",
                "sha": ONLINE,
                "siblings": [{"rfilename": f.name} for f in files],
            }
            return json.dumps(info).encode(), as_json
        if path.startswith("/org/online/resolve/"):
            file = self.folder / path.split("/", 5)[-1]
            data = file.read_bytes()
            etag = '"' + hashlib.sha1(data).hexdigest() + '"'
            return data, {"X-Repo-Commit": ONLINE, "ETag": etag}
        return None, {}


ONLINE = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture(scope="module")
def fake_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHub]:
    require_transformers()
    folder = tiny.save_tiny("gpt2", tmp_path_factory.mktemp("hub-repo") / "online")
    (folder / "flax_model.msgpack").write_bytes(b"not fetched")
    hub = FakeHub(folder)
    yield hub
    hub.server.shutdown()


def test_an_id_not_cached_is_downloaded_with_progress_when_the_hub_answers(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    env = {"ATTNVIZ_MODELS": json.dumps(["org/online"]), "ATTNVIZ_PACKAGED_MODELS": "false"}
    with serving(env) as client:
        info = client.get("/api/v1/models").json()["models"][0]
        assert (info["name"], info["state"]) == ("org/online", "ready"), info
        body = {"model": "org/online", "texts": [TEXT], "sequence_index": 0}
        response = client.post("/api/v1/models/attention", json=body)
        assert response.status_code == 200, response.text
        ids = torch.tensor(response.json()["input_ids"])
        expected = eager_weights(fake_hub.folder, ids)
        got = torch.tensor(response.json()["attentions"])
        for layer, weights in enumerate(expected):
            torch.testing.assert_close(got[layer], weights, atol=1e-5, rtol=0)
    snapshot = tmp_path / "hub" / "models--org--online" / "snapshots" / ONLINE
    assert (snapshot / "model.safetensors").is_file()
    assert not (snapshot / "flax_model.msgpack").exists()  # only what a model needs
    assert not any("flax_model" in path for path in fake_hub.requests)
    assert "Fetching" in capfd.readouterr().err  # huggingface_hub's progress bar

    # The hub gone (nothing listens there): the cache answers, at once; an id it lacks
    # fails saying the hub could not be reached.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    import time

    from attnviz.pretrained.hub import resolve_hub_model

    start = time.monotonic()
    assert resolve_hub_model(HubId("org/online")) == snapshot
    assert time.monotonic() - start < 30
    with pytest.raises(
        ValueError, match=r"not in the local Hugging Face cache .* could not be reached"
    ):
        resolve_hub_model(HubId("org/elsewhere"))
