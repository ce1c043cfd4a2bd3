"""The pretrained models' endpoints: GET /api/v1/models and POST /api/v1/models/attention."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from ...attention.engine import DeviceName
from ...attention.errors import AttentionInputError
from ...pretrained.analysis import ViewOptions, check_view_options
from ...pretrained.blocks import Block
from ...pretrained.methods import Method, method_description
from ...pretrained.results import TOP_K
from ...pretrained.vision_language import MAX_IMAGES as MAX_PROMPT_IMAGES
from ..limits import (
    MAX_ABLATED_HEADS,
    MAX_BATCH,
    MAX_MODEL_DISPLAY_SIZE,
    MAX_MODEL_NAME_CHARS,
    MAX_NEW_TOKENS,
    MAX_TEMPERATURE,
    MAX_TEXT_CHARS,
)
from ..transport import Encoding
from .common import (
    DEVICE_FIELD,
    NONEMPTY_WORDS,
    EncodedArray,
    NonNegativeJsonInt,
    StrictRequest,
    Tensor4,
)
from .models import FamilyInfo

TextIn = Annotated[
    str,
    Field(
        max_length=MAX_TEXT_CHARS,
        description="Raw text; the model's own tokenizer (WordPiece, BPE, ...) splits it. "
        "A text with no token in it, or longer than the model's positions (512 for BERT), "
        "is a 422 naming it.",
        json_schema_extra={"pattern": NONEMPTY_WORDS},
        examples=["The cat sat on the mat."],
    ),
]


ImageIn = Annotated[
    str,
    Field(
        min_length=1,
        description="An image as base64 (a data: URL's header allowed): PNG, JPEG, WebP, GIF "
        "(first frame) or BMP, at most 40 Mpx; anything else is a 415 or 422 naming images. "
        "It counts against ATTNVIZ_MAX_BODY_BYTES (4 MiB) with the rest of the request.",
    ),
]
"""One image of a vision-language prompt, base64."""


HeadPair = Annotated[
    list[NonNegativeJsonInt],
    Field(min_length=2, max_length=2, description="[layer, head]"),
]
"""One head of the block, [layer, head] (JSON Schema integers: 3.0 is 3)."""


class PretrainedAttentionRequest(StrictRequest):
    """Texts (sentence pairs, prompts, or sources with targets) for a pretrained model."""

    model_config = ConfigDict(
        protected_namespaces=(),
        json_schema_extra={
            "examples": [
                {"texts": ["The cat sat on the mat because it was tired."]},
                {
                    "model": "all-MiniLM-L6-v2",
                    "texts": ["The cat sat on the mat.", "Where did the cat sit?"],
                    "text_pairs": ["It was tired.", None],
                    "encoding": "base64_float32",
                },
            ]
        },
    )

    model: str | None = Field(
        None,
        max_length=MAX_MODEL_NAME_CHARS,
        description="A name from GET /api/v1/models; default the first. A name the server "
        "has not loaded (or no model at all) is a 422 naming model.",
    )
    texts: list[TextIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="B texts (sentence A of each input), padded with [PAD] to the longest.",
    )
    text_pairs: list[TextIn | None] | None = Field(
        None,
        max_length=MAX_BATCH,
        description="Optional sentence B of each input (null for none): the input is then "
        "[CLS] A [SEP] B [SEP], with segment ids 0 and 1, as BERT takes pairs. One entry "
        "per text (else 422 naming text_pairs).",
    )
    chat: bool = Field(
        False,
        description="Decoders with a chat template: each text becomes a user message in "
        "the model's chat template (its special tokens and the assistant turn's opening "
        "included). A model without a template is a 422 naming chat.",
    )
    images: list[ImageIn] | None = Field(
        None,
        max_length=MAX_PROMPT_IMAGES,
        description="Vision-language models (LLaVA, Qwen2-VL, Qwen2.5-VL, Idefics3, "
        "SmolVLM): images read with the one text (B = 1). Each is placed where the text "
        "writes the processor's image token, else before the text (in the user's turn with "
        "chat). The response's `images` gives each image's token positions and the "
        "rectangle of the original image each token covers. A 422 naming images for other "
        "models.",
    )
    targets: list[TextIn] | None = Field(
        None,
        max_length=MAX_BATCH,
        description="Encoder-decoders (T5, BART, Marian): the decoder's text, one per text, "
        "teacher-forced after the decoder start token; required for them, a 422 for "
        "other families.",
    )
    block: Block | None = Field(
        None,
        description="Which attention block the maps are of: 'encoder' (self-attention over "
        "the texts), 'decoder' (causal self-attention), 'cross' (decoder queries over "
        "encoder keys). Default the family's first block; one the model lacks is a 422.",
    )
    device: DeviceName = DEVICE_FIELD
    encoding: Encoding = Field("json", description="As in the attention request.")
    sequence_index: int | None = Field(
        None,
        ge=0,
        description="Return only this input, run alone (so without [PAD]): B = 1 and L its "
        "length. Must be below B (else 422). The display options below need it (one of "
        "them without it is a 422 naming that option).",
    )
    hide_special_tokens: bool = Field(
        False,
        description="With sequence_index: remove [CLS] and [SEP] from rows and columns and "
        "renormalise every row to sum to 1 (means are then of the renormalised maps).",
    )
    neuron: bool = Field(
        False,
        description="With layer_index, head_index and query_index: that query's step through "
        "the head (BertViz's neuron view), in the response's `neuron`: the query vector q, "
        "every key vector k (after rotary embeddings, where the model has them), q.k, the "
        "model's scaling (usually 1/sqrt(d_k)), q.k * scaling, the masked keys and the "
        "softmax weights of the model's own eager attention. Positions count every token "
        "(not with hide_special_tokens or merge_words).",
    )
    merge_words: bool = Field(
        False,
        description="With sequence_index: merge word pieces (WordPiece ##, BPE, "
        "SentencePiece) into words as the tokenizer's pre-tokenizer splits the text. A "
        "word's column is the SUM over its key pieces, its row the MEAN over its query "
        "pieces, so rows still sum to 1: M[a, b] = (1/|A|) sum_{i in A} sum_{j in B} W[i, j]. "
        "Special tokens stay words of their own; applied after hide_special_tokens, and to "
        "the means and rollout too. Not with query_index or top_k (they count tokens).",
    )
    layer_index: int | None = Field(
        None,
        ge=0,
        description="With sequence_index: only this layer's attentions and head mean. Must "
        "be below the model's layers (else 422).",
    )
    head_index: int | None = Field(
        None,
        ge=0,
        description="With layer_index: only this head's attentions (one map at full "
        "resolution, as when a thumbnail is clicked; the layer's head_mean then comes "
        "pooled to at most 512 per side). Must be below num_heads (else 422).",
    )
    display_size: int | None = Field(
        None,
        ge=8,
        le=MAX_MODEL_DISPLAY_SIZE,
        description="With sequence_index: block-max pool attentions and head means to at most "
        "this many rows and columns (layer_mean and rollout are pooled only beyond 512).",
    )
    query_index: int | None = Field(
        None,
        ge=0,
        description="With sequence_index: also return `query_attentions`, that query "
        "position's row in every layer and head (N, H, L_k): what it attends to. Costs "
        "N x H x L_k, not the whole maps. Must be below the shown length (else 422).",
    )
    max_new_tokens: int = Field(
        0,
        ge=0,
        le=MAX_NEW_TOKENS,
        description="With sequence_index, decoders: first continue the text by this many "
        "tokens (stopping early at end of sequence), with the key/value cache; the maps "
        "are then of prompt + generated tokens in one causal pass, whose rows equal the "
        "step-by-step rows (tested to 1e-5).",
    )
    temperature: float = Field(
        0.0,
        ge=0.0,
        le=MAX_TEMPERATURE,
        description="Generation: 0 is greedy (the most likely token); above 0 samples "
        "from softmax(logits / temperature).",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Generation: the sampling's RNG seed.")
    method: Method = Field("attention", description=method_description())
    target_index: int | None = Field(
        None,
        ge=0,
        description="With method 'grad_rollout' or 'head_importance': the output position "
        "whose target is explained (a decoder's token, an encoder-decoder's target token, an "
        "encoder's token); default the last token that is neither special nor whitespace "
        "(decoders: not <|im_end|> or the newline after it) or 0 (encoders). Must be "
        "below the length (else 422).",
    )
    target_token_id: int | None = Field(
        None,
        ge=0,
        description="With method 'grad_rollout' or 'head_importance', decoders and "
        "encoder-decoders: the next token whose logit is the target; default the model's "
        "most likely next token at target_index.",
    )
    ablate: list[HeadPair] | None = Field(
        None,
        max_length=MAX_ABLATED_HEADS,
        description="With sequence_index: switch these heads off, [[layer, head], ...] of "
        "the block (head ablation: the head's output is zeroed before the output projection, "
        "Michel et al., NeurIPS 2019). The maps are then of the ablated model (later layers "
        "change too), and `ablation` says what the output does: a decoder's or "
        "encoder-decoder's next-token distribution at each (target) position (KL from the "
        "intact model, its top 5 before and after), an encoder's last hidden state (relative "
        "change per token). Not with hide_special_tokens or merge_words (positions count "
        "every token).",
    )
    top_k: int = Field(
        0,
        ge=0,
        le=TOP_K,
        description="With sequence_index, decoders: return `next_tokens`, the k most likely "
        "next tokens (softmax of the logits) at every shown position.",
    )

    @model_validator(mode="after")
    def _options_agree(self) -> Self:
        """The rules between fields, whatever the model.

        :func:`attnviz.pretrained.analysis.check_view_options`, a 422 naming the field
        (:func:`attnviz.server.errors.validation_error_handler` reads the
        :class:`~attnviz.attention.errors.AttentionInputError`'s field).
        """
        check_view_options(self.view_options(), self.block)
        return self

    def view_options(self) -> ViewOptions:
        """The options as the pretrained runtime takes them (:class:`ViewOptions`)."""
        return ViewOptions(**{f.name: getattr(self, f.name) for f in fields(ViewOptions)})


class PretrainedLayersRequest(PretrainedAttentionRequest):
    """One input's grid, streamed layer by layer (POST /api/v1/models/attention/layers)."""

    model_config = ConfigDict(
        protected_namespaces=(),
        json_schema_extra={
            "examples": [
                {"texts": ["The cat sat on the mat because it was tired."], "display_size": 64},
                {
                    "model": "SmolLM2-135M-Instruct",
                    "texts": ["Why is the sky blue?"],
                    "chat": True,
                    "max_new_tokens": 8,
                    "display_size": 64,
                    "encoding": "base64_float32",
                },
            ]
        },
    )

    sequence_index: int = Field(
        0,
        ge=0,
        description="The input whose grid is streamed; must be below B (else 422).",
    )


class PretrainedDownloadRequest(PretrainedAttentionRequest):
    """One input's exact maps of one layer or head as a file (POST .../attention/download).

    The fields of POST /api/v1/models/attention, of one input (``sequence_index``,
    default 0), with ``layer_index`` required and nothing pooled: the same maps the
    page draws, at full resolution.
    """

    model_config = ConfigDict(
        protected_namespaces=(),
        json_schema_extra={
            "examples": [
                {"texts": ["The cat sat on the mat."], "layer_index": 2, "head_index": 5},
                {
                    "model": "SmolLM2-135M-Instruct",
                    "texts": ["Why is the sky blue?"],
                    "chat": True,
                    "layer_index": 3,
                    "format": "safetensors",
                },
            ]
        },
    )

    sequence_index: int = Field(
        0, ge=0, description="The input whose maps are sent; must be below B (else 422)."
    )
    layer_index: int = Field(
        ge=0, description="The layer sent; must be below the model's layers (else 422)."
    )
    format: Literal["npy", "safetensors"] = Field(
        "npy",
        description="'npy': NumPy's .npy of float32 (np.load), (L_q, L_k) for a head, "
        "(H, L_q, L_k) for a layer. 'safetensors': the same array as tensor "
        "'attn_weights' (or the method's name), with the tokens, model, layer, head and "
        "method in its metadata (safetensors.torch.load_file, safe_open(...).metadata()).",
    )

    @model_validator(mode="after")
    def _exact_maps_only(self) -> Self:
        """Refuse the display options a file of exact maps does not take (422 naming one)."""
        given = {
            "display_size": self.display_size is not None,
            "query_index": self.query_index is not None,
            "top_k": self.top_k > 0,
            "neuron": self.neuron,
        }
        for name in (name for name, set_ in given.items() if set_):
            raise AttentionInputError(
                name, "a download holds the exact maps of a layer or head: leave it out"
            )
        return self


class PretrainedDownsample(BaseModel):
    """How maps were pooled for display (block max)."""

    method: Literal["max"] = "max"
    factor: int = Field(description="Query tokens per displayed row.")
    key_factor: int = Field(description="Key tokens per displayed column.")
    full_length: int = Field(description="L_q before pooling.")
    full_key_length: int = Field(description="L_k before pooling.")


class NextToken(BaseModel):
    """One candidate for the next token at a position."""

    token: str
    id: int
    probability: float


class GenerationOut(BaseModel):
    """The tokens a decoder added to the prompt (``max_new_tokens``)."""

    prompt_length: int = Field(description="The prompt's tokens; generated ones follow.")
    tokens: list[str] = Field(description="The generated tokens, in order.")
    ids: list[int]
    temperature: float
    seed: int
    compute_ms: float = Field(description="Generation with the key/value cache, in ms.")


class GradientTargetOut(BaseModel):
    """The scalar a gradient method explains (the request's target_index and target_token_id)."""

    kind: Literal["logit", "embedding"] = Field(
        description="'logit': a next-token logit (decoders, encoder-decoders); "
        "'embedding': <h_p, e> / ||e|| (encoders)."
    )
    index: int = Field(description="The output position p.")
    token_id: int | None = Field(description="The next token whose logit it is.")
    token: str | None = Field(description="That token's text.")
    value: float = Field(description="The target's value in the forward pass.")
    compute_ms: float = Field(description="The forward and backward pass, in ms.")


class TokenGridInfo(BaseModel):
    """Image tokens that tile one view of the image (:class:`.image_tokens.TokenGrid`)."""

    name: Literal["image", "tiles", "global"] = Field(description="Which view.")
    rows: int
    cols: int
    tokens: list[int] = Field(
        description="Per cell, row-major, which of the image's tokens it is (an index into "
        "`positions` and `rectangles`)."
    )


class ImageTokensInfo(BaseModel):
    """One image's tokens in a vision-language prompt (:class:`.image_tokens.ImageTokens`)."""

    image: int = Field(description="Which image of the request (0 for the first).")
    width: int = Field(description="The original image's width, in pixels.")
    height: int = Field(description="Its height, in pixels.")
    positions: list[int] = Field(
        description="Its tokens' positions in the prompt (indices of `tokens`, before any "
        "hiding, merging or pooling)."
    )
    grids: list[TokenGridInfo] = Field(
        description="The views its tokens tile: one grid for LLaVA and Qwen (LLaVA's [CLS], "
        "kept by the 'full' strategy, is in none), Idefics3's and SmolVLM's tiles put back "
        "together and their global view."
    )
    rectangles: list[list[float]] = Field(
        description="Per token, [x0, y0, x1, y1] of the original image it covers, in "
        "pixels (x right, y down, edges), clipped to the image."
    )


class PretrainedAttentionResponse(BaseModel):
    """Every layer's and head's attention of one block of a pretrained model, and derived maps."""

    model_config = ConfigDict(protected_namespaces=())

    model: str
    family: Literal["encoder", "decoder", "encoder-decoder", "vision-language"]
    family_spec: FamilyInfo = Field(description="What the family reads and gives.")
    architecture: str
    block: Block = Field(description="The attention block the maps are of.")
    images: list[ImageTokensInfo] | None = Field(
        None,
        description="A vision-language prompt's images (null without): each one's token "
        "positions in the prompt as tokenised and the rectangle of the original image "
        "each token covers.",
    )
    shape: list[int] = Field(
        description="[N, B, H, L, L], the shape of `attentions` as returned (after selection "
        "and pooling)."
    )
    num_layers: int
    num_heads: int
    num_key_value_heads: int = Field(
        description="H_kv; query head h reads key/value head h // (H // H_kv)."
    )
    d_model: int
    tokens: list[list[str]] = Field(
        description="(B, L_q) query tokens as the tokenizer writes them (WordPiece ##pieces, "
        "BPE Ġ spaces, special tokens, padding)."
    )
    key_tokens: list[list[str]] | None = Field(
        None, description="(B, L_k) the key tokens, when they differ (cross attention)."
    )
    input_ids: list[list[int]] = Field(description="(B, L) token ids.")
    token_type_ids: list[list[int]] = Field(description="(B, L) segment: 0 = A, 1 = B.")
    attention_mask: list[list[bool]] = Field(
        description="(B, L) True for real tokens, False for [PAD] (the key padding mask)."
    )
    special_tokens_mask: list[list[bool]] = Field(
        description="(B, L) True for [CLS], [SEP] and [PAD]."
    )
    lengths: list[int] = Field(description="(B,) real tokens of each input, [CLS] and [SEP] in.")
    attentions: list[Tensor4] | EncodedArray = Field(
        description="(N, B, H, L, L) softmax weights of every layer and head, as "
        "transformers' output_attentions ([PAD] keys get 0); with method 'norm', "
        "||alpha f(x)|| in their place."
    )
    head_mean: Tensor4 | EncodedArray = Field(description="(N, B, L, L) mean over heads.")
    layer_mean: list[list[list[float]]] | EncodedArray = Field(
        description="(B, L, L) mean over every layer and head."
    )
    rollout: list[list[list[float]]] | EncodedArray | None = Field(
        description="(B, L, L) attention rollout across layers (Abnar & Zuidema 2020): "
        "the product of 0.5 * head mean + 0.5 * I, first layer rightmost; null for cross "
        "attention and for one input over 2048 tokens (N products of L^3)."
    )
    device: str
    compute_ms: float = Field(description="Forward pass and derived maps, in milliseconds.")
    pass_key: str | None = Field(
        None,
        description="One input whose pass is kept for tiles (a grid pooled to display_size, "
        "or one head): its name for POST /api/v1/models/attention/tiles, which zooms into "
        "any head's map with no forward pass; null when it is not kept.",
    )
    attention_path: Literal["recorded", "output_attentions"] = Field(
        "recorded",
        description="'recorded' (the fused path), or 'output_attentions': the maps are the "
        "model's own eager output_attentions, for a family whose modules bypass "
        "transformers' attention interface (see attention_note).",
    )
    attention_note: str | None = Field(
        None, description="With 'output_attentions': why the fused path is not available."
    )
    sequence_index: int | None = Field(None, description="The input returned, when selected.")
    layer_index: int | None = Field(None, description="The layer returned, when selected.")
    hidden_special_tokens: bool = Field(False, description="Whether [CLS] / [SEP] were removed.")
    neuron: dict[str, Any] | None = Field(
        None,
        description="With neuron: {layer_index, head_index, query_index, key_value_head, "
        "d_k, scaling, query (d_k), keys (L_k x d_k), scores (q.k), scaled_scores, masked, "
        "weights}; see the request's `neuron`.",
    )
    merged_words: bool = Field(
        False, description="Whether word pieces were merged into words (merge_words)."
    )
    method: Method = Field("attention", description="What the maps hold (the request's).")
    summed_norm: list[list[list[float]]] | EncodedArray | None = Field(
        None,
        description="With method 'norm' and layer_index: (1, L_q, L_k) that layer's "
        "||sum_h alpha_ij^h f^h(x_j)|| (Kobayashi et al. 2020), pooled as head_mean.",
    )
    ablation: dict[str, Any] | None = Field(
        None,
        description="With ablate: {heads: [[layer, head], ...], tokens (L,) the positions "
        "of the lists below (an encoder-decoder's targets, else the input), and for decoders "
        "and encoder-decoders kl (L,) KL(intact || ablated) of the next-token distributions "
        "in nats, top_before and top_after (L, 5) [{token, id, probability}]; for encoders "
        "hidden_change (L,) ||h' - h|| / ||h|| of the last hidden state}.",
    )
    method_map: list[list[list[float]]] | EncodedArray | None = Field(
        None,
        description="With method 'flow': (1, L, L) attention flow (Abnar & Zuidema 2020); "
        "row i is how token i after the last layer draws on each input token ((1, W, W) of "
        "the positions method_window for an input over flow's bound). With "
        "'rollout': attention rollout ((B, L, L) for the batch). With 'grad_rollout': "
        "(1, L, L) gradient-weighted rollout R (Chefer et al. 2021), block-max pooled as "
        "layer_mean beyond 512 tokens (average_downsample). With 'value_zeroing': (N, L_q, "
        "L_k) each layer's context-mixing map (Mohebbi et al. 2023), rows summing to 1.",
    )
    method_window: list[int] | None = Field(
        None,
        description="With method 'flow' on an input longer than flow's bound (L^2 max-flow "
        "problems: 24 tokens through 30 layers): [start, stop), the last positions that "
        "fit, whose flow among themselves method_map holds. Null when it covers the input.",
    )
    head_importance: list[list[float]] | EncodedArray | None = Field(
        None,
        description="With method 'head_importance': (N, H) |dT/d xi_h| of each layer's "
        "heads for the target (Michel et al. 2019), unnormalised.",
    )
    target: GradientTargetOut | None = Field(
        None, description="With 'grad_rollout' or 'head_importance': what was explained."
    )
    special_share: float | None = Field(
        None,
        description="With hidden special tokens: the mean share of a shown row that went to "
        "them, over layers, heads and rows.",
    )
    downsample: PretrainedDownsample | None = Field(
        None, description="Present when display_size pooled the attentions."
    )
    average_downsample: PretrainedDownsample | None = Field(
        None, description="Present when layer_mean and rollout were pooled (beyond 512)."
    )
    head_index: int | None = Field(None, description="The head returned, when selected.")
    query_index: int | None = Field(None, description="The query of `query_attentions`.")
    query_attentions: list[list[list[float]]] | EncodedArray | None = Field(
        None, description="(N, H, L_k) the row of query_index in every layer and head."
    )
    generation: GenerationOut | None = Field(
        None, description="With max_new_tokens: what was generated (its tokens end `tokens`)."
    )
    next_tokens: list[list[NextToken]] | None = Field(
        None, description="With top_k: (L, k) the most likely next tokens at each position."
    )
