"""Speech in, words out: Whisper's transcription and every attention block over time.

A :class:`SpeechModel` is a transformers ``WhisperForConditionalGeneration`` (converted
from the packaged CTranslate2 tiny.en by :mod:`.whisper`, or any local Whisper
directory) run by the same recorder as every other model. :meth:`SpeechModel.transcribe`
turns 16 kHz mono audio into log-mel features (``WhisperFeatureExtractor``), decodes
greedily with the key/value cache (the most likely token at each step, Whisper's
suppressed tokens masked, as CTranslate2's ``generate`` with ``beam_size=1``), then runs
the model once more over the prompt and the transcript, teacher-forced, with the
recorder on: that pass gives the three blocks, each head's weights computed by
Whisper's own eager attention.

* ``"encoder"``: self-attention over audio frames. Whisper's encoder always reads 30 s
  (1,500 frames of 20 ms, the audio padded with silence); the maps are cut to the
  frames that hold the audio, F = ceil(seconds / 0.02), so a row's weights over them
  sum to at most 1 (the rest went to the padding).
* ``"decoder"``: causal self-attention over the decoder's tokens, T x T.
* ``"cross"``: each decoder position's attention over the audio frames, T x F, cut as
  the encoder's. Row i is the position that *produced* token i + 1: the row of a
  transcribed token is the one before it (as Whisper's own word alignment reads them,
  ``whisper/timing.py``).

Audio is decoded by PyAV (FFmpeg: WAV, FLAC, MP3, Ogg/Opus, WebM from a browser's
microphone, ...) and resampled to 16 kHz mono (:func:`decode_audio`).
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
import torch

from ..attention.cancellation import check_cancelled
from ..attention.errors import AttentionInputError
from .blocks import Block
from .calls import AttentionRecording
from .model import ModelFormatError, PretrainedModel
from .recorder import record_attention
from .whisper import WHISPER_ENGLISH_VOCAB

SAMPLE_RATE: Final = 16_000
"""Whisper's audio rate, in Hz."""
FRAME_S: Final = 0.02
"""Seconds per encoder frame (10 ms mel hops, halved by the stride-2 convolution)."""
MAX_AUDIO_S: Final = 30.0
"""The most audio one transcription takes: Whisper's window, in seconds."""
MAX_TRANSCRIPT_TOKENS: Final = 224
"""The most tokens one transcription produces (Whisper's own ``sample_len``)."""
ROUNDING_SAMPLES: Final = SAMPLE_RATE // 100
"""10 ms past :data:`MAX_AUDIO_S` still accepted (a codec's padding, a recorder's latency)."""
MIN_SAMPLE_RATE: Final = 4_000
"""The lowest sample rate accepted, in Hz (telephone speech is 8 kHz): a lower one says
little audio in a small file that resampling to 16 kHz would blow up."""
MAX_SAMPLE_RATE: Final = 384_000
"""The highest sample rate accepted, in Hz (the fastest studio converters)."""
MAX_CHANNELS: Final = 32
"""The most channels accepted (7.1.4 surround is 12)."""
MAX_DECODE_S: Final = 2.5
"""The longest decoding of one upload may take, in seconds of this thread's CPU time (30 s
of any codec decodes in well under 0.2 s)."""
STATED_MARGIN: Final = 1.25
"""A header's stated length refuses the file before decoding only beyond this many times
the limit (37.5 s for 30 s): between, the decoded frames decide."""
AUDIO_FIELD: Final = "audio"


class AudioError(AttentionInputError):
    """The upload is not audio PyAV can decode, or is empty or too long (field ``audio``)."""

    def __init__(self, message: str) -> None:
        super().__init__(AUDIO_FIELD, message)


