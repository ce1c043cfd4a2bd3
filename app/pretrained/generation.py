"""Generation: a decoder continues a prompt token by token with its key/value cache.

:class:`GenerationMixin` gives :class:`.model.PretrainedModel` its :meth:`generate`: the
tutorials' step-by-step decoding (tutorial 002 section 3.4) on a real model, each step
recorded, or unrecorded (SDPA) with one recorded causal pass over prompt + new tokens
joined from the steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from ..attention.errors import AttentionInputError
from .calls import AttentionRecording, StepwiseRecording, WeightsRecording
from .recorder import record_attention
from .results import DecoderHead, Generation, PretrainedAttentions
from .tokens import TokenizedBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from .blocks import Block
    from .families import FamilySpec


class GenerationMixin:
    """Generation for :class:`.model.PretrainedModel`.

    The host class gives ``name``, ``spec``, ``tokenizer``, ``described``,
    ``num_layers``, ``placed_on``, ``block_calls``, ``extended``, ``token_strings`` and
    ``forward_arguments``.
    """

    if TYPE_CHECKING:
        name: str
        tokenizer: PreTrainedTokenizerBase

        @property
        def spec(self) -> FamilySpec: ...  # noqa: D102

        attention_path: Literal["recorded", "output_attentions"]

        @property
        def described(self) -> str: ...  # noqa: D102

        @property
        def num_layers(self) -> int: ...  # noqa: D102

        @property
        def forward_arguments(self) -> frozenset[str]: ...  # noqa: D102

        def placed_on(self, device: str) -> tuple[torch.device, PreTrainedModel]: ...  # noqa: D102

        def block_calls(  # noqa: D102
            self, model: PreTrainedModel, recording: AttentionRecording
        ) -> dict[Block, list[int]]: ...

        def extended(self, batch: TokenizedBatch, new_ids: Sequence[int]) -> TokenizedBatch: ...  # noqa: D102

        def forward_inputs(  # noqa: D102
            self, batch: TokenizedBatch, targets: TokenizedBatch | None, device: torch.device
        ) -> dict[str, torch.Tensor]: ...

        def token_strings(self, ids: Sequence[int]) -> list[str]: ...  # noqa: D102

    def generate(
        self,
        batch: TokenizedBatch,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        seed: int = 0,
        device: str = "auto",
        record_steps: bool = True,
        record_pass: bool = False,
    ) -> Generation:
        """Continue one prompt token by token with the key/value cache, recording each step.

        The prompt runs in one pass; then each new token is fed alone, its query
        attending to the cached keys of every earlier token (the tutorials' step-by-step
        decoding, tutorial 002 section 3.4, on a real model). Generation stops early at
        the tokenizer's end-of-sequence token. Only the last position's logits are
        computed (``logits_to_keep``, where the model takes it): the prompt's whole
        (L, vocab) logits would be 0.8 GB for SmolLM2 at 4096 tokens.

        Args:
            batch: one prompt (B = 1) from :meth:`tokenize`.
            max_new_tokens: how many tokens to add, at least 1.
            temperature: 0 picks the most likely token (greedy); above 0 samples from
                softmax(logits / temperature).
            seed: the RNG seed of the sampling.
            device: as :meth:`run`.
            record_steps: keep every step's attention calls (:meth:`Generation.step_row`).
                Each step's call holds the whole key/value cache, so this costs
                N * steps * L * d numbers (11 GB for SmolLM2 at 4,000 + 64 tokens):
                the server passes False and records one pass over prompt + new tokens
                instead (``record_pass``).
            record_pass: record, while generating, what one causal pass over prompt +
                new tokens records (:class:`.calls.StepwiseRecording`: the prompt's
                calls, then each step's query row and new key), so that the maps of the
                generated text cost no second forward pass; the last token is fed once
                more for its query and key. Not with ``record_steps``; a model without a
                separate backbone and output head gives no pass.

        Returns:
            A :class:`Generation` (its recording empty without ``record_steps``; its
            ``result`` the recorded pass with ``record_pass``, else None).

        Raises:
            AttentionInputError: (field ``max_new_tokens``) a model that does not
                generate, or a batch of more than one prompt; ``max_new_tokens`` below
                1 or ``temperature`` below 0.
        """
        if not self.spec.generates:
            raise AttentionInputError(
                "max_new_tokens", f"{self.name} is {self.described}; generation is for decoders"
            )
        if batch.input_ids.shape[0] != 1:
            raise AttentionInputError("max_new_tokens", "generation continues one prompt")
        if max_new_tokens < 1:
            raise AttentionInputError("max_new_tokens", f"must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise AttentionInputError("temperature", f"must be >= 0, got {temperature}")
        run_on, model = self.placed_on(device)
        generator = torch.Generator().manual_seed(seed)
        stop = self.tokenizer.eos_token_id
        new_ids: list[int] = []
        start = time.perf_counter()
        from transformers import DynamicCache

        backbone, head = model.base_model, model.get_output_embeddings()  # type: ignore[no-untyped-call]
        # A model drawn from its output_attentions records nothing through the interface:
        # its steps keep the weights it returns, and its pass is run after generating.
        own = self.attention_path == "output_attentions"
        # A vision-language prompt's first pass also runs the image encoder, whose calls
        # are no step of the decoder's: its pass is recorded after generating.
        joining = (
            record_pass and not record_steps and backbone is not model and head is not None
        ) and not (own or batch.model_inputs)
        recording: AttentionRecording = (
            StepwiseRecording()
            if joining
            else WeightsRecording()
            if own and record_steps
            else AttentionRecording()
        )
        hidden: list[torch.Tensor] = []
        last = {"logits_to_keep": 1} if "logits_to_keep" in self.forward_arguments else {}
        if isinstance(recording, WeightsRecording):
            last["output_attentions"] = True

        def keep_hidden(module: nn.Module, args: Any, output: Any) -> None:
            hidden.append(output[0])  # the backbone's last hidden states (1, L, d_model)

        def forward(
            ids: torch.Tensor, cache: Any, **inputs: torch.Tensor
        ) -> tuple[torch.Tensor, Any]:
            """The model's own next-token logits (vocab,) after ``ids``, and the cache.

            The logits are the model's (its final softcapping or scaling included); each
            pass is marked in a joined recording. ``inputs``: the prompt's images
            (a vision-language model's first pass).
            """
            out = model(ids, past_key_values=cache, use_cache=True, **inputs, **last)
            if isinstance(recording, StepwiseRecording):
                recording.end_pass()
            if isinstance(recording, WeightsRecording):
                for weights in out.attentions:  # this step's rows, every layer
                    recording.add_weights(model, weights)
            return out.logits[0, -1], out.past_key_values

        hook = backbone.register_forward_hook(keep_hidden) if joining else None
        try:
            with (
                torch.inference_mode(),
                record_attention(recording) if record_steps or joining else nullcontext(),
            ):
                # A cache without the model's config keeps every key, also beyond a sliding
                # window (the mask still hides the old ones): each step's row then covers
                # every earlier position, as one causal pass does.
                images = {}
                if batch.model_inputs:  # the pixels, their grids and the mask with them
                    images = self.forward_inputs(batch, None, run_on)
                    del images["input_ids"]
                logits, cache = forward(batch.input_ids.to(run_on), DynamicCache(), **images)
                for step in range(max_new_tokens):
                    check_cancelled()
                    logits = logits.float().cpu()
                    if temperature == 0:
                        token = int(logits.argmax())
                    else:
                        probabilities = torch.softmax(logits / temperature, dim=-1)
                        token = int(torch.multinomial(probabilities, 1, generator=generator))
                    new_ids.append(token)
                    done = token == stop or step + 1 == max_new_tokens
                    if done and not joining:
                        break  # the last token is never fed back
                    logits, cache = forward(torch.tensor([[token]], device=run_on), cache)
                    if done:  # fed once more: its query, key and state complete the pass
                        break
                del cache  # the key/value cache goes before the pass is joined
        finally:
            if hook is not None:
                hook.remove()
        compute_ms = (time.perf_counter() - start) * 1000.0
        result = None
        if isinstance(recording, StepwiseRecording) and recording.complete:
            joined = recording.finish()
            recording = AttentionRecording()
            result = PretrainedAttentions(
                batch=self.extended(batch, new_ids),
                targets=None,
                recording=joined,
                block_calls=self.block_calls(model, joined),
                decoder_head=DecoderHead(torch.cat(hidden, dim=1), head),
                compute_ms=compute_ms,
                device=str(run_on),
            )
        return Generation(
            prompt_length=int(batch.input_ids.shape[1]),
            new_ids=new_ids,
            new_tokens=self.token_strings(new_ids),
            num_layers=self.num_layers,
            recording=recording if record_steps else AttentionRecording(),
            compute_ms=compute_ms,
            result=result,
        )
