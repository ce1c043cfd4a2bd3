"""Tiny random models of every family, saved as local Hugging Face directories.

Built from configs at test time (hidden size 16-32, 2 layers, nothing downloaded) with
a word-level tokenizer (the ``tokenizers`` library, wrapped in transformers'
``PreTrainedTokenizerFast``) saved beside the weights, so that
:func:`attnviz.pretrained.loading.load_model_dir` loads them like any downloaded model.
Each tokenizer adds its family's special tokens ([CLS]/[SEP] with segments for BERT,
<s>/</s> for RoBERTa and BART, </s> for T5, none for the decoders).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

WORDS = (  # noqa: SIM905  (a sentence is easier to read than a list)
    "the cat sat on mat a dog ran to park because it was tired and happy "
    "big small red house tree bird sang loud today"
).split()
"""The words every tiny tokenizer knows (anything else is its unknown token)."""

TEXTS = ["the cat sat on the mat because it was tired", "a dog ran"]
"""Two inputs of different lengths: the second is padded in a batch."""
TARGETS = ["the bird sang", "a big red house and a small tree today"]
"""An encoder-decoder's decoder texts, of different lengths (the first is padded)."""


@dataclass(frozen=True)
class Style:
    """A tokenizer's special tokens, first in its vocabulary, and how it wraps inputs.

    Attributes:
        specials: special tokens, ids 0, 1, ... in this order.
        roles: the tokenizer's attribute for each role (``pad_token``, ``eos_token``, ...).
        single: the post-processor template of one text, or None to add nothing.
        pair: the template of a sentence pair, or None.
        byte_level: a byte-level BPE trained on :data:`WORDS` (GPT-2's ``Ġ`` spaces)
            instead of a word-level vocabulary.
    """

    specials: tuple[str, ...]
    roles: dict[str, str]
    single: str | None = None
    pair: str | None = None
    byte_level: bool = False

    def id(self, token: str) -> int:
        return self.specials.index(token)


