"""AttnViz: a web-based multi-head attention visualizer.

For notebooks, the engine is importable without the web layer::

    from app.attention import compute_attention
    result = compute_attention([[62, 13, 47], [60, 96]], mask="padding_causal")
    result.attn_weights.shape  # (B, H, L_q, L_k) = (2, 2, 3, 3)
"""

__version__ = "0.1.0"
