"""A corpus read a line at a time, each passage cut to what a pass uses (issue 53, finding 4).

Before: a corpus of one 60 MB line took 3.8 GB and ignored Ctrl-C (the whole line went to
the tokenizer, which does not return to Python while it runs), a binary ``.txt`` ended in
a ``UnicodeDecodeError`` traceback, and a 200 MB corpus tokenised for minutes with no
progress shown. Now :func:`read_corpus` holds ``max_tokens`` x 64 characters of a passage
at most, :func:`natural_tokens` gives the tokenizer a prefix whose first ids are the whole
text's, undecodable text is refused by line, bars count the bytes read and the passages
tokenised, and Ctrl-C stops ``attnviz atlas`` with one line and exit status 130.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from attnviz.attention import AttentionInputError
from attnviz.pretrained.atlas.corpus import CHARS_PER_TOKEN, passage_chars, read_corpus
from attnviz.pretrained.atlas.inputs import natural_tokens
from attnviz.pretrained.loading import load_model_dir

from tests.pretrained import test_atlas_shards, tiny
from tests.support.cli import ctrl_c_as_on_a_terminal

folders = test_atlas_shards.folders
"""The tiny Llama and BERT folders (module-scoped), the atlas shards tests' fixture."""


def words(count: int, start: int = 0) -> str:
    return " ".join(tiny.WORDS[(start + i) % len(tiny.WORDS)] for i in range(count))


def test_a_huge_line_is_cut_while_it_is_read_and_the_lines_after_it_are_kept(
    tmp_path: Path,
) -> None:
    corpus = tmp_path / "corpus.txt"
    huge = words(400_000)  # about 1.6 MB on one line
    corpus.write_text(f"first line\n{huge}\n\nlast line, é and 語\n")
    read: list[int] = []
    texts = read_corpus(corpus, max_chars=1000, progress=read.append)
    assert texts == ["first line", huge[:1000], "last line, é and 語"]
    assert sum(read) == corpus.stat().st_size  # every byte counted once, for the bar
    # without a bound each passage is whole, as before
    assert read_corpus(corpus) == ["first line", huge, "last line, é and 語"]


