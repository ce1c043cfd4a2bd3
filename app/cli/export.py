"""``attnviz export``: the heatmaps as a file, of the toy engine or of a pretrained model."""

from __future__ import annotations

import argparse
from typing import Any

from ..pretrained.methods import DRAWN_METHODS
from .common import DefaultsShown, build_request, check_model_names, input_arguments

EXPORT_SUFFIXES = (".html", ".htm", ".png", ".svg", ".pdf")
"""What ``export --output`` writes, by the file's suffix."""


def run(args: argparse.Namespace) -> None:
    """Write the heatmaps as a standalone HTML file (Plotly.js inlined) or a PNG, SVG, PDF."""
    from ..attention import AttentionInputError, compute_attention
    from ..views.figure import attention_figure
    from ..views.notebook import AttentionView
    from ..views.show import show

    if args.output is None or args.output.suffix.lower() not in EXPORT_SUFFIXES:
        raise SystemExit("attnviz: export needs --output FILE.html (or .png, .svg, .pdf)")
    if (args.model is None) != (args.text is None):
        raise SystemExit("attnviz: export --model NAME needs --text TEXT, and --text a --model")
    if args.head is not None and args.layer is None:
        raise SystemExit("attnviz: --head needs --layer")
    if args.model is not None:
        check_model_names([args.model], "--model")
    try:
        if args.model is not None:
            view = show(
                args.text,
                args.model,
                layer=args.layer,
                method=args.method or DRAWN_METHODS[0],
                target=args.target[0] if args.target else None,
                device=getattr(args, "device", "auto"),
            )
            if args.head is not None:
                view = _one_head(view, args.head)
        else:
            if args.layer is not None or args.method not in (None, DRAWN_METHODS[0]):
                raise SystemExit("attnviz: --layer, --head and --method are for --model")
            request = build_request(args)
            result = compute_attention(
                request.sequences,
                targets=request.targets,
                mask=request.mask,
                dtype=request.dtype,
                mask_fill=float(request.mask_fill),
                scale=request.scale,
                config=request.layer(),
            )
            figure = attention_figure(result, sequence_index=args.sequence_index)
            view = AttentionView(figure, result.attn_weights[args.sequence_index][None].numpy())
    except (AttentionInputError, IndexError, ValueError) as error:
        raise SystemExit(f"attnviz: {error}") from None
    try:
        view.save(args.output, interactive=False)  # the figure, as PNG/SVG/PDF are
    except RuntimeError as error:
        raise SystemExit(f"attnviz: {error}") from None


def _one_head(view: Any, head: int) -> Any:
    """A head view's one head, as a view of its own."""
    from ..views.notebook import head_view

    heads = view.maps.shape[1]
    if not 0 <= head < heads:
        raise SystemExit(f"attnviz: --head {head} is not below {heads}")
    layout = view.figure.layout
    query = list(layout.yaxis.ticktext)
    key = list(layout.xaxis.ticktext)
    return head_view(
        view.maps[:, head : head + 1],
        key,
        target_tokens=query if query != key else None,
        title=f"{layout.title.text}, head {head}",
    )


def add_parser(commands: Any) -> None:
    """``export`` and its options, on the main parser's subcommands."""
    parser = commands.add_parser(
        "export",
        help="write the heatmaps: standalone HTML (offline), PNG, SVG or PDF",
        formatter_class=DefaultsShown,
    )
    input_arguments(parser)
    parser.add_argument("--sequence-index", type=int, default=0, help="which sequence to draw")
    parser.add_argument(
        "--model",
        default=None,
        help="a pretrained model (a packaged name such as all-MiniLM-L6-v2, a local "
        "Hugging Face directory or .gguf file, or a Hugging Face id such as gpt2 or "
        "org/name@revision) to run on --text instead of the toy engine",
    )
    parser.add_argument("--text", default=None, help="the text for --model")
    parser.add_argument(
        "--layer", type=int, default=None, help="one layer's heads (default: every layer)"
    )
    parser.add_argument(
        "--head", type=int, default=None, help="with --layer, that head alone (default: all)"
    )
    parser.add_argument(
        "--method",
        choices=DRAWN_METHODS,
        default=None,
        help="with --model: the weights (attention, the default), or norm-based attention "
        "||alpha f(x)|| (norm, Kobayashi et al. 2020)",
    )
    parser.set_defaults(run=run)
