"""The naive baseline: the tutorials' code behind FastAPI, as a tutorial would write it.

Every request builds nn.Embedding and the layers anew (global RNG), runs tutorial 000's
masked multi-head attention, and returns ``attn_dists.tolist()`` through FastAPI's
default response (jsonable_encoder + json.dumps). Kept only for the benchmark.
"""

import math

import torch
from fastapi import FastAPI
from pydantic import BaseModel
from torch import nn
from torch.nn import functional as F  # noqa: N812

app = FastAPI()


class NaiveRequest(BaseModel):
    sequences: list[list[int]]
    d_model: int = 8
    num_heads: int = 2
    vocab_size: int = 100


@app.post("/attention")
def attention(request: NaiveRequest):  # type: ignore[no-untyped-def]
    pad_id, inf = 0, 1e12
    d_model, num_heads = request.d_model, request.num_heads
    max_len = len(max(request.sequences, key=len))
    data = [seq + [pad_id] * (max_len - len(seq)) for seq in request.sequences]

    embedding = nn.Embedding(request.vocab_size, d_model)
    w_q, w_k, w_v = (nn.Linear(d_model, d_model) for _ in range(3))
    batch = torch.LongTensor(data)  # (B, L)
    batch_emb = embedding(batch)  # (B, L, d_model)
    padding_mask = (batch != pad_id).unsqueeze(1)  # (B, 1, L)
    nopeak_mask = torch.tril(torch.ones([1, max_len, max_len], dtype=torch.bool))
    mask = padding_mask & nopeak_mask  # (B, L, L)

    batch_size = batch_emb.shape[0]
    d_k = d_model // num_heads
    q = w_q(batch_emb).view(batch_size, -1, num_heads, d_k).transpose(1, 2)
    k = w_k(batch_emb).view(batch_size, -1, num_heads, d_k).transpose(1, 2)
    attn_scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    attn_scores = attn_scores.masked_fill_(mask.unsqueeze(1) == False, -1 * inf)  # noqa: E712
    attn_dists = F.softmax(attn_scores, dim=-1)  # (B, num_heads, L, L)
    w_v(batch_emb)  # the tutorials compute V too
    return {"weights": attn_dists.tolist()}