def test_a_cut_inside_a_multibyte_character_drops_only_that_character(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    line = "é語" * 5_000  # 2- and 3-byte characters: the byte limit falls inside one
    corpus.write_text(line + "\nnext\n", encoding="utf-8")
    for max_chars in (1, 2, 7, 100, 1001):
        assert read_corpus(corpus, max_chars=max_chars) == [line[:max_chars], "next"[:max_chars]]


def test_jsonl_passages_are_cut_and_carriage_returns_split_lines_as_before(
    tmp_path: Path,
) -> None:
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text(json.dumps({"text": words(500)}) + "\n" + json.dumps({"text": "b"}) + "\n")
    assert read_corpus(jsonl, max_chars=50) == [words(500)[:50], "b"]
    txt = tmp_path / "corpus.txt"
    txt.write_bytes(b"one\r\ntwo\rthree\n")
    assert read_corpus(txt) == "one\r\ntwo\rthree\n".splitlines()


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 1),  # a binary file named .txt
        (b"good text\nLatin-1 caf\xe9\n", 2),
        (b"ok\n" + "é".encode()[:1] + b" cut\n", 2),
    ],
    ids=["png", "latin-1", "truncated-character"],
)
def test_text_that_is_not_utf8_is_refused_by_line(
    tmp_path: Path, content: bytes, line: int
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(content)
    with pytest.raises(AttentionInputError, match=rf"corpus.txt:{line}: not UTF-8 text") as raised:
        read_corpus(corpus, max_chars=1000)
    assert raised.value.field == "corpus"


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_a_long_text_is_tokenised_by_prefixes_with_the_whole_texts_ids(
    folders: dict[str, Path], name: str
) -> None:
    model = load_model_dir(name, folders[name])
    given: list[int] = []
    tokenizer = model.tokenizer

    class Spy:
        def __call__(self, text: str, **kwargs: object) -> object:
            given.append(len(text))
            return tokenizer(text, **kwargs)

    texts = [
        words(50_000),  # many words
        "x" * 40_000 + " " + words(20),  # one very long word first
        words(30) + " " + "   " * 3_000 + words(200),  # a run of whitespace inside
        words(5),  # shorter than max_tokens: whole, not cut
    ]
    for max_tokens in (12, 40):
        for text in texts:
            expected_whole = tokenizer(text)["input_ids"]
            cut = len(expected_whole) > max_tokens
            expected = (
                tokenizer(text, truncation=True, max_length=max_tokens)["input_ids"]
                if cut
                else expected_whole
            )
            given.clear()
            model.tokenizer = Spy()  # type: ignore[assignment]
            try:
                ids, was_cut = natural_tokens(model, text, max_tokens)
            finally:
                model.tokenizer = tokenizer
            assert (list(ids), was_cut) == (list(expected), cut), (name, max_tokens, text[:40])
            if text is texts[0]:  # the tokenizer never saw the 300,000-character text
                assert max(given) <= CHARS_PER_TOKEN * max_tokens, given


def run_atlas(folder: Path, corpus: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "attnviz.cli", "atlas", str(folder), "--corpus", str(corpus),
        "--out", str(out), "--max-tokens", "12", "--top-k", "2", *extra,
    ]  # fmt: skip


PEAK_RSS = (
    "import resource, sys\n"
    "from attnviz.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "finally:\n"
    "    print('peak_rss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
    "file=sys.stderr)\n"
)


def peak_rss_mib(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``attnviz ARGS`` (command[3:]) and return its peak RSS (MiB) and the run."""
    run = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *command[3:]],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    line = next(x for x in run.stderr.splitlines() if x.startswith("peak_rss_kib"))
    return int(line.split()[1]) / 1024, run


def test_a_corpus_of_one_huge_line_costs_no_more_memory_than_a_small_one(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    small = tmp_path / "small.txt"
    small.write_text(words(30) + "\n" + words(8, 3) + "\n")
    huge = tmp_path / "huge.txt"
    with huge.open("w") as file:
        file.write(words(30) + "\n")
        for _ in range(100):  # one 20 MB line: 100 pieces of 200 KB, no newline between
            file.write(words(40_000) + " ")
        file.write("\n" + words(8, 3) + "\n")
    assert huge.stat().st_size > 15 * 2**20
    baseline, _ = peak_rss_mib(run_atlas(folders["bert"], small, tmp_path / "a"))
    peak, run = peak_rss_mib(run_atlas(folders["bert"], huge, tmp_path / "b"))
    # The line is read 1 MiB at a time past its first 12 x 64 characters: the run holds
    # what the small corpus's does (before: the whole line and its tokens, over 1 GiB).
    assert peak < baseline + 64, (peak, baseline)
    data = json.loads((tmp_path / "b" / "atlas.json").read_text())
    assert data["corpus"]["sequences"] == 3 and data["corpus"]["truncated"] == 2
    long_passage = max(data["passages"].values(), key=len) if data["passages"] else ""
    assert len(long_passage) <= passage_chars(12)
    # the bars: bytes read and passages tokenised, then the passes
    for bar in ("corpus:", "tokens:", "atlas:"):
        assert bar in run.stderr, run.stderr


def test_a_binary_corpus_is_one_line_naming_it(folders: dict[str, Path], tmp_path: Path) -> None:
    corpus = tmp_path / "image.txt"
    corpus.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00" * 100)
    out = tmp_path / "out"
    run = subprocess.run(
        run_atlas(folders["bert"], corpus, out),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    last = run.stderr.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith(f"attnviz: corpus: {corpus}:1: not UTF-8 text"), run.stderr
    assert not out.exists()  # the folder this run made is removed


def test_ctrl_c_stops_the_atlas_with_one_line_and_exit_130(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(words(10, i) + "\n" for i in range(20_000)))
    out = tmp_path / "out"
    process = subprocess.Popen(
        run_atlas(folders["llama"], corpus, out),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=ctrl_c_as_on_a_terminal,
    )
    assert process.stderr is not None
    seen = b""
    try:
        # The event: the bar of passages tokenised has begun (20,000 passages to go).
        while b"tokens:" not in seen:
            byte = process.stderr.read(1)
            assert byte, seen.decode(errors="replace")
            seen += byte
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = (seen + rest).decode(errors="replace")
    assert code == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert text.replace("\r", "\n").strip().splitlines()[-1] == "attnviz atlas: stopped (Ctrl-C)"
    assert not out.exists()


def test_every_line_break_of_splitlines_ends_a_passage_even_past_a_long_line(
    tmp_path: Path,
) -> None:
    # A classic Mac file (\r alone) of long lines, and passages separated by \x0b, \x1c,
    # U+2028: each is a passage, as str.splitlines splits them, however far into the file
    # (the reader skips only the rest of a line past max_chars, never the lines after it).
    long = words(20_000)  # about 80,000 characters: past 64 x 12
    parts = [long, "second", long, "third é", "fourth"]
    for separator in ("\r", "\r\n", "\x0b", "\x1c", "\u2028", "\x85"):
        corpus = tmp_path / "corpus.txt"
        corpus.write_text(separator.join(parts), encoding="utf-8", newline="")
        expected = [part[:768] for part in separator.join(parts).splitlines()]
        assert read_corpus(corpus, max_chars=768) == expected, repr(separator)
        assert read_corpus(corpus) == separator.join(parts).splitlines()


def test_a_jsonl_string_may_hold_line_separators_as_they_are(tmp_path: Path) -> None:
    # JSON allows U+2028, U+2029 and U+0085 raw in a string (json.dumps with
    # ensure_ascii=False writes them so): a .jsonl line ends at "\n" only.
    texts = ["a\u2028b", "c\x85d", "e\u2029f\x0bg", "plain"]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": t}, ensure_ascii=False) + "\r\n" for t in texts),
        encoding="utf-8",
        newline="",
    )
    assert read_corpus(corpus) == texts
    assert read_corpus(corpus, max_chars=3) == [t[:3] for t in texts]


def test_a_bad_byte_far_into_a_long_line_is_found_with_its_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"first\n" + words(300_000).encode() + b" caf\xe9\nlast\n")
    with pytest.raises(AttentionInputError, match=r"corpus.txt:2: not UTF-8 text"):
        read_corpus(corpus, max_chars=100)
