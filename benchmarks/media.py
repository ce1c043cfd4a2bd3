"""Speech and images, timed: Whisper tiny.en on 3.5, 10 and 30 s of speech; a ViT per image.

Usage (from the repository root):  .venv/bin/python -m benchmarks.media [--reps N]

Speech is the page's sample sentence (espeak-ng), repeated to fill 10 and 30 s. Each row is
the median of N in-process requests to POST /api/v1/speech (base64 float32, as the page
asks), split as the response reports it: greedy transcription with the key/value cache,
the recorded teacher-forced pass, and the whole request (decoding the file, every block's
maps, pooling and serialising included), with the response's size (float32; the page
asks for float16, half of it). Images: the demo ViT
(scripts/demo_vit.py, 3 training steps: its speed does not depend on its training) and a
ViT-Base-sized random model (12 layers x 12 heads, d_model 768, 224 px in 16 px patches),
a new picture per request, then the same picture with another query (the pass reused).

Machines are shared and noisy: read the medians and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]


def median_ms(times: list[float]) -> str:
    return f"{statistics.median(times):,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    import transformers
    from attnviz.pretrained.speech import decode_audio
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    sys.path.insert(0, str(REPO_ROOT))
    from tests.pretrained.media import encoded, png_bytes
    from tests.server.support import serving

    sample = decode_audio((REPO_ROOT / "static/samples/the-cat-sat.flac").read_bytes())
    root = Path(tempfile.mkdtemp())
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts/demo_vit.py"),
            str(root / "demo-vit"),
            "--steps",
            "3",
        ],
        check=True,
        capture_output=True,
    )
    config = transformers.ViTConfig(image_size=224, patch_size=16)
    transformers.ViTModel(config).save_pretrained(root / "vit-base-random")
    ViTImageProcessorPil(size={"height": 224, "width": 224}).save_pretrained(
        root / "vit-base-random"
    )
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(root / "demo-vit"), str(root / "vit-base-random")]),
        "ATTNVIZ_PACKAGED_MODELS": '["whisper-tiny.en"]',
        "ATTNVIZ_ACCESS_LOG": "false",
        "ATTNVIZ_RESPONSE_CACHE_BYTES": "0",
    }
    with serving(env, wait_s=300) as client:
        print("| audio | tokens | transcribe ms | recorded pass ms | request ms | response MB |")
        print("|---|---|---|---|---|---|")
        for seconds in (3.5, 10.0, 30.0):
            copies = int(np.ceil(seconds * 16_000 / sample.size))
            clip = np.concatenate([sample] * copies)[: int(seconds * 16_000) - 160]
            data = encoded(clip, "flac", "flac")
            transcribe, recorded, whole, size, tokens = [], [], [], 0, 0
            for _ in range(args.reps):
                start = time.perf_counter()
                response = client.post("/api/v1/speech", files={"audio": ("a.flac", data)})
                whole.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.text
                body = response.json()
                transcribe.append(body["transcribe_ms"])
                recorded.append(body["compute_ms"])
                size, tokens = len(response.content), len(body["decoder_tokens"])
            print(
                f"| {seconds:g} s | {tokens} | {median_ms(transcribe)} | {median_ms(recorded)} "
                f"| {median_ms(whole)} | {size / 2**20:.1f} |"
            )
        print()
        print("| model | new picture: request ms | model ms | same picture, another query ms |")
        print("|---|---|---|---|")
        for name in ("demo-vit", "vit-base-random"):
            fresh, model_ms, again = [], [], []
            for rep in range(args.reps):
                picture = png_bytes(320, 240, seed=100 + rep)
                start = time.perf_counter()
                response = client.post(
                    "/api/v1/vision", files={"image": ("p.png", picture)}, data={"model": name}
                )
                fresh.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.text
                model_ms.append(response.json()["compute_ms"])
                start = time.perf_counter()
                response = client.post(
                    "/api/v1/vision",
                    files={"image": ("p.png", picture)},
                    data={"model": name, "query": "5"},
                )
                again.append((time.perf_counter() - start) * 1000)
            print(f"| {name} | {median_ms(fresh)} | {median_ms(model_ms)} | {median_ms(again)} |")


if __name__ == "__main__":
    main()
