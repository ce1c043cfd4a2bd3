"""Head atlas: what every head of a text model does, scored over a corpus.

For each layer and head of a text model's self-attention block, six numbers
(:data:`.definitions.SCORES`), each a mean of the softmax weights A (or of their rows) over chosen
queries, as (N, H) float64 arrays: N layers, H query heads. Two kinds of input:

* natural text (``previous_token``, ``first_token``, ``self``, ``entropy``): the corpus
  shipped with the package (``attnviz/corpus/head_atlas.txt``, see its README.md) or the
  caller's own texts. Each text is tokenised alone, as the model's tokenizer does (its
  special tokens included: [CLS] ... [SEP] for BERT, BOS where the tokenizer adds one),
  cut to ``max_tokens``, and runs in a forward pass of its own (B = 1: no padding, so no
  padding key or query exists). The counted queries are the positions i >= 1 whose token
  is not a special token (the tokenizer's ``all_special_ids``: [CLS], [SEP], BOS, EOS,
  pad, unk); the keys are every position, special tokens included, with the weights as
  the model computed them (rows are not renormalised). A score is the mean over every
  counted query of every text (each query weighs the same).
* repeated random tokens (``induction``, ``duplicate_token``): ``induction_sequences``
  sequences ``P + x + x + S``, where x is R tokens drawn without replacement from the
  vocabulary less its special and added tokens (seeded, :func:`.inputs.repeated_tokens`), and P
  and S are the special tokens the tokenizer puts before and after any text (BOS or
  [CLS]; [SEP] or EOS; none for SmolLM2). All have one length, so they run in batches
  without padding. The counted queries are the R positions of the second copy of x.

Which block: a decoder's layers, an encoder's, and an encoder-decoder's *encoder* (its
self-attention reads the text alone, as an encoder's does; the decoder then runs on its
start token only, unobserved). Speech and image models are refused
(:class:`.inputs.HeadScoresUnavailableError`) until scores are defined for them.

The weights are never held for a whole layer: each pass runs with a
:class:`.observer.HeadScoreObserver` (:class:`..computing.AttentionObserver`), to which every layer
hands its weights in chunks of query rows, computed by the model's own eager attention;
the observer adds the sums each score needs, per head, in float64 on the layer's device
(a model placed by a device map hands each layer's weights on that layer's device), and
moves the (H,) sums to the CPU at the end of the layer.

The defaults (:data:`.definitions.MAX_TOKENS`, ``REPEAT_LENGTH``, ``INDUCTION_SEQUENCES``)
keep the work small: SmolLM2-135M (30 layers x 9 heads, float32, 2 CPU cores) reads the
shipped corpus (33 sequences, 5,157 tokens) and 16 sequences of 2 x 40 random tokens in
35 passes, in about 16 s, 1.2 times the same passes without an observer
(benchmarks/head_atlas.py).

The package: :mod:`.definitions` (the scores and defaults), :mod:`.inputs` (the corpus and
the repeated tokens), :mod:`.observer` (the sums during a pass), :mod:`.table` (the result),
:mod:`.plan` (a request checked once, run by :func:`.shards.head_scores`), :mod:`.cache`
(results on disk).
"""

from __future__ import annotations

from .cache import (
    ATLAS_FOLDER,
    PYTHON_SOURCE,
    atlas_path,
    cached_head_scores,
    read_cached,
    write_cached,
)
from .definitions import (
    CORPUS_NAME,
    CORPUS_VERSION,
    DEFINITION_VERSION,
    DEFINITIONS,
    INDUCTION_BATCH,
    INDUCTION_SEQUENCES,
    MAX_TOKENS,
    PROBE_TEXT,
    REPEAT_LENGTH,
    SCORES,
    Rule,
    ScoreDefinition,
    natural_rules,
    repeated_rules,
)
from .inputs import (
    Corpus,
    HeadScoresUnavailableError,
    decoder_start,
    natural_queries,
    natural_tokens,
    paragraphs,
    random_vocabulary,
    repeated_tokens,
    scored_block,
    second_copy,
    shipped_corpus,
    special_affixes,
    text_model,
    texts_corpus,
    unpadded_batch,
)
from .observer import HeadScoreObserver
from .plan import AtlasPlan, Pass, model_fingerprint, plan_atlas, repeat_length
from .shards import head_scores
from .table import CorpusInfo, HeadScores, work_fingerprint

__all__ = [
    "ATLAS_FOLDER",
    "CORPUS_NAME",
    "CORPUS_VERSION",
    "DEFINITIONS",
    "DEFINITION_VERSION",
    "INDUCTION_BATCH",
    "INDUCTION_SEQUENCES",
    "MAX_TOKENS",
    "PROBE_TEXT",
    "PYTHON_SOURCE",
    "REPEAT_LENGTH",
    "SCORES",
    "AtlasPlan",
    "Corpus",
    "CorpusInfo",
    "HeadScoreObserver",
    "HeadScores",
    "HeadScoresUnavailableError",
    "Pass",
    "Rule",
    "ScoreDefinition",
    "atlas_path",
    "cached_head_scores",
    "decoder_start",
    "head_scores",
    "model_fingerprint",
    "natural_queries",
    "natural_rules",
    "natural_tokens",
    "paragraphs",
    "plan_atlas",
    "random_vocabulary",
    "read_cached",
    "repeat_length",
    "repeated_rules",
    "repeated_tokens",
    "scored_block",
    "second_copy",
    "shipped_corpus",
    "special_affixes",
    "text_model",
    "texts_corpus",
    "unpadded_batch",
    "work_fingerprint",
    "write_cached",
]
