"""The attnviz command: --help for each command, compute, export (opened offline).

Most tests run the command in a subprocess, as a user does. Help and refused arguments,
which end in argparse or before any computation, run in this process
(:func:`attnviz_here`): the same ``main``, without a second import of torch each time.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from attnviz import attention_figure, compute_attention
from attnviz.attention import LayerConfig
from attnviz.attention.tutorials import TUTORIAL_BATCH

from tests import REPO_ROOT
from tests.support.browser import HANG_MS
from tests.support.cli import attnviz_here

pytestmark = pytest.mark.slow  # runs the attnviz command in subprocesses (torch's import each time)


def attnviz(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "attnviz.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", [[], ["serve"], ["compute"], ["export"], ["models"]])
def test_every_command_has_help_with_every_options_default(command: list[str]) -> None:
    import re

    result = attnviz_here(*command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: attnviz")
    options = result.stdout.split("options:", 1)[1]
    # Each option's entry (from its flag to the next flag) says its default.
    entries = re.split(r"\n  (?=-)", options)[1:]
    for entry in entries:
        if entry.startswith(("-h, --help", "--version")):
            continue
        assert "(default:" in " ".join(entry.split()), entry


def test_the_main_help_lists_every_command_in_plain_text() -> None:
    from attnviz.cli import parser

    result = attnviz("--help")
    assert result.returncode == 0
    commands = parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(commands) == {"serve", "compute", "export", "models", "atlas"}
    listed = result.stdout.split("positional arguments:", 1)[1]
    for name in commands:
        assert f"\n    {name} " in listed, name  # each with its one-line summary
        assert f"attnviz {name}" in result.stdout.split("positional arguments:", 1)[0]
    for markup in ("``", ":func:", ":class:", ":meth:", ":mod:", ":data:"):
        assert markup not in result.stdout, markup
    for name in commands:
        own = attnviz_here(name, "--help").stdout
        assert f"attnviz {name}: " in own and "``" not in own


def test_version() -> None:
    from attnviz import __version__

    result = attnviz("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"attnviz {__version__}"


def test_compute_writes_the_api_response(tmp_path: Path) -> None:
    result = attnviz(
        "compute",
        "--sequence",
        "62 13 47 39",
        "--sequence",
        "60 96",
        "--mask",
        "padding_causal",
        "--seed",
        "3",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    expected = compute_attention(
        [[62, 13, 47, 39], [60, 96]], LayerConfig(seed=3), mask="padding_causal"
    )
    assert torch.equal(torch.tensor(data["weights"]), expected.attn_weights)
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps(
            {"sequences": ["I love deep learning"], "d_model": 64, "num_heads": 8, "mask": "none"}
        )
    )
    output = tmp_path / "out.json"
    result = attnviz("compute", "--json", str(request), "--seed", "1", "-o", str(output))
    assert result.returncode == 0, result.stderr
    data = json.loads(output.read_text())
    assert data["shape"] == [1, 8, 4, 4] and data["seed"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--sequence", "1 2 3", "--d-model", "10", "--num-heads", "3"],
            "num_heads must divide d_model (10)",
        ),
        (["--sequence", "1 200"], "sequences.0: token id 200 is outside"),
        (["--d-model", "8"], "sequences: Field required"),
    ],
)
def test_compute_refuses_bad_input_naming_the_field(args: list[str], message: str) -> None:
    result = attnviz_here("compute", *args)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def test_python_api_figure_has_one_heatmap_per_head() -> None:
    result = compute_attention(
        TUTORIAL_BATCH, LayerConfig(d_model=16, num_heads=4), mask="padding_causal"
    )
    figure = attention_figure(result, sequence_index=1)
    heatmaps = [trace for trace in figure.data if trace.type == "heatmap"]
    assert len(heatmaps) == 4
    assert [a.text for a in figure.layout.annotations] == [f"Head {h}" for h in range(4)]
    # Padded keys of sequence 1 (5 real tokens) are left empty: drawn as masked.
    assert all(list(row[5:]) == [None] * 5 for row in heatmaps[0].z)
    with pytest.raises(IndexError):
        attention_figure(result, sequence_index=5)


def test_export_opens_offline_and_draws_every_head(tmp_path: Path, browser) -> None:  # type: ignore[no-untyped-def]
    output = tmp_path / "attention.html"
    result = attnviz(
        "export",
        "--sequence",
        "the cat sat on the mat",
        "--d-model",
        "32",
        "--num-heads",
        "4",
        "--mask",
        "causal",
        "-o",
        str(output),
    )
    assert result.returncode == 0, result.stderr
    assert "plotly.js (attnviz" in output.read_text()  # inlined: nothing to fetch
    context = browser.new_context(offline=True)  # no network: everything is in the file
    page = context.new_page()
    page.goto(output.as_uri())
    page.locator(".main-svg").first.wait_for(timeout=HANG_MS)
    heads = page.evaluate(
        "() => document.querySelector('.js-plotly-plot').data"
        ".filter(t => t.type === 'heatmap').length"
    )
    titles = page.locator(".annotation-text").all_text_contents()
    context.close()
    assert heads == 4
    assert titles[:4] == ["Head 0", "Head 1", "Head 2", "Head 3"]
    # The same figure for a paper: a PDF (kaleido, driving the machine's Chromium).
    pdf = tmp_path / "attention.pdf"
    result = attnviz("export", "--sequence", "the cat sat", "--num-heads", "4", "-o", str(pdf))
    assert result.returncode == 0, result.stderr
    assert pdf.read_bytes()[:5] == b"%PDF-"
    result = attnviz("export", "--sequence", "the cat sat", "-o", str(tmp_path / "x.txt"))
    assert result.returncode == 1 and ".pdf" in result.stderr


def test_serve_runs_several_workers_that_agree(tmp_path: Path) -> None:
    import time
    import urllib.request

    from attnviz.devtools import free_port

    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "attnviz.cli", "serve", "--port", str(port), "--workers", "2"],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300  # a bound on a hang: both workers start slowly
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "no answer from attnviz serve"
                time.sleep(0.3)
        body = json.dumps({"sequences": ["two workers agree"], "seed": 7}).encode()
        answers = set()
        for _ in range(6):  # new connections: the requests spread over the workers
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/attention",
                data=body,
                headers={"content-type": "application/json", "connection": "close"},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                answers.add(json.dumps(json.loads(response.read())["weights"]))
        assert len(answers) == 1
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


@pytest.mark.usefixtures("pretrained_extra")
def test_export_a_pretrained_models_layer_head_and_method(tmp_path: Path) -> None:
    """export --model: the maps are the model's own (attnviz.show, checked against the
    registry's run), in HTML, SVG, PNG and PDF; bad combinations are refused."""
    import xml.etree.ElementTree as ElementTree

    from attnviz import show
    from attnviz.pretrained import ModelRegistry
    from attnviz.pretrained.methods import with_method

    text = "The cat sat on the mat."
    svg = tmp_path / "head.svg"
    result = attnviz("export", "--model", "all-MiniLM-L6-v2", "--text", text, "--layer", "2",
                     "--head", "3", "--method", "norm", "-o", str(svg))  # fmt: skip
    assert result.returncode == 0, result.stderr
    images = [e for e in ElementTree.parse(svg).getroot().iter() if e.tag.endswith("image")]
    assert len(images) == 1  # one head's heatmap
    html = tmp_path / "model.html"
    result = attnviz("export", "--model", "all-MiniLM-L6-v2", "--text", text, "-o", str(html))
    assert result.returncode == 0, result.stderr
    assert html.read_text().count("query %{customdata[0]}") == 6 * 12  # one hover per map
    png = tmp_path / "layer.png"
    result = attnviz("export", "--model", "all-MiniLM-L6-v2", "--text", text, "--layer", "0",
                     "-o", str(png))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"  # PDF: tests/browser/test_notebook_export.py
    # The same maps in Python: attnviz.show equals the registry's own run, norm included.
    registry = ModelRegistry()
    registry.configure([], packaged=["all-MiniLM-L6-v2"])
    registry.load()
    model = registry.get("all-MiniLM-L6-v2")
    run = with_method(model.attention([text]), model.on(torch.device("cpu")), "norm")
    view = show(text, "all-MiniLM-L6-v2", layer=2, method="norm", device="cpu")
    expected = run.layer_weights("encoder", 2)[0].numpy()
    drawn = [trace.z for trace in view.figure.data]
    assert torch.allclose(torch.tensor(drawn), torch.tensor(expected), atol=1e-6)
    from attnviz.attention import AttentionInputError

    with pytest.raises(AttentionInputError, match="9 is not below 6"):
        show(text, "all-MiniLM-L6-v2", layer=9)
    for args, message in (
        (["--model", "all-MiniLM-L6-v2"], "needs --text"),
        (["--model", "all-MiniLM-L6-v2", "--text", text, "--head", "1"], "--head needs --layer"),
        (["--sequence", "1 2", "--layer", "0"], "are for --model"),
    ):
        result = attnviz_here("export", *args, "-o", str(tmp_path / "x.html"))
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    # A model the server does not know: refused by a real command (it looks the name up).
    result = attnviz(
        "export", "--model", "no-such-model", "--text", text, "-o", str(tmp_path / "x.html")
    )
    assert result.returncode == 1 and "no-such-model" in result.stderr, result.stderr
