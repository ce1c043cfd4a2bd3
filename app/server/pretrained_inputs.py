"""A pretrained-model request's inputs, tokenised and checked, and its view's plan run.

What POST /api/v1/models/attention and its streamed, uploaded and downloaded forms share
(``routers/pretrained.py``): the texts (with a vision-language prompt's images) as the
model reads them, the server's length limits, and the view plan of one input.
"""

from __future__ import annotations

from fastapi import status

from ..pretrained import PretrainedModel, TokenizedBatch
from ..pretrained.analysis import Limits, PreparedSequence
from ..pretrained.blocks import Block
from ..pretrained.recordings import RecordingCache
from ..pretrained.streaming import ProgressBudget
from ..pretrained.view_plan import plan_view
from ..pretrained.vision_language import decode_prompt_images, image_prompt
from .checks import check_limit
from .errors import engine_errors, field_error
from .schemas.pretrained import PretrainedAttentionRequest
from .settings import Settings


def tokenized(
    model: PretrainedModel, request: PretrainedAttentionRequest, settings: Settings
) -> tuple[TokenizedBatch, TokenizedBatch | None, Block]:
    """The request's texts (and targets) tokenised and checked, and the block it asks for.

    Raises:
        HTTPException: 422 naming texts, text_pairs, chat, targets or block; 413 over
            ATTNVIZ_MAX_SEQ_LEN.
    """
    with engine_errors(request.device):
        if request.images is None:
            batch = model.tokenize(request.texts, request.text_pairs, chat=request.chat)
        else:
            batch = image_prompt(
                model, request.texts, decode_prompt_images(request.images), chat=request.chat,
                removes_tokens=request.hide_special_tokens or request.merge_words,
            )  # fmt: skip
        targets = None if request.targets is None else model.decoder_inputs(request.targets)
    if targets is not None and len(request.targets or []) != len(request.texts):
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "targets",
            f"{len(request.targets or [])} targets for {len(request.texts)} texts; "
            "give one per text",
        )
    check_lengths(batch, "texts", settings)
    if targets is not None:
        check_lengths(targets, "targets", settings)
    if request.block is not None and request.block not in model.blocks:
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "block",
            f"{request.block!r}: {model.name} is {model.described} with blocks "
            f"{', '.join(model.blocks)}",
        )
    return batch, targets, request.block or model.blocks[0]


def check_lengths(batch: TokenizedBatch, field: str, settings: Settings) -> None:
    """Refuse an input longer than ATTNVIZ_MAX_SEQ_LEN tokens (413 naming ``field[i]``).

    Unset, the model's own positions bound the input (tokenising refuses a longer one).
    """
    if settings.max_seq_len is None:
        return
    for i, length in enumerate(batch.lengths):
        check_limit(f"{field}[{i}]", length, settings.max_seq_len, "MAX_SEQ_LEN")


def prepared_sequence(
    model: PretrainedModel,
    request: PretrainedAttentionRequest,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None,
    block: Block,
    settings: Settings,
    recordings: RecordingCache,
    *,
    deadline: ProgressBudget | None = None,
) -> PreparedSequence:
    """The request's :class:`attnviz.pretrained.analysis.ViewPlan`, observed, run.

    ``deadline``: the stream's time budget (:class:`attnviz.pretrained.streaming.ProgressBudget`).

    Raises:
        HTTPException: 422 naming a bad option, 413 over a limit, 503 out of device memory.
    """
    limits = Limits(
        max_seq_len=settings.max_seq_len,
        max_weight_cells=settings.max_weight_cells,
        max_request_bytes=settings.max_request_bytes,
    )
    with engine_errors(request.device):
        plan = plan_view(
            model, request.view_options(), batch, targets, block, limits, recordings, observe=True
        )
        return plan.run(deadline=deadline)