def decode_audio(
    data: bytes, *, max_s: float = MAX_AUDIO_S, max_decode_s: float = MAX_DECODE_S
) -> np.ndarray:
    """Decode any audio file FFmpeg reads to 16 kHz mono float32 in [-1, 1], within bounds.

    The bounds hold whatever the file claims (hostile uploads were measured: an 81-byte
    FLAC whose header says 10 Hz expands to 2.4 GB when resampled to 16 kHz):

    1. before decoding, the container's header: the stream's sample rate within
       :data:`MIN_SAMPLE_RATE`..:data:`MAX_SAMPLE_RATE`, at most :data:`MAX_CHANNELS`
       channels, and its duration, where it states one, at most ``max_s`` (with
       :data:`STATED_MARGIN`, since some containers' lengths are estimates);
    2. while decoding, frame by frame, each frame's own rate and channels checked the
       same way, and the seconds decoded so far (samples / the frame's rate, at the
       source rate, before any resampling) at most ``max_s``: a header that lies about
       the duration is caught one frame past the limit, and a frame is resampled only
       once it is known to be kept, so at most ``max_s`` of 16 kHz audio is ever held;
    3. the whole decode within ``max_decode_s`` seconds of CPU time, checked at every
       packet, whether it gives frames or not (a file of millions of empty packets), and
       stopped when the request is given up
       (:func:`attnviz.attention.cancellation.check_cancelled`).

    Args:
        data: the file's bytes (WAV, FLAC, MP3, Ogg, WebM, M4A, ...).
        max_s: the longest audio accepted, in seconds.
        max_decode_s: the longest decoding takes before it is given up, in seconds.

    Returns:
        (S,) float32 samples at :data:`SAMPLE_RATE`.

    Raises:
        AudioError: not decodable audio, no audio stream, silence of zero length, a
            sample rate or channel count out of bounds, longer than ``max_s`` (the
            message gives its length), or too slow to decode.
    """
    import av

    chunks: list[np.ndarray] = []
    seconds = 0.0
    limit_s = max_s + ROUNDING_SAMPLES / SAMPLE_RATE
    started = time.thread_time()  # this thread's CPU time: a busy machine does not count
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioError("the file has no audio stream")
            stream = container.streams.audio[0]
            _check_format(stream.codec_context.sample_rate, stream.codec_context.channels)
            stated = _stated_seconds(container, stream)
            # A stated length can be an estimate (an MP3 without a Xing header, from its
            # bitrate): refused up front only well past the limit; the frames decide.
            if stated is not None and stated > limit_s * STATED_MARGIN:
                raise AudioError(_too_long(max_s, stated))
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            for packet in container.demux(stream):  # checked per packet, frames or not
                check_cancelled()
                if time.thread_time() - started > max_decode_s:
                    raise AudioError(
                        f"decoding took over {max_decode_s:g} s of CPU and was stopped: the "
                        "file is damaged or built to be slow"
                    )
                for frame in packet.decode():
                    _check_format(frame.sample_rate, len(frame.layout.channels))
                    seconds += frame.samples / frame.sample_rate
                    if seconds > limit_s:
                        raise AudioError(_too_long(max_s, max(seconds, stated or 0.0)))
                    for out in resampler.resample(frame):
                        chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
    except AudioError:
        raise
    except av.error.FFmpegError as error:
        raise AudioError(
            f"not an audio file FFmpeg can decode (WAV, FLAC, MP3, Ogg, WebM, ...): "
            f"{error.strerror or type(error).__name__}"
        ) from error
    except (ValueError, EOFError, ZeroDivisionError) as error:
        raise AudioError(f"the audio cannot be decoded: {error}") from error
    samples = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    if samples.size == 0:
        raise AudioError("the file holds no audio samples")
    samples = np.nan_to_num(samples.astype(np.float32, copy=False))
    return np.clip(samples, -1.0, 1.0)


def _check_format(rate: int | None, channels: int | None) -> None:
    """Refuse a sample rate or a channel count out of bounds (as a header or a frame says).

    Raises:
        AudioError: as above.
    """
    if not rate or not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioError(
            f"a sample rate of {rate or 0} Hz is outside {MIN_SAMPLE_RATE:,} to "
            f"{MAX_SAMPLE_RATE:,} Hz"
        )
    if channels is not None and not 1 <= channels <= MAX_CHANNELS:
        raise AudioError(f"{channels} channels is outside 1 to {MAX_CHANNELS}")


