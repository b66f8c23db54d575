"""Report tokens (paper 002): lowercase word tokens, the NLTK stop-word list, count matrices of two corpora."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ['REPORT_STOP_WORDS', 'report_count_matrices', 'report_tokens']


#: English stop words (the NLTK list), removed before every association metric.
REPORT_STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his himself
she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that
that'll these those am is are was were be been being have has had having do does did doing a an the and but if or
because as until while of at by for with about against between into through during before after above below to
from up down in out on off over under again further then once here there when where why how all any both each few
more most other some such no nor not only own same so than too very s t can will just don don't should should've
now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven
haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren
weren't won won't wouldn wouldn't""".split())  # noqa: SIM905


_REPORT_WORD = None  # compiled lazily (re)


def _word_pattern() -> Any:
    global _REPORT_WORD
    if _REPORT_WORD is None:
        import re

        _REPORT_WORD = re.compile(r"[a-z]+(?:['\-][a-z]+)*")
    return _REPORT_WORD


def report_tokens(text: str, stop_words: Any = REPORT_STOP_WORDS) -> list[str]:
    """Lowercase word tokens (letters, inner hyphens/apostrophes kept) without ``stop_words`` (None: keep all).

    >>> report_tokens("No focal consolidation. The x-ray is NORMAL.")
    ['focal', 'consolidation', 'x-ray', 'normal']
    """
    toks = _word_pattern().findall(text.lower())
    if stop_words:
        toks = [t for t in toks if t not in stop_words]
    return toks


def report_count_matrices(*corpora: Any, stop_words: Any = REPORT_STOP_WORDS) -> tuple[list[Any], list[str]]:
    """Sparse report x word count matrices (CSR, int64), one per corpus, over their shared vocabulary.

    The vocabulary is the union of the corpora's words after stop-word removal, sorted. Every later statistic
    (CAD, WAE, their bootstrap and permutation null) works on these counts: nothing is tokenised twice.

    >>> (A, B), vocab = report_count_matrices(["effusion effusion"], ["no effusion", "mastectomy"])
    >>> vocab, A.toarray().tolist(), B.toarray().tolist()
    (['effusion', 'mastectomy'], [[2, 0]], [[1, 0], [0, 1]])
    """
    from scipy import sparse

    index: dict[str, int] = {}
    parts = []
    for texts in corpora:
        ids: list[int] = []
        lens: list[int] = []
        for t in texts:
            toks = report_tokens(t, stop_words)
            ids.extend(index.setdefault(w, len(index)) for w in toks)
            lens.append(len(toks))
        parts.append((np.asarray(ids, dtype=np.int64), np.asarray(lens, dtype=np.int64)))
    vocab_unsorted = list(index)
    order = np.argsort(np.asarray(vocab_unsorted, dtype=object)) if vocab_unsorted else np.zeros(0, np.int64)
    rank = np.empty(len(vocab_unsorted), dtype=np.int64)
    rank[order] = np.arange(len(vocab_unsorted))
    V = len(vocab_unsorted)
    mats = []
    for ids, lens in parts:
        rows = np.repeat(np.arange(lens.shape[0]), lens)
        m = sparse.coo_matrix((np.ones(ids.shape[0], np.int64), (rows, rank[ids] if V else ids)),
                              shape=(lens.shape[0], V)).tocsr()
        m.sum_duplicates()
        mats.append(m)
    return mats, [vocab_unsorted[i] for i in order]

