"""The shipped Shakespeare corpus, and how a language model reads text: ids in random windows.

Taught in chapter 4 (language models), section on the data. The corpus is 37 plays of the
Project Gutenberg edition, built by ``scripts/build_shakespeare.py`` from the ``shakespeare`` 0.6
source distribution and shipped compressed in ``course_lib/data/`` (provenance, licence, command
and checksums in ``course_lib/data/SHAKESPEARE.md``). The split is fixed and by whole plays: the
validation split is four plays the training split does not contain.

A language model trains on a long sequence of token ids; a batch is ``batch_size`` windows of
``block_size + 1`` consecutive ids taken at random offsets, the inputs ``x`` being the first
``block_size`` ids of each window and the targets ``y`` the same window shifted by one, so that
position ``t`` of ``x`` is trained to predict ``y[t] = x[t + 1]`` (:func:`random_windows`).
"""

from __future__ import annotations

import hashlib
import lzma
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from course_lib.checks import check_ids

DATA_DIR = Path(__file__).resolve().parent / "data"
SPLITS: tuple[str, ...] = ("train", "val")


@dataclass(frozen=True)
class SplitRecord:
    """What the build script recorded about one split of the corpus."""

    chars: int  # length of the text in characters (= bytes: the corpus is ASCII)
    sha256: str  # SHA-256 of the text encoded as UTF-8


#: The recorded size and checksum of each split (printed by ``scripts/build_shakespeare.py``).
SHAKESPEARE: dict[str, SplitRecord] = {
    "train": SplitRecord(chars=4343147,
                         sha256="c29e82459e6fe98f4d7adc557fe24f68e754c92d1599688bcc4ca644eacd03d1"),
    "val": SplitRecord(chars=503268,
                       sha256="62161a4aa9989ce9fd3902ce20edb18c1311a2414b65cf627fb750f3ba16ce75"),
}

#: The four plays of the validation split (whole plays: the model never sees them in training).
VALIDATION_PLAYS: tuple[str, ...] = ("Hamlet", "Julius Caesar", "The Tempest", "Twelfth Night")


def shakespeare_path(split: str) -> Path:
    """The compressed file of ``split`` (``"train"`` or ``"val"``) inside ``course_lib``.

    Example:
        >>> shakespeare_path("val").name
        'shakespeare_val.txt.xz'
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return DATA_DIR / f"shakespeare_{split}.txt.xz"


@cache
def load_shakespeare(split: str = "train", verify: bool = False) -> str:
    """The plain text of a split of the shipped Shakespeare corpus (cached after the first call).

    Args:
        split: ``"train"`` (33 plays, 4.34 million characters) or ``"val"`` (4 plays, 0.50
            million characters: :data:`VALIDATION_PLAYS`).
        verify: also check the text against its recorded SHA-256 (:data:`SHAKESPEARE`).

    Returns:
        The text: ASCII, ``"\\n"`` line ends, plays two blank lines apart.

    Raises:
        ValueError: an unknown split, or (with ``verify``) a text that is not the recorded one.

    Example:
        >>> text = load_shakespeare("val")
        >>> text[:25]
        'HAMLET, PRINCE OF DENMARK'
        >>> len(text) == SHAKESPEARE["val"].chars
        True
    """
    path = shakespeare_path(split)
    text = lzma.decompress(path.read_bytes()).decode("utf-8")
    if verify:
        record = SHAKESPEARE[split]
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if len(text) != record.chars or digest != record.sha256:
            raise ValueError(f"{path.name}: {len(text)} characters with SHA-256 {digest}; the "
                             f"build recorded {record.chars} and {record.sha256} (rebuild with "
                             "scripts/build_shakespeare.py)")
    return text


def random_windows(ids: torch.Tensor, block_size: int, batch_size: int,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""A batch of next-token training pairs: random windows of ``ids`` and the same shifted by one.

    Offsets :math:`o_b` are uniform on :math:`\{0, \dots, N - \text{block\_size} - 1\}`, and

    .. math:: x_{b,t} = \text{ids}[o_b + t], \qquad y_{b,t} = \text{ids}[o_b + t + 1],
              \qquad 0 \le t < \text{block\_size}.

    Args:
        ids: ``(N,)`` integer token ids of the whole text, ``N > block_size``.
        block_size: ``T``, the context length.
        batch_size: ``B``, the number of windows.
        generator: a ``torch.Generator`` on the CPU for the offsets (reproducible batches).

    Returns:
        ``(x, y)``, both ``(B, T)`` long, on the device of ``ids``.

    Example:
        >>> x, y = random_windows(torch.arange(10), block_size=4, batch_size=2,
        ...                       generator=torch.Generator().manual_seed(0))
        >>> x.shape, bool((y == x + 1).all())
        (torch.Size([2, 4]), True)
    """
    if check_ids("ids", ids).dim() != 1:
        raise ValueError(f"ids must be 1-D (the whole text as one sequence), got shape "
                         f"{tuple(ids.shape)}")
    if block_size < 1 or batch_size < 1:
        raise ValueError(f"block_size and batch_size must be >= 1, got {block_size}, {batch_size}")
    if ids.numel() <= block_size:
        raise ValueError(f"a window needs block_size + 1 = {block_size + 1} ids; the text has "
                         f"{ids.numel()}")
    # drawn on the generator's device (without one, on the CPU, as before: the same windows
    # anywhere)
    draw_on = generator.device if generator is not None else torch.device("cpu")
    offsets = torch.randint(ids.numel() - block_size, (batch_size,), generator=generator,
                            device=draw_on)
    index = offsets[:, None] + torch.arange(block_size + 1, device=draw_on)  # (B, T + 1)
    window = ids[index.to(ids.device)].long()  # (B, T + 1)
    return window[:, :-1], window[:, 1:]


def char_vocabulary(text: str) -> list[str]:
    """The sorted distinct characters of ``text``: a character-level model's vocabulary.

    Example:
        >>> char_vocabulary("to be or not")
        [' ', 'b', 'e', 'n', 'o', 'r', 't']
    """
    return sorted(set(text))


def encode_chars(text: str, vocabulary: list[str], *,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """Character ids of ``text`` in ``vocabulary`` (id = index), ``(len(text),)`` long.

    On ``device`` (the default device when ``None``).

    Raises:
        ValueError: a character that is not in the vocabulary (named, with its position).

    Example:
        >>> encode_chars("bob", ["b", "o"]).tolist()
        [0, 1, 0]
    """
    index = {ch: i for i, ch in enumerate(vocabulary)}
    try:
        return torch.tensor([index[ch] for ch in text], dtype=torch.long, device=device)
    except KeyError as err:
        pos = next(i for i, ch in enumerate(text) if ch not in index)
        raise ValueError(f"character {err.args[0]!r} at position {pos} is not in the "
                         f"vocabulary of {len(vocabulary)} characters") from None