def _stated_seconds(container: Any, stream: Any) -> float | None:
    """The duration the header states (the stream's, else the container's), or None."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        import av

        return float(container.duration / av.time_base)
    return None


def _too_long(max_s: float, seconds: float) -> str:
    return (
        f"the audio is longer than {max_s:g} s (Whisper's window); it is at least "
        f"{seconds:.1f} s: cut it shorter"
    )


def waveform_envelope(samples: np.ndarray, points: int = 1200) -> dict[str, Any]:
    """The waveform's min and max over ``points`` equal spans, for drawing it.

    Args:
        samples: (S,) float32 at :data:`SAMPLE_RATE`, S >= 1.
        points: the most spans.

    Returns:
        ``{"min": (P,), "max": (P,), "step_s": seconds per span}``, P <= points.
    """
    span = max(1, math.ceil(samples.size / points))
    count = math.ceil(samples.size / span)
    padded = np.zeros(count * span, np.float32)
    padded[: samples.size] = samples
    spans = padded.reshape(count, span)
    return {
        "min": spans.min(axis=1),
        "max": spans.max(axis=1),
        "step_s": span / SAMPLE_RATE,
    }


@dataclass
class Transcription:
    """One audio clip through Whisper: the transcript and the recorded teacher-forced pass.

    Attributes:
        text: the transcript, special tokens left out.
        samples: the 16 kHz mono audio (S,) float32.
        decoder_ids: the decoder's input, prompt then transcript: (T,) ids.
        prompt_length: how many of ``decoder_ids`` are the prompt
            (``<|startoftranscript|>``, ``<|notimestamps|>``).
        next_ids: what each decoder position produced, (T,): ``decoder_ids[1:]`` then
            ``<|endoftext|>`` (or the last token, where 224 tokens ran out first).
        num_frames: F, the encoder frames that hold the audio.
        recording: the attention calls of the teacher-forced pass.
        block_calls: each block's calls in ``recording``, layer 0 first.
        transcribe_ms: greedy decoding's wall time, in ms.
        compute_ms: the recorded pass's wall time, in ms.
        device: where it ran.
    """

    text: str
    samples: np.ndarray
    decoder_ids: list[int]
    prompt_length: int
    next_ids: list[int]
    num_frames: int
    recording: AttentionRecording
    block_calls: dict[Block, list[int]]
    transcribe_ms: float
    compute_ms: float
    device: str

    @property
    def duration_s(self) -> float:
        """The audio's length, in seconds."""
        return self.samples.size / SAMPLE_RATE

    def weights(self, block: Block, layer: int) -> torch.Tensor:
        """One layer's heads of a block, cut to the audio's frames.

        Returns:
            (H, L_q, L_k) float32 on the CPU: encoder (H, F, F), decoder (H, T, T),
            cross (H, T, F); the weights of Whisper's own eager attention.

        Raises:
            IndexError: no such layer.
        """
        calls = self.block_calls[block]
        if not 0 <= layer < len(calls):
            raise IndexError(f"{block} layer {layer} is not in 0..{len(calls) - 1}")
        weights = self.recording.layer_weights(calls[layer])[0]
        if block == "encoder":
            weights = weights[:, : self.num_frames, : self.num_frames]
        elif block == "cross":
            weights = weights[:, :, : self.num_frames]
        return weights.contiguous()

    def block(
        self, block: Block, each: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Every layer of a block: (N, H, L_q, L_k) float32, as :meth:`weights`.

        Args:
            each: applied to each layer's (H, L_q, L_k) as it is computed (the encoder's
                pooling), so that one layer's full maps are held at a time (13.5 M
                floats for 30 s of audio), not all of them.
        """
        layers = range(len(self.block_calls[block]))
        return torch.stack([(each or _same)(self.weights(block, i)) for i in layers])


def _same(weights: torch.Tensor) -> torch.Tensor:
    return weights


@dataclass
class SpeechModel(PretrainedModel):
    """A Whisper model that transcribes audio while recording its attention.

    Attributes (besides :class:`.model.PretrainedModel`'s):
        feature_extractor: its ``WhisperFeatureExtractor`` (log-mel features, 30 s).
    """

    feature_extractor: Any = None
    modality: ClassVar[str] = "speech"

    @property
    def alignment_heads(self) -> list[tuple[int, int]]:
        """The cross-attention heads (layer, head) that follow the words in time.

        As the model's config names them (Whisper's ``alignment_heads``); empty if none.
        """
        pairs = getattr(self.config, "alignment_heads", None) or getattr(
            self.model.generation_config, "alignment_heads", None
        )
        return [(int(layer), int(head)) for layer, head in pairs or []]

    @property
    def prompt_ids(self) -> list[int]:
        """The decoder's forced start: ``<|startoftranscript|>``, then ``<|notimestamps|>``.

        A multilingual model gets ``<|en|><|transcribe|>`` between them.
        """
        ids = [int(self.config.decoder_start_token_id)]
        multilingual = getattr(self.model.generation_config, "is_multilingual", None)
        if multilingual or (multilingual is None and self.vocab_size > WHISPER_ENGLISH_VOCAB):
            ids += [self._token_id("<|en|>"), self._token_id("<|transcribe|>")]
        ids.append(self._token_id("<|notimestamps|>"))
        return ids

    def _token_id(self, token: str) -> int:
        found = self.tokenizer.convert_tokens_to_ids(token)
        if not isinstance(found, int):
            raise ModelFormatError(f"{self.name}'s tokenizer has no {token}")
        return found

    def warm_up(self) -> None:
        """One second of silence through the whole path (torch's lazy start-up), once.

        A model loaded once per process (:func:`.loading.load_model`) and offered again (a
        second app, a registry configured anew) is warm already: the next call returns.
        """
        if self.attention_path_found:
            return
        self.transcribe(np.zeros(SAMPLE_RATE, np.float32), device="auto", max_new_tokens=4)
        self.attention_path_found = True

    def features(self, samples: np.ndarray) -> torch.Tensor:
        """(1, mel bins, 3000) float32 log-mel features of 30 s (the audio, then silence)."""
        out = self.feature_extractor(samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        features: torch.Tensor = out.input_features
        return features.float()

    def transcribe(
        self,
        samples: np.ndarray,
        *,
        device: str = "auto",
        max_new_tokens: int = MAX_TRANSCRIPT_TOKENS,
    ) -> Transcription:
        """Transcribe 16 kHz mono audio greedily, then record one teacher-forced pass.

        Args:
            samples: (S,) float32 at :data:`SAMPLE_RATE`, at most :data:`MAX_AUDIO_S`.
            device: "auto", "cpu" or "cuda".
            max_new_tokens: the most tokens to produce.

        Returns:
            A :class:`Transcription`, its attention recorded for every block.

        Raises:
            AttentionInputError: (field ``audio``) longer than 30 s; (``device``) as
                :func:`attnviz.attention.engine.resolve_device`.
        """
        if samples.size > MAX_AUDIO_S * SAMPLE_RATE + ROUNDING_SAMPLES:
            raise AudioError(f"{samples.size / SAMPLE_RATE:.1f} s is over {MAX_AUDIO_S:g} s")
        run_on, model = self.placed_on(device)
        features = self.features(samples).to(run_on, self.dtype)
        config = self.config
        suppress = list(getattr(config, "suppress_tokens", None) or [])
        begin = list(getattr(config, "begin_suppress_tokens", None) or [])
        eot = int(config.eos_token_id)
        ids = self.prompt_ids
        prompt_length = len(ids)
        limit = min(max_new_tokens, int(config.max_target_positions) - prompt_length)
        start = time.perf_counter()
        with torch.inference_mode():
            encoder_outputs = model.get_encoder()(features)
            produced, cache, fed, cut = eot, None, ids, False
            for step in range(limit):
                out = model(
                    encoder_outputs=encoder_outputs,
                    decoder_input_ids=torch.tensor([fed], device=run_on),
                    past_key_values=cache,
                    use_cache=True,
                )
                cache, logits = out.past_key_values, out.logits[0, -1]
                logits[suppress] = -math.inf
                if step == 0:
                    logits[begin] = -math.inf
                produced = int(logits.argmax())
                if produced == eot:
                    break
                ids = [*ids, produced]
                fed = [produced]
            else:  # out of tokens: the last one becomes what the last position produced
                cut = len(ids) > prompt_length
                if cut:
                    ids = ids[:-1]
        transcribe_ms = (time.perf_counter() - start) * 1000.0
        start = time.perf_counter()
        with torch.inference_mode(), record_attention() as recording:
            model(
                input_features=features,
                decoder_input_ids=torch.tensor([ids], device=run_on),
                use_cache=False,
            )
        compute_ms = (time.perf_counter() - start) * 1000.0
        text_ids = [*ids[prompt_length:], produced] if cut else ids[prompt_length:]
        return Transcription(
            text=str(self.tokenizer.decode(text_ids, skip_special_tokens=True)).strip(),
            samples=samples,
            decoder_ids=ids,
            prompt_length=prompt_length,
            next_ids=[*ids[1:], produced],
            num_frames=min(int(config.max_source_positions), max(1, math.ceil(samples.size / 320))),
            recording=recording,
            block_calls=self.block_calls(model, recording),
            transcribe_ms=transcribe_ms,
            compute_ms=compute_ms,
            device=str(run_on),
        )