BERT_STYLE = Style(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]"),
    {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"},
    single="[CLS] $A [SEP]",
    pair="[CLS] $A [SEP] $B:1 [SEP]:1",
)
ROBERTA_STYLE = Style(
    ("<s>", "<pad>", "</s>", "<unk>"),
    {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"},
    single="<s> $A </s>",
)
T5_STYLE = Style(
    ("<pad>", "</s>", "<unk>"),
    {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"},
    single="$A </s>",
)
DECODER_STYLE = Style(
    ("<unk>", "<s>", "</s>"),
    {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
)
QWEN2_STYLE = Style(
    ("<|endoftext|>",),
    {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    byte_level=True,
)
"""transformers 5 loads a qwen2 folder's tokenizer as ``Qwen2Tokenizer`` whatever its
tokenizer_config says, and that class rebuilds a byte-level BPE from the vocabulary and
merges: a word-level vocabulary would come back as other ids."""


def word_tokenizer(style: Style) -> Any:
    """A tokenizer of :data:`WORDS` after ``style``'s special tokens (ids 0, 1, ...).

    Word-level on whitespace, or a byte-level BPE trained on the words.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if style.byte_level:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=list(style.specials),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator([" ".join(WORDS)] * 3 + WORDS, trainer)
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **style.roles)
    vocab = {token: i for i, token in enumerate([*style.specials, *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=style.roles["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    if style.single is not None:
        used = [t for t in style.specials if t in f"{style.single} {style.pair or ''}".split()]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=style.single,
            pair=style.pair,
            special_tokens=[(t.split(":")[0], vocab[t.split(":")[0]]) for t in used],
        )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **style.roles)


def _gpt2(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.GPT2Config(
        vocab_size=vocab,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
    )
    return transformers.GPT2LMHeadModel(config)


def _llama(s: Style, vocab: int, **shape: Any) -> Any:
    import transformers

    sizes = {
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,  # 2 query heads share each key/value head
        "max_position_embeddings": 64,
    }
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        **{**sizes, **shape},
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
    )
    return transformers.LlamaForCausalLM(config)


def _mistral(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.MistralConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        sliding_window=SLIDING_WINDOW,  # shorter than TEXTS[0]: old keys leave the window
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
    )
    return transformers.MistralForCausalLM(config)


def _qwen2(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=64,
        eos_token_id=s.id("<|endoftext|>"),
        pad_token_id=s.id("<|endoftext|>"),
    )
    return transformers.Qwen2ForCausalLM(config)


def _bert(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        pad_token_id=s.id("[PAD]"),
    )
    return transformers.BertModel(config)


def _distilbert(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.DistilBertConfig(
        vocab_size=vocab,
        dim=32,
        hidden_dim=48,
        n_layers=2,
        n_heads=4,
        max_position_embeddings=64,
        pad_token_id=s.id("[PAD]"),
    )
    return transformers.DistilBertModel(config)


def _roberta(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.RobertaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=66,
        type_vocab_size=1,
        pad_token_id=s.id("<pad>"),
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
    )
    return transformers.RobertaModel(config)


def _t5(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.T5Config(
        vocab_size=vocab,
        d_model=32,
        d_kv=8,
        d_ff=48,
        num_heads=4,
        num_layers=2,
        num_decoder_layers=3,  # a decoder deeper than the encoder
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        pad_token_id=s.id("<pad>"),
        eos_token_id=s.id("</s>"),
        decoder_start_token_id=s.id("<pad>"),
    )
    return transformers.T5ForConditionalGeneration(config)


def _bart(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.BartConfig(
        vocab_size=vocab,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=48,
        decoder_ffn_dim=48,
        max_position_embeddings=64,
        pad_token_id=s.id("<pad>"),
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
        decoder_start_token_id=s.id("</s>"),
        forced_eos_token_id=s.id("</s>"),
    )
    return transformers.BartForConditionalGeneration(config)


SLIDING_WINDOW = 4
"""The tiny Mistral's window, in tokens."""

BUILDERS: dict[str, tuple[Callable[[Style, int], Any], Style]] = {
    "gpt2": (_gpt2, DECODER_STYLE),
    "llama": (_llama, DECODER_STYLE),
    "mistral": (_mistral, DECODER_STYLE),
    "qwen2": (_qwen2, QWEN2_STYLE),
    "bert": (_bert, BERT_STYLE),
    "distilbert": (_distilbert, BERT_STYLE),
    "roberta": (_roberta, ROBERTA_STYLE),
    "t5": (_t5, T5_STYLE),
    "bart": (_bart, ROBERTA_STYLE),
}
"""Each tiny model by its config's ``model_type``: its builder and its tokenizer's style."""


def _gemma2(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.Gemma2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,  # layer 0 slides, layer 1 is global
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        sliding_window=SLIDING_WINDOW,
        attn_logit_softcapping=0.5,  # small, so that the capping changes the weights
        final_logit_softcapping=2.0,
        query_pre_attn_scalar=20,  # scaling 20**-0.5, not head_dim**-0.5
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
        pad_token_id=s.id("</s>"),
    )
    return transformers.Gemma2ForCausalLM(config)


def _gemma3(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,  # multi-query: every head reads one key/value head
        head_dim=8,
        max_position_embeddings=64,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        query_pre_attn_scalar=12,
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
        pad_token_id=s.id("</s>"),
    )
    return transformers.Gemma3ForCausalLM(config)


def _gpt_oss(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.GptOssConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_local_experts=2,
        num_experts_per_tok=1,
        max_position_embeddings=64,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
        pad_token_id=s.id("</s>"),
    )
    model = transformers.GptOssForCausalLM(config)
    with torch.no_grad():  # learned sinks, large enough to take a visible share
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 2.0)
    return model


def _granite(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.GraniteConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attention_multiplier=0.7,  # the scores' scaling, not head_dim**-0.5
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
    )
    return transformers.GraniteForCausalLM(config)


def _qwen2_sliding(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_sliding_window=True,
        sliding_window=SLIDING_WINDOW,
        max_window_layers=1,  # layer 0 global, layer 1 slides
        eos_token_id=s.id("<|endoftext|>"),
        pad_token_id=s.id("<|endoftext|>"),
    )
    return transformers.Qwen2ForCausalLM(config)


def _bloom(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.BloomConfig(
        vocab_size=vocab, hidden_size=32, n_layer=2, n_head=4, bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
    )  # fmt: skip
    return transformers.BloomForCausalLM(config)


QUIRKS: dict[str, tuple[Callable[[Style, int], Any], Style]] = {
    "gemma2": (_gemma2, DECODER_STYLE),
    "gemma3_text": (_gemma3, DECODER_STYLE),
    "gpt_oss": (_gpt_oss, DECODER_STYLE),
    "granite": (_granite, DECODER_STYLE),
    "qwen2_sliding": (_qwen2_sliding, QWEN2_STYLE),
}
"""Decoders whose attention has a family's quirk, each as a tiny random model: logit
soft-capping, query scaling other than head_dim**-0.5 and alternating sliding-window layers
(Gemma 2), multi-query heads with sliding and global layers (Gemma 3), learned attention
sinks (gpt-oss), Granite's attention multiplier, Qwen2's sliding window from a layer on."""


def _gpt_neo(s: Style, vocab: int) -> Any:
    import transformers

    config = transformers.GPTNeoConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        attention_types=[[["global", "local"], 1]],  # layer 1 sees a local window only
        window_size=SLIDING_WINDOW,
        max_position_embeddings=64,
        bos_token_id=s.id("<s>"),
        eos_token_id=s.id("</s>"),
    )
    return transformers.GPTNeoForCausalLM(config)


OWN_ATTENTION: dict[str, tuple[Callable[[Style, int], Any], Style]] = {
    "bloom": (_bloom, DECODER_STYLE),
    "gpt_neo": (_gpt_neo, DECODER_STYLE),
}
"""Decoders whose attention modules compute attention themselves instead of calling
transformers' attention interface (BLOOM's ALiBi; GPT-Neo's global and local layers with
unscaled scores): AttnViz draws them from their eager ``output_attentions``."""


FAMILIES = {
    "gpt2": "decoder",
    "llama": "decoder",
    "mistral": "decoder",
    "qwen2": "decoder",
    "bert": "encoder",
    "distilbert": "encoder",
    "roberta": "encoder",
    "t5": "encoder-decoder",
    "bart": "encoder-decoder",
}
"""The family each tiny model belongs to (what ``family_of`` must say)."""


def save_tiny(model_type: str, folder: Path, *, seed: int = 0, **shape: Any) -> Path:
    """Build the tiny ``model_type`` (random weights from ``seed``) and save it to ``folder``.

    ``model_type`` is one of :data:`BUILDERS`, :data:`QUIRKS` or :data:`OWN_ATTENTION`;
    ``shape``: config fields in place of the tiny sizes (llama only, for a bigger model).
    """
    build, style = {**BUILDERS, **QUIRKS, **OWN_ATTENTION}[model_type]
    tokenizer = word_tokenizer(style)
    torch.manual_seed(seed)
    model = build(style, len(tokenizer), **shape)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
